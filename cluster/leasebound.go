package cluster

import (
	"fmt"
	"slices"
	"time"
)

// LeaseBound is the part of the cluster's state that bounds a take-over's
// warm-up: the largest lease any client was granted, the ceiling an
// operator set on new leases, and a lowering of that largest lease in
// progress. Its methods are the rules the Raft log applies; they do no I/O
// and read no clock, so that the lease-lowering model
// (internal/modelcheck) runs them as they are.
//
// Raising is always safe: a node raises MaxLease before the grant that
// needs it. Lowering is not: a name taken over with a warm-up computed
// from the lower value would be granted while a holder of the dead node,
// under a longer lease, may still believe it holds. So a lowering only
// sets the ceiling at once (new sessions above it are refused), and
// lowers MaxLease when every member has acknowledged that it has no
// session above the target and no warm-up computed from the old value
// still running (AckDue). A member removed before it acknowledged may
// have died with such a session: its removal cancels the lowering.
type LeaseBound struct {
	// MaxLease is the largest lease any client was granted (a node raises
	// it before the grant that exceeds it): the bound of a take-over's
	// warm-up.
	MaxLease time.Duration `json:"max_lease"`
	// Ceiling is the longest lease a node accepts from a client, set by
	// an operator (0: none; each node's -max-lease applies as well).
	Ceiling time.Duration `json:"lease_ceiling,omitempty"`
	// Lowering is the lowering of MaxLease to the ceiling in progress;
	// nil when none is.
	Lowering *LeaseLowering `json:"lease_lowering,omitempty"`
}

// LeaseLowering is a lowering of MaxLease waiting for its members'
// acknowledgements.
type LeaseLowering struct {
	Target time.Duration `json:"target"`
	Acked  []string      `json:"acked,omitempty"` // sorted member ids
}

func (b LeaseBound) clone() LeaseBound {
	if b.Lowering != nil {
		l := *b.Lowering
		l.Acked = slices.Clone(l.Acked)
		b.Lowering = &l
	}
	return b
}

// Raise records a lease granted, or about to be.
func (b *LeaseBound) Raise(lease time.Duration) {
	b.MaxLease = max(b.MaxLease, lease)
}

// SetCeiling sets the ceiling on new leases to target (0: none). A ceiling
// at or above MaxLease takes effect at once and ends any lowering in
// progress; one below MaxLease starts a lowering to it, which members
// then acknowledge.
func (b *LeaseBound) SetCeiling(target time.Duration) {
	b.Ceiling = target
	b.Lowering = nil
	if target > 0 && target < b.MaxLease {
		b.Lowering = &LeaseLowering{Target: target}
	}
}

// Ack records that member id has no session above target and no warm-up
// from a larger lease running; members are the cluster's current members.
// When every member has acknowledged, MaxLease comes down to the target.
func (b *LeaseBound) Ack(id string, target time.Duration, members []string) error {
	l := b.Lowering
	if l == nil || l.Target != target {
		return fmt.Errorf("cluster: no lowering of the largest lease to %v is in progress", target)
	}
	if !slices.Contains(members, id) {
		return fmt.Errorf("%w: %s", ErrUnknownMember, id)
	}
	if i, found := slices.BinarySearch(l.Acked, id); !found {
		l.Acked = slices.Insert(l.Acked, i, id)
	}
	b.complete(members)
	return nil
}

// MemberRemoved is called when a member is removed. One that had not
// acknowledged a lowering in progress may have died holding a session
// above its target, and the take-over of its names must warm up for it:
// the lowering is cancelled (the ceiling stays; an operator sets it again
// to lower once the take-over is over). members are the remaining
// members.
func (b *LeaseBound) MemberRemoved(id string, members []string) {
	l := b.Lowering
	if l == nil {
		return
	}
	if i, found := slices.BinarySearch(l.Acked, id); found {
		l.Acked = slices.Delete(l.Acked, i, i+1)
		b.complete(members)
		return
	}
	b.Lowering = nil
}

// complete lowers MaxLease when every member has acknowledged.
func (b *LeaseBound) complete(members []string) {
	l := b.Lowering
	for _, m := range members {
		if _, found := slices.BinarySearch(l.Acked, m); !found {
			return
		}
	}
	b.MaxLease = min(b.MaxLease, l.Target)
	b.Lowering = nil
}

// Acked reports whether member id has acknowledged the lowering in
// progress (false when none is).
func (b *LeaseBound) Acked(id string) bool {
	if b.Lowering == nil {
		return false
	}
	_, found := slices.BinarySearch(b.Lowering.Acked, id)
	return found
}

// AckDue is a member's rule for acknowledging a lowering to target: it
// applies the ceiling first, then acknowledges once the longest lease of
// its sessions, open or kept, is within the target, and no warm-up of its
// own (a take-over's, a restart's) computed from a larger lease is still
// running.
func AckDue(target, longestSession time.Duration, warmingUp bool) bool {
	return longestSession <= target && !warmingUp
}
