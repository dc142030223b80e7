package server

import (
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

// Watches on a cluster node (docs/cluster.md, "Watches in a cluster").
//
// A WATCH whose name another node owns is served by this node through an
// upstream values session of its own (the watcher): one connection to
// the owner per relayed watch, opened with a version 2 hop header
// without a resume hash (the owner keeps nothing of it when it breaks),
// HELLO with the values flag, and WATCH with the client's id. The
// owner's CHANGEs go to the client unchanged. The first state (the held
// frames and synced) is the WATCH's answer, in its place in the
// session's answer order (an outbox slot, relay2.go); later changes are
// pushes.
//
// A watch follows its name. When the upstream breaks, the owner revokes
// the watch with 0x03 (the name left it), or ends the session, the
// client is sent CHANGE kind 5 (reset) and the watch starts again where
// the name now lives: through a new upstream, or in this node's table
// when this node owns it now. A node that warms the name up or moves it
// refuses the watch with 0x03 and is asked again with backoff, so the
// next state the client gets is the new owner's, never an older one. A
// watch in this node's table follows the same way when the table ends it
// with 0x03 (the name left this node: followLocal).

// Backoff between two attempts to watch a name whose owner does not
// serve it yet (warming up, moving, unreachable, no route).
const (
	watchRetryMin = 20 * time.Millisecond
	watchRetryMax = 250 * time.Millisecond
)

// relayWatch is one watch of a client session on a cluster node: relayed
// to the name's owner, or in this node's table (local). Its fields are
// guarded by srv.mu.
type relayWatch struct {
	s    *session
	id   uint32
	name string
	// local: the watch is in this node's table now.
	local bool
	// ended: released, or the session ended; nothing more is sent for it.
	ended bool
	// slot is the WATCH's answer in the outbox until it is given; pre the
	// held frames read for it so far.
	slot *outEntry
	pre  []byte
	// told: the client was sent frames of a state since its last reset.
	told bool
	// conn is the current upstream connection, if any.
	conn net.Conn
	stop chan struct{} // closed when the watch ends
}

// watchesLocked returns the session's watches map, creating it. Called
// with srv.mu held.
func (v *v2conn) watchesLocked() map[uint32]*relayWatch {
	if v.watches == nil {
		v.watches = map[uint32]*relayWatch{}
	}
	return v.watches
}

// relayWatchTo serves WATCH f through an upstream session to the owner.
// Its answer waits in the outbox. Called by the reader with srv.mu held.
func (s *session) relayWatchTo(f protocol.Frame) {
	srv, v := s.srv, s.v2
	rw := &relayWatch{s: s, id: f.Claim, name: f.Name, stop: make(chan struct{})}
	v.omu.Lock()
	rel := v.relayLocked()
	rw.slot = &outEntry{Pending: true, At: rel.answerAt()}
	rel.add(v, rw.slot)
	v.omu.Unlock()
	v.watchesLocked()[f.Claim] = rw
	srv.relayedWatches.Add(1)
	s.startWatchWriter()
	srv.sessionsWG.Add(1)
	go rw.follow()
}

// watchedLocally records a watch this node's table serves on a cluster
// node, so that it follows its name when the name leaves (followLocal).
// A relayed session's watch does not: its REVOKED 0x03 tells the
// relaying node to follow. Called with srv.mu held.
func (s *session) watchedLocally(id uint32, name string) {
	if s.srv.Router == nil || s.forwarded {
		return
	}
	s.v2.watchesLocked()[id] = &relayWatch{s: s, id: id, name: name, local: true, told: true, stop: make(chan struct{})}
}

// followLocal takes the table's REVOKED for claim id of s: when id is a
// local watch ended with 0x03 (its name left this node), the client is
// sent a reset instead and the watch follows its name; it reports
// whether it did. Any other end of a local watch forgets its record.
// Called with srv.mu held.
func (srv *Server) followLocal(s *session, id uint32, code protocol.Code) bool {
	v := s.v2
	rw := v.watches[id]
	if rw == nil || !rw.local {
		return false
	}
	if code != protocol.CodeNotOwner || rw.ended || v.watchesClosed {
		delete(v.watches, id)
		return false
	}
	rw.local = false
	rw.resetLocked()
	srv.relayedWatches.Add(1)
	srv.sessionsWG.Add(1)
	go rw.follow()
	return true
}

// releaseWatch ends watch id if it is relayed, answering RELEASED, and
// reports whether it did; a local watch is the table's to release (its
// record is forgotten). Called by the reader with srv.mu held.
func (s *session) releaseWatch(id uint32) bool {
	v := s.v2
	rw := v.watches[id]
	if rw == nil {
		return false
	}
	delete(v.watches, id)
	if rw.local {
		return false
	}
	rw.endLocked(protocol.AppendRefused(nil, id, protocol.CodeNotOwner, "watch released before its state"))
	v.appendOut(s, func(b []byte) []byte { return protocol.AppendReleased(b, id) })
	return true
}

// relayWatchInUse reports whether id names a relayed watch. Called with
// srv.mu held.
func (s *session) relayWatchInUse(id uint32) bool {
	rw := s.v2.watches[id]
	return rw != nil && !rw.local
}

// endRelayWatches ends every watch the session relays, when the session
// ends, or with REVOKED code (the slow watcher's 0x08) when code is not
// 0. Called with srv.mu held.
func (s *session) endRelayWatchesLocked(code protocol.Code) {
	v := s.v2
	if code == 0 {
		v.watchesClosed = true
	}
	for id, rw := range v.watches {
		delete(v.watches, id)
		if rw.local {
			continue
		}
		if code != 0 && !rw.ended {
			v.appendPushOut(s, func(b []byte) []byte { return protocol.AppendRevoked(b, id, code, "") })
		}
		rw.endLocked(nil)
	}
}

// endRelayWatches is endRelayWatchesLocked for a session that ended.
func (s *session) endRelayWatches() {
	if s.srv.Router == nil {
		return
	}
	s.srv.mu.Lock()
	s.endRelayWatchesLocked(0)
	s.srv.mu.Unlock()
}

// endLocked ends the watch: its goroutine stops and its upstream closes.
// answer fills its outbox slot when the WATCH was not answered yet.
// Called with srv.mu held.
func (rw *relayWatch) endLocked(answer []byte) {
	if rw.ended {
		return
	}
	rw.ended = true
	close(rw.stop)
	if rw.conn != nil {
		rw.conn.Close()
	}
	if !rw.local {
		rw.s.srv.relayedWatches.Add(-1)
	}
	if rw.slot != nil {
		if answer == nil {
			answer = protocol.AppendRefused(nil, rw.id, protocol.CodeNotOwner, "")
		}
		rw.fillSlotLocked(answer)
	}
}

// fillSlotLocked gives the WATCH its answer b and releases what the
// outbox can. Called with srv.mu held.
func (rw *relayWatch) fillSlotLocked(b []byte) {
	v := rw.s.v2
	v.omu.Lock()
	rw.slot.B = b
	rw.slot.Pending = false
	rw.slot = nil
	if rel := v.rel.Load(); rel != nil {
		rel.pump(v)
	}
	v.omu.Unlock()
	v.wakeWriter()
}

// resetLocked sends the client CHANGE reset when it was told a state
// since the last one. Called with srv.mu held.
func (rw *relayWatch) resetLocked() {
	rw.pre = rw.pre[:0]
	if !rw.told {
		return
	}
	rw.told = false
	rw.s.v2.appendPushOut(rw.s, func(b []byte) []byte {
		return protocol.AppendChange(b, rw.id, protocol.Change{Kind: protocol.ChangeReset})
	})
	rw.s.v2.wakeWriter()
}

// passLocked sends the client the owner's CHANGE c: into the WATCH's
// answer while it has not been given (synced gives it), else as a push.
// Called with srv.mu held.
func (rw *relayWatch) passLocked(c protocol.Change) {
	if rw.slot != nil {
		rw.pre = protocol.AppendChange(rw.pre, rw.id, c)
		if c.Kind == protocol.ChangeSynced {
			rw.told = true
			rw.fillSlotLocked(rw.pre)
			rw.pre = nil
		}
		return
	}
	rw.told = true
	rw.s.v2.appendPushOut(rw.s, func(b []byte) []byte { return protocol.AppendChange(b, rw.id, c) })
	rw.s.v2.wakeWriter()
}

// failLocked ends the watch for good with code: REFUSED when the WATCH
// was not answered yet, else REVOKED. Called with srv.mu held.
func (rw *relayWatch) failLocked(code protocol.Code) {
	v := rw.s.v2
	if v.watches[rw.id] == rw {
		delete(v.watches, rw.id)
	}
	if rw.slot != nil {
		rw.endLocked(protocol.AppendRefused(nil, rw.id, code, ""))
		return
	}
	rw.endLocked(nil)
	v.appendPushOut(rw.s, func(b []byte) []byte { return protocol.AppendRevoked(b, rw.id, code, "") })
	v.wakeWriter()
}

// errWatchEnded: the watch ended while an attempt ran.
var errWatchEnded = errors.New("server: the watch ended")

// watchOutcome is how one attempt to watch at the owner ended.
type watchOutcome struct {
	again  bool          // watch again where the name lives (reset first)
	served bool          // the owner served the watch before it ended
	code   protocol.Code // else: end the watch with this code
	err    error
}

// follow watches the name where it lives until the watch ends: each
// attempt either serves it from this node's table (and returns), or
// relays it to the owner until that upstream ends.
func (rw *relayWatch) follow() {
	srv := rw.s.srv
	defer srv.sessionsWG.Done()
	wait := watchRetryMin
	for {
		srv.mu.Lock()
		if rw.ended {
			srv.mu.Unlock()
			return
		}
		rt := srv.Router.Route(rw.name, 0, false)
		if rt.Action == RouteServe {
			rw.watchHereLocked()
			srv.mu.Unlock()
			return
		}
		srv.mu.Unlock()
		if rt.Action == RouteForward {
			out := rw.attempt(rt.Addr)
			srv.mu.Lock()
			switch {
			case rw.ended:
			case !out.again:
				rw.failLocked(out.code)
			default:
				rw.resetLocked()
			}
			srv.mu.Unlock()
			if out.err != nil && !errors.Is(out.err, errWatchEnded) {
				srv.Logger.Debug("watching again at the name's owner", "lock", rw.name, "owner_addr", rt.Addr, "err", out.err)
			}
			if out.served {
				wait = watchRetryMin
			}
		}
		select {
		case <-rw.stop:
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, watchRetryMax)
	}
}

// watchHereLocked moves the watch into this node's table, which now owns
// its name. Called with srv.mu held.
func (rw *relayWatch) watchHereLocked() {
	srv, s := rw.s.srv, rw.s
	now := time.Now()
	res, err := srv.table.Watch(now, s.id, locktable.ClaimID(rw.id), rw.name)
	if err != nil {
		rw.failLocked(claimErrorCode(err))
		return
	}
	// Whatever the table sends from now on is the state's, and the
	// WATCH's answer, if still due, is the table's synced: the slot is
	// released as an empty answer before it (ordered by the outbox).
	srv.relayedWatches.Add(-1)
	rw.local = true
	if rw.slot != nil {
		rw.fillSlotLocked(nil)
	}
	rw.told = true
	srv.commit(now, res) // the table's CHANGEs to s, appended now
	s.v2.wakeWriter()
}

// attempt watches the name at the owner at addr, passing its CHANGEs on,
// until the upstream ends; the outcome says whether to watch again.
func (rw *relayWatch) attempt(addr string) (out watchOutcome) {
	srv, s := rw.s.srv, rw.s
	conn, err := srv.dialOwner(addr)
	if err != nil {
		return watchOutcome{again: true, err: fmt.Errorf("dialling the owner: %w", err)}
	}
	srv.mu.Lock()
	if rw.ended {
		srv.mu.Unlock()
		conn.Close()
		return watchOutcome{err: errWatchEnded}
	}
	rw.conn = conn
	srv.mu.Unlock()
	defer func() {
		srv.mu.Lock()
		if rw.conn == conn {
			rw.conn = nil
		}
		srv.mu.Unlock()
		conn.Close()
	}()
	v := s.v2
	// The hop header names this node and the client session, without a
	// resume hash: the owner keeps nothing of this session when it ends.
	b := protocol.AppendHopV2(nil, s.peer.Addr, s.peer.Identity, srv.NodeID, uint64(s.id))
	b = protocol.AppendPreamble(b)
	b = protocol.AppendFrame(b, protocol.Frame{Type: protocol.TypeHello, LeaseMS: protocol.LeaseMS(v.lease), Flags: protocol.HelloValues, Label: v.label})
	b = protocol.AppendWatch(b, rw.id, rw.name)
	conn.SetWriteDeadline(time.Now().Add(srv.IOTimeout))
	if _, err := conn.Write(b); err != nil {
		return watchOutcome{again: true, err: fmt.Errorf("writing to the owner: %w", err)}
	}
	done := make(chan struct{})
	defer close(done)
	srv.sessionsWG.Add(1)
	go rw.ping(conn, done)
	return rw.read(conn)
}

// ping keeps the upstream session alive: a PING every third of the
// client's lease, until done.
func (rw *relayWatch) ping(conn net.Conn, done chan struct{}) {
	srv := rw.s.srv
	defer srv.sessionsWG.Done()
	t := time.NewTicker(rw.s.v2.lease / 3)
	defer t.Stop()
	var seq uint64
	for {
		select {
		case <-done:
			return
		case <-t.C:
			seq++
			conn.SetWriteDeadline(time.Now().Add(srv.IOTimeout))
			if _, err := conn.Write(protocol.AppendPing(nil, seq)); err != nil {
				conn.Close() // the reader sees it and the watch starts again
				return
			}
		}
	}
}

// read reads the owner's frames on conn and passes the watch's CHANGEs
// on until the upstream ends. The owner answers every PING: a lease
// without a frame from it is an owner lost.
func (rw *relayWatch) read(conn net.Conn) watchOutcome {
	lease := rw.s.v2.lease
	buf := make([]byte, 0, v2ValuesReadBuf)
	opened, served := false, false
	for {
		conn.SetReadDeadline(time.Now().Add(lease))
		n, err := conn.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		off := 0
		for {
			var f protocol.Frame
			var m int
			var perr error
			if opened {
				f, m, perr = protocol.ParseServerFrameV2Max(buf[off:], protocol.MaxValuesFrameLen)
			} else {
				f, m, perr = protocol.ParseHelloAnswer(buf[off:])
			}
			if perr != nil {
				return watchOutcome{again: true, served: served, err: fmt.Errorf("reading from the owner: %w", perr)}
			}
			if m == 0 {
				break
			}
			off += m
			opened = true
			out, done := rw.handle(f)
			if f.Type == protocol.TypeChange && f.ChangeOf().Kind == protocol.ChangeSynced {
				served = true
			}
			if done {
				out.served = served
				return out
			}
		}
		buf = buf[:copy(buf, buf[off:])]
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				err = fmt.Errorf("the owner was silent for the lease: %w", err)
			}
			return watchOutcome{again: true, served: served, err: err}
		}
	}
}

// handle takes one frame of the owner; done reports the upstream's end.
func (rw *relayWatch) handle(f protocol.Frame) (out watchOutcome, done bool) {
	srv := rw.s.srv
	switch f.Type {
	case protocol.TypeWelcome:
		if f.Flags&protocol.WelcomeValues == 0 {
			// A node of an earlier revision: it cannot serve a watch.
			return watchOutcome{code: protocol.CodeUnsupportedFeature}, true
		}
		return out, false
	case protocol.TypePong:
		return out, false
	case protocol.TypeError:
		// The owner ends the session (it stops, or shuts down): the
		// name goes elsewhere.
		return watchOutcome{again: true, err: fmt.Errorf("the owner ended the session: %v", f.Code)}, true
	}
	if f.Claim != rw.id {
		return watchOutcome{again: true, err: errUpstreamAnswer}, true
	}
	switch f.Type {
	case protocol.TypeChange:
		srv.mu.Lock()
		if rw.ended {
			srv.mu.Unlock()
			return watchOutcome{err: errWatchEnded}, true
		}
		if rw.overBacklogLocked() {
			s := rw.s
			srv.notify(Event{Kind: EventLimit, Time: time.Now(), Action: LimitWatchBacklog, Peer: s.peer, Lock: rw.name,
				Session: s.id, Claim: locktable.ClaimID(rw.id), Code: protocol.CodeSlowWatcher})
			rw.failLocked(protocol.CodeSlowWatcher)
			srv.mu.Unlock()
			return watchOutcome{err: errWatchEnded}, true
		}
		rw.passLocked(f.ChangeOf())
		srv.mu.Unlock()
		return out, false
	case protocol.TypeRefused, protocol.TypeRevoked:
		if f.Code == protocol.CodeNotOwner {
			// Not served there now (warming up, moving), or no longer
			// (the name left it): ask again where it lives.
			return watchOutcome{again: true, err: fmt.Errorf("the owner answered %v", f.Code)}, true
		}
		return watchOutcome{code: f.Code}, true
	}
	return watchOutcome{again: true, err: errUpstreamAnswer}, true
}

// overBacklogLocked reports whether the client's session has more than
// MaxWatchBacklog bytes unsent: the bound of a slow watcher (watch.go).
// Called with srv.mu held.
func (rw *relayWatch) overBacklogLocked() bool {
	srv, v := rw.s.srv, rw.s.v2
	if srv.MaxWatchBacklog <= 0 {
		return false
	}
	v.omu.Lock()
	defer v.omu.Unlock()
	return v.backlogLocked() > srv.MaxWatchBacklog
}

// RelayedWatches returns how many watches this node relays to their
// names' owners now, one upstream connection each: the metric
// baton_cluster_relayed_watches.
func (srv *Server) RelayedWatches() int64 { return srv.relayedWatches.Load() }
