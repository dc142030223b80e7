package modelcheck

import (
	"testing"
)

func TestDirlockSeedModel(t *testing.T) {
	t.Parallel()
	for _, cfg := range []DirlockConfig{{Hosts: 2, ProcsPerHost: 1}, DefaultDirlockConfig(), {Hosts: 3, ProcsPerHost: 1}} {
		rep := CheckDirlockSeed(cfg)
		t.Log(rep)
		if rep.Violation != nil {
			t.Error(rep.Violation)
		}
	}
	// Pinned so that a change in the model is noticed (docs/design/2026-12-07-dirlock.md
	// quotes it).
	if rep := CheckDirlockSeed(DefaultDirlockConfig()); rep.States != 80 {
		t.Errorf("seed model, 2 hosts × 2 processes: %d states, docs/design/2026-12-07-dirlock.md says 80", rep.States)
	}
	if rep := CheckDirlockSeed(DirlockConfig{Hosts: 3, ProcsPerHost: 1}); rep.States != 44 {
		t.Errorf("seed model, 3 hosts × 1 process: %d states, docs/design/2026-12-07-dirlock.md says 44", rep.States)
	}
}

func TestDirlockStepsModel(t *testing.T) {
	t.Parallel()
	cfgs := []DirlockConfig{{Hosts: 2, ProcsPerHost: 1}, DefaultDirlockConfig()}
	if !raceEnabled {
		cfgs = append(cfgs, DirlockConfig{Hosts: 1, ProcsPerHost: 3})
	}
	// An operator's forced break at any moment (bigger configurations
	// take minutes: 2 hosts × 2 processes has 4.45 million states).
	cfgs = append(cfgs, DirlockConfig{Hosts: 2, ProcsPerHost: 1, ForcedBreak: true}, DirlockConfig{Hosts: 1, ProcsPerHost: 2, ForcedBreak: true})
	for _, cfg := range cfgs {
		rep := CheckDirlockSteps(cfg)
		t.Log(rep)
		if rep.Violation != nil {
			t.Error(rep.Violation)
		}
		if cfg == DefaultDirlockConfig() && rep.States != 162756 {
			t.Errorf("steps model, 2 hosts × 2 processes: %d states, docs/design/2026-12-07-dirlock.md says 162,756", rep.States)
		}
	}
}

// The checker must be able to fail: each mutation drops one rule of the
// design and must be caught with the property it protects.
func TestDirlockMutations(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		steps bool
		mut   string
		prop  string
		n     int    // length of the shortest counterexample, loop included
		says  string // in the trace
	}{
		{false, "tempting", PropDirOneHolder, 4, "which looks dead from h2"},
		{false, "no-takeover", PropDirNoWedge, 8, "nothing can happen any more"},
		{false, "local-live", PropDirOneHolder, 4, "judged dead by a timeout"},
		{true, "remote-break", PropDirOneHolder, 13, "p3@h2 reads LOCK (owner.p1@h1): judged dead"},
		{true, "no-death-check", PropDirOneHolder, 13, "p2@h1 reads LOCK (owner.p1@h1): judged dead"},
		{true, "no-claim", PropDirOneHolder, 21, "p2@h1 renames LOCK (owner.p1@h1) to its trash"},
		{true, "mkdir-lock", PropDirNoWedge, 27, "(no record).dead"},
		// Two machines with one host name: judging by the name takes the
		// other machine's boot id for a reboot of this one.
		{true, "host-name", PropDirOneHolder, 13, "p3@h2 reads LOCK (owner.p1@h1): judged dead"},
	} {
		t.Run(tc.mut, func(t *testing.T) {
			cfg := DefaultDirlockConfig()
			cfg.Mutation = tc.mut
			rep := CheckDirlockSeed(cfg)
			if tc.steps {
				rep = CheckDirlockSteps(cfg)
			}
			expectCounterexample(t, rep, tc.prop, tc.n, tc.says)
		})
	}
	// A forced break between a release's (or a break's) claim and its
	// removal of the lock, then a new holder: renaming the whole lock
	// away, as the steps did, moves the new holder's lock.
	for _, cfg := range []DirlockConfig{{Hosts: 1, ProcsPerHost: 2}, {Hosts: 2, ProcsPerHost: 1}} {
		cfg.ForcedBreak, cfg.Mutation = true, "move-lock"
		t.Run(cfg.String(), func(t *testing.T) {
			expectCounterexample(t, CheckDirlockSteps(cfg), PropDirOneHolder, 18, "renames LOCK (break.operator) to its trash")
		})
	}
	// Without a forced break nobody else touches a claimed entry: the old
	// steps were right there.
	if rep := CheckDirlockSteps(DirlockConfig{Hosts: 2, ProcsPerHost: 1, Mutation: "move-lock"}); rep.Violation != nil {
		t.Errorf("move-lock without a forced break: %v", rep.Violation)
	}
}

func TestDirlockConfigValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []DirlockConfig{{Hosts: 0, ProcsPerHost: 1}, {Hosts: 4, ProcsPerHost: 1}, {Hosts: 1, ProcsPerHost: 0}, {Hosts: 1, ProcsPerHost: 4},
		{Hosts: 1, ProcsPerHost: 2, ForcedBreak: true, Mutation: "mkdir-lock"}} {
		if c.Validate() == nil {
			t.Errorf("%+v: valid", c)
		}
	}
	if err := DefaultDirlockConfig().Validate(); err != nil {
		t.Error(err)
	}
}
