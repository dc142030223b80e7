package clustercore

import (
	"slices"
	"time"
)

// The pessimism rule through a relay (docs/design/2026-12-07-cluster-relay.md, "Relaying a
// version 2 session"). The client's confirmation anchor is the send time
// of its latest request whose answer arrived, and any answer moves it,
// whoever produced it. So the relaying node writes the answer to a
// request it read at r only once every upstream of the session has been
// confirmed after r: an upstream request sent at or after r has been
// answered, so the owner read it after r and its lease for the relayed
// claims runs at least until r + L. The session's frames wait in an
// ordered outbox: an answer leaves when it is known and its condition
// holds, a push (PROMOTED, REVOKED) never overtakes an earlier frame, and
// a push from an owner goes before the answers that owner had not sent
// yet.

// Entry is one frame of the ordered outbox. U names the upstream the
// frame is about (its zero value: this node's own frames).
type Entry[U comparable] struct {
	B []byte
	// At is when the request it answers was read; zero for a push.
	At time.Time
	// Pending: the answer has not come from the upstream yet.
	Pending bool
	// Up and Claim say which upstream and claim id the frame is about.
	Up    U
	Claim uint32
}

// Confirmation is how far the upstreams that protect a session's claims
// have been confirmed: the earliest of their confirmations. Build it
// with Upstream for each upstream and Block while anything moves.
type Confirmation struct {
	blocked bool
	any     bool
	through time.Time
}

// Upstream records an upstream confirmed at confirmed; holds says it has
// a claim or may hold range locks. An upstream with none protects
// nothing: a claim it gets later is answered after its own CLAIM is
// confirmed.
func (c *Confirmation) Upstream(confirmed time.Time, holds bool) {
	if !holds {
		return
	}
	if !c.any || confirmed.Before(c.through) {
		c.through = confirmed
	}
	c.any = true
}

// Block records a claim or key moving to a new owner and not adopted
// yet: an upstream not confirmed yet, so no answer is released.
func (c *Confirmation) Block() { c.blocked = true }

// After reports whether every protecting upstream has been confirmed at
// or after at.
func (c Confirmation) After(at time.Time) bool {
	switch {
	case c.blocked:
		return false
	case !c.any:
		return true
	}
	return !c.through.Before(at)
}

// Outbox holds a relaying session's frames not yet released to the
// client, in the order decided.
type Outbox[U comparable] struct {
	q []*Entry[U]
	// lastAt is the latest read time of an answer queued.
	lastAt time.Time
	// readAt is when the batch being answered was read in full. Only the
	// session's reader, which alone builds answers, touches it.
	readAt time.Time
}

// Read records that the reader's batch was read in full at now.
func (o *Outbox[U]) Read(now time.Time) { o.readAt = now }

// Relaying records a request relayed from a batch read at now (the
// session's first relayed claim may come from a batch that began before
// the session relayed anything) and returns the time its answer must be
// confirmed after.
func (o *Outbox[U]) Relaying(now time.Time) time.Time {
	if o.readAt.IsZero() || o.readAt.Before(now) {
		o.readAt = now
	}
	return o.readAt
}

// AnswerAt is the time an answer built at now must be confirmed after:
// the read time of the reader's batch, or now when the batch began
// before the session relayed anything (a claim attached to it meanwhile,
// by a planned hand-off).
func (o *Outbox[U]) AnswerAt(now time.Time) time.Time {
	if o.readAt.IsZero() {
		return now
	}
	return o.readAt
}

// LastAt is the latest read time of an answer queued: every upstream
// must be confirmed after it before that answer leaves.
func (o *Outbox[U]) LastAt() time.Time { return o.lastAt }

// Len is the number of frames held.
func (o *Outbox[U]) Len() int { return len(o.q) }

// Backlog is the number of bytes held.
func (o *Outbox[U]) Backlog() int {
	n := 0
	for _, e := range o.q {
		n += len(e.B)
	}
	return n
}

// Add appends e and returns dst with what leaves at once: a frame with
// nothing before it and no condition goes straight to dst.
func (o *Outbox[U]) Add(dst []byte, e *Entry[U], c Confirmation) []byte {
	if !e.At.IsZero() && e.At.After(o.lastAt) {
		o.lastAt = e.At
	}
	if len(o.q) == 0 && !e.Pending && (e.At.IsZero() || c.After(e.At)) {
		return append(dst, e.B...)
	}
	o.q = append(o.q, e)
	return dst
}

// Insert puts e at index i.
func (o *Outbox[U]) Insert(i int, e *Entry[U]) { o.q = slices.Insert(o.q, i, e) }

// Release returns dst with the prefix whose frames are known and whose
// conditions hold under c appended, and drops that prefix.
func (o *Outbox[U]) Release(dst []byte, c Confirmation) []byte {
	i := 0
	for ; i < len(o.q); i++ {
		e := o.q[i]
		if e.Pending || !e.At.IsZero() && !c.After(e.At) {
			break
		}
		dst = append(dst, e.B...)
	}
	if i > 0 {
		n := copy(o.q, o.q[i:])
		clear(o.q[n:])
		o.q = o.q[:n]
	}
	return dst
}

// Push places a push from e.Up before the first answer that upstream has
// not sent yet (the owner sent it before those answers), else at the
// end; it returns dst as Add does.
func (o *Outbox[U]) Push(dst []byte, e *Entry[U], c Confirmation) []byte {
	for i, x := range o.q {
		if x.Pending && x.Up == e.Up {
			o.Insert(i, e)
			return dst
		}
	}
	return o.Add(dst, e, c)
}

// PlaceLoss places e, the REVOKED of a claim lost with its upstream,
// right after the last frame about the claim from that upstream still
// held, else at *front, which then moves on: the client hears of the
// loss before its anchor moves again, and losses without such a frame
// go first in the order they are placed.
func (o *Outbox[U]) PlaceLoss(e *Entry[U], front *int) {
	at := o.after(func(x *Entry[U]) bool { return x.Up == e.Up && x.Claim == e.Claim })
	if at < 0 {
		at = *front
		*front++
	}
	o.Insert(at, e)
}

// GiveUp places e, the REVOKED of a moving claim given up, right after
// the last frame about the claim still held (an owner's frame, or a
// push: this node's own answers, such as a PONG, carry claim 0), else
// first; it returns dst as Add does when nothing is held. The answers
// held were held because the claim was not confirmed after their
// requests were read: the client must hear of its loss before they move
// its anchor.
func (o *Outbox[U]) GiveUp(dst []byte, e *Entry[U], c Confirmation) []byte {
	if len(o.q) == 0 {
		return o.Add(dst, e, c)
	}
	var none U
	at := o.after(func(x *Entry[U]) bool { return x.Claim == e.Claim && (x.Up != none || x.At.IsZero()) })
	o.Insert(max(at, 0), e)
	return dst
}

// after returns the index just after the last entry match accepts, or -1.
func (o *Outbox[U]) after(match func(*Entry[U]) bool) int {
	for i := len(o.q) - 1; i >= 0; i-- {
		if match(o.q[i]) {
			return i + 1
		}
	}
	return -1
}

// Clear drops every frame held: the session has ended.
func (o *Outbox[U]) Clear() {
	clear(o.q)
	o.q = nil
}
