package clustercore

import (
	"testing"
	"time"
)

func TestKeptLimits(t *testing.T) {
	cases := []struct {
		name                  string
		limits                KeptLimits
		sessions, claims, add int
		want                  KeptRefusal
	}{
		{"no limits", KeptLimits{}, 1 << 20, 1 << 30, 100, KeptAllowed},
		{"below both", KeptLimits{MaxSessions: 3, MaxClaims: 10}, 2, 5, 5, KeptAllowed},
		{"sessions full", KeptLimits{MaxSessions: 3, MaxClaims: 10}, 3, 0, 1, KeptTooManySessions},
		{"claims would pass", KeptLimits{MaxSessions: 3, MaxClaims: 10}, 1, 6, 5, KeptTooManyClaims},
		{"sessions checked first", KeptLimits{MaxSessions: 1, MaxClaims: 1}, 1, 1, 1, KeptTooManySessions},
	}
	for _, c := range cases {
		if got := c.limits.Allow(c.sessions, c.claims, c.add); got != c.want {
			t.Errorf("%s: Allow(%d, %d, %d) = %v, want %v", c.name, c.sessions, c.claims, c.add, got, c.want)
		}
	}
}

func TestKeptTimerAt(t *testing.T) {
	d := time.Unix(100, 0)
	if got := KeptTimerAt(d); !got.After(d) || got.Sub(d) > time.Millisecond {
		t.Fatalf("KeptTimerAt(d) = d%+v, want just after d", got.Sub(d))
	}
}

// A kept session's end: asked about only past its deadline on a cluster
// node; held with a retry KeptRetry later, warned about once when the
// wait passes a lease beyond the deadline.
func TestKeptEnd(t *testing.T) {
	t0 := time.Unix(100, 0)
	deadline, lease := t0.Add(10*time.Second), 10*time.Second
	steps := []struct {
		at      time.Duration // since t0
		cluster bool
		mayHold bool
		warn    bool // when held
	}{
		{at: 5 * time.Second, cluster: true, mayHold: false},
		{at: 10 * time.Second, cluster: true, mayHold: false},
		{at: 11 * time.Second, cluster: false, mayHold: false},
		{at: 11 * time.Second, cluster: true, mayHold: true, warn: false},
		{at: 20 * time.Second, cluster: true, mayHold: true, warn: false},
		{at: 21 * time.Second, cluster: true, mayHold: true, warn: true},
		{at: 22 * time.Second, cluster: true, mayHold: true, warn: false},
	}
	var e KeptEnd
	for i, s := range steps {
		now := t0.Add(s.at)
		if got := e.MayHold(now, deadline, s.cluster); got != s.mayHold {
			t.Fatalf("step %d: MayHold = %v, want %v", i, got, s.mayHold)
		}
		if !s.mayHold {
			continue
		}
		retryAt, warn := e.Hold(now, deadline, lease)
		if retryAt != now.Add(KeptRetry) || warn != s.warn {
			t.Fatalf("step %d: Hold = %v, %v; want %v, %v", i, retryAt.Sub(now), warn, KeptRetry, s.warn)
		}
	}
}
