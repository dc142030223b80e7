package server

import (
	"errors"
	"os"
	"time"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

// delivery is a frame the table asked for, resolved to its session. For
// a version 2 session, commit has already appended the frame to the
// session's pending output, and the delivery (flush) only writes it.
type delivery struct {
	to    *session
	send  locktable.Send
	flush bool
	// direct: flush here even if the session has a writer of its own
	// (the writer's own flush, watch.go).
	direct bool
}

// commit turns a table result into deliveries and observer events. It is
// called with srv.mu held, right after the table operation, so events
// reach observers in table order and ended claims leave the claims map
// before anyone else can look them up.
func (srv *Server) commit(now time.Time, res locktable.Result) []delivery {
	var ds []delivery
	var closed []*session // version 2 sessions the result closes
	var dropped map[*session]bool
	for _, send := range res.Sends {
		s := srv.claims[send.Session]
		switch {
		case s == nil:
		case s.v2 == nil:
			ds = append(ds, delivery{to: s, send: send})
		case send.Kind == locktable.SendSessionError:
			ds = append(ds, delivery{to: s, send: send})
			closed = append(closed, s)
		case send.Kind == locktable.SendChange:
			if dropped == nil {
				dropped = map[*session]bool{}
			}
			if srv.pushChange(s, send, dropped) {
				if n := len(ds); n == 0 || ds[n-1].to != s || !ds[n-1].flush {
					ds = append(ds, delivery{to: s, flush: true})
				}
			}
		default:
			// Appended now, under srv.mu, so a session's frames go out
			// in table order: a PROMOTED never overtakes its QUEUED, a
			// REVOKED never follows the answer to a later CLAIM that
			// reuses the id. A watch that follows its name is sent a
			// reset in place of its REVOKED 0x03 (relaywatch.go).
			if send.Kind != locktable.SendError || s.v2.watches == nil || !srv.followLocal(s, uint32(send.Claim), send.Code) {
				s.v2.appendPush(s, send)
			}
			if n := len(ds); n == 0 || ds[n-1].to != s || !ds[n-1].flush {
				ds = append(ds, delivery{to: s, flush: true})
			}
		}
	}
	for _, send := range res.Sends {
		if send.Kind == locktable.SendAcquired { // a promotion from a queue
			srv.queued[protocolOf(srv.claims[send.Session])]--
		}
	}
	for _, e := range res.Events {
		s := srv.claims[e.Session]
		v2 := s != nil && s.v2 != nil
		p := protocolOf(s)
		kept := s == nil && srv.isKeptLocked(e.Session)
		if kept {
			// A kept session (resume.go) makes no claims: a grant is a
			// promotion, which sends nothing.
			v2, p = true, protocol.Version2
			if e.Kind == locktable.EventGranted {
				srv.queued[p]--
			}
		}
		switch e.Kind {
		case locktable.EventGranted:
			srv.held[p]++
		case locktable.EventReleased:
			srv.held[p]--
		case locktable.EventDequeued:
			srv.queued[p]--
		}
		if e.Kind != locktable.EventGranted && !v2 {
			if s != nil {
				s.gone.Store(true)
			}
			delete(srv.claims, e.Session)
		}
		ev := fromTable(now, e)
		if v2 {
			ev.Protocol = protocol.Version2
		}
		srv.notify(ev)
	}
	for _, s := range closed {
		delete(srv.claims, s.id)
	}
	return ds
}

// update runs op on the table under srv.mu, then delivers what it asked
// for outside the lock.
func (srv *Server) update(op func(now time.Time, t *locktable.Table) locktable.Result) {
	srv.mu.Lock()
	now := time.Now()
	ds := srv.commit(now, op(now, srv.table))
	srv.mu.Unlock()
	srv.deliver(ds)
}

// deliver writes each frame. A session whose write fails is ended (its
// lock passes on) and closed; the frames that this causes are delivered
// in turn, iteratively rather than recursively.
func (srv *Server) deliver(ds []delivery) {
	for len(ds) > 0 {
		type failure struct {
			s      *session
			reason locktable.Reason
			err    error
		}
		var failed []failure
		for _, d := range ds {
			var err error
			switch {
			case d.flush:
				if !d.direct && d.to.v2.wakeWriter() {
					break // its writer writes it (watch.go)
				}
				err = d.to.flushV2(false)
			case d.send.Kind == locktable.SendAcquired:
				err = d.to.push(d.send.Token)
			case d.send.Kind == locktable.SendError, d.send.Kind == locktable.SendSessionError:
				err = d.to.closeWithError(d.send.Code)
			}
			if err != nil {
				failed = append(failed, failure{d.to, writeFailureReason(err), err})
			}
		}
		ds = nil
		if len(failed) == 0 {
			return
		}
		// End the claims before closing the connections: a reader woken
		// by the close would otherwise end its claim first, as graceful.
		srv.mu.Lock()
		now := time.Now()
		for _, f := range failed {
			// A resumable session's reader keeps it when it sees the
			// connection closed (resume.go); but one ended by ERROR 0x03
			// for want of quorum contact is closing: its reader ends
			// without keeping it, and the self-stop's EndSessions passes
			// it over. Its claims end here, as EndSessions would end them.
			if f.s.v2 != nil && f.s.v2.resume != nil && !errors.Is(f.err, errSelfStopped) {
				continue
			}
			ds = append(ds, srv.commit(now, srv.table.End(now, f.s.id, f.reason))...)
			if f.s.v2 != nil && srv.claims[f.s.id] == f.s {
				f.s.closing.Store(true)
				delete(srv.claims, f.s.id)
			}
		}
		srv.mu.Unlock()
		for _, f := range failed {
			if errors.Is(f.err, errSelfStopped) {
				continue // its reader closes it after ERROR 0x03
			}
			if f.s.v2 != nil && f.s.v2.detach && wroteToHungUp(f.err) {
				// The client's side has closed: its reader sees that
				// after whatever came before it (a DETACH decides), which
				// closing the connection under it would throw away.
				continue
			}
			f.s.conn.Close()
		}
	}
}

// writeFailureReason tells a write that timed out (a client that stopped
// reading) from one that failed because the client went away.
func writeFailureReason(err error) locktable.Reason {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return locktable.ReasonIOTimeout
	}
	return locktable.ReasonGraceful
}

// protocolOf is the protocol version of session s (1 when s is nil).
func protocolOf(s *session) int {
	if s != nil && s.v2 != nil {
		return protocol.Version2
	}
	return protocol.Version
}
