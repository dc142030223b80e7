package modelcheck

import (
	"strings"
	"testing"
)

// TestClaimsModel explores the real lock table with sessions of several
// claims in every mode. The first bounds run everywhere, the race
// detector included; the larger ones only without it.
//
// The state counts of the required bounds are pinned: a change means the
// model or the table's reachable behaviour changed, which deserves a look
// (and an update of docs/verification.md).
func TestClaimsModel(t *testing.T) {
	t.Parallel()
	type bound struct {
		cfg    ClaimsConfig
		states int // pinned, when not 0
	}
	bounds := []bound{
		{ClaimsConfig{Sessions: 2, Claims: 2, RW: 1}, 477},
		{ClaimsConfig{Sessions: 3, Claims: 1, RW: 1, NoWait: true}, 312},
		{ClaimsConfig{Sessions: 3, Claims: 2, Sems: 1, Limit: 2}, 2277},
		{ClaimsConfig{Sessions: 2, Claims: 2, RW: 1, Sems: 1, NoWait: true}, 1329},
	}
	if !raceEnabled {
		bounds = append(bounds,
			bound{ClaimsConfig{Sessions: 2, Claims: 2, RW: 2}, 0},
			bound{ClaimsConfig{Sessions: 2, Claims: 3, RW: 1}, 0},
			bound{ClaimsConfig{Sessions: 3, Claims: 2, RW: 1}, 0},
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

func TestClaimsMutantsAreCaught(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mutation string
		cfg      ClaimsConfig
		property string
		steps    int
		mention  string
	}{
		{MutReaderOvertakes, ClaimsConfig{Sessions: 3, Claims: 1, RW: 1}, PropFairFIFO, 3,
			"s3/c1(shared) was granted \"a\" ahead of s2/c1(exclusive)"},
		{MutReaderOvertakes, ClaimsConfig{Sessions: 2, Claims: 2, RW: 1}, PropFairFIFO, 3, "ahead of"},
		{MutSemaphoreOverLimit, ClaimsConfig{Sessions: 3, Claims: 1, Sems: 1, Limit: 2}, PropNoConflict, 3,
			"s3/c1(semaphore) was granted \"sema\" while [s1/c1(semaphore) s2/c1(semaphore)] hold it"},
		{MutSemaphoreOverLimit, ClaimsConfig{Sessions: 1, Claims: 3, Sems: 1, Limit: 1}, PropNoConflict, 2, "hold it"},
	} {
		t.Run(tc.mutation+"/"+tc.cfg.String(), func(t *testing.T) {
			tc.cfg.New = NewClaimsMutant(tc.mutation)
			rep := CheckClaims(tc.cfg)
			t.Logf("%v", rep)
			v := rep.Violation
			if v == nil {
				t.Fatalf("the checker found no violation in %d states", rep.States)
			}
			if v.Property != tc.property {
				t.Fatalf("violated %q, want %q", v.Property, tc.property)
			}
			if v.Steps() != tc.steps {
				t.Errorf("counterexample has %d steps, want the shortest, %d", v.Steps(), tc.steps)
			}
			if !strings.Contains(v.Error(), tc.mention) {
				t.Errorf("counterexample does not mention %q", tc.mention)
			}
		})
	}
}

// Below the size at which each mutation can act, the wrapped table must
// pass, or the test above would prove nothing about the checker.
func TestClaimsMutantsAreOtherwiseFaithful(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mutation string
		cfg      ClaimsConfig
	}{
		// A reader can overtake only a writer that waits behind a reader:
		// three claims on one name.
		{MutReaderOvertakes, ClaimsConfig{Sessions: 2, Claims: 1, RW: 1, NoWait: true}},
		// Over a limit of 2 takes three claims.
		{MutSemaphoreOverLimit, ClaimsConfig{Sessions: 2, Claims: 1, Sems: 1, Limit: 2, NoWait: true}},
	} {
		tc.cfg.New = NewClaimsMutant(tc.mutation)
		if rep := CheckClaims(tc.cfg); rep.Violation != nil {
			t.Errorf("%s: %v", tc.mutation, rep.Violation)
		} else {
			t.Logf("%s: %v", tc.mutation, rep)
		}
	}
}
