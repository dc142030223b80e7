package locktable

import (
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/batonlock/baton/protocol"
)

// Hand-off of lock state between cluster nodes (docs/design/2026-12-02-cluster-fail-closed-model.md, "Planned
// moves"): the prior owner of a name describes its lock with Export and
// ends its claims with Evict; the new owner installs the description with
// Import. All three are pure, like every other operation of the table.

// LockState is one lock as Export describes it and Import takes it: its
// holders in grant order and its waiters in queue order.
type LockState struct {
	Name    string       `json:"name"`
	Limit   uint32       `json:"limit,omitempty"` // the semaphore limit; 0 for an exclusive/shared lock
	Holders []ClaimState `json:"holders,omitempty"`
	Waiters []ClaimState `json:"waiters,omitempty"`
}

// ClaimState is one claim of a LockState, with what its session needs on
// the other side. Times are durations before the export, not instants, so
// that the two nodes' clocks never meet.
type ClaimState struct {
	Session SessionID `json:"session"`
	Claim   ClaimID   `json:"claim"`
	Mode    Mode      `json:"mode"`
	Token   uint64    `json:"token,omitempty"` // holders
	// Ticket is a waiter's queue ticket (tickets.go); 0 from a node that
	// has none.
	Ticket uint64        `json:"ticket,omitempty"`
	Lease  time.Duration `json:"lease"`
	// Idle is how long before the export the session was last heard
	// from; Age how long before it the claim was granted (holders) or
	// queued (waiters).
	Idle  time.Duration `json:"idle"`
	Age   time.Duration `json:"age"`
	Label string        `json:"label,omitempty"`
	Peer  Peer          `json:"peer"`
	V1    bool          `json:"v1,omitempty"`
	Value string        `json:"value,omitempty"` // the claim's value (watch.go)
}

// ErrLockExists is Import's error for a lock the table already has with
// claims the import does not repeat.
var ErrLockExists = errors.New("locktable: the lock is already in the table")

// ErrBadState is Import's error for a description no table could be in:
// holders that conflict, a mode or limit that does not fit the lock, a
// session whose lease differs between claims, or a claim twice.
var ErrBadState = errors.New("locktable: inconsistent lock state")

// Export describes every lock whose name match accepts (nil accepts all),
// sorted by name. It changes nothing.
func (t *Table) Export(now time.Time, match func(name string) bool) []LockState {
	out := []LockState{}
	for name, l := range t.locks {
		if match != nil && !match(name) {
			continue
		}
		ls := LockState{Name: name, Limit: l.limit,
			Holders: make([]ClaimState, 0, l.held), Waiters: make([]ClaimState, 0, l.waiters)}
		for c := l.holders.head; c != nil; c = c.next {
			ls.Holders = append(ls.Holders, t.claimState(now, c, c.grantedAt))
		}
		for c := l.queue.head; c != nil; c = c.next {
			ls.Waiters = append(ls.Waiters, t.claimState(now, c, c.queuedAt))
		}
		out = append(out, ls)
	}
	slices.SortFunc(out, func(a, b LockState) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (t *Table) claimState(now time.Time, c *claim, since time.Time) ClaimState {
	s := c.sess
	cs := ClaimState{Session: s.id, Claim: c.id, Mode: c.mode, Lease: s.lease,
		Idle: max(now.Sub(s.lastSeen), 0), Age: max(now.Sub(since), 0), Label: s.label, Peer: s.peer, V1: s.v1, Value: t.valueOf(c)}
	if c.holding {
		cs.Token = c.token
	} else {
		cs.Ticket = c.ticket
	}
	return cs
}

// Evict ends every claim on the locks whose name match accepts, for
// ReasonMoved, without granting anyone: the names have moved to another
// owner. A claim of a version 1 session is sent ERROR(v1) and its session
// ends. A claim of a version 2 session is sent ERROR(v2), a claim-level
// frame (the session lives on), or nothing when v2 is 0 (its state was
// exported and the claim continues elsewhere). Locks are visited in name
// order, holders before waiters, so the result is deterministic.
func (t *Table) Evict(now time.Time, match func(name string) bool, v1, v2 protocol.Code) Result {
	var res Result
	t.moveWatches(match, &res)
	// Only the matching names are sorted: the sweep after every ring
	// change usually matches none of a large table.
	var names []string
	for name := range t.locks {
		if match(name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		l := t.locks[name]
		for _, c := range append(l.holders.list(l.held), l.queue.list(l.waiters)...) {
			switch {
			case c.sess.v1:
				res.send(Send{Kind: SendError, Session: c.sess.id, Claim: c.id, Code: v1})
			case v2 != 0:
				res.send(Send{Kind: SendError, Session: c.sess.id, Claim: c.id, Code: v2})
			}
			t.endClaim(now, c, ReasonMoved, false, &res)
		}
		delete(t.locks, name)
	}
	return res
}

// Import installs locks that another table exported: holders keep their
// tokens and grant order, waiters their order, and each claim's session
// (opened when the table does not have it, with the lease, peer and label
// exported) its lease, counted from when it was last heard from. Then,
// as after any change, the waiters at the head of a queue that conflict
// with no holder are granted (their sessions are sent ACQUIRED). Claims
// the table already has are skipped, so that importing the same state
// twice changes nothing; a lock the table has with other claims is
// ErrLockExists. On an error nothing is changed.
func (t *Table) Import(now time.Time, locks []LockState) (Result, error) {
	var res Result
	if t.shutdown {
		return res, ErrShutdown
	}
	// Validate everything first: an import is all or nothing.
	leases := map[SessionID]ClaimState{}
	seen := map[Key]bool{}
	for _, ls := range locks {
		if err := protocol.ValidateName(ls.Name); err != nil {
			return res, err
		}
		exclusive, held := 0, 0
		for i, cs := range slices.Concat(ls.Holders, ls.Waiters) {
			k := Key{cs.Session, cs.Claim}
			switch {
			case seen[k], cs.Lease <= 0, cs.Mode < Exclusive || cs.Mode > Semaphore,
				(cs.Mode == Semaphore) != (ls.Limit > 0), len(cs.Value) > protocol.MaxValueLen:
				return res, ErrBadState
			}
			seen[k] = true
			if prev, ok := leases[cs.Session]; ok && (prev.Lease != cs.Lease || prev.V1 != cs.V1 || prev.V1) {
				return res, ErrBadState // a version 1 session has one claim
			}
			leases[cs.Session] = cs
			if s := t.sessions[cs.Session]; s != nil && (s.lease != cs.Lease || s.v1 != cs.V1) {
				return res, ErrBadState
			}
			if i < len(ls.Holders) {
				held++
				if cs.Mode == Exclusive {
					exclusive++
				}
			}
		}
		if exclusive > 1 || exclusive == 1 && held > 1 || ls.Limit > 0 && uint32(held) > ls.Limit {
			return res, ErrBadState
		}
		if l := t.locks[ls.Name]; l != nil {
			for _, cs := range slices.Concat(ls.Holders, ls.Waiters) {
				if c := t.claim(Key{cs.Session, cs.Claim}); c == nil || c.lock != l {
					return res, ErrLockExists
				}
			}
			if l.held+l.waiters != len(ls.Holders)+len(ls.Waiters) {
				return res, ErrLockExists
			}
		} else {
			for _, cs := range slices.Concat(ls.Holders, ls.Waiters) {
				if t.claim(Key{cs.Session, cs.Claim}) != nil {
					return res, ErrBadState // a claim of this session on another lock
				}
			}
		}
	}
	for _, ls := range locks {
		if t.locks[ls.Name] != nil {
			continue // imported before
		}
		l := &lock{name: ls.Name, limit: ls.Limit}
		t.locks[ls.Name] = l
		for _, cs := range ls.Holders {
			c := t.importClaim(now, l, cs)
			c.holding, c.token, c.grantedAt = true, cs.Token, now.Add(-cs.Age)
			l.holders.push(c)
			l.held++
			t.held++
			if c.mode == Exclusive {
				l.exclusives++
			}
			t.told(c, &res)
		}
		for _, cs := range ls.Waiters {
			c := t.importClaim(now, l, cs)
			c.queuedAt = now.Add(-cs.Age)
			// The prior owner's ticket keeps the waiter ahead of the
			// claims that arrive here without one.
			c.ticket, c.carried = cs.Ticket, cs.Ticket != 0
			t.ticket = max(t.ticket, cs.Ticket)
			l.queue.push(c)
			l.waiters++
			t.waiters++
		}
		t.promote(now, l, &res)
	}
	return res, nil
}

// importClaim creates the claim cs of lock l, and its session when the
// table does not have it.
func (t *Table) importClaim(now time.Time, l *lock, cs ClaimState) *claim {
	s := t.sessions[cs.Session]
	if s == nil {
		s = &session{id: cs.Session, lease: cs.Lease, lastSeen: now.Add(-cs.Idle), peer: cs.Peer, label: cs.Label, v1: cs.V1}
		t.sessions[cs.Session] = s
		if o, ok := t.importing[cs.Session]; ok {
			s.origin = &o
			t.detached[o] = s.id
		}
	}
	var c *claim
	if s.v1 {
		c = &s.v1claim
	} else {
		c = new(claim)
	}
	*c = claim{id: cs.Claim, sess: s, lock: l, mode: cs.Mode}
	t.setValue(c, cs.Value)
	s.add(c)
	return c
}
