package modelcheck

// graph is the explored state space: states are numbered in breadth-first
// order, each remembers the state and step that first reached it (so the
// path to it is the shortest), and, when edges are kept, every transition
// out of it.
type graph[S any] struct {
	index  map[string]int32
	parent []int32 // -1 for the initial state
	via    []S     // the step from parent
	depth  []int32
	edges  [][]edge[S] // nil unless keepEdges
	keep   bool
	trans  int
}

type edge[S any] struct {
	to   int32
	step S
}

func newGraph[S any](keepEdges bool) *graph[S] {
	return &graph[S]{index: map[string]int32{}, keep: keepEdges}
}

// add records the state with canonical key key, reached from parent by
// step (parent -1 for the initial state), and returns its number and
// whether it is new.
func (g *graph[S]) add(key string, parent int32, step S) (int32, bool) {
	if parent >= 0 {
		g.trans++
	}
	id, ok := g.index[key]
	if !ok {
		id = int32(len(g.parent))
		g.index[key] = id
		g.parent = append(g.parent, parent)
		g.via = append(g.via, step)
		d := int32(0)
		if parent >= 0 {
			d = g.depth[parent] + 1
		}
		g.depth = append(g.depth, d)
		if g.keep {
			g.edges = append(g.edges, nil)
		}
	}
	if g.keep && parent >= 0 {
		g.edges[parent] = append(g.edges[parent], edge[S]{to: id, step: step})
	}
	return id, !ok
}

// path returns the steps from the initial state to state id.
func (g *graph[S]) path(id int32) []S {
	p := make([]S, g.depth[id])
	for i := len(p) - 1; i >= 0; i-- {
		p[i] = g.via[id]
		id = g.parent[id]
	}
	return p
}

func (g *graph[S]) states() int { return len(g.parent) }

// sccs returns the strongly connected components of the subgraph induced
// by the states for which in returns true, each as a list of states, and
// only those with at least one edge inside (a cycle, possibly a self-loop).
func (g *graph[S]) sccs(in func(int32) bool) [][]int32 {
	roots := make([]int32, len(g.parent))
	for i := range roots {
		roots[i] = int32(i)
	}
	return sccsOf(g, roots, in)
}

// sccsOf is sccs for the part of the subgraph reachable inside in from
// roots, with bookkeeping proportional to that part rather than to the
// whole graph: the directory-lock fair-cycle search splits small
// components many times.
func sccsOf[S any](g *graph[S], roots []int32, in func(int32) bool) [][]int32 {
	type mark struct{ index, low int32 }
	marks := map[int32]*mark{}
	onStack := map[int32]bool{}
	var stack []int32
	var out [][]int32
	next := int32(0)
	type frame struct {
		v int32
		e int
	}
	for _, root := range roots {
		if marks[root] != nil || !in(root) {
			continue
		}
		marks[root] = &mark{next, next}
		next++
		stack = append(stack, root)
		onStack[root] = true
		call := []frame{{v: root}}
		for len(call) > 0 {
			f := &call[len(call)-1]
			if f.e < len(g.edges[f.v]) {
				w := g.edges[f.v][f.e].to
				f.e++
				if !in(w) {
					continue
				}
				if marks[w] == nil {
					marks[w] = &mark{next, next}
					next++
					stack = append(stack, w)
					onStack[w] = true
					call = append(call, frame{v: w})
				} else if onStack[w] {
					marks[f.v].low = min(marks[f.v].low, marks[w].index)
				}
				continue
			}
			v := f.v
			call = call[:len(call)-1]
			if len(call) > 0 {
				u := call[len(call)-1].v
				marks[u].low = min(marks[u].low, marks[v].low)
			}
			if marks[v].low != marks[v].index {
				continue
			}
			var c []int32
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[w] = false
				c = append(c, w)
				if w == v {
					break
				}
			}
			if len(c) > 1 || g.selfLoop(v) {
				out = append(out, c)
			}
		}
	}
	return out
}

func (g *graph[S]) selfLoop(v int32) bool {
	for _, e := range g.edges[v] {
		if e.to == v {
			return true
		}
	}
	return false
}

// route returns the steps of a shortest path from state from to state to
// that stays inside the states for which in returns true, and at least one
// step when from == to (a cycle). It reports false when there is none.
func (g *graph[S]) route(from, to int32, in func(int32) bool) ([]S, bool) {
	type back struct {
		prev int32
		step S
	}
	seen := map[int32]back{}
	queue := []int32{}
	// Expand from's edges first, so that from == to needs a real cycle.
	for _, e := range g.edges[from] {
		if _, ok := seen[e.to]; !ok && in(e.to) {
			seen[e.to] = back{prev: from, step: e.step}
			queue = append(queue, e.to)
		}
	}
	for len(queue) > 0 {
		v := queue[0]
		queue = queue[1:]
		if v == to {
			var steps []S
			for {
				b := seen[v]
				steps = append(steps, b.step)
				v = b.prev
				if v == from && len(steps) > 0 {
					break
				}
			}
			for i, j := 0, len(steps)-1; i < j; i, j = i+1, j-1 {
				steps[i], steps[j] = steps[j], steps[i]
			}
			return steps, true
		}
		for _, e := range g.edges[v] {
			if _, ok := seen[e.to]; !ok && in(e.to) {
				seen[e.to] = back{prev: v, step: e.step}
				queue = append(queue, e.to)
			}
		}
	}
	return nil, false
}
