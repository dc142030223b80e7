package clustercore

import (
	"time"

	"github.com/batonlock/baton/protocol"
)

// The host's side of a move around each claim's own rules
// (relay_move.go): how often and until when the host asks again, when
// its retries stop, how long a client's hang-up waits for its moving
// claims, what the new owner's answer to an adoption makes the host send
// (release-after-adopt), and what the owner's MOVED push does to a claim
// whose RELEASE is in flight. server/move_host.go keeps the timers,
// upstreams and locks.

// MoveRetry is how often a host asks again to adopt its moving claims
// and keys.
const MoveRetry = 100 * time.Millisecond

// HostMovingOver reports whether a session's moving claims are no longer
// retried: the session has ended (closed), or is ending (ending) without
// its client having hung up while they moved (finishing: then their
// adoption and release go on, HostFinishUntil).
func HostMovingOver(closed, ending, finishing bool) bool {
	return closed || ending && !finishing
}

// HostRetryDue reports whether a retry of a session's moves must be
// scheduled: something still moves (moving), none is scheduled yet, and
// the session has not ended.
func HostRetryDue(moving, scheduled, closed bool) bool {
	return moving && !scheduled && !closed
}

// HostFinishUntil is until when a session whose client hung up while its
// claims moved waits for their adoption and release at the new owner:
// by then the retries have given up the latest of them (half the lease
// after it began moving, Move.Expired), with two retries' slack.
// since are the times the claims began moving.
func HostFinishUntil(since []time.Time, lease time.Duration) time.Time {
	var last time.Time
	for _, t := range since {
		if t.After(last) {
			last = t
		}
	}
	return last.Add(lease/2 + 2*MoveRetry)
}

// HostAdopted applies the new owner's GRANTED or QUEUED f to the
// adoption of moving claim c (Move.Adopted; AdoptAnswer said Adopted):
// push is what the client hears (PROMOTED), or nil; release is the
// client's RELEASE of the claim, sent on to the new owner now that it
// holds the claim (the client released it while it moved: released),
// or nil.
func (m *Move) HostAdopted(c *Claim, f protocol.Frame, released bool) (push, release []byte) {
	push = m.Adopted(c, f, released)
	if released {
		release = protocol.AppendRelease(nil, c.ID)
	}
	return push, release
}

// HostMovedAnswers reports whether the owner's MOVED about claim id
// answers the request at the head of the upstream's ledger (head, about
// claim c, nil when it is about none): the RELEASE the owner read after
// its export, which it answers MOVED too (HostStartMove kept that
// RELEASE for the new owner). It clears c's MovedAnswer when it does.
func HostMovedAnswers(head protocol.Type, c *Claim, id uint32) bool {
	if head != protocol.TypeRelease || c == nil || c.ID != id || !c.MovedAnswer {
		return false
	}
	c.MovedAnswer = false
	return true
}

// HostStartMove marks c moving at now after its owner's MOVED push
// (Claim.StartMove). keepRelease says the client released it and that
// RELEASE is in flight on the old upstream: it goes to the new owner
// once the claim is adopted (HostAdopt), and the old owner's MOVED
// answer to it is expected (HostKeptRelease).
func (c *Claim) HostStartMove(now time.Time) (m Move, keepRelease bool) {
	keepRelease = c.State == ClaimReleasing
	return c.StartMove(now), keepRelease
}

// HostKeptRelease records that c's RELEASE in flight on its old
// upstream was kept for the new owner: the old owner answers it MOVED
// (HostMovedAnswers).
func (c *Claim) HostKeptRelease() { c.MovedAnswer = true }

// HostAwaits reports whether a host sends (or takes here) the adoption
// of a claim in state st next: it moves, and no adoption of it is in
// flight.
func HostAwaits(st ClaimState, inFlight bool) bool {
	return st == ClaimMoving && !inFlight
}

// HostRoute is what the host's Router says of a moving name or key, in
// the terms the host decides with (HostMoveRoute).
type HostRoute struct {
	Forward bool // another node serves it
	Serve   bool // this node serves it
	Gated   bool // held while this node warms it up after a take-over
}

// HostMoveRoute is where route r sends a moving name or key.
func HostMoveRoute(r HostRoute) MoveRoute {
	switch {
	case r.Forward:
		return MoveRouteThere
	case r.Serve:
		return MoveRouteHere
	case r.Gated:
		return MoveRouteWarming
	}
	return MoveRouteNowhere
}
