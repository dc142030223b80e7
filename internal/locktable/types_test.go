package locktable_test

import (
	"testing"
	"time"

	"github.com/batonlock/baton/internal/locktable"
)

// New(nil) issues tokens from the system clock: a first token is above
// the second in which the source began (so this test waits up to a
// second, once).
func TestNewNilUsesClockTokens(t *testing.T) {
	before := uint64(time.Now().Unix()+1) << 20
	table := locktable.New(nil)
	st, _, err := table.Acquire(time.Now(), 1, locktable.Request{Name: "a", Lease: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if st.Token < before {
		t.Errorf("first token %d is below the clock floor %d", st.Token, before)
	}
	c, err := locktable.NewClockTokens(time.Unix(0, 0)) // began long ago: no wait
	if err != nil {
		t.Fatal(err)
	}
	if a, b := c.Next(), c.Next(); a < before-1<<20 || b != a+1 {
		t.Errorf("ClockTokens{} gave %d then %d, want >= %d then +1", a, b, before)
	}
}

func TestStrings(t *testing.T) {
	tests := []struct{ got, want string }{
		{locktable.Waiting.String(), "waiting"},
		{locktable.Owner.String(), "owner"},
		{locktable.State(0).String(), "none"},
		{locktable.Reason(0).String(), "unknown"},
		{locktable.ReasonIOTimeout.String(), "io_timeout"},
		{locktable.ReasonProtocolError.String(), "protocol_error"},
		{locktable.ReasonRevoked.String(), "revoked"},
		{locktable.ReasonMoved.String(), "moved"},
		{locktable.EventKind(0).String(), "unknown"},
		{locktable.EventDequeued.String(), "dequeued"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
	seen := map[string]bool{}
	for _, r := range locktable.Reasons {
		if s := r.String(); s == "unknown" || seen[s] {
			t.Errorf("reason %d has label %q", r, s)
		} else {
			seen[s] = true
		}
	}
	if len(locktable.Reasons) != 9 {
		t.Errorf("Reasons has %d entries, want 9", len(locktable.Reasons))
	}
}
