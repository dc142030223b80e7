package modelcheck

import "testing"

// handoverConfigs are the hand-over configurations of
// DefaultClusterRangesConfigs, by their index there.
func handoverConfigs() map[int]ClusterRangesConfig {
	cfgs := map[int]ClusterRangesConfig{}
	for i, cfg := range DefaultClusterRangesConfigs() {
		if cfg.Handover {
			cfgs[i] = cfg
		}
	}
	return cfgs
}

// TestClusterRangesHandoverModel checks the hand-over configurations
// always checked and, on the same explorations, that the property does
// not hold for lack of behaviour.
func TestClusterRangesHandoverModel(t *testing.T) {
	t.Parallel()
	behaviours := [...]string{
		"c2 is granted at N after the placeholder expired, with c1's key still moving at its host and c1 no longer believing",
		"the host answers c1's held PING once N adopted the lock and confirmed a send at or after its read",
		"c2 is granted at N after N dropped an adopted lock",
		"N answers an ADOPT \"unavailable\" before it serves the key",
		"N answers an ADOPT \"none\" while c1 believes: the host ends its session",
		"P answers R's PING after the export: R reads MOVED first",
		"the host holds c1's PING while the key is moving",
		"N, c1's host, adopts locally and answers c1's PING as the owner",
		"the host gives the move up while c1 believes",
		"N adopts for a host that has ended c1's session (the orphan)",
	}
	var reached [len(behaviours)]bool
	// Pinned so that a change in the model is noticed (docs/design/2026-12-07-verification-models-cluster.md
	// quotes them).
	states := map[int]int{4: 3232, 5: 18531, 6: 12392}
	cfgs := handoverConfigs()
	if len(cfgs) != len(states) {
		t.Fatalf("%d hand-over configurations, %d pinned", len(cfgs), len(states))
	}
	for i, cfg := range cfgs {
		rep := checkClusterRangesHandover(cfg, func(s *hoState, st hoStep) {
			switch {
			case st.kind == hkC2 && s.hm == hmMoving && s.c1 != crHeld:
				reached[0] = true
			case st.kind == hkAnswer && s.hm == hmAdopted && s.hq == crPing && !cfg.RelayAtN && s.conf <= s.hRead:
				reached[1] = true
			case st.kind == hkC2 && s.hm == hmAdopted:
				reached[2] = true
			case st.kind == hkUpNRead && st.what == adUnavailable:
				reached[3] = true
			case st.kind == hkUpNRead && st.what == adNone && s.hm == hmMoving && s.c1 == crHeld:
				reached[4] = true
			case st.kind == hkUpPRead && st.what == crPing && s.moved && !s.ended:
				reached[5] = true
			case st.kind == hkHostRead && st.what == crPing && s.hm == hmMoving:
				reached[6] = true
			case st.kind == hkHostRead && cfg.RelayAtN && s.hm == hmAdopted && s.nLk:
				reached[7] = true
			case st.kind == hkHGiveUp && s.c1 == crHeld:
				reached[8] = true
			case st.kind == hkUpNRead && st.what == adAdopted && s.hm == hmEnded:
				reached[9] = true
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
func TestClusterRangesHandoverModelLarger(t *testing.T) {
	t.Parallel()
	if raceEnabled || testing.Short() {
		t.Skip("skipped under -race or -short")
	}
	states := map[int]int{4: 41428, 5: 360863, 6: 209144}
	for i, cfg := range handoverConfigs() {
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

// With ρ = 0.2 the placeholder's L from the install no longer outlasts a
// client's 0.8 × L from an anchor before the export.
func TestClusterRangesHandoverDriftTooLarge(t *testing.T) {
	t.Parallel()
	for i, n := range map[int]int{4: 13, 5: 15, 6: 15} {
		cfg := DefaultClusterRangesConfigs()[i]
		cfg.Drift = 2
		t.Run(cfg.String(), func(t *testing.T) {
			expectCounterexample(t, CheckClusterRanges(cfg), PropClusterRangesOneHolder, n, "drops the placeholder")
		})
	}
}

// The finding of the hand-over option: a host that gives the move up
// (L/2 after the key began moving) while its ADOPT is in flight leaves N
// adopting the locks for its upstream session: if that session lives on,
// N keeps them as long as it reads from it, for no client. Releasing them
// when the host reads "adopted" is unsafe (c1 may not have read its ERROR
// 0x03 and believes until 0.8 × L after its anchor); closing the upstream
// without releases when the host ends c1's session (N keeps them L after
// it read the ADOPT) is safe and leaves no orphan.
func TestClusterRangesHandoverOrphan(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg            int
		orphan, unsafe int // steps of the counterexamples
	}{
		{4, 13, 14},
		{5, 15, 17},
	} {
		cfg := DefaultClusterRangesConfigs()[tc.cfg]
		cfg.orphanCheck = true
		t.Run(cfg.String(), func(t *testing.T) {
			expectCounterexample(t, CheckClusterRanges(cfg), PropClusterRangesNoOrphan, tc.orphan, "N holds the lock for no client")
			cfg.orphanFix = ofRelease
			expectCounterexample(t, CheckClusterRanges(cfg), PropClusterRangesOneHolder, tc.unsafe, "releases the lock at N at once")
			cfg.orphanFix = ofClose
			rep := CheckClusterRanges(cfg)
			t.Log(rep)
			if rep.Violation != nil {
				t.Error(rep.Violation)
			}
		})
	}
	// N, c1's host, adopts locally in one step: no orphan.
	cfg := DefaultClusterRangesConfigs()[6]
	cfg.orphanCheck = true
	if rep := CheckClusterRanges(cfg); rep.Violation != nil {
		t.Error(rep.Violation)
	}
}
