package rangelock

// The wait-for graph has an owner per node (Owner: session and owner id,
// the same node in both namespaces) and an edge o → p for every waiting
// request of o and every other owner p such that p holds a range on the
// request's file that conflicts with it, or p has an earlier waiting
// request on that file that conflicts with it (strict FIFO: the request
// cannot be granted before that one).
//
// The graph is kept acyclic. Only a new waiting request adds edges out of
// an owner; a grant (at once or from a queue) never adds an edge, because
// a request is granted only when it conflicts with no earlier waiter, and
// every waiter conflicting with it is then later and already waits for
// it; unlocks, releases and cancels only remove edges. So a new waiting
// request of o closes a cycle exactly when one of the owners it would
// wait for reaches o in the graph as it is, which wouldDeadlock checks by
// a depth-first search: sound (a refused request would have closed a
// cycle) and complete (no cycle ever forms).

// wouldDeadlock reports whether req, about to wait on f, would close a
// cycle.
func (t *Table) wouldDeadlock(f *file, req Request) bool {
	seen := map[Owner]bool{}
	var stack []Owner
	push := func(p Owner) bool {
		if p == req.Owner {
			return true
		}
		if !seen[p] {
			seen[p] = true
			stack = append(stack, p)
		}
		return false
	}
	if f.blockers(req.Owner, req.Type, req.Range, len(f.queue), push) {
		return true
	}
	for len(stack) > 0 {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		or := t.owner(p, false)
		if or == nil {
			continue
		}
		for _, w := range or.waiting {
			n := 0
			for n < len(w.f.queue) && w.f.queue[n] != w {
				n++
			}
			if w.f.blockers(w.owner, w.typ, w.r, n, push) {
				return true
			}
		}
	}
	return false
}

// blockers calls visit for the owner of every holder of f and of every
// one of its first n waiters that conflicts with a lock of type typ over
// r by o, and stops early when visit returns true.
func (f *file) blockers(o Owner, typ Type, r Range, n int, visit func(Owner) bool) bool {
	for _, h := range f.holders {
		if _, ok := h.conflict(o, typ, r); ok && visit(h.owner) {
			return true
		}
	}
	if f.holder(o).covers(typ, r) {
		return false
	}
	for _, w := range f.queue[:n] {
		if conflicting(o, typ, r, w.owner, w.typ, w.r) && visit(w.owner) {
			return true
		}
	}
	return false
}
