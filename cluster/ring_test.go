package cluster

import (
	"fmt"
	"math"
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

func TestRingDeterministic(t *testing.T) {
	a := NewRing(3, []string{"n3", "n1", "n2", "n1"})
	b := NewRing(3, []string{"n2", "n3", "n1"})
	if a.Len() != 3 || !a.Has("n2") || a.Has("n4") {
		t.Fatalf("members %v", a.Members())
	}
	for _, name := range names(1000) {
		if a.Owner(name) != b.Owner(name) {
			t.Fatalf("%s: %s vs %s", name, a.Owner(name), b.Owner(name))
		}
	}
	// Pinned: a change of hash would change owners across a rolling upgrade.
	for name, want := range map[string]string{"a": "n1", "jobs/nightly": "n3", "db-migrate": "n3"} {
		if got := a.Owner(name); got != want {
			t.Errorf("Owner(%q) = %s, want %s (the hash changed: nodes of two versions would disagree)", name, got, want)
		}
	}
	if NewRing(1, nil).Owner("x") != "" {
		t.Error("empty ring has an owner")
	}
}

func TestRingBalance(t *testing.T) {
	ns := names(100000)
	for _, n := range []int{3, 5} {
		r := NewRing(1, nodeIDs(n))
		count := map[string]int{}
		for _, name := range ns {
			count[r.Owner(name)]++
		}
		ideal := float64(len(ns)) / float64(n)
		lo, hi := math.MaxInt, 0
		for _, id := range r.Members() {
			lo, hi = min(lo, count[id]), max(hi, count[id])
		}
		spread := float64(hi-lo) / ideal
		t.Logf("%d nodes, %d names: min %d, max %d, ideal %.0f, spread (max-min)/ideal %.2f%%", n, len(ns), lo, hi, ideal, 100*spread)
		if spread > 0.05 {
			t.Errorf("%d nodes: spread %.2f%% above 5%%: %v", n, 100*spread, count)
		}
	}
}

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

func TestRingMovement(t *testing.T) {
	ns := names(100000)
	for _, n := range []int{3, 5} {
		ids := nodeIDs(n)
		before := NewRing(1, ids)
		joined := NewRing(2, append(ids, "node-new"))
		m, moves := moved(before, joined, ns)
		frac := float64(m) / float64(len(ns))
		ideal := 1 / float64(n+1)
		t.Logf("join to %d nodes: %d of %d names move (%.2f%%, ideal 1/%d = %.2f%%)", n+1, m, len(ns), 100*frac, n+1, 100*ideal)
		if math.Abs(frac-ideal) > 0.02 {
			t.Errorf("join moved %.2f%%, want about %.2f%%", 100*frac, 100*ideal)
		}
		for mv := range moves {
			if mv[len(mv)-len("node-new"):] != "node-new" {
				t.Errorf("join moved a name between old members: %s", mv)
			}
		}
		left := NewRing(3, ids[1:])
		m, moves = moved(before, left, ns)
		frac = float64(m) / float64(len(ns))
		t.Logf("leave from %d nodes: %d of %d names move (%.2f%%, ideal 1/%d = %.2f%%)", n, m, len(ns), 100*frac, n, 100/float64(n))
		if math.Abs(frac-1/float64(n)) > 0.02 {
			t.Errorf("leave moved %.2f%%, want about %.2f%%", 100*frac, 100/float64(n))
		}
		for mv := range moves {
			if mv[:len(ids[0])+2] != ids[0]+"->" {
				t.Errorf("leave moved a name the leaving node did not own: %s", mv)
			}
		}
	}
}

func TestHistory(t *testing.T) {
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

func BenchmarkRingOwner(b *testing.B) {
	for _, n := range []int{3, 5, 7} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			r := NewRing(1, nodeIDs(n))
			ns := names(1024)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				_ = r.Owner(ns[i&1023])
				i++
			}
		})
	}
}
