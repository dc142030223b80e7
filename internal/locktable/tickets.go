package locktable

// Queue tickets (docs/high-availability.md, rule 5; docs/protocol.md, "v2
// queue tickets"). Every claim that joins a queue gets a ticket: a number
// that orders the waiters of one lock at this table, drawn when it
// queues. A client that asked for tickets is told its claim's ticket in
// QUEUED. When the name's owner dies, the node that takes the name over
// has none of its state; a client re-asserts its queued claim there with
// its ticket (ClaimRequest.Ticket), and the claim takes its old place:
// ahead of every waiter that arrived without a ticket of a prior owner
// (those came after the take-over, so later), and in ticket order among
// those that have one. A ticket is only compared with tickets; holders
// are not affected.
//
// Tickets of one source increase. In a cluster they come from the node's
// token epoch (epoch<<40 | a counter of their own), so a later owner's
// tickets, carried on after a second failure, are above its
// predecessor's.

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

// Ticket returns the queue ticket of claim k while it waits: its own, or
// the one of a prior owner it was re-asserted with. It is 0 when k is not
// a waiter.
func (t *Table) Ticket(k Key) uint64 {
	if c := t.claim(k); c != nil && !c.holding {
		return c.ticket
	}
	return 0
}
