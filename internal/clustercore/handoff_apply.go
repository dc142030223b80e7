package clustercore

import (
	"errors"
	"time"

	"github.com/batonlock/baton/internal/rangelock"
	"github.com/batonlock/baton/protocol"
)

// The owner's answers when a host takes up range locks that moved
// (docs/cluster.md, "Range locks"): RANGE adopt of the locks a planned
// change handed over here under a stand-in, RANGE reassert of a lock
// after the key's owner was lost, and how long a stand-in keeps what it
// holds. server/rangemove.go keeps the range table and the stand-ins'
// timers.

// HandoffRangeAsk is what an owner knows when a RANGE adopt or
// reassert arrives on a session.
type HandoffRangeAsk struct {
	Clustered bool // this node is a cluster node
	Forwarded bool // the session is an upstream session a relaying node opened
	HasOrigin bool // its hop header names the client's session there
	// Owns asks the Router whether this node serves the key, or warms it
	// up after a take-over; asked only of a session that may ask.
	Owns func() bool
}

// HandoffRangeAsked decides the answer to a RANGE adopt (adopt) or
// reassert on an upstream session: only an upstream session of a
// cluster node may ask (RangeInvalid; an adopt must name its origin), and
// only of a key this node owns (RangeUnavailable: asked again later).
// proceed says the locks are taken up, and the answer is then theirs.
func HandoffRangeAsked(a HandoffRangeAsk, adopt bool) (st protocol.RangeStatus, proceed bool) {
	switch {
	case !a.Clustered || !a.Forwarded || adopt && !a.HasOrigin:
		return protocol.RangeInvalid, false
	case !a.Owns():
		return protocol.RangeUnavailable, false
	}
	return 0, true
}

// HandoffAdopted is the answer to a RANGE adopt once the stand-in's locks
// on the key were given to the session (moved of them; standIn: one
// holds them for the origin): done when some were, free when none is
// kept (the stand-in was dropped, or holds nothing on the key).
func HandoffAdopted(standIn bool, moved int) protocol.RangeStatus {
	if !standIn || moved == 0 {
		return protocol.RangeFree
	}
	return protocol.RangeDone
}

// HandoffInstalled is the answer to a re-asserted range lock's install:
// unavailable while a planned change gates the key (gated: its holders
// at the prior owner may still believe), conflict when another session
// holds a conflicting lock, invalid for a lock the table refuses, else
// done (err is the table's Install error).
func HandoffInstalled(gated bool, err error) protocol.RangeStatus {
	switch {
	case gated:
		return protocol.RangeUnavailable
	case errors.Is(err, rangelock.ErrConflict):
		return protocol.RangeConflict
	case err != nil:
		return protocol.RangeInvalid
	}
	return protocol.RangeDone
}

// HandoffStandInLease is how long a stand-in keeps an origin's range
// locks when another hand-off adds some of lease to what it holds for
// cur (existing: it holds some already): the longer of the two, and
// reset says its timer restarts (a longer lease arrived). A new stand-in
// keeps them for lease.
func HandoffStandInLease(existing bool, cur, lease time.Duration) (keep time.Duration, reset bool) {
	if !existing {
		return lease, false
	}
	return max(cur, lease), lease > cur
}

// HandoffStillServes reports whether a claim the node routed before
// may still enter its table, by what the Router says of the name now,
// under the server's lock: not when the name moves (a planned change
// froze it before exporting it under that lock), goes to another node,
// or is not this node's, so that a claim routed before the freeze never
// enters the table after the export. A hold is not a move: a longer
// warm-up, after the claim's own lease was recorded, does not refuse
// it.
func HandoffStillServes(moving, forward, notOwner bool) bool {
	return !moving && !forward && !notOwner
}
