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
		// The watch mutations (claimswatch.go).
		{MutGrantUntold, ClaimsConfig{Sessions: 2, Claims: 1, RW: 1, Watches: 1, Values: true}, PropWatchPicture, 2,
			`s1/w11's picture of "a" is [] (synced true), but its holders in grant order are [1 exclusive "p" (session 1)]`},
		{MutFreedAfterGrant, ClaimsConfig{Sessions: 1, Claims: 2, RW: 1, Watches: 2, Values: true}, PropWatchOrder, 4,
			`s1/w11's picture of "a" became [1 exclusive "p" (session 1), 2 exclusive "p" (session 1)], which the table never had`},
		{MutFreedAfterGrant, ClaimsConfig{Sessions: 2, Claims: 1, RW: 1, Watches: 1, Values: true}, PropWatchOrder, 4, "which the table never had"},
		{MutGrantsReversed, ClaimsConfig{Sessions: 2, Claims: 2, Sems: 1, Limit: 2, Watches: 1}, PropWatchOrder, 6, "after token"},
		{MutGrantsReversed, ClaimsConfig{Sessions: 1, Claims: 3, RW: 1, Watches: 1}, PropWatchOrder, 5,
			`s1/w11 was told holder token 2 of "a" after token 3`},
		{MutValueUntold, ClaimsConfig{Sessions: 2, Claims: 1, RW: 1, Watches: 1, Values: true}, PropWatchPicture, 3,
			`s1/w11's picture of "a" is [1 exclusive "p" (session 1)] (synced true), but its holders in grant order are [1 exclusive "q" (session 1)]`},
		{MutUnwatchKept, ClaimsConfig{Sessions: 1, Claims: 2, RW: 1, Watches: 2, Values: true}, PropWatchEnded, 4,
			`s1/w12 was told held(1, "p") after it ended`},
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
		// Every grant a watch sees is caught, so without watches.
		{MutGrantUntold, ClaimsConfig{Sessions: 2, Claims: 2, RW: 1}},
		// No waiter, so no release grants in the same step.
		{MutFreedAfterGrant, ClaimsConfig{Sessions: 1, Claims: 1, RW: 1, Watches: 2, Values: true}},
		// Two claims in all: at most one grant per step.
		{MutGrantsReversed, ClaimsConfig{Sessions: 2, Claims: 1, RW: 1, Watches: 1, Values: true}},
		// No value changes.
		{MutValueUntold, ClaimsConfig{Sessions: 2, Claims: 1, RW: 1, Watches: 1}},
		// One watch in all: an ended watch has no other to copy.
		{MutUnwatchKept, ClaimsConfig{Sessions: 1, Claims: 2, RW: 1, Watches: 1, Values: true}},
	} {
		tc.cfg.New = NewClaimsMutant(tc.mutation)
		if rep := CheckClaims(tc.cfg); rep.Violation != nil {
			t.Errorf("%s: %v", tc.mutation, rep.Violation)
		} else {
			t.Logf("%s: %v", tc.mutation, rep)
		}
	}
}
