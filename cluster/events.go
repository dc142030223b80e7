package cluster

import "time"

// Membership and ring events, for an audit log: every node reports the
// changes it applies from the Raft log, in log order, so every node's
// log tells the same story.

// EventKind names a membership or ring event.
type EventKind string

// Event kinds.
const (
	// EventJoin: a node was recorded as a member (joining; it enters the
	// ring once added to Raft).
	EventJoin EventKind = "join"
	// EventLeave: a member was marked leaving (a planned leave); its
	// removal follows.
	EventLeave EventKind = "leave"
	// EventRemove: a member was taken out of the ring and the metadata
	// (a dead node's removal, or the end of a leave).
	EventRemove EventKind = "remove"
	// EventRing: this node applied a new ring version.
	EventRing EventKind = "ring"
)

// Event is one membership or ring change this node applied.
type Event struct {
	Kind EventKind
	// Member is the member concerned (join, leave, remove), as recorded
	// before a removal.
	Member Member
	// RingVersion and Ring are the ring after the change (its members,
	// sorted); CommittedAt is the leader's clock when it was proposed.
	RingVersion uint64
	Ring        []string
	CommittedAt time.Time
	// Index is the Raft log index of the change (0 for a ring restored
	// from a snapshot).
	Index uint64
	// Replayed is true for a change that was already in this node's data
	// directory when it opened (its Raft log, or the snapshot it restored
	// while opening): applied again after a restart, usually reported by
	// the earlier run too.
	Replayed bool
}

// memberEvent returns the event of applying c to a member that was prev
// (ok: known), or false when c is not a membership event.
func memberEvent(c *command, prev Member, known bool) (Event, bool) {
	switch c.Op {
	case opPutMember:
		switch {
		case !known:
			return Event{Kind: EventJoin, Member: c.Member}, true
		case c.Member.State == Leaving && prev.State != Leaving:
			return Event{Kind: EventLeave, Member: c.Member}, true
		}
	case opRemoveMember:
		if known {
			return Event{Kind: EventRemove, Member: prev}, true
		}
	}
	return Event{}, false
}
