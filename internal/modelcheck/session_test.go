package modelcheck

import (
	"strings"
	"testing"
)

func TestSessionModel(t *testing.T) {
	t.Parallel()
	cfgs := []SessionConfig{
		DefaultSessionConfig(),
		// Work that ignores its cancellation past anchor + lease.
		{Lease: 5, MaxDelay: 1, TimerLag: 0, WorkStop: 7},
	}
	if !raceEnabled {
		// About 20 s; {Lease: 10, MaxDelay: 3, TimerLag: 1,
		// WorkStop: 4} (7M states) passes too, in minutes.
		cfgs = append(cfgs, SessionConfig{Lease: 5, MaxDelay: 2, TimerLag: 0, WorkStop: 2})
	}
	for _, cfg := range cfgs {
		t.Run(cfg.String(), func(t *testing.T) {
			t.Parallel()
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			rep := CheckSession(cfg)
			t.Log(rep)
			if rep.Violation != nil {
				t.Error(rep.Violation)
			}
		})
	}
}

// The checker must fail when the rule of docs/protocol.md is broken: an
// anchor taken at an answer's arrival or moved by a push, a close at the
// give-up or before the work is told.
func TestSessionModelMutations(t *testing.T) {
	t.Parallel()
	// Delays of 2 steps exceed a 5-step lease's last fifth: an anchor
	// taken at arrival overshoots the server's expiry. A close at the
	// give-up needs a lease whose give-up comes before anchor + lease by
	// more than the timer lag: the default's.
	long := SessionConfig{Lease: 5, MaxDelay: 2, TimerLag: 0, WorkStop: 2}
	for _, tc := range []struct {
		cfg     SessionConfig
		mut     string
		prop    string
		mention string
	}{
		{long, "anchor-at-receive", PropSessionOwner, "server expires the session"},
		{SessionConfig{Lease: 5, MaxDelay: 1, TimerLag: 0, WorkStop: 2}, "anchor-on-push", PropSessionOwner, "PROMOTED"},
		{DefaultSessionConfig(), "close-at-giveup", PropSessionWork, "server reads the client's close"},
		{DefaultSessionConfig(), "close-before-cancel", PropSessionWork, "the work is not told yet"},
	} {
		t.Run(tc.mut, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Mutation = tc.mut
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			rep := CheckSession(cfg)
			t.Log(rep)
			v := rep.Violation
			if v == nil {
				t.Fatalf("no violation in %d states", rep.States)
			}
			if v.Property != tc.prop {
				t.Fatalf("violated %q, want %q", v.Property, tc.prop)
			}
			if !strings.Contains(v.Error(), tc.mention) {
				t.Errorf("counterexample does not mention %q", tc.mention)
			}
		})
	}
}
