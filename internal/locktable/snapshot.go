package locktable

import (
	"slices"
	"strings"
	"time"
)

// LockInfo describes one lock: its holder and its waiters in FIFO order.
type LockInfo struct {
	Name    string
	Holder  HolderInfo
	Waiters []WaiterInfo
}

// HolderInfo describes the owner of a lock.
type HolderInfo struct {
	Claim    ClaimID
	Peer     Peer
	Since    time.Time // when it was granted
	Lease    time.Duration
	Token    uint64
	LastSeen time.Time
}

// WaiterInfo describes one waiter.
type WaiterInfo struct {
	Claim    ClaimID
	Peer     Peer
	QueuedAt time.Time
	Lease    time.Duration
	LastSeen time.Time
}

// Counts are the table's sizes.
type Counts struct {
	Locks   int // locks with an owner
	Waiters int // claims in a queue
}

// Counts returns the number of held locks and of waiters.
func (t *Table) Counts() Counts { return Counts{Locks: len(t.locks), Waiters: t.waiters} }

// Lock describes lock name, or reports false when nobody owns it.
func (t *Table) Lock(name string) (LockInfo, bool) {
	l := t.locks[name]
	if l == nil {
		return LockInfo{}, false
	}
	return l.info(), true
}

// Snapshot describes every lock for which match returns true (nil matches
// all), sorted by name.
func (t *Table) Snapshot(match func(name string) bool) []LockInfo {
	out := []LockInfo{}
	for name, l := range t.locks {
		if match == nil || match(name) {
			out = append(out, l.info())
		}
	}
	slices.SortFunc(out, func(a, b LockInfo) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (l *lock) info() LockInfo {
	o := l.owner
	info := LockInfo{
		Name: l.name,
		Holder: HolderInfo{Claim: o.id, Peer: o.peer, Since: o.grantedAt,
			Lease: o.lease, Token: o.token, LastSeen: o.lastSeen},
		Waiters: make([]WaiterInfo, 0, l.waiters),
	}
	for w := l.head; w != nil; w = w.next {
		info.Waiters = append(info.Waiters, WaiterInfo{Claim: w.id, Peer: w.peer,
			QueuedAt: w.queuedAt, Lease: w.lease, LastSeen: w.lastSeen})
	}
	return info
}
