// Package clientrule is the decision logic of one baton client connection,
// free of sockets, goroutines and clocks: the client obligations of
// docs/protocol.md ("Client obligations", items 2 to 4) as a state machine.
// The caller stamps each input (SentAcquire, SentHeartbeat, Received) with
// a monotonic time and reads back State, NextHeartbeat, Deadline and
// CloseBy. After a give-up the caller stops the guarded work and closes the
// connection by CloseBy: the lease's last fifth is the margin in which the
// server still keeps the lock. Nothing here blocks, so tests and the model
// checker drive it with synthetic times. The inputs in full:
// docs/design/2026-12-07-go-client.md#internalclientrulerulego.
package clientrule

import (
	"errors"
	"fmt"
	"time"

	"github.com/batonlock/baton/protocol"
)

// State is the client's view of its claim.
type State uint8

const (
	// Idle: nothing sent yet.
	Idle State = iota
	// Pending: ACQUIRE sent, its reply not yet received.
	Pending
	// Waiting: queued behind the owner.
	Waiting
	// Owner: the lock is ours, as long as the deadline is not passed.
	Owner
	// Closed: the claim is over; the connection must be closed.
	Closed
)

func (s State) String() string {
	switch s {
	case Idle:
		return "idle"
	case Pending:
		return "pending"
	case Waiting:
		return "waiting"
	case Owner:
		return "owner"
	case Closed:
		return "closed"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Errors returned by Received. Both leave the Rule Closed.
var (
	// ErrViolation: the server broke the protocol (a reply nothing asked
	// for, WAITING after ACQUIRED, a changed token, a frame type other than
	// WAITING or ACQUIRED). The error returned wraps it with the details.
	ErrViolation = errors.New("protocol violation")
	// ErrExpired: the frame arrived after the give-up deadline; the claim
	// had already to be treated as lost.
	ErrExpired = errors.New("give-up deadline passed")
)

// DefaultMinInterval is the heartbeat floor of docs/protocol.md.
const DefaultMinInterval = 100 * time.Millisecond

// Rule is the state of one connection. The zero value is not usable; make
// one with New. A Rule is not safe for concurrent use.
type Rule struct {
	lease time.Duration
	base  time.Duration // lease/4
	floor time.Duration // min(minInterval, base)

	state    State
	token    uint64
	inflight bool      // the last frame sent (ACQUIRE or HEARTBEAT) awaits its reply
	sentAt   time.Time // send time of the last frame sent
	replyAt  time.Time // arrival of the last reply
	anchor   time.Time // confirmation anchor; zero before the first reply
	deadline time.Time // give up when now is after it
	closeBy  time.Time // close the connection by then: anchor + lease

	srtt    time.Duration
	sampled bool // srtt holds at least one sample
}

// New returns a Rule for a claim with the given lease. minInterval is the
// heartbeat floor; zero or less means DefaultMinInterval, and the floor is
// never above lease/4.
func New(lease, minInterval time.Duration) Rule {
	if minInterval <= 0 {
		minInterval = DefaultMinInterval
	}
	base := lease / 4
	return Rule{lease: lease, base: base, floor: min(minInterval, base)}
}

// GiveUpAfter is how long after the anchor a client gives up: 0.8·lease.
func GiveUpAfter(lease time.Duration) time.Duration { return lease * 4 / 5 }

// CloseAfter is how long after the anchor a client that gave up closes its
// connection at the latest, whether or not its work has stopped: the
// lease. The server cannot end the claim earlier, since its last-seen time
// is never before the anchor; a close that waited longer would only keep
// the lock from the next waiter.
func CloseAfter(lease time.Duration) time.Duration { return lease }

// State returns the current state.
func (r *Rule) State() State { return r.state }

// Token returns the fencing token of the grant, or 0 before it.
func (r *Rule) Token() uint64 { return r.token }

// InFlight reports whether a sent ACQUIRE or HEARTBEAT awaits its reply.
func (r *Rule) InFlight() bool { return r.inflight }

// Anchor returns the confirmation anchor: the send time of the most recent
// ACQUIRE or HEARTBEAT whose reply has arrived. ok is false before the
// first reply.
func (r *Rule) Anchor() (t time.Time, ok bool) { return r.anchor, !r.anchor.IsZero() }

// Deadline returns the give-up time, anchor + 0.8·lease; before the first
// reply it is ACQUIRE's send time + 0.8·lease, since a reply can only
// confirm that send time. It is meaningful from SentAcquire on.
func (r *Rule) Deadline() time.Time { return r.deadline }

// CloseBy returns the latest time at which a client that gave up closes
// its connection: anchor + lease, or ACQUIRE's send time + lease before the
// first reply. Between Deadline and CloseBy the client no longer believes
// it holds anything but keeps the connection open while its guarded work
// stops, so that the server cannot hand the lock on before that. It is
// meaningful from SentAcquire on and does not change once the Rule is
// Closed.
func (r *Rule) CloseBy() time.Time { return r.closeBy }

// SRTT returns the smoothed round-trip time (EWMA, alpha 0.2, seeded by the
// first sample), or 0 before the first reply.
func (r *Rule) SRTT() time.Duration { return r.srtt }

// Interval returns clamp(lease/4 − 2·srtt, floor, lease/4).
func (r *Rule) Interval() time.Duration {
	return max(r.floor, min(r.base, r.base-2*r.srtt))
}

// Floor returns min(minInterval, lease/4).
func (r *Rule) Floor() time.Duration { return r.floor }

// SentAcquire records that ACQUIRE is being sent at t. Call it before the
// write, so that no reply can arrive before it is recorded. It panics
// unless the Rule is Idle.
func (r *Rule) SentAcquire(t time.Time) {
	if r.state != Idle {
		panic("clientrule: SentAcquire in state " + r.state.String())
	}
	r.state = Pending
	r.inflight = true
	r.sentAt = t
	r.deadline = t.Add(GiveUpAfter(r.lease))
	r.closeBy = t.Add(CloseAfter(r.lease))
}

// NextHeartbeat returns when the next heartbeat is due:
// max(previous send + Interval, arrival of its reply). ok is false while a
// frame is in flight (at most one at a time) and outside Waiting and Owner.
func (r *Rule) NextHeartbeat() (t time.Time, ok bool) {
	if r.inflight || (r.state != Waiting && r.state != Owner) {
		return time.Time{}, false
	}
	t = r.sentAt.Add(r.Interval())
	if r.replyAt.After(t) {
		t = r.replyAt
	}
	return t, true
}

// SentHeartbeat records that a HEARTBEAT is being sent at t. Call it before
// the write. It panics when NextHeartbeat would report ok == false; it does
// not check that t is at or after the due time.
func (r *Rule) SentHeartbeat(t time.Time) {
	if _, ok := r.NextHeartbeat(); !ok {
		panic("clientrule: SentHeartbeat not allowed in state " + r.state.String())
	}
	r.inflight = true
	r.sentAt = t
}

// Expire closes the claim and reports true if t is after the deadline.
// Call it whenever the caller's own timer for Deadline fires.
func (r *Rule) Expire(t time.Time) bool {
	if r.state == Idle || r.state == Closed || !t.After(r.deadline) {
		return false
	}
	r.state = Closed
	return true
}

// Close ends the claim (ERROR frame, read or write error, local release).
func (r *Rule) Close() { r.state = Closed }

// Received processes a WAITING or ACQUIRED frame that arrived at t.
//
// Replies are counted: every ACQUIRE and HEARTBEAT gets exactly one, and a
// promotion push is one extra ACQUIRED. While Waiting, an ACQUIRED is the
// push (whether or not a heartbeat is in flight): the state becomes Owner,
// an in-flight heartbeat stays in flight and the anchor does not move. A
// reply moves the anchor to the send time of the frame it answers.
//
// A frame in state Closed is ignored.
func (r *Rule) Received(f protocol.ServerFrame, t time.Time) error {
	switch r.state {
	case Closed:
		return nil
	case Idle:
		return r.violate("%v before ACQUIRE was sent", f)
	}
	if t.After(r.deadline) {
		r.state = Closed
		return ErrExpired
	}
	switch f.Type {
	case protocol.TypeWaiting:
		switch {
		case r.state == Owner:
			return r.violate("WAITING after ACQUIRED")
		case !r.inflight:
			return r.violate("WAITING with nothing in flight")
		}
		r.state = Waiting
		r.reply(t)
	case protocol.TypeAcquired:
		switch r.state {
		case Pending:
			r.state, r.token = Owner, f.Token
			r.reply(t)
		case Waiting: // the promotion push
			r.state, r.token = Owner, f.Token
		case Owner:
			switch {
			case f.Token != r.token:
				return r.violate("ACQUIRED(%d) after ACQUIRED(%d)", f.Token, r.token)
			case !r.inflight:
				return r.violate("ACQUIRED with nothing in flight")
			}
			r.reply(t)
		}
	default:
		return r.violate("unexpected %v", f)
	}
	return nil
}

// reply records the reply, arriving at t, to the frame in flight.
func (r *Rule) reply(t time.Time) {
	r.inflight = false
	r.anchor = r.sentAt
	r.deadline = r.anchor.Add(GiveUpAfter(r.lease))
	r.closeBy = r.anchor.Add(CloseAfter(r.lease))
	r.replyAt = t
	rtt := max(t.Sub(r.sentAt), 0)
	if r.sampled {
		r.srtt += (rtt - r.srtt) / 5 // alpha = 0.2
	} else {
		r.srtt, r.sampled = rtt, true
	}
}

func (r *Rule) violate(format string, args ...any) error {
	r.state = Closed
	return fmt.Errorf("%w: %s", ErrViolation, fmt.Sprintf(format, args...))
}
