package modelcheck

import (
	"sync"
	"testing"
)

func TestContinueModel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg    ContinueConfig
		states int // pinned so that a change in the model is noticed (docs/design/2026-12-07-verification-models-cluster.md quotes them)
		big    bool
	}{
		{ContinueConfig{Nodes: 3, Clients: 2, Lives: 1, Changes: 1, Deaths: 1}, 213274, false},
		{ContinueConfig{Nodes: 2, Clients: 2, Lives: 1, Changes: 1, Deaths: 1, Restarts: 1}, 86062, false},
		{DefaultContinueConfig(), 984976, true},
		// Two acquisitions each: a client claims again after its claim
		// moved, and meets records its first session left.
		{ContinueConfig{Nodes: 2, Clients: 2, Lives: 2, Changes: 1, Deaths: 1, Restarts: 1}, 580313, true},
		// Two ring changes: detached claims moved again, or the name given
		// to a live node after its new owner died.
		{ContinueConfig{Nodes: 2, Clients: 2, Lives: 1, Changes: 2, Deaths: 1, Restarts: 1}, 1116881, true},
	} {
		if tc.big && (raceEnabled || testing.Short()) {
			t.Logf("%v: skipped under -race or -short", tc.cfg)
			continue
		}
		t.Run(tc.cfg.String(), func(t *testing.T) {
			t.Parallel()
			var rep Report
			if tc.cfg == continueVacuityConfig() {
				rep, _ = continueVacuityRun()
			} else {
				rep = CheckContinue(tc.cfg)
			}
			t.Log(rep)
			if rep.Violation != nil {
				t.Error(rep.Violation)
			}
			if rep.States != tc.states {
				t.Errorf("%v: %d states, docs/design/2026-12-07-verification-models-cluster.md says %d", tc.cfg, rep.States, tc.states)
			}
		})
	}
}

// mutationConfig is the configuration the mutations are checked in: the
// default without its restart, which none of the counterexamples needs.
func continueMutationConfig(mut string) ContinueConfig {
	return ContinueConfig{Nodes: 3, Clients: 2, Lives: 1, Changes: 1, Deaths: 1, Mutation: mut}
}

// The checker must be able to fail: each mutation drops one rule of the
// design and must be caught with the property it protects.
func TestContinueMutations(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mut  string
		prop string
		n    int    // length of the shortest counterexample
		says string // in the trace
	}{
		{MutReleaseAtHost, PropContinueNoStale, 5, "(its host) answers RELEASED itself"},
		{MutDropDetachedGrant, PropContinueNoLost, 14, "its promotion while detached is lost"},
		{MutAbortAfterExport, PropContinueNoLost, 5, "node B dies"},
		{MutAnswerUnconfirmed, PropClusterOneHolder, 12, "node B expires c1's claim"},
		{MutAdoptBeforeCommit, PropContinueNoLost, 8, "committed, not handed over"},
		// The two gaps checking the model found in the design.
		{MutReleaseAfterAdopt, PropContinueNoStale, 11, "node A releases c1's claim: RELEASED"},
		{MutExportAgain, PropClusterOneHolder, 11, "node B restarts"},
		// The hand-off carries the claims of sessions P cannot hear: the
		// server does not wait for them to expire before a move.
		{MutExportDropsAbandoned, PropClusterOneHolder, 11, "node B dies"},
	} {
		t.Run(tc.mut, func(t *testing.T) {
			t.Parallel()
			cfg := continueMutationConfig(tc.mut)
			if tc.mut == MutExportAgain {
				cfg.Restarts = 1 // N must come back
			}
			rep := CheckContinue(cfg)
			expectCounterexample(t, rep, tc.prop, tc.n, tc.says)
		})
	}
}

// continueVacuityConfig is the configuration TestContinueModelNotVacuous
// checks: the default, without its restart under -race or -short.
func continueVacuityConfig() ContinueConfig {
	cfg := DefaultContinueConfig()
	if raceEnabled || testing.Short() {
		cfg.Restarts = 0
	}
	return cfg
}

// continueVacuityRun explores continueVacuityConfig once for both
// TestContinueModelNotVacuous and TestContinueModel, which checks the
// same configuration: the report, and the behaviours it reached.
var continueVacuityRun = sync.OnceValues(func() (Report, map[string]bool) {
	reached := map[string]bool{}
	rep := checkContinue(continueVacuityConfig(), func(s *ccState, st ccStep) {
		switch st.kind {
		case ccAdopt:
			switch st.what {
			case ccAdoptHeld:
				if st.n == st.m {
					reached["a held claim adopted by its host, now its owner"] = true
				} else {
					reached["a held claim adopted on an upstream to the new owner"] = true
				}
			case ccAdoptWaits:
				reached["a queued claim adopted, still queued"] = true
			case ccAdoptPromoted:
				reached["a claim promoted while detached, PROMOTED at adoption"] = true
			case ccAdoptReleased:
				reached["a queued RELEASE replayed after the ADOPT"] = true
			}
		case ccReadMoved:
			reached["a relayed claim's host reads MOVED"] = true
		case ccDeliverRelease:
			switch st.what {
			case ccMovedAgain:
				reached["a RELEASE answered MOVED again"] = true
			case ccMovedAfterAdopt:
				reached["a RELEASE answered MOVED after the adoption, sent on"] = true
			default:
				if s.nring > 1 {
					reached["a relayed release at the new owner"] = true
				}
			}
		case ccExpire:
			if s.n[st.n].lk.det&(1<<st.c) != 0 {
				reached["a detached claim expires"] = true
			}
		case ccApply:
			if s.ring[st.what].gated && s.n[st.n].lk.present && s.n[st.n].lk.holder >= 0 && s.n[st.n].lk.det != 0 {
				reached["a fallback drops an installed claim"] = true
			}
		case ccExport:
			if s.mv.phase == ccLost {
				reached["a restarted prior owner exports again"] = true
			}
		}
	})
	return rep, reached
})

// The properties must not hold for lack of behaviour: in the checked
// model claims continue through the new owner in both the direct and the
// relayed case, a promotion made while detached reaches its client at
// adoption, releases are queued and replayed, and the failure paths
// (a fallback that drops installed claims, an expiry, a prior owner that
// restarted and hands over again) happen.
func TestContinueModelNotVacuous(t *testing.T) {
	t.Parallel()
	cfg := continueVacuityConfig()
	rep, reached := continueVacuityRun()
	if rep.Violation != nil {
		t.Fatal(rep.Violation)
	}
	want := []string{"a held claim adopted by its host, now its owner", "a held claim adopted on an upstream to the new owner",
		"a queued claim adopted, still queued", "a claim promoted while detached, PROMOTED at adoption",
		"a queued RELEASE replayed after the ADOPT", "a relayed claim's host reads MOVED", "a RELEASE answered MOVED again",
		"a RELEASE answered MOVED after the adoption, sent on", "a relayed release at the new owner", "a detached claim expires",
		"a fallback drops an installed claim"}
	if cfg.Restarts > 0 {
		want = append(want, "a restarted prior owner exports again")
	}
	for _, w := range want {
		if !reached[w] {
			t.Errorf("never reached: %s", w)
		}
	}
}

func TestContinueConfigValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []ContinueConfig{
		{Nodes: 1, Clients: 1, Lives: 1}, {Nodes: 4, Clients: 1, Lives: 1}, {Nodes: 2, Clients: 0, Lives: 1},
		{Nodes: 2, Clients: 4, Lives: 1}, {Nodes: 2, Clients: 1, Lives: 3}, {Nodes: 2, Clients: 1, Lives: 1, Changes: 4},
		{Nodes: 2, Clients: 1, Lives: 1, Deaths: 3}, {Nodes: 2, Clients: 1, Lives: 1, Restarts: -1},
		{Nodes: 2, Clients: 1, Lives: 1, Mutation: "switch-first"},
	} {
		if c.Validate() == nil {
			t.Errorf("%+v: valid", c)
		}
	}
	if err := DefaultContinueConfig().Validate(); err != nil {
		t.Error(err)
	}
}
