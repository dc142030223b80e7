package server

import (
	"github.com/batonlock/baton/internal/clustercore"
	"github.com/batonlock/baton/internal/locktable"
)

// Version 2 claims that continue across a planned change, in the direct
// case (the client's session is on the prior owner P). P exports the
// continuing claims with their session's origin, the new owner N installs
// them detached, and the host adopts each with a re-assertion on its
// upstream to N; nothing read after the export is answered before the
// adoption, and a claim not adopted within half the lease is revoked.
// This file holds what the roles share (MOVED's code, the hand-off's
// names); move_export.go, move_install.go and move_host.go hold each role.
// Design: "Continuing version 2 claims across a planned change" and
// #servermovego in docs/design/2026-12-02-cluster-handoff.md.

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
// (clustercore.CodeMoved).
const codeMoved = clustercore.CodeMoved
