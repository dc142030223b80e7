package locktable

import "time"

// TokenSource issues fencing tokens. Every call returns a value larger
// than every earlier one from the same source.
type TokenSource interface {
	Next() uint64
}

// ClockTokens is the default TokenSource:
// token = max(previous + 1, unix_seconds << 20).
//
// Tokens keep increasing across restarts provided grants are more than one
// second apart and the wall clock did not step back; within one process
// they always increase.
type ClockTokens struct {
	// Now returns the wall clock; nil means time.Now.
	Now  func() time.Time
	prev uint64
}

// Next returns the next token.
func (c *ClockTokens) Next() uint64 {
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	t := c.prev + 1
	if floor := uint64(now().Unix()) << 20; floor > t {
		t = floor
	}
	c.prev = t
	return t
}

// CounterTokens issues 1, 2, 3, ...: deterministic tokens for tests and
// the model checker.
type CounterTokens struct{ prev uint64 }

// Next returns the next token.
func (c *CounterTokens) Next() uint64 { c.prev++; return c.prev }
