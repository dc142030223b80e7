package modelcheck

import (
	"slices"
	"testing"
)

// The liveness check rests on sccs and route; pin them on a small graph:
//
//	0 → 1 → 2 → 1,  2 → 3 → 3,  0 → 4
func TestGraphSCCsAndRoute(t *testing.T) {
	t.Parallel()
	g := newGraph[string](true)
	g.add("0", -1, "")
	for _, e := range []struct {
		from int32
		to   string
	}{{0, "1"}, {1, "2"}, {2, "1"}, {2, "3"}, {3, "3"}, {0, "4"}} {
		g.add(e.to, e.from, e.to)
	}
	all := func(int32) bool { return true }
	var got [][]int32
	for _, c := range g.sccs(all) {
		slices.Sort(c)
		got = append(got, c)
	}
	slices.SortFunc(got, func(a, b []int32) int { return int(a[0] - b[0]) })
	if want := [][]int32{{1, 2}, {3}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("sccs = %v, want %v (no component for 0 or 4: no cycle)", got, want)
	}
	if got := g.sccs(func(v int32) bool { return v != 2 }); len(got) != 1 || !slices.Equal(got[0], []int32{3}) {
		t.Errorf("sccs without state 2 = %v, want [[3]]", got)
	}
	if steps, ok := g.route(1, 1, all); !ok || !slices.Equal(steps, []string{"2", "1"}) {
		t.Errorf("cycle from 1 = %v %v, want [2 1]", steps, ok)
	}
	if steps, ok := g.route(3, 3, all); !ok || !slices.Equal(steps, []string{"3"}) {
		t.Errorf("cycle from 3 = %v %v, want the self-loop", steps, ok)
	}
	if steps, ok := g.route(0, 3, all); !ok || !slices.Equal(steps, []string{"1", "2", "3"}) {
		t.Errorf("route 0→3 = %v %v", steps, ok)
	}
	if _, ok := g.route(4, 4, all); ok {
		t.Error("found a cycle through 4, which has no edges")
	}
	if p := g.path(3); !slices.Equal(p, []string{"1", "2", "3"}) {
		t.Errorf("path to 3 = %v", p)
	}
	if g.states() != 5 || g.trans != 6 {
		t.Errorf("%d states, %d transitions; want 5 and 6", g.states(), g.trans)
	}
}
