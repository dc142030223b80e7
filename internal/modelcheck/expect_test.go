package modelcheck

import (
	"strings"
	"testing"
)

// expectCounterexample checks that a mutant's report holds a violation of
// prop whose shortest trace has n steps and mentions says: the checker
// can fail, and fails for the rule the mutation dropped.
func expectCounterexample(t *testing.T, rep Report, prop string, n int, says string) {
	t.Helper()
	t.Log(rep)
	v := rep.Violation
	if v == nil {
		t.Fatalf("no violation in %d states", rep.States)
	}
	if v.Property != prop {
		t.Errorf("violated %q, want %q", v.Property, prop)
	}
	if v.Steps() != n {
		t.Errorf("counterexample has %d steps, want %d", v.Steps(), n)
	}
	if !strings.Contains(v.Error(), says) {
		t.Errorf("counterexample does not say %q", says)
	}
}

// expectReached checks that an exploration reached every behaviour of
// names (reached[i] for names[i]) and none of neverNames.
func expectReached(t *testing.T, reached []bool, names []string, never []bool, neverNames []string) {
	t.Helper()
	for i, ok := range reached {
		if !ok {
			t.Errorf("never reached: %s", names[i])
		}
	}
	for i, ok := range never {
		if ok {
			t.Errorf("reached: %s", neverNames[i])
		}
	}
}
