package clustercore

import (
	"time"

	"github.com/batonlock/baton/protocol"
)

// MaxPings bounds the PINGs in flight on one upstream.
const MaxPings = 2

// Patience is how long a request on an upstream may go unanswered
// before the upstream is given up: half the client session's lease, so
// the client hears of its other claims before it gives up at 0.8 of its
// lease.
func Patience(lease time.Duration) time.Duration { return lease / 2 }

// Sent is what the ledger needs of a request sent on an upstream.
type Sent struct {
	Kind protocol.Type // HELLO, PING, CLAIM, RELEASE, PROCLAIM or RANGE
	At   time.Time     // when it was queued to be sent
	// ID is what its answer names: the claim id (CLAIM, RELEASE,
	// PROCLAIM) or the RANGE req.
	ID uint32
}

// Head returns s: a type that embeds Sent is a Request.
func (s Sent) Head() Sent { return s }

// Request is a request a Ledger keeps; the caller's type carries what
// it needs besides (where its answer goes, its claim).
type Request interface{ Head() Sent }

// Ledger is an upstream's record of its requests in flight: the owner
// answers them in order, so each answer matches the oldest. It says when
// the upstream was last confirmed, when it needs a PING, and when it is
// overdue.
type Ledger[R Request] struct {
	fifo      []R // sent, unanswered, in order
	confirmed time.Time
	lastSent  time.Time
	pings     int
	seq       uint64
	patience  time.Duration
}

// OpenLedger returns the ledger of an upstream opened at now for a
// session of lease lease. Answers read before it opened need nothing of
// it: its claims are granted only after.
func OpenLedger[R Request](now time.Time, lease time.Duration) Ledger[R] {
	return Ledger[R]{confirmed: now, patience: Patience(lease)}
}

// Confirmed is the send time of the latest request answered.
func (l *Ledger[R]) Confirmed() time.Time { return l.confirmed }

// InFlight returns the requests sent and not answered, oldest first; the
// caller may change their own fields in place.
func (l *Ledger[R]) InFlight() []R { return l.fifo }

// Send records r as sent. It returns the read deadline for r when
// nothing else was in flight (first), which the caller sets.
func (l *Ledger[R]) Send(r R) (deadline time.Time, first bool) {
	h := r.Head()
	first = len(l.fifo) == 0
	l.fifo = append(l.fifo, r)
	l.lastSent = h.At
	return h.At.Add(l.patience), first
}

// Ping reports whether the upstream needs a PING, and its sequence
// number: it has not been confirmed after lastAt (the latest read time
// of an answer the outbox holds) and has nothing in flight sent late
// enough, with fewer than MaxPings PINGs in flight. Every upstream, with
// claims or not, hears from this node when the client has spoken: an
// idle one stays open as long as the session. The caller sends the PING
// (Send).
func (l *Ledger[R]) Ping(lastAt time.Time) (seq uint64, ok bool) {
	if !l.confirmed.Before(lastAt) || !l.lastSent.Before(lastAt) || l.pings >= MaxPings {
		return 0, false
	}
	l.seq++
	l.pings++
	return l.seq, true
}

// Match takes the oldest request in flight if owner frame f answers it,
// and confirms the upstream at its send time. tickets says the upstream
// asked for queue tickets: one that did not must get none.
func (l *Ledger[R]) Match(f protocol.Frame, tickets bool) (R, bool) {
	if len(l.fifo) == 0 || !Answers(l.fifo[0].Head(), f) || !tickets && Ticketed(f) {
		var none R
		return none, false
	}
	r := l.Pop()
	if f.Type == protocol.TypePong {
		l.pings--
	}
	return r, true
}

// Head returns the oldest request in flight.
func (l *Ledger[R]) Head() (R, bool) {
	if len(l.fifo) == 0 {
		var none R
		return none, false
	}
	return l.fifo[0], true
}

// Pop takes the oldest request in flight as answered, and confirms the
// upstream at its send time.
func (l *Ledger[R]) Pop() R {
	r := l.fifo[0]
	var none R
	l.fifo[0] = none
	l.fifo = l.fifo[1:]
	if len(l.fifo) == 0 {
		l.fifo = nil
	}
	if at := r.Head().At; at.After(l.confirmed) {
		l.confirmed = at
	}
	return r
}

// Drain returns the requests in flight and forgets them: the upstream
// has ended, and the caller answers them.
func (l *Ledger[R]) Drain() []R {
	rs := l.fifo
	l.fifo = nil
	return rs
}

// Deadline is when the oldest request in flight is overdue; ok is false
// when nothing is in flight.
func (l *Ledger[R]) Deadline() (time.Time, bool) {
	if len(l.fifo) == 0 {
		return time.Time{}, false
	}
	return l.fifo[0].Head().At.Add(l.patience), true
}

// Overdue reports whether at now the oldest request in flight has waited
// past the patience; if not, deadline is the next read deadline (zero:
// none, nothing is in flight).
func (l *Ledger[R]) Overdue(now time.Time) (deadline time.Time, overdue bool) {
	d, ok := l.Deadline()
	if !ok {
		return time.Time{}, false
	}
	if !now.Before(d) {
		return time.Time{}, true
	}
	return d, false
}

// Answers reports whether server frame f answers request r.
func Answers(r Sent, f protocol.Frame) bool {
	switch f.Type {
	case protocol.TypeWelcome:
		return r.Kind == protocol.TypeHello
	case protocol.TypePong:
		return r.Kind == protocol.TypePing
	case protocol.TypeGranted, protocol.TypeQueued, protocol.TypeBusy, protocol.TypeRefused:
		return r.Kind == protocol.TypeClaim && r.ID == f.Claim
	case protocol.TypeReleased:
		return r.Kind == protocol.TypeRelease && r.ID == f.Claim
	case protocol.TypeProclaimed:
		return r.Kind == protocol.TypeProclaim && r.ID == f.Claim
	case protocol.TypeRangeAnswer:
		return r.Kind == protocol.TypeRange && r.ID == f.Claim
	}
	return false
}

// Ticketed reports whether an owner's frame gives queue tickets: the
// WELCOME flag, or a QUEUED with a ticket (docs/protocol-v2-tickets.md, "v2 queue
// tickets"). An upstream that did not ask for them must get neither.
func Ticketed(f protocol.Frame) bool {
	switch f.Type {
	case protocol.TypeWelcome:
		return f.Flags&protocol.WelcomeTickets != 0
	case protocol.TypeQueued:
		return f.Ticket != 0
	}
	return false
}
