package locktable

import (
	"slices"
	"time"

	"github.com/batonlock/baton/protocol"
)

// Table holds every lock that has an owner. A lock exists exactly while it
// has an owner: when the owner ends, the head of the queue is promoted in
// the same operation, so a queue is never left without an owner.
type Table struct {
	tokens   TokenSource
	locks    map[string]*lock
	claims   map[ClaimID]*claim
	waiters  int
	shutdown bool
}

type lock struct {
	name       string
	owner      *claim
	head, tail *claim // FIFO queue of waiters
	waiters    int
}

type claim struct {
	id         ClaimID
	lock       *lock
	peer       Peer
	lease      time.Duration
	lastSeen   time.Time
	queuedAt   time.Time // when the ACQUIRE arrived
	grantedAt  time.Time
	token      uint64
	prev, next *claim // queue links while waiting
}

func (c *claim) owner() bool { return c.lock.owner == c }

func (c *claim) status() Status {
	st := Status{State: Waiting, Deadline: c.lastSeen.Add(c.lease)}
	if c.owner() {
		st.State, st.Token = Owner, c.token
	}
	return st
}

// New returns an empty table that takes tokens from tokens (nil means a
// ClockTokens on the system clock).
func New(tokens TokenSource) *Table {
	if tokens == nil {
		tokens = &ClockTokens{}
	}
	return &Table{
		tokens: tokens,
		locks:  map[string]*lock{},
		claims: map[ClaimID]*claim{},
	}
}

// Acquire adds claim id for req: owner at once when the lock is free,
// otherwise at the back of the lock's queue. It returns the status to
// answer with (WAITING or ACQUIRED). After Shutdown it returns
// ErrShutdown; an invalid name or lease returns the protocol sentinel.
func (t *Table) Acquire(now time.Time, id ClaimID, req Request) (Status, Result, error) {
	var res Result
	switch {
	case t.shutdown:
		return Status{}, res, ErrShutdown
	case req.Lease <= 0:
		return Status{}, res, protocol.ErrInvalidLease
	}
	if err := protocol.ValidateName(req.Name); err != nil {
		return Status{}, res, err
	}
	if _, ok := t.claims[id]; ok {
		return Status{}, res, ErrClaimExists
	}
	c := &claim{id: id, peer: req.Peer, lease: req.Lease, lastSeen: now, queuedAt: now}
	t.claims[id] = c
	l := t.locks[req.Name]
	if l == nil {
		l = &lock{name: req.Name}
		t.locks[req.Name] = l
		c.lock = l
		t.grant(now, c, &res)
	} else {
		c.lock = l
		l.enqueue(c)
		t.waiters++
	}
	return c.status(), res, nil
}

// Heartbeat records that claim id was heard from at now and returns its
// status.
func (t *Table) Heartbeat(now time.Time, id ClaimID) (Status, error) {
	c := t.claims[id]
	if c == nil {
		return Status{}, ErrNoClaim
	}
	c.lastSeen = now
	return c.status(), nil
}

// End removes claim id for reason: an owner releases its lock and the
// head of the queue is promoted; a waiter leaves its queue. Ending an
// unknown or already ended claim does nothing.
func (t *Table) End(now time.Time, id ClaimID, reason Reason) Result {
	var res Result
	if c := t.claims[id]; c != nil {
		t.end(now, c, reason, &res)
	}
	return res
}

// Expire ends claim id with ReasonExpired if more than its lease has
// passed since it was last heard from, and returns ErrNotExpired if not.
func (t *Table) Expire(now time.Time, id ClaimID) (Result, error) {
	c := t.claims[id]
	if c == nil {
		return Result{}, ErrNoClaim
	}
	if now.Sub(c.lastSeen) <= c.lease {
		return Result{}, ErrNotExpired
	}
	var res Result
	t.end(now, c, ReasonExpired, &res)
	return res, nil
}

// ForceRelease takes the lock name from its owner, who is sent
// ERROR(0x02) and closed; the head of the queue is promoted at once.
func (t *Table) ForceRelease(now time.Time, name string) (Result, error) {
	l := t.locks[name]
	if l == nil {
		return Result{}, ErrNoLock
	}
	var res Result
	owner := l.owner
	res.send(Send{Kind: SendError, Claim: owner.id, Code: protocol.CodeClosedByAdmin})
	t.end(now, owner, ReasonForce, &res)
	return res, nil
}

// Kick removes the first waiter of lock name whose address is addr; it is
// sent ERROR(0x02) and closed, and the other waiters keep their order.
func (t *Table) Kick(now time.Time, name, addr string) (Result, error) {
	l := t.locks[name]
	if l == nil {
		return Result{}, ErrNoLock
	}
	for w := l.head; w != nil; w = w.next {
		if w.peer.Addr == addr {
			var res Result
			res.send(Send{Kind: SendError, Claim: w.id, Code: protocol.CodeClosedByAdmin})
			t.end(now, w, ReasonKick, &res)
			return res, nil
		}
	}
	return Result{}, ErrNoWaiter
}

// Revoke ends the claims that allow no longer permits, as after a reload
// of an access-control list: every waiter that allow refuses is sent
// ERROR(0x18) and leaves its queue, the others keep their order; with
// owners, an owner that allow refuses is sent ERROR(0x18) and closed too,
// and the (permitted) head of its queue is promoted. Each ended claim has
// ReasonRevoked. Locks are visited in name order so the result is
// deterministic.
func (t *Table) Revoke(now time.Time, allow func(p Peer, lock string) bool, owners bool) Result {
	var res Result
	names := make([]string, 0, len(t.locks))
	for name := range t.locks {
		names = append(names, name)
	}
	slices.Sort(names)
	revoke := func(c *claim) {
		res.send(Send{Kind: SendError, Claim: c.id, Code: protocol.CodeNotAuthorized})
		t.end(now, c, ReasonRevoked, &res)
	}
	for _, name := range names {
		l := t.locks[name]
		for _, w := range l.queue() {
			if !allow(w.peer, name) {
				revoke(w)
			}
		}
		if owners && !allow(l.owner.peer, name) {
			revoke(l.owner)
		}
	}
	return res
}

// Shutdown ends every claim without promoting anyone: each is sent
// ERROR(0x01) and closed. Every later Acquire returns ErrShutdown.
// Locks are visited in name order so the result is deterministic.
func (t *Table) Shutdown(now time.Time) Result {
	var res Result
	t.shutdown = true
	names := make([]string, 0, len(t.locks))
	for name := range t.locks {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		l := t.locks[name]
		for _, c := range append([]*claim{l.owner}, l.queue()...) {
			res.send(Send{Kind: SendError, Claim: c.id, Code: protocol.CodeShuttingDown})
			t.end(now, c, ReasonShutdown, &res)
		}
		delete(t.locks, name)
	}
	return res
}

// ShuttingDown reports whether Shutdown was called.
func (t *Table) ShuttingDown() bool { return t.shutdown }

func (t *Table) grant(now time.Time, c *claim, res *Result) {
	c.lock.owner = c
	c.token = t.tokens.Next()
	c.grantedAt = now
	res.event(Event{Kind: EventGranted, Lock: c.lock.name, Claim: c.id, Peer: c.peer,
		Token: c.token, Waited: now.Sub(c.queuedAt)})
}

func (t *Table) end(now time.Time, c *claim, reason Reason, res *Result) {
	delete(t.claims, c.id)
	l := c.lock
	if !c.owner() {
		l.remove(c)
		t.waiters--
		res.event(Event{Kind: EventDequeued, Lock: l.name, Claim: c.id, Peer: c.peer, Reason: reason})
		return
	}
	res.event(Event{Kind: EventReleased, Lock: l.name, Claim: c.id, Peer: c.peer,
		Token: c.token, Reason: reason, Held: now.Sub(c.grantedAt)})
	l.owner = nil
	next := l.head
	if next == nil || t.shutdown {
		if next == nil {
			delete(t.locks, l.name)
		}
		return
	}
	l.remove(next)
	t.waiters--
	t.grant(now, next, res)
	res.send(Send{Kind: SendAcquired, Claim: next.id, Token: next.token})
}

func (l *lock) enqueue(c *claim) {
	c.prev = l.tail
	if l.tail != nil {
		l.tail.next = c
	} else {
		l.head = c
	}
	l.tail = c
	l.waiters++
}

func (l *lock) remove(c *claim) {
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		l.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		l.tail = c.prev
	}
	c.prev, c.next = nil, nil
	l.waiters--
}

func (l *lock) queue() []*claim {
	q := make([]*claim, 0, l.waiters)
	for w := l.head; w != nil; w = w.next {
		q = append(q, w)
	}
	return q
}
