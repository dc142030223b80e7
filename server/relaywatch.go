package server

import (
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/batonlock/baton/internal/clustercore"
	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

// Watches on a cluster node (docs/cluster.md, "Watches in a cluster").
//
// A relayed watch's upstream is a connection to the owner opened with a
// version 2 hop header without a resume hash (the owner keeps nothing of
// it when it breaks), HELLO with the values flag, and WATCH with the
// client's id. When it resets, follows its name, ends, and with which
// code, is clustercore.Watch's (internal/clustercore/relay_watch.go);
// this file holds its goroutine, its connection and its outbox slot.

// relayWatch is one watch of a client session on a cluster node, as
// clustercore.Watch, with what the shell needs for it. Its fields are
// guarded by srv.mu.
type relayWatch struct {
	clustercore.Watch
	s *session
	// slot is the WATCH's answer in the outbox until it is given.
	slot *outEntry
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
	rw := &relayWatch{Watch: clustercore.NewRelayedWatch(f.Claim, f.Name), s: s, stop: make(chan struct{})}
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
	s.v2.watchesLocked()[id] = &relayWatch{Watch: clustercore.NewLocalWatch(id, name), s: s, stop: make(chan struct{})}
}

// followLocal takes the table's REVOKED for claim id of s: when id is a
// local watch that follows its name (clustercore.Watch.FollowsLocal),
// the client is sent a reset instead and the watch is relayed, or, over
// MaxRelayedWatches, REVOKED 0x07; it reports whether it did. Any other
// end of a local watch forgets its record. Called with srv.mu held.
func (srv *Server) followLocal(s *session, id uint32, code protocol.Code) bool {
	v := s.v2
	rw := v.watches[id]
	if rw == nil || !rw.Local {
		return false
	}
	if !rw.FollowsLocal(code, v.watchesClosed) {
		delete(v.watches, id)
		return false
	}
	if !clustercore.WatchRelayRoom(srv.MaxRelayedWatches, srv.relayedWatches.Load()) {
		srv.notify(Event{Kind: EventLimit, Time: time.Now(), Action: LimitRelayedWatches, Peer: Peer(s.peer), Lock: rw.Name,
			Session: SessionID(s.id), Claim: ClaimID(id), Code: protocol.CodeLimitReached})
		rw.failLocked(protocol.CodeLimitReached)
		return true
	}
	rw.send(rw.Follow())
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
	if rw.Local {
		return false
	}
	rw.finish(rw.Release())
	v.appendOut(s, func(b []byte) []byte { return protocol.AppendReleased(b, id) })
	return true
}

// relayWatchInUse reports whether id names a relayed watch. Called with
// srv.mu held.
func (s *session) relayWatchInUse(id uint32) bool {
	rw := s.v2.watches[id]
	return rw != nil && !rw.Local
}

// endRelayWatchesLocked ends every watch the session relays, when the
// session ends, or with REVOKED code (the slow watcher's 0x08) when code
// is not 0. Called with srv.mu held.
func (s *session) endRelayWatchesLocked(code protocol.Code) {
	v := s.v2
	if code == 0 {
		v.watchesClosed = true
	}
	for id, rw := range v.watches {
		delete(v.watches, id)
		if !rw.Local {
			rw.finish(rw.Revoke(code))
		}
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

// finish applies out of a step that may have ended the watch (ok): its
// goroutine stops, its upstream closes, and out is sent. Called with
// srv.mu held.
func (rw *relayWatch) finish(out clustercore.WatchOut, ok bool) {
	if ok {
		close(rw.stop)
		if rw.conn != nil {
			rw.conn.Close()
		}
		if !rw.Local {
			rw.s.srv.relayedWatches.Add(-1)
		}
	}
	rw.send(out)
}

// send sends the client what a step of the watch decided: the push, then
// the WATCH's answer into its outbox slot, releasing what the outbox
// can. Called with srv.mu held.
func (rw *relayWatch) send(out clustercore.WatchOut) {
	v := rw.s.v2
	if out.Push != nil {
		v.appendPushOut(rw.s, func(b []byte) []byte { return append(b, out.Push...) })
	}
	if out.Answered && rw.slot != nil {
		v.omu.Lock()
		rw.slot.B = out.Answer
		rw.slot.Pending = false
		rw.slot = nil
		if rel := v.rel.Load(); rel != nil {
			rel.pump(v)
		}
		v.omu.Unlock()
	}
	if out.Push != nil || out.Answered {
		v.wakeWriter()
	}
}

// failLocked ends the watch for good with code (clustercore.Watch.Fail).
// Called with srv.mu held.
func (rw *relayWatch) failLocked(code protocol.Code) {
	rw.finishLocked(rw.Fail(code))
}

// finishLocked is finish for a step that may have ended the watch for
// good (ended): the session forgets it. Called with srv.mu held.
func (rw *relayWatch) finishLocked(out clustercore.WatchOut, ended bool) {
	if v := rw.s.v2; ended && v.watches[rw.ID] == rw {
		delete(v.watches, rw.ID)
	}
	rw.finish(out, ended)
}

// errWatchEnded: the watch ended while an attempt ran.
var errWatchEnded = errors.New("server: the watch ended")

// follow watches the name where it lives until the watch ends: each
// attempt either serves it from this node's table (and returns), or
// relays it to the owner until that upstream ends.
func (rw *relayWatch) follow() {
	srv := rw.s.srv
	defer srv.sessionsWG.Done()
	var backoff clustercore.WatchBackoff
	for {
		srv.mu.Lock()
		if rw.Ended {
			srv.mu.Unlock()
			return
		}
		rt := srv.Router.Route(rw.Name, 0, false)
		step := clustercore.WatchRoute(rt.Action.core())
		if step == clustercore.WatchHere {
			rw.watchHereLocked()
			srv.mu.Unlock()
			return
		}
		srv.mu.Unlock()
		served := false
		if step == clustercore.WatchRelay {
			out := rw.attempt(rt.Addr)
			srv.mu.Lock()
			rw.finishLocked(rw.Attempted(out))
			srv.mu.Unlock()
			if out.Err != nil && !errors.Is(out.Err, errWatchEnded) {
				srv.Logger.Debug("watching again at the name's owner", "lock", rw.Name, "owner_addr", rt.Addr, "err", out.Err)
			}
			served = out.Served
		}
		select {
		case <-rw.stop:
			return
		case <-time.After(backoff.Next(served)):
		}
	}
}

// watchHereLocked moves the watch into this node's table, which now owns
// its name. Called with srv.mu held.
func (rw *relayWatch) watchHereLocked() {
	srv, s := rw.s.srv, rw.s
	now := time.Now()
	res, err := srv.table.Watch(now, s.id, locktable.ClaimID(rw.ID), rw.Name)
	if err != nil {
		rw.failLocked(claimErrorCode(err))
		return
	}
	srv.relayedWatches.Add(-1)
	rw.send(rw.Here())   // the slot, if still due, before the table's CHANGEs
	srv.commit(now, res) // the table's CHANGEs to s, appended now
	s.v2.wakeWriter()
}

// attempt watches the name at the owner at addr, passing its CHANGEs on,
// until the upstream ends; the outcome says whether to watch again.
func (rw *relayWatch) attempt(addr string) (out clustercore.WatchAttempt) {
	srv := rw.s.srv
	conn, err := srv.dialOwner(addr)
	if err != nil {
		return clustercore.WatchAttempt{Again: true, Err: fmt.Errorf("dialling the owner: %w", err)}
	}
	srv.mu.Lock()
	if rw.Ended {
		srv.mu.Unlock()
		conn.Close()
		return clustercore.WatchAttempt{Err: errWatchEnded}
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
	up := rw.upstream()
	conn.SetWriteDeadline(time.Now().Add(srv.IOTimeout))
	if _, err := conn.Write(up.Opening(rw.ID, rw.Name)); err != nil {
		return clustercore.WatchAttempt{Again: true, Err: fmt.Errorf("writing to the owner: %w", err)}
	}
	done := make(chan struct{})
	defer close(done)
	srv.sessionsWG.Add(1)
	go rw.ping(conn, up.PingEvery(), done)
	return rw.read(conn)
}

// upstream is the client's session that the watch's upstream speaks
// for.
func (rw *relayWatch) upstream() clustercore.WatchUpstream {
	s := rw.s
	return clustercore.WatchUpstream{Addr: s.peer.Addr, Identity: s.peer.Identity, Node: s.srv.NodeID,
		Session: uint64(s.id), Lease: s.v2.lease, Label: s.v2.label}
}

// ping keeps the upstream session alive: a PING every period, until
// done.
func (rw *relayWatch) ping(conn net.Conn, every time.Duration, done chan struct{}) {
	srv := rw.s.srv
	defer srv.sessionsWG.Done()
	t := time.NewTicker(every)
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
// on until the upstream ends (clustercore.WatchReader). The owner
// answers every PING: a lease without a frame from it is an owner lost.
func (rw *relayWatch) read(conn net.Conn) clustercore.WatchAttempt {
	lease := rw.s.v2.lease
	buf := make([]byte, 0, v2ValuesReadBuf)
	var rd clustercore.WatchReader
	for {
		conn.SetReadDeadline(time.Now().Add(lease))
		n, err := conn.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		off := 0
		for {
			f, m, perr := rd.Parse(buf[off:])
			if perr != nil {
				return rd.Malformed(perr)
			}
			if m == 0 {
				break
			}
			off += m
			if out, done := rw.handle(f); done {
				return rd.Ended(out)
			}
		}
		buf = buf[:copy(buf, buf[off:])]
		if err != nil {
			return rd.Broke(err, errors.Is(err, os.ErrDeadlineExceeded))
		}
	}
}

// handle takes one frame of the owner (clustercore.WatchOwnerFrame,
// Watch.Changed); done reports the upstream's end.
func (rw *relayWatch) handle(f protocol.Frame) (out clustercore.WatchAttempt, done bool) {
	srv := rw.s.srv
	pass, done, out := clustercore.WatchOwnerFrame(rw.ID, f)
	if !pass {
		return out, done
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	sent, stop, slow := rw.Changed(f.ChangeOf(), rw.overBacklogLocked())
	if slow {
		s := rw.s
		srv.notify(Event{Kind: EventLimit, Time: time.Now(), Action: LimitWatchBacklog, Peer: Peer(s.peer), Lock: rw.Name,
			Session: SessionID(s.id), Claim: ClaimID(rw.ID), Code: protocol.CodeSlowWatcher})
	}
	rw.finishLocked(sent, slow)
	if stop {
		return clustercore.WatchAttempt{Err: errWatchEnded}, true
	}
	return out, false
}

// overBacklogLocked reports whether the client's session has more than
// MaxWatchBacklog bytes unsent: the bound of a slow watcher (watch.go).
// Called with srv.mu held.
func (rw *relayWatch) overBacklogLocked() bool {
	v := rw.s.v2
	return clustercore.WatchOverBacklog(rw.s.srv.MaxWatchBacklog, func() int {
		v.omu.Lock()
		defer v.omu.Unlock()
		return v.backlogLocked()
	})
}

// relayedWatchCount returns how many watches this node relays to their
// names' owners now, one upstream connection each: the metric
// baton_cluster_relayed_watches.
func (srv *Server) relayedWatchCount() int64 { return srv.relayedWatches.Load() }
