package locktable

import (
	"slices"
	"time"
)

// Queue tickets: every claim that joins a queue gets a ticket that orders
// the waiters of one lock here. A queued claim re-asserted with its ticket
// at the node that took its name over keeps its old place: ahead of every
// waiter without a predecessor's ticket, in ticket order among those with
// one. In a cluster tickets come from the node's token epoch, so a later
// owner's are above its predecessor's.
// Protocol: docs/protocol-v2-tickets.md; design:
// docs/design/2026-12-01-ha-queue-tickets.md#internallocktableticketsgo.

// TicketSource issues queue tickets. Every call returns a value larger
// than every earlier one from the same source, or 0 when it has none to
// give (the table then counts its own). A TokenSource that is also a
// TicketSource gives the table its tickets.
type TicketSource interface {
	NextTicket() uint64
}

// nextTicket returns the ticket of a claim that joins a queue now.
func (t *Table) nextTicket() uint64 {
	if t.tickets != nil {
		if tk := t.tickets.NextTicket(); tk != 0 {
			t.ticket = max(t.ticket, tk)
			return tk
		}
	}
	t.ticket++
	return t.ticket
}

// ticketPlace returns the waiter of l that a claim with a prior owner's
// ticket goes before: the first that has no such ticket, or a larger
// one; nil for the back of the queue.
func (l *lock) ticketPlace(ticket uint64) *claim {
	if l == nil {
		return nil
	}
	for w := l.queue.head; w != nil; w = w.next {
		if !w.carried || w.ticket > ticket {
			return w
		}
	}
	return nil
}

// enqueue puts waiter c in its lock's queue: with a prior owner's ticket
// before at (ticketPlace's answer), else at the back with a ticket of
// this table. The caller counts it.
func (t *Table) enqueue(c *claim, ticket uint64, at *claim) {
	if ticket != 0 {
		c.ticket, c.carried = ticket, true
		t.ticket = max(t.ticket, ticket) // its own tickets stay above
		c.lock.queue.insertBefore(c, at)
		return
	}
	c.ticket = t.nextTicket()
	c.lock.queue.push(c)
}

// Ticket returns the queue ticket of claim k while it waits: its own, or
// the one of a prior owner it was re-asserted with. It is 0 when k is not
// a waiter.
func (t *Table) Ticket(k Key) uint64 {
	if c := t.claim(k); c != nil && !c.holding {
		return c.ticket
	}
	return 0
}

// Entry is one claim of an Enter.
type Entry struct {
	Session SessionID
	Claim   ClaimID
	Req     ClaimRequest
}

// Enter adds claims whose clients were told they wait, all in one step:
// the claims held back while their names warmed up after a take-over,
// among them claims re-asserted with a prior owner's ticket. Each joins
// its lock's queue, one with a Ticket at its place by it, the others at
// the back in the order given, and only then are the waiters of those
// locks granted, in queue order, as after any change (their sessions
// are sent ACQUIRED). So no claim is granted ahead of one its ticket
// puts it behind, whatever order the caller found them in. NoWait is
// ignored, and entering does not count as hearing from a session.
// errs[i] is the claim-level error of entries[i], as Claim's (the claim
// is left out); nil when it entered.
func (t *Table) Enter(now time.Time, entries []Entry) (res Result, errs []error) {
	errs = make([]error, len(entries))
	var touched []*lock
	t.openGate(now, &res)
	for i, e := range entries {
		s := t.sessions[e.Session]
		req := e.Req
		switch {
		case t.shutdown:
			errs[i] = ErrShutdown
			continue
		case s == nil:
			errs[i] = ErrNoSession
			continue
		}
		if err := checkRequest(req); err != nil {
			errs[i] = err
			continue
		}
		if s.v1 || s.get(e.Claim) != nil {
			errs[i] = ErrClaimExists
			continue
		}
		l := t.locks[req.Name]
		if err := l.family(req); err != nil {
			errs[i] = err
			continue
		}
		if l == nil {
			l = &lock{name: req.Name}
			if req.Mode == Semaphore {
				l.limit = req.Limit
			}
			t.locks[req.Name] = l
		}
		c := &claim{id: e.Claim, sess: s, lock: l, mode: req.Mode, queuedAt: now}
		var at *claim
		if req.Ticket != 0 {
			at = l.ticketPlace(req.Ticket)
		}
		t.enqueue(c, req.Ticket, at)
		l.waiters++
		t.waiters++
		s.add(c)
		if !slices.Contains(touched, l) {
			touched = append(touched, l)
		}
	}
	for _, l := range touched {
		t.promote(now, l, &res)
	}
	return res, errs
}
