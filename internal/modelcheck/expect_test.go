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
