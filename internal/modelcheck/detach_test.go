package modelcheck

import (
	"strings"
	"testing"
)

// TestDetach checks the detach model, with and without the relay, and
// that it holds not for lack of behaviour: each way a connection ends is
// reached with h believing, and each re-assertion it allows is accepted.
func TestDetach(t *testing.T) {
	t.Parallel()
	for _, relay := range []bool{false, true} {
		cfg := DefaultDetachConfig()
		cfg.Relay = relay
		behaviours := []string{
			"h is killed with its connection open: w is granted in the same step",
			"h re-asserts after DETACH: accepted",
			"h re-asserts after its link went silent: accepted",
			"O ends a kept claim a lease after it last heard from h",
		}
		if relay {
			behaviours = append(behaviours, "h re-asserts after R died: accepted")
		}
		reached := make([]bool, len(behaviours))
		rep := checkDetach(cfg, func(s *dtState, st dtStep) {
			switch {
			case st.kind == dsKill && s.conn == dcOpen:
				reached[0] = true
			case st.kind == dsReassert && st.ok && s.conn == dcDetached:
				reached[1] = true
			case st.kind == dsReassert && st.ok && s.conn == dcSilent:
				reached[2] = true
			case st.kind == dsExpire:
				reached[3] = true
			case st.kind == dsReassert && st.ok && s.conn == dcBroken:
				reached[4] = true
			}
		})
		t.Log(rep)
		if rep.Violation != nil {
			t.Fatalf("relay=%v: %v", relay, rep.Violation)
		}
		for i, b := range behaviours {
			if !reached[i] {
				t.Errorf("relay=%v: never reached: %s", relay, b)
			}
		}
	}
}

// TestDetachMutations: each mutation breaks the property it must, with a
// counterexample.
func TestDetachMutations(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		mut, prop string
	}{
		{MutDetachReleases, PropDetachOneBeliever},
		{MutDetachFinKeeps, PropDetachSuccessor},
		{MutDetachHopReleases, PropDetachOneBeliever},
		{MutDetachCloseSilent, PropDetachOneBeliever},
	} {
		cfg := DefaultDetachConfig()
		cfg.Mutation = c.mut
		rep := CheckDetach(cfg)
		t.Log(rep)
		if rep.Violation == nil || rep.Violation.Property != c.prop {
			t.Errorf("%s: %v, want a violation of %s", c.mut, rep.Violation, c.prop)
			continue
		}
		if !strings.Contains(rep.String(), "counterexample") {
			t.Errorf("%s: no counterexample", c.mut)
		}
	}
}
