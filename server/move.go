package server

import (
	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

// Version 2 claims that continue across a planned change
// (docs/cluster.md, "Continuing version 2 claims across a planned
// change"), for the claims whose session is on the prior owner itself
// (the direct case: the host is the prior owner P).
//
// Export, under srv.mu: the claims on the moving names that do not
// continue are ended as before (version 1: ERROR 0x01; a claim of a
// session relayed by another node, or of a kept session: REVOKED 0x03);
// the others are exported with their session's origin (this node, the
// session id) and taken out of the table without a frame, and each
// session marks them moving, in the same critical section. The new owner
// N installs them detached (locktable.ImportDetached), each origin as a
// kept session (resume.go) that a re-assertion naming it with the right
// secret adopts, and that expires, promoting its queue, a lease after
// the export when nobody adopts it.
//
// The ADOPT of the design is a re-assertion (CLAIM flags bit 1) sent by
// the host on its upstream session to N: it names the origin, the token
// the client was told (0 for a queued claim), the ring version, and a
// move secret the host made for the session, whose hash the hand-off
// carried. N answers it as any re-assertion: GRANTED or QUEUED when it
// adopted the claim (same token, same place), REFUSED 0x03 when it does
// not serve the name yet (its ring is older, or the name is frozen for
// another change): the host asks again after moveRetry; any other answer
// means N has no such claim, and the client is told REVOKED 0x03. A
// resumable session's claims also carry the hash of the client's own
// secret, so that when the host is the node that stops, the client's own
// re-assertion, after it reconnects, adopts them at N.
//
// While a claim moves it counts as an upstream that has not been
// confirmed (relayState.moving): no answer to anything read after the
// export reaches the client before the claim is adopted; a RELEASE of it
// is queued in the session and sent to N after the adoption; a claim not
// adopted within half the lease after it began moving is given up
// (REVOKED 0x03, a queued RELEASE answered RELEASED). The export carries
// an idle time of zero: N's lease of a detached claim runs from the
// install, after every confirmation the client was given (late is safe).
//
// This file holds what the roles share: the hand-off's format (moveState)
// and MOVED's code. Each role has its own file: move_export.go (the prior
// owner), move_install.go (the new owner), move_host.go (the node whose
// session re-routes its moving claims to the new owner).

// moveState is the state a prior owner hands to one new owner: the locks
// (claims named by the prior owner's session ids) and, per session, its
// origin and the hashes of the secrets that may adopt its claims.
type moveState struct {
	Locks    []locktable.LockState `json:"locks"`
	Sessions []moveSession         `json:"sessions"`
	// RangeGates are the keys that move with range locks or waiting
	// requests on them, which the new owner grants no range lock on for
	// LeaseMS after the install (relayranges.go): the prior owner ends
	// the sessions that held or waited for them, whose clients may
	// believe until their give-up.
	RangeGates []rangeGate `json:"range_gates,omitempty"`
	// Ranges are the range locks held on moving keys by sessions that
	// continue, which the new owner keeps for their hosts to adopt
	// (rangemove.go).
	Ranges []movedRange `json:"ranges,omitempty"`
}

// rangeGate is one key of moveState.RangeGates: the longest lease of the
// sessions that held or waited for range locks on it.
type rangeGate struct {
	Key     string `json:"key"`
	LeaseMS uint32 `json:"lease_ms"`
}

// moveSession is one session of a moveState.
type moveSession struct {
	Session locktable.SessionID `json:"session"` // as in Locks
	Origin  locktable.Origin    `json:"origin"`
	Adopt   []byte              `json:"adopt"`            // SHA-256 of the host's move secret
	Resume  []byte              `json:"resume,omitempty"` // SHA-256 of a resumable session's own secret
}

// codeMoved is the claim-level code of MOVED, a hop-only frame
// (docs/protocol.md): REVOKED(claim, 0x06) sent only on an upstream
// session, telling its relaying node that the claim was handed over to
// a new owner and continues there. A relaying node never passes it on.
const codeMoved protocol.Code = 0x06
