package clustercore

import "github.com/batonlock/baton/protocol"

// The lease of a cluster node's version 2 session: the node records it
// (Router.RecordLease, which may block on Raft) before the session may
// hold or wait for anything, since a take-over waits out the longest
// lease recorded (docs/design/2026-12-01-ha-failover-design.md, rule 3).
// It does so at the first frame that may hold something, not at HELLO: a
// client the ACL allows nothing cannot raise every take-over's warm-up.
// Package server (session2.go) stops the batch there, records the lease
// with the table mutex let go, and goes on.

// SessionLeaseFirst reports whether frame f, read on a cluster node's
// session whose lease is not recorded yet, waits for it: f may make the
// session hold or wait for something. That is a CLAIM without a
// claim-level error (claimErr), or a RANGE request other than a cancel,
// on a name the ACL allows (allowed, asked only then).
func SessionLeaseFirst(f protocol.Frame, claimErr bool, allowed func(name string) bool) bool {
	switch {
	case f.Type == protocol.TypeRange && f.Op != protocol.RangeCancel:
	case f.Type == protocol.TypeClaim && !claimErr:
	default:
		return false
	}
	return allowed(f.Name)
}
