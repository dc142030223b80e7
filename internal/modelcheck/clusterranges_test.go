package modelcheck

import "testing"

// TestClusterRangesModel checks the configurations always checked and, on
// the same explorations, that the property does not hold for lack of
// behaviour.
func TestClusterRangesModel(t *testing.T) {
	t.Parallel()
	behaviours := [...]string{
		"c2 is granted at N after the gate while c1, which held the lock at the export, no longer believes",
		"c1 gives up by the client rule with its ERROR unread",
		"R answers c1's PING once the upstream is confirmed after its read",
		"c1 reads R's ERROR 0x03 while it believes: R ended its session",
		"O sees the hop end, keeps the relayed lock, drops it L after its last read, and c2 is then granted",
		"the frozen owner answers a LOCK \"unavailable\"",
		"w, waiting, is granted at P after the export and believes",
		"c2 is granted at N after a gate counted from w's session",
	}
	var reached [len(behaviours)]bool
	// Pinned so that a change in the model is noticed (docs/design/2026-12-07-verification-models-cluster.md
	// quotes them).
	states := []int{366, 1020, 4902, 17432}
	for i, cfg := range DefaultClusterRangesConfigs() {
		if cfg.Handover {
			continue // TestClusterRangesHandoverModel
		}
		rep := checkClusterRanges(cfg, func(s *crState, st crStep) {
			switch {
			case st.kind == ckC2 && cfg.Move && s.g&1 != 0 && s.c1 != crHeld:
				reached[0] = true
			case st.kind == ckGiveUp && s.err:
				reached[1] = true
			case st.kind == ckRAnswer && s.rq == crPing && s.conf <= s.rRead:
				reached[2] = true
			case st.kind == ckReadErr && s.upEnd && s.c1 == crHeld:
				reached[3] = true
			case st.kind == ckC2 && cfg.Relay && !cfg.Move && s.ended && s.hopCut:
				reached[4] = true
			case (st.kind == ckDeliver || st.kind == ckUpRead) && st.what == crLock && s.mv >= mvFrozen:
				reached[5] = true
			case st.kind == ckHangUp && st.what == 1 && s.wRec == wrQueued && !s.wEnded && s.mv >= mvExported:
				reached[6] = true
			case st.kind == ckC2 && s.g&2 != 0:
				reached[7] = true
			}
		})
		t.Log(rep)
		if rep.Violation != nil {
			t.Error(rep.Violation)
		}
		if rep.States != states[i] {
			t.Errorf("%s: %d states, docs/design/2026-12-07-verification-models-cluster.md says %d", cfg, rep.States, states[i])
		}
	}
	for i, ok := range reached {
		if !ok {
			t.Errorf("never reached: %s", behaviours[i])
		}
	}
}

// Leases of 80 units (eight ticks) instead of 40: finer time.
func TestClusterRangesModelLarger(t *testing.T) {
	t.Parallel()
	if raceEnabled || testing.Short() {
		t.Skip("skipped under -race or -short")
	}
	states := []int{2158, 10294, 53960, 384372}
	for i, cfg := range DefaultClusterRangesConfigs() {
		if cfg.Handover {
			continue // TestClusterRangesHandoverModelLarger
		}
		cfg.Lease = 80
		rep := CheckClusterRanges(cfg)
		t.Log(rep)
		if rep.Violation != nil {
			t.Error(rep.Violation)
		}
		if rep.States != states[i] {
			t.Errorf("%s: %d states, docs/design/2026-12-07-verification-models-cluster.md says %d", cfg, rep.States, states[i])
		}
	}
}

// The checker must be able to fail: each mutation drops one rule and must
// be caught, in every default configuration it applies to.
func TestClusterRangesMutations(t *testing.T) {
	t.Parallel()
	tested := map[string]bool{}
	defer func() {
		for _, mut := range ClusterRangesMutations {
			if !tested[mut] {
				t.Errorf("mutation %s is not tested", mut)
			}
		}
	}()
	for _, tc := range []struct {
		mut  string
		cfg  int    // index in DefaultClusterRangesConfigs
		n    int    // length of the shortest counterexample
		says string // in the trace
	}{
		{MutCrGateShort, 0, 8, "gate G = 0 units"},
		{MutCrGateShort, 2, 9, "gate G = 0 units"},
		{MutCrGateShort, 3, 8, "gate G = 0 units"},
		{MutCrAnswerAfterExport, 0, 14, "PONG on the session the export ended"},
		{MutCrAnswerAfterExport, 2, 18, "PONG on the session the export ended"},
		{MutCrAnswerAfterExport, 3, 14, "PONG on the session the export ended"},
		{MutCrOwnerDropsRelayed, 1, 6, "drops its range lock at once"},
		{MutCrOwnerDropsRelayed, 2, 10, "drops its range lock at once"},
		{MutCrRelayUnconfirmed, 1, 13, "without an upstream confirmation since"},
		{MutCrRelayUnconfirmed, 2, 16, "without an upstream confirmation since"},
		{MutCrRelayUnconfirmed, 5, 18, "without an upstream confirmation since"},
		{MutCrRelayUnconfirmed, 6, 18, "without an upstream confirmation since"},
		{MutCrPlaceholderShort, 4, 11, "expires 20 units after"},
		{MutCrPlaceholderShort, 5, 13, "expires 20 units after"},
		{MutCrPlaceholderShort, 6, 13, "expires 20 units after"},
		{MutCrHostAnswersMoving, 4, 15, "PONG while the key is moving"},
		{MutCrHostAnswersMoving, 5, 20, "answers c1's PING while the key is moving"},
		{MutCrHostAnswersMoving, 6, 20, "answers c1's PING while the key is moving"},
		{MutCrMovedUnordered, 5, 20, "reads it before MOVED"},
		{MutCrMovedUnordered, 6, 20, "reads it before MOVED"},
		{MutCrAdoptAnyOrigin, 4, 8, "lets c2's session adopt"},
		{MutCrAdoptAnyOrigin, 5, 10, "lets c2's session adopt"},
		{MutCrAdoptAnyOrigin, 6, 10, "lets c2's session adopt"},
	} {
		tested[tc.mut] = true
		cfg := DefaultClusterRangesConfigs()[tc.cfg]
		cfg.Mutation = tc.mut
		t.Run(cfg.String(), func(t *testing.T) {
			expectCounterexample(t, CheckClusterRanges(cfg), PropClusterRangesOneHolder, tc.n, tc.says)
		})
	}
	// Only a waiter with a longer lease than every holder's outlasts a
	// gate of the holders' leases (TestClusterRangesWaiterLongerLease).
	tested[MutCrGateHoldersOnly] = true
	cfg := DefaultClusterRangesConfigs()[3]
	cfg.WaiterLease, cfg.Mutation = 2*cfg.Lease, MutCrGateHoldersOnly
	expectCounterexample(t, CheckClusterRanges(cfg), PropClusterRangesOneHolder, 17, "grants w, which waited, and pushes PROMOTED")
}

// With a drift of ρ = 0.2, above the 1/9 at which the client rule itself
// fails, the owner's L and N's gate of L no longer outlast a client's
// 0.8 × L: the model is not blind to drift.
func TestClusterRangesDriftTooLarge(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  int
		n    int
		says string
	}{
		{0, 12, "installed 4 ticks ago"},
		{1, 10, "drops its range lock"},
	} {
		cfg := DefaultClusterRangesConfigs()[tc.cfg]
		cfg.Drift = 2
		t.Run(cfg.String(), func(t *testing.T) {
			expectCounterexample(t, CheckClusterRanges(cfg), PropClusterRangesOneHolder, tc.n, tc.says)
		})
	}
}

// The finding of the model's waiter option: a gate that counted only the
// leases of the sessions holding range locks on the key at the export
// (MutCrGateHoldersOnly, the rule first built) lets a waiter that P
// grants after the export (the holder's connection ends, or its lease
// runs out, before Export's loop has ended the waiter's session), told
// PROMOTED and missing its ERROR 0x01, believe past the gate when its
// lease is longer than every holder's. The gate counts the waiters'
// leases too (server/rangemove.go, exportRangesLocked): no violation.
func TestClusterRangesWaiterLongerLease(t *testing.T) {
	t.Parallel()
	cfg := DefaultClusterRangesConfigs()[3]
	cfg.WaiterLease = 2 * cfg.Lease
	rep := CheckClusterRanges(cfg)
	t.Log(rep)
	if rep.Violation != nil {
		t.Fatal(rep.Violation)
	}
	cfg.Mutation = MutCrGateHoldersOnly
	expectCounterexample(t, CheckClusterRanges(cfg), PropClusterRangesOneHolder, 17,
		"grants w, which waited, and pushes PROMOTED")
}
