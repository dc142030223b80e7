package modelcheck

import (
	"strings"
	"testing"
)

func TestClientModel(t *testing.T) {
	for _, cfg := range []ClientConfig{
		DefaultClientConfig(),
		{Lease: 20, MaxDelay: 6, GiveUp: 0.8, TimerLag: 3},
		{Lease: 10, MaxDelay: 0, GiveUp: 0.8, TimerLag: 1},
	} {
		rep := CheckClient(cfg)
		t.Log(rep)
		if rep.Violation != nil {
			t.Error(rep.Violation)
		}
	}
}

// The checker must be able to fail: the margin between the client's
// give-up (0.8·lease) and the server's expiry (after 1.0·lease) is what
// keeps the property true.
func TestClientModelCatchesTooLateGiveUp(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   ClientConfig
		steps int
	}{
		{"give-up factor 1.0", ClientConfig{Lease: 10, MaxDelay: 3, GiveUp: 1.0, TimerLag: 1}, 15},
		{"give-up factor 1.0, punctual timer", ClientConfig{Lease: 10, MaxDelay: 3, GiveUp: 1.0, TimerLag: 0}, 15},
		{"give-up factor 0.8, timer lag eats the margin", ClientConfig{Lease: 10, MaxDelay: 3, GiveUp: 0.8, TimerLag: 2}, 15},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := CheckClient(tc.cfg)
			t.Log(rep)
			v := rep.Violation
			if v == nil {
				t.Fatalf("no violation in %d states", rep.States)
			}
			if v.Property != PropClientOwner {
				t.Fatalf("violated %q, want %q", v.Property, PropClientOwner)
			}
			if v.Steps() != tc.steps {
				t.Errorf("counterexample has %d steps, want the shortest, %d", v.Steps(), tc.steps)
			}
			if !strings.Contains(v.Error(), "server expires the session") {
				t.Error("counterexample does not end with the server's expiry")
			}
		})
	}
}
