package modelcheck

import "testing"

// rfBehaviours are the behaviours the explorations must reach, so that
// the properties do not hold for lack of them; rfProbe marks those that
// a transition shows.
var rfBehaviours = [...]string{
	"N accepts a reassert while its client believes, during the warm-up",
	"R answers a PING it held while re-asserting, once N confirmed",
	"c2 is granted at N after a re-asserted lock expired there",
	"R gives up re-asserting while its client believes",
	"N answers a reassert \"unavailable\"",
	"N accepts a reassert R gave up on (nobody believes in it)",
	"N refuses a reassert R gave up on",
	"R notices the end with its believed window closed while its client believes",
	"c2 is granted while a reassert is in flight",
	"O grants c3 after it dropped c1's lock (Second)",
}

// rfNever are behaviours the rule as designed excludes: the findings of
// TestRangeFailoverModel.
var rfNever = [...]string{
	"N refuses \"conflict\" a reassert whose relaying node still re-asserts",
	"two conflicting locks re-assert at once",
}

func rfProbe(m *rfModel, reached, never []bool) func(s *rfState, st rfStep) {
	return func(s *rfState, st rfStep) {
		p := &s.p[st.i]
		if st.kind == rkUpRead && st.what == raRefused && p.ust == usRe {
			never[0] = true
		}
		if s.p[0].ust == usRe && s.p[1].ust == usRe {
			never[1] = true
		}
		if st.kind == rkC2 && (s.p[0].up == rqReassert || s.p[1].up == rqReassert) {
			reached[8] = true
		}
		switch {
		case st.kind == rkUpRead && st.what == raAccepted && p.ust == usRe && p.c == rfHeld && s.nTake < m.gate:
			reached[0] = true
		case st.kind == rkRAnswer && p.ust == usN && p.rq == rqPing:
			reached[1] = true
		case st.kind == rkC2 && s.p[0].ust == usClosed && s.p[0].c == rfDone && !s.p[0].nLk:
			reached[2] = true
		case st.kind == rkRGiveUp && p.c == rfHeld:
			reached[3] = true
		case st.kind == rkUpRead && st.what == raUnavailable:
			reached[4] = true
		case st.kind == rkUpRead && st.what == raAccepted && p.ust == usClosed:
			reached[5] = true
		case st.kind == rkUpRead && st.what == raRefused && p.ust == usClosed:
			reached[6] = true
		case st.kind == rkRNotice && st.what == 0 && p.mir && p.c == rfHeld:
			reached[7] = true
		case st.kind == rkUpRead && st.what == raAnswered && p.up == rqLock && m.np == 2 && s.p[1-st.i].mir:
			reached[9] = true
		}
	}
}

// TestRangeFailoverModel checks the configuration always checked, and
// that its exploration reaches the behaviours that give the properties
// their meaning.
//
// Two findings of the model about the rule as designed: N never refuses
// "conflict" a reassert whose relaying node still re-asserts, and two
// conflicting locks are never re-asserting at once. The believed window
// closes before O may expire the lock (so O grants no conflicting lock
// while a re-asserter may still send), and before N's warm-up ends (so
// c2 is granted only once no reassert may still be accepted); N's
// refusal reaches only reasserts whose R gave up. The conflict check at
// N is therefore defence in depth here: MutRfAcceptConflict breaks
// nothing (TestRangeFailoverMutations).
func TestRangeFailoverModel(t *testing.T) {
	t.Parallel()
	cfg := DefaultRangeFailoverConfigs()[0]
	reached, never := make([]bool, len(rfBehaviours)), make([]bool, len(rfNever))
	rep := checkRangeFailover(cfg, rfProbe(newRfModel(cfg), reached, never))
	t.Log(rep)
	if rep.Violation != nil {
		t.Error(rep.Violation)
	}
	// Pinned so that a change in the model is noticed (docs/design/2026-12-07-verification-models-cluster.md
	// quotes it).
	if rep.States != 14673 {
		t.Errorf("%s: %d states, docs/design/2026-12-07-verification-models-cluster.md says 14673", cfg, rep.States)
	}
	expectReached(t, reached[:len(reached)-1], rfBehaviours[:], never, rfNever[:])
}

// With c3 relayed by R2 (2.2 million states, about 20 s; skipped under
// -race or -short).
func TestRangeFailoverModelSecond(t *testing.T) {
	t.Parallel()
	if raceEnabled || testing.Short() {
		t.Skip("skipped under -race or -short")
	}
	cfg := DefaultRangeFailoverConfigs()[1]
	reached, never := make([]bool, len(rfBehaviours)), make([]bool, len(rfNever))
	rep := checkRangeFailover(cfg, rfProbe(newRfModel(cfg), reached, never))
	t.Log(rep)
	if rep.Violation != nil {
		t.Error(rep.Violation)
	}
	if rep.States != 2219794 {
		t.Errorf("%s: %d states, docs/design/2026-12-07-verification-models-cluster.md says 2219794", cfg, rep.States)
	}
	expectReached(t, reached, rfBehaviours[:], never, rfNever[:])
}

// Leases of 80 units (eight ticks) instead of 40: finer time.
func TestRangeFailoverModelLarger(t *testing.T) {
	t.Parallel()
	if raceEnabled || testing.Short() {
		t.Skip("skipped under -race or -short")
	}
	cfg := DefaultRangeFailoverConfigs()[0]
	cfg.Lease = 80
	rep := CheckRangeFailover(cfg)
	t.Log(rep)
	if rep.Violation != nil {
		t.Error(rep.Violation)
	}
	if rep.States != 444274 {
		t.Errorf("%s: %d states, docs/design/2026-12-07-verification-models-cluster.md says 444274", cfg, rep.States)
	}
}

// The checker must be able to fail: each mutation drops one rule and must
// be caught.
func TestRangeFailoverMutations(t *testing.T) {
	t.Parallel()
	tested := map[string]bool{}
	defer func() {
		for _, mut := range RangeFailoverMutations {
			if !tested[mut] {
				t.Errorf("mutation %s is not tested", mut)
			}
		}
	}()
	long := !raceEnabled && !testing.Short()
	for _, tc := range []struct {
		mut  string
		cfg  int // index in DefaultRangeFailoverConfigs
		prop string
		n    int    // length of the shortest counterexample
		says string // in the trace
	}{
		{MutRfWarmupShort, 0, PropClusterRangesOneHolder, 12, "warm-up of at least 2 ticks"},
		{MutRfWarmupShort, 1, PropClusterRangesOneHolder, 12, "warm-up of at least 2 ticks"},
		{MutRfAnswersEarly, 0, PropClusterRangesOneHolder, 18, "before N accepted"},
		{MutRfAnswersEarly, 1, PropClusterRangesOneHolder, 18, "before N accepted"},
		// Needs c3: O must have expired c1's lock (R's pings lost) and
		// granted c3, which re-asserts too; R's reassert, outside its
		// window, reaches N first.
		{MutRfReassertUnbelieved, 1, PropRfKept, 24, "refused \"conflict\""},
	} {
		tested[tc.mut] = true
		if tc.cfg != 0 && !long {
			continue // 1.5 to 2.2 million states
		}
		cfg := DefaultRangeFailoverConfigs()[tc.cfg]
		cfg.Mutation = tc.mut
		t.Run(cfg.String(), func(t *testing.T) {
			expectCounterexample(t, CheckRangeFailover(cfg), tc.prop, tc.n, tc.says)
		})
	}
	// N's conflict check decides nothing in these configurations
	// (TestRangeFailoverModel): the mutant accepts conflicting
	// reasserts, but only those whose R gave up, which nobody believes
	// in. The test fails if that changes.
	tested[MutRfAcceptConflict] = true
	cfg := DefaultRangeFailoverConfigs()[0]
	cfg.Mutation = MutRfAcceptConflict
	accepted := false
	rep := checkRangeFailover(cfg, func(s *rfState, st rfStep) {
		if st.kind == rkUpRead && st.what == raAccepted && s.c2 {
			accepted = true
		}
	})
	t.Log(rep)
	if rep.Violation != nil || !accepted {
		t.Errorf("%s: violation %v, a conflicting reassert accepted: %v; the mutant was harmless", cfg, rep.Violation, accepted)
	}
}

// With a drift of ρ = 0.2, above the 1/9 at which the client rule itself
// fails, O's L no longer outlasts c1's 0.8 × L; and with T = TSelf the
// old owner may still serve when N takes over: the model is not blind to
// drift or to the removal margin.
func TestRangeFailoverMargins(t *testing.T) {
	t.Parallel()
	cfg := DefaultRangeFailoverConfigs()[0]
	cfg.Drift, cfg.T = 2, 30 // T ≥ TSelf·(1+ρ)/(1−ρ)
	expectCounterexample(t, CheckRangeFailover(cfg), PropRfKept, 10, "node O expires c1's range lock")
	cfg = DefaultRangeFailoverConfigs()[0]
	cfg.T = cfg.TSelf
	expectCounterexample(t, CheckRangeFailover(cfg), PropRfOneOwner, 7, "node O reads an upstream request after node N took the key over")
}
