package modelcheck

import "testing"

// TestWatchModel explores the claims model with watches and values on
// the real lock table: every watch's picture, built from its changes
// alone, must be its name's holders in grant order after every step, and
// must never pass through one the table never had. The first bounds run
// everywhere, the race detector included; the larger ones only without
// it. The required bounds' state counts are pinned, as in
// TestClaimsModel.
func TestWatchModel(t *testing.T) {
	type bound struct {
		cfg    ClaimsConfig
		states int // pinned, when not 0
	}
	bounds := []bound{
		// Watchers of a lock two sessions contend for, values changed
		// while held and while queued.
		{ClaimsConfig{Sessions: 2, Claims: 1, RW: 1, Watches: 1, Values: true}, 696},
		// A session that watches its own claims, with two watches.
		{ClaimsConfig{Sessions: 1, Claims: 2, RW: 1, Watches: 2, Values: true}, 235},
		// Several holders at once, and several grants in one step.
		{ClaimsConfig{Sessions: 2, Claims: 2, Sems: 1, Limit: 2, Watches: 1}, 1074},
	}
	if !raceEnabled {
		bounds = append(bounds,
			bound{ClaimsConfig{Sessions: 2, Claims: 2, RW: 1, Watches: 1}, 0},
			bound{ClaimsConfig{Sessions: 3, Claims: 1, Sems: 1, Limit: 2, Watches: 1}, 0},
			bound{ClaimsConfig{Sessions: 2, Claims: 1, RW: 1, Sems: 1, Limit: 1, Watches: 1, Values: true}, 0},
		)
	}
	for _, b := range bounds {
		t.Run(b.cfg.String(), func(t *testing.T) {
			rep := CheckClaims(b.cfg)
			t.Log(rep)
			if rep.Violation != nil {
				t.Fatal(rep.Violation)
			}
			if rep.States < 100 || rep.Transitions <= rep.States {
				t.Fatalf("explored only %d states and %d transitions", rep.States, rep.Transitions)
			}
			if b.states != 0 && rep.States != b.states {
				t.Errorf("%d states, want %d", rep.States, b.states)
			}
		})
	}
}
