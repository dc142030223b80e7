package clustercore

import (
	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

// How a version 2 session's claims end with its connection
// (docs/protocol-v2-resume.md, "v2 resumable sessions and
// re-assertion" and "v2 detach"): kept for the client's resume, released at once, or
// left to each owner's lease on a cluster node that relayed them. The
// reader of package server (session2.go, session.go) reads the socket
// and records what it saw in a SessionEnd; the table keeps or ends the
// session.

// SessionEnd is what the reader of a version 2 session knows when its
// connection ends.
type SessionEnd struct {
	// Resumable: the session has a resume key (its own secret, or its
	// relaying node's origin and the client's secret hash).
	Resumable bool
	// Detach: the session was opened with the detach flag, so a hang-up
	// ends it unless Detached is set (a DETACH was read): the client
	// promised to say DETACH before any close it makes on purpose, and
	// a killed client says nothing.
	Detach, Detached bool
	// HungUp: a read found the client's side closed (its process closed
	// the connection or died), not a deadline or this node's close.
	HungUp bool
}

// DiedUnannounced reports whether the client's side closed the
// connection (FIN or reset) without the DETACH it promised: its process
// ended, and its claims and range locks are released at once, as a
// plain session's are, rather than kept for a re-assertion nobody will
// make.
func (e SessionEnd) DiedUnannounced() bool {
	return e.Detach && !e.Detached && e.HungUp
}

// Keeps reports whether a session whose frames ended for reason, with
// session-level ERROR code (0: none), is kept for a resume (when the
// server's kept-session limits allow it): a resumable one whose
// connection broke (a hang-up or a write that could not complete), not
// one that broke the protocol, expired, was ended by this node, or whose
// client died without the DETACH it promised.
func (e SessionEnd) Keeps(reason locktable.Reason, code protocol.Code) bool {
	if !e.Resumable || code != 0 || e.DiedUnannounced() {
		return false
	}
	return reason == locktable.ReasonGraceful || reason == locktable.ReasonIOTimeout
}

// ReleasesRelayed reports whether a session that ended for reason, with
// session-level ERROR code (0: none), releases the claims it relayed to
// their owners at once (a RELEASE for each before its upstreams close),
// as a direct session's are: any session whose client broke the
// protocol (a client-error code: it stops believing at the ERROR, and
// the session is not kept here either, Keeps), a plain session whose
// client hung up, and a detach session whose client died unannounced.
// Otherwise each owner keeps them until their lease passes (it cannot
// tell this node's death from its client's hang-up), for the client's
// resume: after a hang-up or a broken connection, and after a server
// condition (this node's shutdown, 0x01, or self-stop, 0x03), which a
// resumable client answers by re-asserting through another node.
func (e SessionEnd) ReleasesRelayed(reason locktable.Reason, code protocol.Code) bool {
	if e.DiedUnannounced() || code != 0 && !code.Temporary() {
		return true
	}
	return !e.Resumable && (e.HungUp || reason == locktable.ReasonProtocolError)
}

// WriteEnds reports whether a failed write of the session's answers
// ends it; toHungUp says the write failed because the client's side had
// closed. A detach session's does not: its reader reads on and sees the
// hang-up after whatever came before it, a DETACH included, and that
// decides whether the session is kept.
func (e SessionEnd) WriteEnds(toHungUp bool) bool {
	return !(e.Detach && toHungUp)
}
