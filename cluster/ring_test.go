package cluster

import (
	"fmt"
	"testing"
	"time"
)

func names(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("jobs/nightly-%d", i)
	}
	return out
}

func nodeIDs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("node-%d", i+1)
	}
	return out
}

// moved counts the names whose owner differs between a and b, and the
// moves as "from->to".
func moved(a, b *Ring, ns []string) (int, map[string]bool) {
	from := map[string]bool{}
	n := 0
	for _, name := range ns {
		if oa, ob := a.Owner(name), b.Owner(name); oa != ob {
			n++
			from[oa+"->"+ob] = true
		}
	}
	return n, from
}

func TestHistory(t *testing.T) {
	t.Parallel()
	h := NewHistory(3)
	if _, ok := h.Latest(); ok {
		t.Fatal("empty history has a latest ring")
	}
	t0 := time.Unix(1000, 0)
	for v := uint64(1); v <= 5; v++ {
		h.Add(NewRing(v, nodeIDs(int(v))), t0.Add(time.Duration(v)*time.Second))
	}
	h.Add(NewRing(4, nodeIDs(1)), t0) // replayed: ignored
	if got := len(h.Entries()); got != 3 {
		t.Fatalf("%d entries, want 3", got)
	}
	if e, _ := h.Latest(); e.Ring.Version() != 5 || e.Ring.Len() != 5 || !e.CommittedAt.Equal(t0.Add(5*time.Second)) {
		t.Errorf("latest %d/%d at %v", e.Ring.Version(), e.Ring.Len(), e.CommittedAt)
	}
	if _, ok := h.Get(2); ok {
		t.Error("version 2 still kept")
	}
	if e, ok := h.Previous(5); !ok || e.Ring.Version() != 4 {
		t.Errorf("previous of 5: %v %v", ok, e.Ring)
	}
	if _, ok := h.Previous(3); ok {
		t.Error("a ring before the oldest kept")
	}
}
