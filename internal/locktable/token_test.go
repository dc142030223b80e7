package locktable

import (
	"errors"
	"testing"
	"time"
)

// fakeClock is a wall clock that only Sleep advances.
type fakeClock struct {
	now    time.Time
	slept  time.Duration
	sleeps int
}

func (f *fakeClock) tokens(start time.Time) *ClockTokens {
	return &ClockTokens{Now: func() time.Time { return f.now }, Start: start,
		Sleep: func(d time.Duration) { f.now = f.now.Add(d); f.slept += d; f.sleeps++ }}
}

// The first token of a source waits for the second after Start and is at
// least (Start's second + 1) << 20: above everything a process that ran
// until Start could have issued in its last second.
func TestClockTokensFirstSecondWaits(t *testing.T) {
	start := time.Unix(1_700_000_000, 300_000_000)
	clk := &fakeClock{now: start.Add(100 * time.Millisecond)}
	c := clk.tokens(start)
	if nb := c.NotBefore(); !nb.Equal(time.Unix(1_700_000_001, 0)) {
		t.Errorf("NotBefore = %v, want the next whole second", nb)
	}
	tok := c.Next()
	if want := uint64(1_700_000_001) << 20; tok != want {
		t.Errorf("first token %d, want %d", tok, want)
	}
	if clk.sleeps != 1 || clk.slept > 700*time.Millisecond {
		t.Errorf("waited %v in %d sleeps, want one sleep to the next second", clk.slept, clk.sleeps)
	}
	// A later call in the new second does not wait.
	if tok2 := c.Next(); tok2 != tok+1 || clk.sleeps != 1 {
		t.Errorf("second token %d after %d sleeps, want %d without a sleep", tok2, clk.sleeps, tok+1)
	}
}

// The old rule, max(prev+1, unix_seconds << 20), gave a process restarted
// within the same second tokens below its predecessor's. Simulate the
// restart: the old process issues many tokens in second S, the new one
// starts in S.
func TestClockTokensFastRestartIncreases(t *testing.T) {
	s := time.Unix(1_700_000_000, 0)
	clk := &fakeClock{now: s.Add(10 * time.Millisecond)}
	old := clk.tokens(s.Add(-5 * time.Second))
	var last uint64
	for range 1000 {
		last = old.Next()
	}
	clk.now = s.Add(20 * time.Millisecond) // restart 10 ms later
	fresh := clk.tokens(clk.now)
	if first := fresh.Next(); first <= last {
		t.Errorf("first token after a fast restart %d <= last before %d", first, last)
	}
}

// Above 2^20 grants in one second, the next grant waits for the next
// second rather than run ahead of the clock.
func TestClockTokensRateCap(t *testing.T) {
	s := time.Unix(1_700_000_000, 0)
	clk := &fakeClock{now: s.Add(500 * time.Millisecond)}
	c := clk.tokens(s.Add(-time.Hour))
	c.started, c.startS = true, s.Add(-time.Hour).Unix()
	c.prev = uint64(s.Unix()+1)<<20 - 2 // one token left in second s
	if tok := c.Next(); tok != uint64(s.Unix()+1)<<20-1 || clk.sleeps != 0 {
		t.Fatalf("last token of the second %d after %d sleeps", tok, clk.sleeps)
	}
	tok := c.Next()
	if want := uint64(s.Unix()+1) << 20; tok != want || clk.sleeps != 1 {
		t.Errorf("token past the cap %d after %d sleeps (%v), want %d after one", tok, clk.sleeps, clk.slept, want)
	}
	if clk.now.Unix() != s.Unix()+1 {
		t.Errorf("clock after the wait %v, want in the next second", clk.now)
	}
}

// A clock that stands still makes Next wait a bounded number of times,
// then issue anyway rather than hang.
func TestClockTokensStoppedClockIsBounded(t *testing.T) {
	s := time.Unix(1_700_000_000, 0)
	sleeps := 0
	c := &ClockTokens{Now: func() time.Time { return s }, Start: s, Sleep: func(time.Duration) { sleeps++ }}
	if tok := c.Next(); tok != uint64(s.Unix()+1)<<20 || sleeps != maxWaits {
		t.Errorf("token %d after %d sleeps, want %d after %d", tok, sleeps, uint64(s.Unix()+1)<<20, maxWaits)
	}
}

// Before 1970 the shift would wrap: NewClockTokens refuses such a start,
// and a clock that later reads before 1970 clamps instead of wrapping.
func TestClockTokensBeforeEpoch(t *testing.T) {
	if _, err := NewClockTokens(time.Unix(-1, 0)); !errors.Is(err, ErrClockBeforeEpoch) {
		t.Errorf("NewClockTokens(1969) error %v, want ErrClockBeforeEpoch", err)
	}
	c, err := NewClockTokens(time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	c.Now = func() time.Time { return time.Unix(-3600, 0) }
	c.Sleep = func(time.Duration) { t.Fatal("unexpected wait") }
	if a, b := c.Next(), c.Next(); a != 1<<20 || b != a+1 {
		t.Errorf("tokens before 1970: %d, %d; want %d, %d", a, b, 1<<20, 1<<20+1)
	}
	lazy := &ClockTokens{Now: func() time.Time { return time.Unix(-3600, 0) }, Sleep: func(time.Duration) {}}
	if tok := lazy.Next(); tok > 1<<20 {
		t.Errorf("a zero-value source before 1970 issued %d: wrapped", tok)
	}
}
