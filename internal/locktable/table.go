package locktable

import (
	"cmp"
	"slices"
	"time"

	"github.com/batonlock/baton/protocol"
)

// Table holds sessions, their claims and every lock that has a holder. A
// lock exists exactly while it has a holder: when a claim ends, the
// waiters at the head of its queue that can now be granted are granted in
// the same operation, and the head of a queue always conflicts with a
// holder, so a queue is never left without one. The one exception is the
// gate (SetGate): before it, nothing is granted, and a lock may have
// waiters alone until it opens.
type Table struct {
	tokens   TokenSource
	tickets  TicketSource // nil: ticket counts 1, 2, 3, …
	ticket   uint64
	locks    map[string]*lock
	sessions map[SessionID]*session
	held     int // claims holding a lock
	waiters  int // claims in a queue
	shutdown bool
	limits   Limits // SetLimits
	// gate is the first instant at which the table may grant (SetGate);
	// gated is set until a grant at or after it opened the gate.
	gate  time.Time
	gated bool
	// detached maps an origin to its detached session (detached.go);
	// importing, set during ImportDetached, the origins of its sessions.
	detached  map[Origin]SessionID
	importing map[SessionID]Origin
	// watches lists each watched name's watches, watchesOf each
	// session's by id, and values the claims that have one (watch.go).
	// They live beside the claims and sessions, not in them, so that a
	// claim without them costs no more than before.
	watches    map[string]*watchList
	watchesOf  map[SessionID]map[ClaimID]*watch
	values     map[*claim]string
	watchCount int
}

type session struct {
	id       SessionID
	lease    time.Duration
	lastSeen time.Time
	peer     Peer
	label    string
	v1       bool // one claim: its end ends the session
	// origin is set on a detached session: the client session it stands
	// for, on another node (detached.go).
	origin *Origin
	// A session's first claim lives in one, the others in claims, so a
	// version 1 session (one claim) has no map.
	one    *claim
	claims map[ClaimID]*claim
	// v1claim is the one claim of a version 1 session, allocated with it.
	v1claim claim
}

func (s *session) get(id ClaimID) *claim {
	if s.one != nil && s.one.id == id {
		return s.one
	}
	return s.claims[id]
}

func (s *session) add(c *claim) {
	if s.one == nil {
		s.one = c
		return
	}
	if s.claims == nil {
		s.claims = map[ClaimID]*claim{}
	}
	s.claims[c.id] = c
}

func (s *session) remove(c *claim) {
	if s.one == c {
		s.one = nil
		return
	}
	delete(s.claims, c.id)
}

// ids returns the session's claim ids in order.
func (s *session) ids() []ClaimID {
	ids := make([]ClaimID, 0, len(s.claims)+1)
	if s.one != nil {
		ids = append(ids, s.one.id)
	}
	for id := range s.claims {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, cmp.Compare)
	return ids
}

type lock struct {
	name string
	// limit is the semaphore limit while the name is a semaphore, 0 while
	// it is an exclusive/shared lock; fixed from the lock's first claim
	// until it has neither holders nor waiters.
	limit      uint32
	held       int    // number of holders
	holders    claims // in grant order
	queue      claims // FIFO
	waiters    int
	exclusives int // exclusive holders (0 or 1)
}

// claims is an intrusive doubly linked list: a claim is in its lock's
// holder list or in its queue, never both, so one pair of links serves.
type claims struct{ head, tail *claim }

type claim struct {
	id      ClaimID
	sess    *session
	lock    *lock
	mode    Mode
	holding bool
	token   uint64
	// ticket is a waiter's queue ticket (tickets.go); carried is set when
	// it came from a prior owner of the name rather than from this table.
	ticket     uint64
	carried    bool
	queuedAt   time.Time // when the claim arrived
	grantedAt  time.Time
	prev, next *claim
}

func (c *claim) status() Status {
	st := Status{State: Waiting, Deadline: c.sess.lastSeen.Add(c.sess.lease)}
	if c.holding {
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
	tickets, _ := tokens.(TicketSource)
	return &Table{
		tokens:   tokens,
		tickets:  tickets,
		locks:    map[string]*lock{},
		sessions: map[SessionID]*session{},
		detached: map[Origin]SessionID{},
	}
}

// Open starts session id at now. After Shutdown it returns ErrShutdown; a
// lease that is not positive returns protocol.ErrInvalidLease.
func (t *Table) Open(now time.Time, id SessionID, p SessionParams) error {
	switch {
	case t.shutdown:
		return ErrShutdown
	case p.Lease <= 0:
		return protocol.ErrInvalidLease
	case t.sessions[id] != nil:
		return ErrSessionExists
	}
	t.sessions[id] = &session{id: id, lease: p.Lease, lastSeen: now, peer: p.Peer, label: p.Label}
	return nil
}

// Claim adds claim cid of session sid for req. The claim is granted at
// once when it conflicts with no holder and nobody waits for the name;
// otherwise, or while the gate is closed (SetGate), it joins the back of
// the queue with a fresh queue ticket, or, with NoWait, is answered Busy
// and not kept. A claim with a Ticket of a prior owner takes its place
// by that ticket instead (tickets.go), and is granted at once when that
// place is the head of the queue and it conflicts with no holder. An answered claim counts as hearing from the session. The errors
// are claim-level (the session lives on) and change nothing: ErrShutdown,
// ErrNoSession, a protocol sentinel for an invalid name, ErrInvalidMode,
// ErrInvalidLimit, ErrClaimExists, ErrModeConflict, ErrLimitMismatch,
// and, over a limit (SetLimits), ErrTooManyClaims, ErrTooManyWaiters.
func (t *Table) Claim(now time.Time, sid SessionID, cid ClaimID, req ClaimRequest) (Status, Result, error) {
	var res Result
	if t.shutdown {
		return Status{}, res, ErrShutdown
	}
	s := t.sessions[sid]
	if s == nil {
		return Status{}, res, ErrNoSession
	}
	if err := checkRequest(req); err != nil {
		return Status{}, res, err
	}
	if s.get(cid) != nil || s.v1 && s.one != nil || t.watchOf(sid, cid) != nil {
		// A version 1 session has its one claim only.
		return Status{}, res, ErrClaimExists
	}
	l := t.locks[req.Name]
	if err := l.family(req); err != nil {
		return Status{}, res, err
	}
	if err := t.overLimit(s, l, req); err != nil {
		return Status{}, res, err
	}
	s.lastSeen = now
	// The claims that waited for the gate come first.
	t.openGate(now, &res)
	fresh := l == nil
	if fresh {
		l = &lock{name: req.Name}
		if req.Mode == Semaphore {
			l.limit = req.Limit
		}
	}
	var c *claim
	if s.v1 && s.one == nil {
		c = &s.v1claim // one allocation for a version 1 session and its claim
	} else {
		c = new(claim)
	}
	*c = claim{id: cid, sess: s, lock: l, mode: req.Mode, queuedAt: now}
	t.setValue(c, req.Value) // before a grant tells the watchers
	var at *claim            // the waiter a claim with a ticket goes before; nil: the back
	if req.Ticket != 0 {
		at = l.ticketPlace(req.Ticket)
	}
	switch {
	case (l.queue.head == nil || req.Ticket != 0 && at == l.queue.head) && l.admits(c.mode) && !t.closed(now):
		if fresh {
			t.locks[req.Name] = l
		}
		t.grant(now, c, &res)
	case req.NoWait:
		t.setValue(c, "")
		return Status{State: Busy, Deadline: s.lastSeen.Add(s.lease)}, res, nil
	default:
		if fresh { // waiting for the gate, not for a holder
			t.locks[req.Name] = l
		}
		t.enqueue(c, req.Ticket, at)
		l.waiters++
		t.waiters++
	}
	s.add(c)
	return c.status(), res, nil
}

// checkRequest checks what a claim request alone decides: its name, mode
// and limit.
func checkRequest(req ClaimRequest) error {
	if err := protocol.ValidateName(req.Name); err != nil {
		return err
	}
	switch {
	case req.Mode < Exclusive || req.Mode > Semaphore:
		return ErrInvalidMode
	case req.Mode == Semaphore && req.Limit == 0:
		return ErrInvalidLimit
	case len(req.Value) > protocol.MaxValueLen:
		return protocol.ErrValueTooLong
	}
	return nil
}

// family checks that a claim for req may join lock l (nil: no lock yet):
// a semaphore with the same limit, or an exclusive/shared lock.
func (l *lock) family(req ClaimRequest) error {
	switch {
	case l == nil:
		return nil
	case (req.Mode == Semaphore) != (l.limit > 0):
		return ErrModeConflict
	case req.Mode == Semaphore && req.Limit != l.limit:
		return ErrLimitMismatch
	}
	return nil
}

// Touch records that session sid was heard from at now (a session-level
// heartbeat) and returns its new deadline.
func (t *Table) Touch(now time.Time, sid SessionID) (time.Time, error) {
	s := t.sessions[sid]
	if s == nil {
		return time.Time{}, ErrNoSession
	}
	s.lastSeen = now
	return s.lastSeen.Add(s.lease), nil
}

// ClaimStatus returns where claim k stands.
func (t *Table) ClaimStatus(k Key) (Status, error) {
	c := t.claim(k)
	if c == nil {
		return Status{}, ErrNoClaim
	}
	return c.status(), nil
}

// Release ends claim k at its client's request (ReasonGraceful), which
// also counts as hearing from the session: a holder releases its lock and
// the waiters it was blocking are granted; a waiter leaves its queue.
func (t *Table) Release(now time.Time, k Key) (Result, error) {
	var res Result
	c := t.claim(k)
	if c == nil {
		if w := t.watchOf(k.Session, k.Claim); w != nil {
			w.sess.lastSeen = now
			t.unwatch(w)
			return res, nil
		}
		return res, ErrNoClaim
	}
	c.sess.lastSeen = now
	t.end(now, c, ReasonGraceful, &res)
	return res, nil
}

// CloseSession ends session sid and every claim it has, for reason, in
// claim id order. Closing an unknown or ended session does nothing.
func (t *Table) CloseSession(now time.Time, sid SessionID, reason Reason) Result {
	var res Result
	if s := t.sessions[sid]; s != nil {
		t.closeSession(now, s, reason, &res)
	}
	return res
}

// ExpireSession ends session sid and all its claims with ReasonExpired if
// more than its lease has passed since it was last heard from, and
// returns ErrNotExpired if not. No frame is sent: the caller closes the
// connection.
func (t *Table) ExpireSession(now time.Time, sid SessionID) (Result, error) {
	s := t.sessions[sid]
	if s == nil {
		return Result{}, ErrNoSession
	}
	if now.Sub(s.lastSeen) <= s.lease {
		return Result{}, ErrNotExpired
	}
	var res Result
	t.closeSession(now, s, ReasonExpired, &res)
	return res, nil
}

// ForceReleaseClaim takes lock name from its holder k, which is sent
// ERROR(0x02) (ending that claim; a version 1 session is closed with it);
// the waiters it blocked are granted at once.
func (t *Table) ForceReleaseClaim(now time.Time, name string, k Key) (Result, error) {
	l := t.locks[name]
	if l == nil {
		return Result{}, ErrNoLock
	}
	c := t.claim(k)
	if c == nil || c.lock != l || !c.holding {
		return Result{}, ErrNoHolder
	}
	return t.adminEnd(now, c, ReasonForce), nil
}

// KickClaim removes waiter k from the queue of lock name; it is sent
// ERROR(0x02) and the other waiters keep their order.
func (t *Table) KickClaim(now time.Time, name string, k Key) (Result, error) {
	l := t.locks[name]
	if l == nil {
		return Result{}, ErrNoLock
	}
	c := t.claim(k)
	if c == nil || c.lock != l || c.holding {
		return Result{}, ErrNoWaiter
	}
	return t.adminEnd(now, c, ReasonKick), nil
}

func (t *Table) adminEnd(now time.Time, c *claim, reason Reason) Result {
	var res Result
	res.send(Send{Kind: SendError, Session: c.sess.id, Claim: c.id, Code: protocol.CodeClosedByAdmin})
	t.end(now, c, reason, &res)
	return res
}

// Revoke ends the claims that allow no longer permits, as after a reload
// of an access-control list: every waiter that allow refuses is sent
// ERROR(0x18) and leaves its queue, the others keep their order; with
// owners, a holder that allow refuses is sent ERROR(0x18) too, and the
// (permitted) waiters it blocked are granted. Each ended claim has
// ReasonRevoked; a version 1 session ends with its claim, a version 2
// session lives on. Locks are visited in name order so the result is
// deterministic.
func (t *Table) Revoke(now time.Time, allow func(p Peer, lock string) bool, owners bool) Result {
	var res Result
	revoke := func(c *claim, promote bool) {
		res.send(Send{Kind: SendError, Session: c.sess.id, Claim: c.id, Code: protocol.CodeNotAuthorized})
		t.endClaim(now, c, ReasonRevoked, promote, &res)
	}
	for _, name := range t.lockNames() {
		l := t.locks[name]
		// Waiters first, without promotion: a waiter granted in the
		// middle would be judged as a holder.
		for _, w := range l.queue.list(l.waiters) {
			if !allow(w.sess.peer, name) {
				revoke(w, false)
			}
		}
		t.promote(now, l, &res)
		if owners {
			for _, h := range l.holders.list(l.held) {
				if h.holding && !allow(h.sess.peer, name) {
					revoke(h, true)
				}
			}
		}
	}
	t.revokeWatches(allow, &res)
	return res
}

// Shutdown ends every claim without granting anyone. Each claim of a
// version 1 session is sent ERROR(0x01) (and closed), lock by lock in
// name order, holders first; then every version 2 session, in id order,
// is sent one session-level ERROR(0x01) and closed. Every later Open,
// Claim or Acquire returns ErrShutdown.
func (t *Table) Shutdown(now time.Time) Result {
	var res Result
	t.shutdown = true
	for _, name := range t.lockNames() {
		l := t.locks[name]
		for _, c := range append(l.holders.list(l.held), l.queue.list(l.waiters)...) {
			if c.sess.v1 {
				res.send(Send{Kind: SendError, Session: c.sess.id, Claim: c.id, Code: protocol.CodeShuttingDown})
			}
			t.endClaim(now, c, ReasonShutdown, false, &res)
		}
		delete(t.locks, name)
	}
	ids := make([]SessionID, 0, len(t.sessions))
	for id := range t.sessions {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		res.send(Send{Kind: SendSessionError, Session: id, Code: protocol.CodeShuttingDown})
		delete(t.sessions, id)
	}
	t.watches, t.watchesOf, t.values, t.watchCount = nil, nil, nil, 0
	return res
}

// ShuttingDown reports whether Shutdown was called.
func (t *Table) ShuttingDown() bool { return t.shutdown }

func (t *Table) claim(k Key) *claim {
	if s := t.sessions[k.Session]; s != nil {
		return s.get(k.Claim)
	}
	return nil
}

func (t *Table) lockNames() []string {
	names := make([]string, 0, len(t.locks))
	for name := range t.locks {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// admits reports whether a claim of mode m conflicts with no holder of l.
func (l *lock) admits(m Mode) bool {
	switch m {
	case Exclusive:
		return l.held == 0
	case Shared:
		return l.exclusives == 0
	}
	return uint32(l.held) < l.limit
}

func (t *Table) grant(now time.Time, c *claim, res *Result) {
	l := c.lock
	l.holders.push(c)
	l.held++
	t.held++
	if c.mode == Exclusive {
		l.exclusives++
	}
	c.holding = true
	c.token = t.tokens.Next()
	c.grantedAt = now
	res.event(Event{Kind: EventGranted, Lock: l.name, Session: c.sess.id, Claim: c.id, Mode: c.mode,
		Label: c.sess.label, Peer: c.sess.peer, Token: c.token, Waited: now.Sub(c.queuedAt)})
	t.told(c, res)
}

// promote grants, in queue order, every waiter at the head of l's queue
// that conflicts with no holder (so with no earlier waiter either), and
// deletes l once it has neither holders nor waiters. Nobody is granted
// after Shutdown, nor while the gate is closed.
func (t *Table) promote(now time.Time, l *lock, res *Result) {
	for !t.shutdown && !t.closed(now) {
		next := l.queue.head
		if next == nil || !l.admits(next.mode) {
			break
		}
		l.queue.remove(next)
		l.waiters--
		t.waiters--
		t.grant(now, next, res)
		if next.sess.origin == nil { // a detached claim learns it at Adopt
			res.send(Send{Kind: SendAcquired, Session: next.sess.id, Claim: next.id, Token: next.token})
		}
	}
	if l.held == 0 && l.waiters == 0 && t.locks[l.name] == l {
		delete(t.locks, l.name)
	}
}

// end ends claim c for reason and grants the waiters it blocked.
func (t *Table) end(now time.Time, c *claim, reason Reason, res *Result) {
	t.endClaim(now, c, reason, true, res)
}

func (t *Table) endClaim(now time.Time, c *claim, reason Reason, promote bool, res *Result) {
	s, l := c.sess, c.lock
	s.remove(c)
	if s.v1 {
		delete(t.sessions, s.id)
	}
	ev := Event{Lock: l.name, Session: s.id, Claim: c.id, Mode: c.mode, Label: s.label, Peer: s.peer, Reason: reason}
	if len(t.values) > 0 {
		delete(t.values, c)
	}
	if c.holding {
		l.holders.remove(c)
		l.held--
		t.held--
		if c.mode == Exclusive {
			l.exclusives--
		}
		ev.Kind, ev.Token, ev.Held = EventReleased, c.token, now.Sub(c.grantedAt)
		if t.watchCount > 0 && t.watches[l.name] != nil { // no hash of the name on a table without watches
			t.tell(l.name, protocol.Change{Kind: protocol.ChangeFreed, Mode: c.mode.wire(), Token: c.token}, res)
		}
	} else {
		l.queue.remove(c)
		l.waiters--
		t.waiters--
		ev.Kind = EventDequeued
	}
	res.event(ev)
	if promote {
		t.promote(now, l, res)
	}
}

func (t *Table) closeSession(now time.Time, s *session, reason Reason, res *Result) {
	// Its watches end first: a session that ends is told nothing.
	for _, w := range t.watchesOf[s.id] {
		t.unwatch(w)
	}
	for _, id := range s.ids() {
		t.end(now, s.get(id), reason, res)
	}
	delete(t.sessions, s.id)
	if s.origin != nil {
		delete(t.detached, *s.origin)
	}
}

func (q *claims) push(c *claim) {
	c.prev, c.next = q.tail, nil
	if q.tail != nil {
		q.tail.next = c
	} else {
		q.head = c
	}
	q.tail = c
}

// insertBefore puts c in q before at, or at the back when at is nil.
func (q *claims) insertBefore(c, at *claim) {
	if at == nil {
		q.push(c)
		return
	}
	c.prev, c.next = at.prev, at
	if at.prev != nil {
		at.prev.next = c
	} else {
		q.head = c
	}
	at.prev = c
}

func (q *claims) remove(c *claim) {
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		q.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		q.tail = c.prev
	}
	c.prev, c.next = nil, nil
}

func (q *claims) list(n int) []*claim {
	out := make([]*claim, 0, n)
	for c := q.head; c != nil; c = c.next {
		out = append(out, c)
	}
	return out
}
