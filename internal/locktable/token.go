package locktable

import (
	"errors"
	"time"
)

// TokenSource issues fencing tokens. Every call returns a value larger
// than every earlier one from the same source.
type TokenSource interface {
	Next() uint64
}

// A Gate is a TokenSource that cannot issue a token before some instant.
// Next is still safe to call earlier (it then waits); callers that hold a
// lock shared with others, like the server's table mutex, wait for
// NotBefore first so that nobody else waits with them.
type Gate interface {
	TokenSource
	// NotBefore is the first instant at which Next returns at once.
	NotBefore() time.Time
}

// GrantsPerSecond is how many tokens ClockTokens issues in one second of
// the wall clock at most: a token issued in second s is below (s+1) << 20,
// so a grant beyond this rate waits for the next second.
const GrantsPerSecond = 1 << 20

// maxSeconds keeps seconds << 20 from wrapping past 2^64 (the year
// 557,000 or so).
const maxSeconds = 1<<44 - 1

// ErrClockBeforeEpoch is returned by NewClockTokens when the wall clock
// is before 1970: unix seconds are negative and tokens derived from them
// would wrap.
var ErrClockBeforeEpoch = errors.New("locktable: the wall clock is before 1970; fencing tokens derive from unix time")

// ClockTokens is the default TokenSource. It keeps two rules:
//
//   - A token issued while the wall clock reads second s is below
//     (s+1) << 20. So a process never runs ahead of its current second:
//     the 2^20-th grant within one second waits for the next second,
//     which caps the rate at GrantsPerSecond (about a million grants per
//     second, far above what one server does).
//   - The first token of a process is issued only once the clock's second
//     is past the second of Start, and it is at least (Start's second + 1)
//     << 20: above everything a previous process that stopped before
//     Start could have issued.
//
// Within those, token = max(previous + 1, unix_seconds << 20). Tokens
// therefore increase across any restart, however fast, provided the wall
// clock does not step back; within one process they always increase.
//
// A ClockTokens is not safe for concurrent use, except NotBefore.
type ClockTokens struct {
	// Now returns the wall clock; nil means time.Now.
	Now func() time.Time
	// Sleep waits; nil means time.Sleep. Tests with a fake clock make it
	// advance the clock.
	Sleep func(time.Duration)
	// Start is when this source began: no earlier process using the same
	// token sequence may issue a token after it. Zero means the time of
	// the first Next. NewClockTokens sets it.
	Start time.Time

	prev    uint64
	started bool
	startS  int64
}

// NewClockTokens returns a ClockTokens on the system clock that began at
// start, typically the start of the process. It returns
// ErrClockBeforeEpoch if start is before 1970.
func NewClockTokens(start time.Time) (*ClockTokens, error) {
	if start.Unix() < 0 {
		return nil, ErrClockBeforeEpoch
	}
	return &ClockTokens{Start: start}, nil
}

// NotBefore returns the first instant at which Next issues a token
// without waiting for the clock (unless the grant rate cap is reached):
// the start of the second after Start. It is zero when Start is zero.
// It is safe to call concurrently with Next.
func (c *ClockTokens) NotBefore() time.Time {
	if c.Start.IsZero() {
		return time.Time{}
	}
	return time.Unix(c.Start.Unix()+1, 0)
}

// maxWaits bounds Next's waits for the clock to reach the next second;
// one is enough for a clock that advances. After that many, Next issues
// a token anyway rather than hang on a clock that stands still.
const maxWaits = 10

// Next returns the next token, waiting for the clock when the rules above
// require it: at most until the next whole second, and only in the
// source's first second or above GrantsPerSecond.
func (c *ClockTokens) Next() uint64 {
	now, sleep := time.Now, time.Sleep
	if c.Now != nil {
		now = c.Now
	}
	if c.Sleep != nil {
		sleep = c.Sleep
	}
	if !c.started {
		start := c.Start
		if start.IsZero() {
			start = now()
		}
		c.startS, c.started = start.Unix(), true
	}
	var base int64
	for i := 0; ; i++ {
		t := now()
		s := t.Unix()
		// In Start's second, or about to run past the current second:
		// wait for the next one. A clock that stepped back below Start
		// (or below the previous token) promises nothing and does not
		// wait.
		last := s >= 0 && s < maxSeconds && c.prev+1 == uint64(s+1)<<20
		if i < maxWaits && (s == c.startS || (s > c.startS && last)) {
			sleep(time.Unix(s+1, 0).Sub(t) + time.Millisecond)
			continue
		}
		base = max(s, c.startS+1)
		break
	}
	base = min(max(base, 0), maxSeconds)
	tok := max(c.prev+1, uint64(base)<<20)
	c.prev = tok
	return tok
}

// CounterTokens issues 1, 2, 3, ...: deterministic tokens for tests and
// the model checker.
type CounterTokens struct{ prev uint64 }

// Next returns the next token.
func (c *CounterTokens) Next() uint64 { c.prev++; return c.prev }
