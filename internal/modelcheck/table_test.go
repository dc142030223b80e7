package modelcheck

import (
	"testing"
)

// TestTableModel explores the real lock table exhaustively. The first two
// bounds are the required ones and run everywhere, the race detector
// included; the larger ones run only without it, to stay well under a
// minute.
func TestTableModel(t *testing.T) {
	t.Parallel()
	bounds := []TableConfig{
		{Sessions: 3, Locks: 2, Lives: 2},
		{Sessions: 4, Locks: 1, Lives: 2},
		{Sessions: 3, Locks: 2, Lives: 3},
	}
	if !raceEnabled {
		bounds = append(bounds,
			TableConfig{Sessions: 4, Locks: 1, Lives: 3},
			TableConfig{Sessions: 4, Locks: 2, Lives: 2},
			TableConfig{Sessions: 3, Locks: 3, Lives: 2},
		)
	}
	for _, cfg := range bounds {
		t.Run(cfg.String(), func(t *testing.T) {
			rep := CheckTable(cfg)
			t.Log(rep)
			if rep.Violation != nil {
				t.Fatal(rep.Violation)
			}
			if rep.States < 100 || rep.Transitions <= rep.States {
				t.Fatalf("explored only %d states and %d transitions", rep.States, rep.Transitions)
			}
		})
	}
}

// The state counts of the required bounds are pinned: a change means the
// model or the table's reachable behaviour changed, which deserves a look
// (and an update of docs/verification.md).
func TestTableModelStateCounts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg    TableConfig
		states int
	}{
		// 4 sessions on one lock: the live sessions in queue order, each
		// with its claims used, and shutdown: 1689 + 81.
		{TableConfig{Sessions: 4, Locks: 1, Lives: 2}, 1770},
		{TableConfig{Sessions: 3, Locks: 2, Lives: 2}, 738},
	} {
		if rep := CheckTable(tc.cfg); rep.States != tc.states {
			t.Errorf("%v: %d states, want %d", tc.cfg, rep.States, tc.states)
		}
	}
}
