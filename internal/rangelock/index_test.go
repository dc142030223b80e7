package rangelock

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestIndexAgainstScan inserts and deletes random ranges of many holders
// in an index, checks the tree's invariants after each change (order,
// AVL balance, heights, max ends, size), and compares every overlap
// query, and the order it reports in, with a scan of a plain list.
func TestIndexAgainstScan(t *testing.T) {
	for seed := range uint64(20) {
		rnd := rand.New(rand.NewPCG(seed, 33))
		holders := make([]*holder, 50)
		for i := range holders {
			holders[i] = &holder{owner: Owner{Session: 1, ID: OwnerID(i)}, seq: uint64(i + 1)}
		}
		var x index
		var list []*node // what the index holds, in its order
		span := uint64(10 + rnd.IntN(2000))
		randRange := func() Range {
			s := rnd.Uint64N(span)
			if rnd.IntN(20) == 0 {
				return Range{s, MaxOffset}
			}
			return Range{s, s + rnd.Uint64N(span/5+1)}
		}
		for op := range 3000 {
			if len(list) > 0 && rnd.IntN(5) < 2 {
				i := rnd.IntN(len(list))
				x.delete(list[i].r.Start, list[i].h)
				list = slices.Delete(list, i, i+1)
			} else {
				h := holders[rnd.IntN(len(holders))]
				r := randRange()
				i, found := slices.BinarySearchFunc(list, r.Start, func(n *node, start uint64) int { return -n.order(start, h) })
				if found {
					continue // one range of a holder per start, as in a file
				}
				x.insert(r, Write, h)
				list = slices.Insert(list, i, &node{r: r, h: h})
			}
			if n := checkTree(t, x.root); n != len(list) || x.n != n {
				t.Fatalf("seed %d op %d: %d nodes, size %d, want %d", seed, op, n, x.n, len(list))
			}
			q := randRange()
			var got, want []Range
			x.overlapping(q, func(n *node) bool { got = append(got, n.r); return true })
			for _, n := range list {
				if n.r.overlaps(q) {
					want = append(want, n.r)
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("seed %d op %d: ranges overlapping %v: %v, want %v", seed, op, q, got, want)
			}
			// Stopping early stops.
			calls := 0
			x.overlapping(q, func(*node) bool { calls++; return false })
			if calls != min(1, len(want)) {
				t.Fatalf("seed %d op %d: %d calls after a stop", seed, op, calls)
			}
		}
	}
}

// checkTree checks the subtree n and returns its size.
func checkTree(t *testing.T, n *node) int {
	if n == nil {
		return 0
	}
	size := 1 + checkTree(t, n.left) + checkTree(t, n.right)
	maxEnd := n.r.End
	for _, c := range []*node{n.left, n.right} {
		if c != nil {
			maxEnd = max(maxEnd, c.maxEnd)
		}
	}
	if n.left != nil && n.order(n.left.r.Start, n.left.h) >= 0 || n.right != nil && n.order(n.right.r.Start, n.right.h) <= 0 {
		t.Fatalf("node %v out of order with its children", n.r)
	}
	if d := height(n.left) - height(n.right); d < -1 || d > 1 || n.height != max(height(n.left), height(n.right))+1 {
		t.Fatalf("node %v: height %d, children %d and %d", n.r, n.height, height(n.left), height(n.right))
	}
	if n.maxEnd != maxEnd {
		t.Fatalf("node %v: max end %d, want %d", n.r, n.maxEnd, maxEnd)
	}
	return size
}
