package modelcheck

import (
	"testing"
)

// TestFailoverModel checks the default configuration and, on the same
// exploration, that the properties do not hold for lack of behaviour: the
// model reaches holders that keep their claims across the failover by
// re-asserting them on B while they believe, grants on B after the
// warm-up, a re-queued claim promoted on B, A expiring a silent holder
// and granting the next, A stopping and learning it was removed, and a
// re-assertion that arrives after its client gave up.
func TestFailoverModel(t *testing.T) {
	t.Parallel()
	behaviours := [...]string{
		"a holder re-asserts its claim on B while it believes: accepted with its old token",
		"B grants after the warm-up", "B promotes a claim re-queued with A's ticket", "A expires a silent holder",
		"A grants a second claim", "A stops serving", "A learns it was removed",
		"B accepts a re-assertion whose client gave up waiting",
	}
	var reached [len(behaviours)]bool
	rep := checkFailover(DefaultFailoverConfig(), func(s *foState, st foStep) {
		switch {
		case st.kind == fsDeliver && st.what == fmReassert && st.val == frHeld && s.c[st.c].st == fcHeld:
			reached[0] = true
		case st.kind == fsDeliver && st.n == nodeB && st.what == fmClaim && st.val == frGranted,
			st.kind == fsPromote && st.n == nodeB && s.n[nodeB].rec[st.c].ticket == 0:
			reached[1] = true
		case st.kind == fsPromote && st.n == nodeB:
			reached[2] = true
		case st.kind == fsExpire && st.n == nodeA && st.what == frecHeld:
			reached[3] = true
		case st.kind == fsPromote && st.n == nodeA && s.maxTok&15 >= 1 && s.maxTok>>4 == 1:
			reached[4] = true
		case st.kind == fsStop:
			reached[5] = true
		case st.kind == fsPing && st.what != 0:
			reached[6] = true
		case st.kind == fsOrphan && st.val == frHeld:
			reached[7] = true
		}
	})
	t.Log(rep)
	if rep.Violation != nil {
		t.Fatal(rep.Violation)
	}
	// Pinned so that a change in the model is noticed (docs/design/2026-12-07-verification-models-cluster.md
	// quotes it).
	if want := 771076; rep.States != want {
		t.Errorf("%d states, docs/design/2026-12-07-verification-models-cluster.md says %d", rep.States, want)
	}
	for i, ok := range reached {
		if !ok {
			t.Errorf("never reached: %s", behaviours[i])
		}
	}
}

// A larger configuration: c2's lease 30 instead of 20.
func TestFailoverModelLarger(t *testing.T) {
	t.Parallel()
	if raceEnabled || testing.Short() {
		t.Skip("skipped under -race or -short")
	}
	cfg := DefaultFailoverConfig()
	cfg.ShortLease = 30
	rep := CheckFailover(cfg)
	t.Log(rep)
	if rep.Violation != nil {
		t.Error(rep.Violation)
	}
	if want := 1367136; rep.States != want {
		t.Errorf("%d states, docs/design/2026-12-07-verification-models-cluster.md says %d", rep.States, want)
	}
}

// The checker must be able to fail: each mutation drops one rule of the
// design and must be caught with the property it protects.
func TestFailoverMutations(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mut  string
		prop string
		n    int    // length of the shortest counterexample
		says string // in the trace
	}{
		{MutFoWarmupShort, PropFailoverOneBeliever, 16, "gated for W = 20 units"},
		{MutFoNoTSelf, PropFailoverOneOwner, 7, "node A reads c1's CLAIM"},
		{MutFoReassertOverNewer, PropFailoverKept, 17, "that c2 sent before it gave up waiting: accepted"},
		{MutFoRemoveAtTSelf, PropFailoverOneOwner, 6, "commits ring 2"},
		{MutFoStaleReassert, PropFailoverKept, 16, "RE-ASSERT(token (epoch 1, 1), ring 1) that c2 sent before it gave up waiting: accepted"},
		{MutFoContactAtReceive, PropFailoverOneOwner, 9, "contact anchored now"},
		{MutFoLeaseUncommitted, PropFailoverOneBeliever, 12, "node A reads c1's CLAIM (sent 0 ticks ago): grants"},
	} {
		t.Run(tc.mut, func(t *testing.T) {
			t.Parallel()
			cfg := DefaultFailoverConfig()
			cfg.Mutation = tc.mut
			rep := CheckFailover(cfg)
			expectCounterexample(t, rep, tc.prop, tc.n, tc.says)
		})
	}
}

// The mutations that break "the old owner stops before the new owner
// starts" are caught by that design invariant first; without it, the
// checker shows what they do to the clients: two holders at once.
func TestFailoverMutationsReachClients(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mut string
		n   int
		big bool
	}{
		{MutFoNoTSelf, 12, true},
		{MutFoContactAtReceive, 14, true},
		{MutFoRemoveAtTSelf, 19, true},
	} {
		if tc.big && (raceEnabled || testing.Short()) {
			t.Logf("%s: skipped under -race or -short", tc.mut)
			continue
		}
		t.Run(tc.mut, func(t *testing.T) {
			cfg := DefaultFailoverConfig()
			cfg.Mutation, cfg.noOwnerCheck = tc.mut, true
			rep := CheckFailover(cfg)
			t.Log(rep)
			v := rep.Violation
			if v == nil {
				t.Fatalf("no violation in %d states", rep.States)
			}
			if v.Property != PropFailoverOneBeliever && v.Property != PropFailoverKept {
				t.Errorf("violated %q, want a client property", v.Property)
			}
			if v.Steps() != tc.n {
				t.Errorf("counterexample has %d steps, want %d", v.Steps(), tc.n)
			}
		})
	}
}

// The discrete model's bound on T: with TSelf 20 and ρ = 0.1, T = 22
// lets the leader remove A at a tick at which A may still serve (2 ticks
// of a fast clock against 3 of a slow one), and T = 23, which needs 3
// ticks, is the smallest that holds; the continuous bound,
// TSelf·(1+ρ)/(1−ρ) = 24.4, is stricter by less than a tick.
func TestFailoverBounds(t *testing.T) {
	t.Parallel()
	cfg := DefaultFailoverConfig()
	cfg.T = 22
	rep := CheckFailover(cfg)
	t.Log(rep)
	if rep.Violation == nil || rep.Violation.Property != PropFailoverOneOwner {
		t.Errorf("T = 22: want a violation of %q, got %v", PropFailoverOneOwner, rep.Violation)
	}
	if raceEnabled || testing.Short() {
		t.Log("T = 23: skipped under -race or -short")
		return
	}
	cfg.T = 23
	rep = CheckFailover(cfg)
	t.Log(rep)
	if rep.Violation != nil {
		t.Errorf("T = 23: %v", rep.Violation)
	}
}

func TestFailoverConfigValidate(t *testing.T) {
	t.Parallel()
	ok := DefaultFailoverConfig()
	for _, mut := range []func(*FailoverConfig){
		func(c *FailoverConfig) { c.Clients = 1 },
		func(c *FailoverConfig) { c.Clients = 4 },
		func(c *FailoverConfig) { c.Shared = 2 },
		func(c *FailoverConfig) { c.Lives = 3 },
		func(c *FailoverConfig) { c.Unit = 0 },
		func(c *FailoverConfig) { c.Drift = 10 },
		func(c *FailoverConfig) { c.ShortLease = 50 },
		func(c *FailoverConfig) { c.TSelf = 0 },
		func(c *FailoverConfig) { c.T = 601 },
		func(c *FailoverConfig) { c.Slack = -1 },
		func(c *FailoverConfig) { c.Mutation = "nope" },
	} {
		c := ok
		mut(&c)
		if c.Validate() == nil {
			t.Errorf("%+v: valid", c)
		}
	}
	if err := ok.Validate(); err != nil {
		t.Error(err)
	}
}

// The timer windows of the default configuration, in ticks: a clock of
// 10 ± 1 units per tick counts K units after at least ⌈K/11⌉ and at most
// ⌈K/9⌉ ticks (strictly more than K: K+1).
func TestFailoverWindows(t *testing.T) {
	t.Parallel()
	m := newFoModel(DefaultFailoverConfig())
	for _, tc := range []struct {
		what      string
		got, want int16
	}{
		{"c1 may give up (clock past 32)", m.gMin[0], 3},
		{"c1 must have given up", m.gMax[0], 4},
		{"c2 may give up (clock past 16)", m.gMin[1], 2},
		{"c2 must have given up", m.gMax[1], 2},
		{"c1's claim may expire (clock past 40)", m.eMin[0], 4},
		{"c2's claim may expire (clock past 20)", m.eMin[1], 2},
		{"A may stop (clock at 20)", m.sMin, 2},
		{"A must have stopped", m.sMax, 3},
		{"Q may remove A (clock at 25)", m.rMin, 3},
		{"B's gate may open, largest lease 40", m.gate(40), 4},
		{"B's gate may open, largest lease 20", m.gate(20), 2},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: after %d ticks, want %d", tc.what, tc.got, tc.want)
		}
	}
	m = newFoModel(FailoverConfig{Clients: 2, Lives: 1, Unit: 10, Drift: 0, Lease: 40, TSelf: 20, T: 20})
	if m.gMin[0] != 4 || m.gMax[0] != 4 || m.sMin != 2 || m.sMax != 2 || m.rMin != 2 {
		t.Errorf("without drift the windows must close: give-up %d..%d, stop %d..%d, removal %d",
			m.gMin[0], m.gMax[0], m.sMin, m.sMax, m.rMin)
	}
}
