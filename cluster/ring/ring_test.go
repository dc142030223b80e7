package ring

import (
	"fmt"
	"math"
	"testing"
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

func TestDeterministic(t *testing.T) {
	a := New(3, []string{"n3", "n1", "n2", "n1"})
	b := New(3, []string{"n2", "n3", "n1"})
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
	if New(1, nil).Owner("x") != "" {
		t.Error("empty ring has an owner")
	}
}

func TestBalance(t *testing.T) {
	ns := names(100000)
	for _, n := range []int{3, 5} {
		r := New(1, nodeIDs(n))
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

func TestMovement(t *testing.T) {
	ns := names(100000)
	for _, n := range []int{3, 5} {
		ids := nodeIDs(n)
		before := New(1, ids)
		joined := New(2, append(ids, "node-new"))
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
		left := New(3, ids[1:])
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

func BenchmarkOwner(b *testing.B) {
	for _, n := range []int{3, 5, 7} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			r := New(1, nodeIDs(n))
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
