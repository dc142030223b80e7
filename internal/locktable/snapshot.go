package locktable

import (
	"slices"
	"strings"
	"time"
)

// LockInfo describes one lock: its holders and its waiters in FIFO order.
type LockInfo struct {
	Name  string
	Limit uint32 // the semaphore limit; 0 for an exclusive/shared lock
	// Holder is the earliest granted of the holders: the one holder of an
	// exclusive lock (and of every version 1 lock).
	Holder  HolderInfo
	Holders []HolderInfo // every holder, in grant order
	// Waiters are the waiters in queue order: all of them, or the part
	// LockPage asked for.
	Waiters []WaiterInfo
	// WaiterCount is the length of the whole queue.
	WaiterCount int
	// Watchers is how many watches the name has (watch.go).
	Watchers int
}

// HolderInfo describes a holder of a lock.
type HolderInfo struct {
	Session  SessionID
	Claim    ClaimID
	Mode     Mode
	Label    string
	Peer     Peer
	Since    time.Time // when it was granted
	Lease    time.Duration
	Token    uint64
	LastSeen time.Time
	V1       bool   // a version 1 session's one claim
	Value    string // the claim's value (watch.go)
}

// WaiterInfo describes one waiter.
type WaiterInfo struct {
	Session  SessionID
	Claim    ClaimID
	Mode     Mode
	Label    string
	Peer     Peer
	QueuedAt time.Time
	Lease    time.Duration
	LastSeen time.Time
	V1       bool // a version 1 session's one claim
}

// Counts are the table's sizes, as version 1 counts them.
type Counts struct {
	Locks   int // locks with a holder
	Waiters int // claims in a queue
}

// Counts returns the number of held locks and of waiters.
func (t *Table) Counts() Counts { return Counts{Locks: len(t.locks), Waiters: t.waiters} }

// Holders returns the number of claims holding a lock (several per lock
// when shared or a semaphore).
func (t *Table) Holders() int { return t.held }

// LongestLease returns the longest lease of the open sessions, kept
// (detached) ones included; 0 when there are none. It walks every
// session.
func (t *Table) LongestLease() time.Duration {
	var d time.Duration
	for _, s := range t.sessions {
		d = max(d, s.lease)
	}
	return d
}

// Sessions returns the number of open sessions.
func (t *Table) Sessions() int { return len(t.sessions) }

// Lock describes lock name, or reports false when nobody holds it.
func (t *Table) Lock(name string) (LockInfo, bool) {
	l := t.locks[name]
	if l == nil {
		return LockInfo{}, false
	}
	return t.withWatchers(l.info()), true
}

// withWatchers fills in info's watcher count and its holders' values.
func (t *Table) withWatchers(info LockInfo) LockInfo {
	info.Watchers = t.Watchers(info.Name)
	if len(t.values) > 0 {
		for i, h := range info.Holders {
			info.Holders[i].Value = t.valueOf(t.claim(Key{h.Session, h.Claim}))
		}
		if len(info.Holders) > 0 {
			info.Holder = info.Holders[0]
		}
	}
	return info
}

// Snapshot describes every lock for which match returns true (nil matches
// all), sorted by name.
func (t *Table) Snapshot(match func(name string) bool) []LockInfo {
	out := []LockInfo{}
	for name, l := range t.locks {
		if match == nil || match(name) {
			out = append(out, t.withWatchers(l.info()))
		}
	}
	slices.SortFunc(out, func(a, b LockInfo) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// LockPage is Lock with only the waiters from queue index offset, at
// most limit of them (WaiterCount has them all): a queue of any length
// costs a view of one page. It walks the queue to offset.
func (t *Table) LockPage(name string, offset, limit int) (LockInfo, bool) {
	l := t.locks[name]
	if l == nil {
		return LockInfo{}, false
	}
	return t.withWatchers(l.page(max(offset, 0), max(limit, 0))), true
}

func (l *lock) info() LockInfo { return l.page(0, l.waiters) }

func (l *lock) page(offset, limit int) LockInfo {
	info := LockInfo{
		Name:        l.name,
		Limit:       l.limit,
		Holders:     make([]HolderInfo, 0, l.held),
		Waiters:     make([]WaiterInfo, 0, max(0, min(limit, l.waiters-offset))),
		WaiterCount: l.waiters,
	}
	for h := l.holders.head; h != nil; h = h.next {
		s := h.sess
		info.Holders = append(info.Holders, HolderInfo{Session: s.id, Claim: h.id, Mode: h.mode, Label: s.label,
			Peer: s.peer, Since: h.grantedAt, Lease: s.lease, Token: h.token, LastSeen: s.lastSeen, V1: s.v1})
	}
	if len(info.Holders) > 0 {
		info.Holder = info.Holders[0]
	}
	w := l.queue.head
	for range offset {
		if w == nil {
			break
		}
		w = w.next
	}
	for ; w != nil && len(info.Waiters) < limit; w = w.next {
		s := w.sess
		info.Waiters = append(info.Waiters, WaiterInfo{Session: s.id, Claim: w.id, Mode: w.mode, Label: s.label,
			Peer: s.peer, QueuedAt: w.queuedAt, Lease: s.lease, LastSeen: s.lastSeen, V1: s.v1})
	}
	return info
}
