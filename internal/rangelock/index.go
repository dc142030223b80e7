package rangelock

// index is the held ranges of one type on one file, of every owner: an
// AVL tree ordered by start (then by holder, since owners may read the
// same bytes), each node keeping the largest end in its subtree. The
// ranges that overlap a request are found by descending only into
// subtrees that can hold one (some end at or after the request's start,
// some start at or before its end): O(log n) for the first, and about
// O(log n + k) for k of them that lie together. A change is O(log n).
// An AVL tree rather than a treap or skip list: no randomness, and its
// worst case is the bound, whatever ranges a client sends.
type index struct {
	root *node
	n    int
}

type node struct {
	r           Range
	typ         Type
	h           *holder
	maxEnd      uint64 // the largest End in this subtree
	height      int8
	left, right *node
}

// order compares the position (start, h) with node n's.
func (n *node) order(start uint64, h *holder) int {
	switch {
	case start < n.r.Start:
		return -1
	case start > n.r.Start:
		return 1
	case h.seq < n.h.seq:
		return -1
	case h.seq > n.h.seq:
		return 1
	}
	return 0
}

func height(n *node) int8 {
	if n == nil {
		return 0
	}
	return n.height
}

// fix recomputes n's height and maxEnd from its children.
func (n *node) fix() {
	n.height = max(height(n.left), height(n.right)) + 1
	n.maxEnd = n.r.End
	if n.left != nil {
		n.maxEnd = max(n.maxEnd, n.left.maxEnd)
	}
	if n.right != nil {
		n.maxEnd = max(n.maxEnd, n.right.maxEnd)
	}
}

func rotateRight(n *node) *node {
	l := n.left
	n.left, l.right = l.right, n
	n.fix()
	l.fix()
	return l
}

func rotateLeft(n *node) *node {
	r := n.right
	n.right, r.left = r.left, n
	n.fix()
	r.fix()
	return r
}

// balance restores the AVL property at n, whose subtrees are balanced
// and differ in height by at most 2, and returns the subtree's root.
func balance(n *node) *node {
	n.fix()
	switch d := height(n.left) - height(n.right); {
	case d > 1:
		if height(n.left.left) < height(n.left.right) {
			n.left = rotateLeft(n.left)
		}
		return rotateRight(n)
	case d < -1:
		if height(n.right.right) < height(n.right.left) {
			n.right = rotateRight(n.right)
		}
		return rotateLeft(n)
	}
	return n
}

// insert adds h's range r of type typ; h holds no other range of typ
// starting at r.Start.
func (x *index) insert(r Range, typ Type, h *holder) {
	x.root = insertNode(x.root, &node{r: r, typ: typ, h: h})
	x.n++
}

func insertNode(n, add *node) *node {
	if n == nil {
		add.fix()
		return add
	}
	if n.order(add.r.Start, add.h) < 0 {
		n.left = insertNode(n.left, add)
	} else {
		n.right = insertNode(n.right, add)
	}
	return balance(n)
}

// delete removes h's range that starts at start, which must be there.
func (x *index) delete(start uint64, h *holder) {
	x.root = deleteNode(x.root, start, h)
	x.n--
}

func deleteNode(n *node, start uint64, h *holder) *node {
	if n == nil {
		panic("rangelock: index out of step with a holder's ranges")
	}
	switch c := n.order(start, h); {
	case c < 0:
		n.left = deleteNode(n.left, start, h)
	case c > 0:
		n.right = deleteNode(n.right, start, h)
	default:
		if n.left == nil {
			return n.right
		}
		if n.right == nil {
			return n.left
		}
		// Put the next node in n's place.
		var next *node
		n.right, next = deleteMin(n.right)
		next.left, next.right = n.left, n.right
		n = next
	}
	return balance(n)
}

// deleteMin takes the first node out of the subtree n and returns the
// subtree's new root and that node.
func deleteMin(n *node) (*node, *node) {
	if n.left == nil {
		return n.right, n
	}
	var m *node
	n.left, m = deleteMin(n.left)
	return balance(n), m
}

// overlapping calls fn with each range that overlaps r, in order of
// start, until fn returns false; it returns false when fn did.
func (x *index) overlapping(r Range, fn func(*node) bool) bool {
	return overlapping(x.root, r, fn)
}

func overlapping(n *node, r Range, fn func(*node) bool) bool {
	if n == nil || n.maxEnd < r.Start {
		return true // nothing here ends late enough
	}
	if !overlapping(n.left, r, fn) {
		return false
	}
	if n.r.Start > r.End {
		return true // n and everything after it start too late
	}
	if n.r.End >= r.Start && !fn(n) {
		return false
	}
	return overlapping(n.right, r, fn)
}
