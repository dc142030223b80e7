package rangelock

// Deadlock detection: the wait-for graph among owners is kept acyclic, so
// a new waiting request is refused with ErrDeadlock exactly when one of
// the owners it would wait for already reaches its owner (wouldDeadlock, a
// depth-first search). The search is bounded, as Linux's is: one that
// reaches Limits.SearchBound answers ErrSearchBound, never queuing a cycle.
// Design: "Deadlock detection" and #internalrangelockdeadlockgo in
// docs/design/2026-12-07-range-locks.md.

// DefaultSearchBound is the most holders and waiting requests one
// deadlock search examines (Limits.SearchBound's default): about a
// quarter of a millisecond of work.
const DefaultSearchBound = 10000

// search is one wouldDeadlock: the owners reached, the owners still to
// expand, per file how far from the queue's front every waiter's owner
// has been reached, and the requests (file, type, range) whose
// conflicting holders have been visited.
type search struct {
	t      *Table
	target Owner
	left   int // steps left before the bound
	seen   map[Owner]bool
	stack  []Owner
	front  map[*file]int
	asked  map[holdersOf]bool // true: the target holds one of them
}

// holdersOf names the holders of file f that conflict with a lock of
// type typ over r, whoever asks, except that an owner never conflicts
// with itself.
type holdersOf struct {
	f   *file
	typ Type
	r   Range
}

// wouldDeadlock reports ErrDeadlock when req, about to wait on f, would
// close a cycle, ErrSearchBound when the search reached its bound, and
// nil otherwise.
func (t *Table) wouldDeadlock(f *file, req Request) error {
	// Only an edge into req.Owner can close a cycle, and only an owner's
	// held ranges and waiting requests draw edges in.
	or := t.owner(req.Owner, false)
	if or == nil || len(or.held) == 0 && len(or.waiting) == 0 || !t.waitedFor(or, req.Owner, t.limits.searchBound()) {
		return nil
	}
	s := &search{t: t, target: req.Owner, left: t.limits.searchBound(), seen: map[Owner]bool{}, front: map[*file]int{},
		asked: map[holdersOf]bool{}}
	if err := s.blockers(f, req.Owner, req.Type, req.Range, len(f.queue)); err != nil {
		return err
	}
	for len(s.stack) > 0 {
		p := s.stack[len(s.stack)-1]
		s.stack = s.stack[:len(s.stack)-1]
		or := t.owner(p, false)
		if or == nil {
			continue
		}
		for _, w := range or.waiting {
			if err := s.blockers(w.f, w.owner, w.typ, w.r, w.f.index(w)); err != nil {
				return err
			}
		}
	}
	return nil
}

// waitedFor reports whether a waiting request of another owner may have
// an edge into o: whether one conflicts, on its file, with a range o
// holds or a request o waits with there. It ignores queue order and
// re-locks, so it may say true wrongly but never false: false proves
// that nothing reaches o, and no new request of o can close a cycle.
// Each comparison is a few binary searches, far cheaper than a search
// step (a queue of 1,000 writers on one byte, each owner holding a
// byte of its own, costs each new writer about 1,000 comparisons rather
// than a search through all their owners). Past budget comparisons (a
// key or a waiter each) it says true: let the bounded search decide.
func (t *Table) waitedFor(or *ownerRec, o Owner, budget int) bool {
	// spend counts one comparison: false once the budget is gone.
	spend := func() bool { budget--; return budget >= 0 }
	for _, f := range or.held {
		if !spend() {
			return true
		}
		h := f.holder(o)
		for _, w := range f.queue {
			if !spend() || w.owner != o && h != nil && h.conflicts(w.typ, w.r) {
				return true
			}
		}
	}
	for _, m := range or.waiting {
		if !spend() {
			return true
		}
		for _, w := range m.f.queue {
			if !spend() || conflicting(o, m.typ, m.r, w.owner, w.typ, w.r) {
				return true
			}
		}
	}
	return false
}

// conflicts reports whether a lock of type typ over r conflicts with a
// range h holds, whoever asks.
func (h *holder) conflicts(typ Type, r Range) bool {
	if _, ok := h.writes.first(r); ok {
		return true
	}
	_, ok := h.reads.first(r)
	return ok && typ == Write
}

// visit reaches owner p: ErrDeadlock when it is the target.
func (s *search) visit(p Owner) error {
	if p == s.target {
		return ErrDeadlock
	}
	if !s.seen[p] {
		s.seen[p] = true
		s.stack = append(s.stack, p)
	}
	return nil
}

// step counts one holder or waiter examined: ErrSearchBound past the
// bound.
func (s *search) step() error {
	if s.left--; s.left < 0 {
		return ErrSearchBound
	}
	return nil
}

// blockers visits the owner of every holder of f and of every one of its
// first n waiters that conflicts with a lock of type typ over r by o (the
// edges out of such a request), and stops at the first error.
func (s *search) blockers(f *file, o Owner, typ Type, r Range, n int) error {
	if err := s.holders(f, o, typ, r); err != nil {
		return err
	}
	if f.holder(o).covers(typ, r) {
		return nil
	}
	// Waiters before front[f] all have owners reached already: no edge
	// to them can add anything.
	front := s.front[f]
	for j := front; j < n; j++ {
		w := f.queue[j]
		if err := s.step(); err != nil {
			return err
		}
		if !s.seen[w.owner] && conflicting(o, typ, r, w.owner, w.typ, w.r) {
			if err := s.visit(w.owner); err != nil {
				return err
			}
		}
		if j == front && s.seen[w.owner] {
			front++
		}
	}
	if front > s.front[f] {
		s.front[f] = front
	}
	return nil
}

// holders visits the owners of f's holders that conflict with a lock of
// type typ over r by o. The same request of another owner (waiters on
// one byte) has the same edges but to the asker's own holder: each of
// those owners has been reached or is the target.
func (s *search) holders(f *file, o Owner, typ Type, r Range) error {
	if err := s.step(); err != nil {
		return err
	}
	k := holdersOf{f, typ, r}
	if target, ok := s.asked[k]; ok {
		if target && o != s.target {
			return ErrDeadlock
		}
		return nil
	}
	target := false
	var err error
	// The index gives the conflicting ranges only: a step each.
	f.conflicts(typ, r, func(n *node) bool {
		if err = s.step(); err != nil {
			return false
		}
		if n.h.owner == s.target {
			target = true
		}
		if n.h.owner != o {
			err = s.visit(n.h.owner)
		}
		return err == nil
	})
	if err != nil {
		return err
	}
	s.asked[k] = target
	return nil
}
