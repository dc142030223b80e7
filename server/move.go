package server

import (
	"github.com/batonlock/baton/internal/clustercore"
	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

// Version 2 claims that continue across a planned change
// (docs/design/2026-12-02-cluster-handoff.md, "Continuing version 2 claims across a planned
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
// This file holds what the roles share: MOVED's code and the names the
// roles use for the hand-off's format, which is internal/clustercore's
// (HandoffState, handoff_export.go): the core decides what each side
// exports and installs. Each role has its own file: move_export.go (the
// prior owner), move_install.go (the new owner), move_host.go (the node
// whose session re-routes its moving claims to the new owner).

// moveSession is one session of a hand-off's state: its origin and the
// hashes of the secrets that may adopt its claims.
type moveSession = clustercore.HandoffSession

// moveClaim is one exported claim of a session, with its lock's name and
// limit.
type moveClaim struct {
	cs    locktable.ClaimState
	name  string
	limit uint32
}

// codeMoved is the claim-level code of MOVED, a hop-only frame
// (docs/protocol-v2-ring.md): REVOKED(claim, 0x06) sent only on an upstream
// session, telling its relaying node that the claim was handed over to
// a new owner and continues there. A relaying node never passes it on.
const codeMoved protocol.Code = 0x06
