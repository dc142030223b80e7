package cluster

import (
	"errors"
	"sync"
	"time"
)

// Fencing tokens without clocks: a token is epoch<<EpochShift | counter,
// and each node commits a fresh epoch through Raft, larger than every
// earlier one, before it serves after a start or a ring change that gives
// it names. So tokens of one lock strictly increase across owners and
// restarts with no assumption about clocks. The first epoch alone is
// floored from the wall clock (EpochFloor), to stay above a replaced
// single server's clock-based tokens.
// Design: docs/design/2026-12-07-cluster-tokens.md#clustertokensgo.

// EpochShift is the number of counter bits in a token: 2^40 tokens per
// epoch (about 12 days at a million grants per second), and 2^24 epochs.
const EpochShift = 40

const counterMask = 1<<EpochShift - 1

// MaxEpoch is the largest epoch a token can carry: epoch<<EpochShift of
// a larger one would lose its top bits and wrap below every earlier
// token. The log never hands out an epoch above it (fsm.go), and
// SetEpoch refuses one.
const MaxEpoch = 1<<(64-EpochShift) - 1

// renewAt is the counter value past which Tokens asks for a fresh epoch,
// long before the counter runs out.
const renewAt = 1 << (EpochShift - 1)

// ErrTokensExhausted is returned by Tokens.TryNext when the counter of the
// current epoch is used up and no fresh epoch has been installed.
var ErrTokensExhausted = errors.New("cluster: the token counter of this epoch is used up; a fresh epoch is needed")

// ErrNoEpoch is returned by Tokens.TryNext before an epoch is installed.
var ErrNoEpoch = errors.New("cluster: no token epoch yet; commit one with AcquireEpoch")

// ErrEpochRange is returned by Tokens.SetEpoch for an epoch above
// MaxEpoch.
var ErrEpochRange = errors.New("cluster: a token epoch must not exceed MaxEpoch (2^24-1)")

// ErrEpochNotAbove is returned by Tokens.SetEpoch for an epoch that is not
// above the current one.
var ErrEpochNotAbove = errors.New("cluster: a new token epoch must be above the current one")

// EpochFloor returns the smallest epoch whose tokens are above every
// clock-based token (locktable.ClockTokens) a single server could have
// issued before now plus a day: ((unix_seconds + 86400 + 1) << 20) >>
// EpochShift, plus one.
func EpochFloor(now time.Time) uint64 {
	s := max(now.Unix(), 0) + 86400 + 1
	return uint64(s)<<20>>EpochShift + 1
}

// Tokens issues the fencing tokens of one node: epoch<<EpochShift |
// counter. It is safe for concurrent use.
type Tokens struct {
	mu      sync.Mutex
	epoch   uint64
	counter uint64
	// tickets counts the queue tickets of the epoch (NextTicket), apart
	// from the tokens so that tickets never use the tokens up.
	tickets uint64
	// low is called once per epoch, outside the mutex, when the counter
	// passes half its range: the node then commits a fresh epoch.
	low      func()
	lowFired bool
}

// NewTokens returns a source under epoch (which must have been committed
// through Raft for this node; 0 for none yet: TryNext fails with
// ErrNoEpoch). low, if not nil, is called when the epoch is half used; it
// must not block.
func NewTokens(epoch uint64, low func()) *Tokens {
	return &Tokens{epoch: epoch, low: low}
}

// Epoch returns the current epoch.
func (t *Tokens) Epoch() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.epoch
}

// SetEpoch installs a fresh epoch, which must be above the current one;
// the counter starts again from 1. An epoch above MaxEpoch is refused
// (ErrEpochRange): its tokens would wrap.
func (t *Tokens) SetEpoch(epoch uint64) error {
	if epoch > MaxEpoch {
		return ErrEpochRange
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if epoch <= t.epoch {
		return ErrEpochNotAbove
	}
	t.epoch, t.counter, t.tickets, t.lowFired = epoch, 0, 0, false
	return nil
}

// NextTicket returns the next queue ticket (locktable.TicketSource):
// epoch<<EpochShift | a counter of tickets of its own, so that a node's
// tickets increase and a later epoch's, on any node, are above every
// earlier one's, as tokens are. It returns 0 (none) without an epoch or
// once the epoch's ticket counter is used up.
func (t *Tokens) NextTicket() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.epoch == 0 || t.tickets >= counterMask {
		return 0
	}
	t.tickets++
	return t.epoch<<EpochShift | t.tickets
}

// TryNext returns the next token, or ErrTokensExhausted.
func (t *Tokens) TryNext() (uint64, error) {
	t.mu.Lock()
	if t.epoch == 0 {
		t.mu.Unlock()
		return 0, ErrNoEpoch
	}
	if t.counter >= counterMask {
		t.mu.Unlock()
		return 0, ErrTokensExhausted
	}
	t.counter++
	tok := t.epoch<<EpochShift | t.counter
	fire := t.counter >= renewAt && !t.lowFired && t.low != nil
	if fire {
		t.lowFired = true
	}
	low := t.low
	t.mu.Unlock()
	if fire {
		low()
	}
	return tok, nil
}

// Next implements locktable.TokenSource. The server calls it only while
// the node serves (Route says so only once an epoch is installed), with an
// epoch far from used up (the node renews at half); without an epoch, or
// if the counter does run out, Next panics rather than issue a token that
// is not above every earlier one.
func (t *Tokens) Next() uint64 {
	tok, err := t.TryNext()
	if err != nil {
		panic(err)
	}
	return tok
}

// SplitToken returns a token's epoch and counter.
func SplitToken(tok uint64) (epoch, counter uint64) {
	return tok >> EpochShift, tok & counterMask
}
