package modelcheck

import (
	"sync"
	"testing"
)

func TestClusterModel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg    ClusterConfig
		states int // pinned so that a change in the model is noticed (docs/design/2026-12-02-cluster-fail-closed-model.md quotes them)
		big    bool
	}{
		// One client continues through a planned move, the other, a
		// version 1 client, is told.
		{DefaultClusterConfig(), 156831, false},
		// Both continue.
		{ClusterConfig{Nodes: 3, Clients: 2, Lives: 1, Changes: 1, Deaths: 1, Restarts: 1}, 181773, false},
		// Two ring changes: a name moved away and back, the hand-off meets
		// a node that has not applied the ring in between; the version 1
		// client, told, acquires again.
		{ClusterConfig{Nodes: 2, Clients: 2, Lives: 2, Changes: 2, Deaths: 1, Restarts: 1, V1: 1}, 326651, false},
		{ClusterConfig{Nodes: 2, Clients: 2, Lives: 2, Changes: 2, Deaths: 1, Restarts: 1}, 411699, true},
		{ClusterConfig{Nodes: 3, Clients: 2, Lives: 1, Changes: 2, Deaths: 1, Restarts: 1}, 1956053, true},
		// The restart finds the data directory wiped, or not.
		{wipedClusterConfig(), 274947, false},
	} {
		if tc.big && (raceEnabled || testing.Short()) {
			t.Logf("%v: skipped under -race or -short", tc.cfg)
			continue
		}
		t.Run(tc.cfg.String(), func(t *testing.T) {
			t.Parallel()
			var rep Report
			if tc.cfg == DefaultClusterConfig() {
				rep, _ = defaultClusterRun()
			} else {
				rep = CheckCluster(tc.cfg)
			}
			t.Log(rep)
			if rep.Violation != nil {
				t.Error(rep.Violation)
			}
			if rep.States != tc.states {
				t.Errorf("%v: %d states, docs/design/2026-12-02-cluster-fail-closed-model.md says %d", tc.cfg, rep.States, tc.states)
			}
		})
	}
}

// The checker must be able to fail: each mutation drops one rule of the
// design and must be caught with the property it protects.
func TestClusterMutations(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mut  string
		prop string
		n    int    // length of the shortest counterexample
		says string // in the trace
	}{
		{MutSwitchFirst, PropClusterNoLost, 4, "the new ring (owner B) is committed at once"},
		{MutForwardAgain, PropClusterNoLoop, 6, "node B forwards c1's request to node A, marked forwarded"},
		{MutNoWarmup, PropClusterOneHolder, 8, "node A opens the gate of the name"},
		{MutStaleEpoch, PropClusterTokens, 9, "node A commits token epoch 1"},
		{MutMoveGated, PropClusterOneHolder, 11, "planned move: node A freezes the name and hands it to node B"},
		{MutGrantBeforeTold, PropClusterOneHolder, 6, "sends ERROR 0x01 to c2, its version 1 holder, and ends its claim at once"},
		{MutHandoffBeforeHangup, PropClusterOneHolder, 8, "node B installs the state handed over by node A (its export ended c2's told claim)"},
		{MutWipedServes, PropClusterOneHolder, 7, "node A restarts on a wiped data directory"},
		{MutWipedReusesEpoch, PropClusterTokens, 9, "node A commits token epoch 1"},
		{MutWipedForms, PropClusterTokens, 6, "node A restarts on a wiped data directory and forms a cluster of its own"},
	} {
		t.Run(tc.mut, func(t *testing.T) {
			t.Parallel()
			cfg := DefaultClusterConfig()
			if tc.mut == MutWipedServes || tc.mut == MutWipedReusesEpoch || tc.mut == MutWipedForms {
				cfg = wipedClusterConfig()
			}
			cfg.Mutation = tc.mut
			rep := CheckCluster(cfg)
			expectCounterexample(t, rep, tc.prop, tc.n, tc.says)
		})
	}
}

// The server's bug as the cluster fault suite met it: without a death
// the old behaviour is caught at the new owner, which grants the claim
// the hand-off carried while the told holder has not read its ERROR.
func TestClusterGrantBeforeToldAtNewOwner(t *testing.T) {
	t.Parallel()
	cfg := DefaultClusterConfig()
	cfg.Deaths, cfg.Restarts, cfg.Mutation = 0, 0, MutGrantBeforeTold
	expectCounterexample(t, CheckCluster(cfg), PropClusterOneHolder, 8, "node B grants the lock to c1")
	cfg.Mutation = ""
	if rep := CheckCluster(cfg); rep.Violation != nil {
		t.Error(rep.Violation)
	}
}

// defaultClusterRun explores DefaultClusterConfig once for both
// TestClusterModel and TestClusterModelNotVacuous, which check the same
// exploration: the report, and the behaviours it reached.
var defaultClusterRun = sync.OnceValues(func() (Report, map[string]bool) {
	reached := map[string]bool{}
	grant := func(st clStep) bool {
		return (st.kind == clDeliver && st.what == clGrant) || st.kind == clPromote
	}
	rep := checkCluster(DefaultClusterConfig(), func(s *clState, st clStep) {
		switch {
		case st.kind == clMoveBegin && st.c >= 0:
			reached["a version 1 holder told at a planned move"] = true
		case st.kind == clMoveBegin && st.ended != 0:
			reached["a version 1 waiter ended at a planned move"] = true
		case st.kind == clEndTold && s.n[st.n].lk.frozen && s.n[st.n].lk.nq > 0:
			reached["a told claim ends at the frozen prior owner, a claim queued behind it"] = true
		case st.kind == clEndTold && !s.n[st.n].lk.frozen:
			reached["a told claim ends at a prior owner whose move was called off"] = true
		}
		if !grant(st) && st.kind != clRelease {
			return
		}
		if st.n == 0 {
			if grant(st) && s.n[0].epoch != 1 && s.nring == 1 { // a new epoch without a ring change: a restart
				reached["grant by the first owner after its restart"] = true
			}
			return
		}
		switch {
		case grant(st) && s.ring[s.nring-1].gated:
			reached["grant after a take-over from a dead node"] = true
		case grant(st):
			reached["grant after a planned move"] = true
		case st.kind == clRelease:
			reached["release on the new owner"] = true
		}
	})
	return rep, reached
})

// The properties must not hold for lack of behaviour: the checked model
// grants on a node that got the name by a hand-off, by a take-over from a
// dead node (after the gate opens) and after a restart, and a client
// releases through the new owner; a planned move tells a version 1 holder
// and ends a version 1 waiter, and a told claim ends, once its client has
// let go, with a continuing claim queued behind it (which the hand-off
// then carries) and at a prior owner whose move was called off.
func TestClusterModelNotVacuous(t *testing.T) {
	t.Parallel()
	rep, reached := defaultClusterRun()
	if rep.Violation != nil {
		t.Fatal(rep.Violation)
	}
	for _, want := range []string{"grant by the first owner after its restart", "grant after a take-over from a dead node",
		"grant after a planned move", "release on the new owner", "a version 1 holder told at a planned move",
		"a version 1 waiter ended at a planned move", "a told claim ends at the frozen prior owner, a claim queued behind it",
		"a told claim ends at a prior owner whose move was called off"} {
		if !reached[want] {
			t.Errorf("never reached: %s", want)
		}
	}
}

func TestClusterConfigValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []ClusterConfig{
		{Nodes: 1, Clients: 1, Lives: 1}, {Nodes: 4, Clients: 1, Lives: 1}, {Nodes: 2, Clients: 0, Lives: 1},
		{Nodes: 2, Clients: 4, Lives: 1}, {Nodes: 2, Clients: 1, Lives: 3}, {Nodes: 2, Clients: 1, Lives: 1, Changes: 4},
		{Nodes: 2, Clients: 1, Lives: 1, Deaths: 3}, {Nodes: 2, Clients: 1, Lives: 1, Restarts: -1},
		{Nodes: 2, Clients: 1, Lives: 1, Mutation: "nope"}, {Nodes: 2, Clients: 1, Lives: 1, V1: 2},
		{Nodes: 2, Clients: 1, Lives: 1, V1: -1},
	} {
		if c.Validate() == nil {
			t.Errorf("%+v: valid", c)
		}
	}
	if err := DefaultClusterConfig().Validate(); err != nil {
		t.Error(err)
	}
}

// wipedClusterConfig is the default configuration whose one restart may
// find the node's data directory wiped.
func wipedClusterConfig() ClusterConfig {
	cfg := DefaultClusterConfig()
	cfg.Wipes = 1
	return cfg
}
