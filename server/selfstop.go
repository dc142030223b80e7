package server

import (
	"errors"
	"time"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

// Self-stop of a cluster node cut off from its Raft quorum: what it
// writes, and when, is internal/clustercore's (owner_selfstop.go); this
// asks the Router for the contact and makes the writes.

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
// to be written (a version 2 session's pending frames are dropped), and
// closes the session as closeWithError does. It returns errSelfStopped.
func (s *session) stopLocked() error {
	s.closeLocked(protocol.CodeNotOwner, false, false)
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
