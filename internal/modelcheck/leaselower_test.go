package modelcheck

import "testing"

func TestLeaseLowerModel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg    LeaseLowerConfig
		states int // pinned so that a change in the model is noticed (docs/design/2026-12-07-cluster-tokens.md quotes them)
	}{
		{DefaultLeaseLowerConfig(), 104694},
		{smallLeaseLowerConfig(), 14574},
	} {
		rep := CheckLeaseLower(tc.cfg)
		t.Log(rep)
		if rep.Violation != nil {
			t.Error(rep.Violation)
		}
		if rep.States != tc.states {
			t.Errorf("%v: %d states, docs/design/2026-12-07-cluster-tokens.md says %d", tc.cfg, rep.States, tc.states)
		}
	}
}

// smallLeaseLowerConfig is two nodes with more deaths, restarts and
// settings: small enough for every mutation under -race.
func smallLeaseLowerConfig() LeaseLowerConfig {
	return LeaseLowerConfig{Nodes: 2, Deaths: 3, Restarts: 2, Settings: 3}
}

func TestLeaseLowerMutations(t *testing.T) {
	t.Parallel()
	for _, m := range LeaseLowerMutations {
		cfg := smallLeaseLowerConfig()
		cfg.Mutation = m
		rep := CheckLeaseLower(cfg)
		if rep.Violation == nil {
			t.Errorf("mutation %s: no violation in %d states", m, rep.States)
			continue
		}
		if rep.Violation.Property != "warmup-covers" {
			t.Errorf("mutation %s: %s, want warmup-covers", m, rep.Violation.Property)
		}
		t.Logf("mutation %s caught in %d steps:\n%v", m, len(rep.Violation.Trace), rep.Violation)
	}
}
