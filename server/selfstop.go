package server

import (
	"errors"
	"time"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

// Self-stop of a cluster node cut off from its Raft quorum
// (docs/design/2026-12-01-ha-failover-design.md, "Failover design", rule 2): after T_self
// without quorum contact it serves nothing. Its names may then be given
// to another node, so it must not confirm anything a client would count
// as held: by the pessimism rule any answer confirms the request it
// answers (a client's lease is anchored at the send time of its latest
// answered request). So the check is made on the one path every answer
// takes, writeLocked, after the request was read and before its answer is
// written: a node out of contact writes, instead of the answer, the
// retryable ERROR 0x03 and ends the session. A request read before the
// check was sent before the node stopped, so an answer written after a
// passing check (however late the write) confirms no later send time.

// QuorumContact is an optional interface of a Router: a cluster node
// tells whether it is in contact with its quorum now. A server whose
// Router implements it writes no answer while InContact is false: it
// sends the session-level ERROR 0x03 instead and ends the session.
type QuorumContact interface {
	InContact() bool
}

// errSelfStopped is a write's error when the node had no quorum contact:
// the ERROR 0x03 was written instead of the frames, and the session is
// closing (its reader closes it after the linger).
var errSelfStopped = errors.New("server: no quorum contact; the session was ended with ERROR 0x03")

// inContact reports whether this server may answer now.
func (srv *Server) inContact() bool {
	q, ok := srv.Router.(QuorumContact)
	return !ok || q.InContact()
}

// stopLocked, with wmu held, writes ERROR 0x03 in place of whatever was
// to be written (a version 2 session's pending frames are dropped), marks
// the session closing, half-closes it and bounds its reader's wait, as
// closeWithError does. It returns errSelfStopped.
func (s *session) stopLocked() error {
	var b []byte
	if v := s.v2; v != nil {
		v.omu.Lock()
		first := !s.closing.Swap(true)
		v.out = nil
		v.omu.Unlock()
		if !first {
			return errSelfStopped
		}
		b = protocol.AppendSessionError(nil, protocol.CodeNotOwner, "")
	} else {
		if s.closing.Swap(true) {
			return errSelfStopped
		}
		b = protocol.AppendError(make([]byte, 0, protocol.MaxErrorLen), protocol.CodeNotOwner, "")
	}
	if err := s.writeLocked(b); err == nil {
		s.srv.observe(Event{Kind: EventErrorSent, Time: time.Now(), Peer: Peer(s.peer), Code: protocol.CodeNotOwner})
		if cw, ok := s.conn.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
	}
	s.conn.SetReadDeadline(time.Now().Add(s.srv.linger()))
	return errSelfStopped
}

// endSessions ends every open session, version 1 and 2, direct and
// relayed, with ERROR(code): a cluster node that lost its quorum contact
// ends them with 0x03 (retryable: the client goes to another node). Their
// claims end with the reason "shutdown". New sessions are the Router's
// to refuse. It returns how many sessions it ended.
func (srv *Server) endSessions(code protocol.Code) int {
	srv.init()
	srv.mu.Lock()
	now := time.Now()
	var ds []delivery
	n := 0
	for s := range srv.sessions {
		if s.closing.Load() {
			continue
		}
		if srv.claims[s.id] == s {
			ds = append(ds, srv.commit(now, srv.table.CloseSession(now, s.id, locktable.ReasonShutdown))...)
		}
		ds = append(ds, delivery{to: s, send: locktable.Send{Kind: locktable.SendSessionError, Session: s.id, Code: code}})
		n++
	}
	srv.mu.Unlock()
	srv.deliverAll(ds)
	return n
}
