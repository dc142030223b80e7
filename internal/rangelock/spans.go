package rangelock

import "sort"

// spans is a set of bytes as disjoint, non-adjacent ranges sorted by
// start (so their ends are sorted too): one owner's ranges of one type on
// one file. Lookups are binary searches; a change moves the tail of the
// slice, a memmove of at most the owner's own ranges.
type spans []Range

// from returns the index of the first range that ends at or after off.
func (s spans) from(off uint64) int {
	return sort.Search(len(s), func(i int) bool { return s[i].End >= off })
}

// after returns the index of the first range that starts after off.
func (s spans) after(off uint64) int {
	return sort.Search(len(s), func(i int) bool { return s[i].Start > off })
}

// first returns the first range that overlaps r.
func (s spans) first(r Range) (Range, bool) {
	if i := s.from(r.Start); i < len(s) && s[i].Start <= r.End {
		return s[i], true
	}
	return Range{}, false
}

// cut plans taking the bytes of r out of the set: s[i:j] are the
// ranges r touches, to be replaced by keep, their parts outside r (a
// range that r cuts in the middle splits in two).
func (s spans) cut(r Range) (i, j int, keep []Range) {
	i, j = s.from(r.Start), s.after(r.End)
	if i >= j {
		return i, i, nil
	}
	if s[i].Start < r.Start {
		keep = append(keep, Range{s[i].Start, r.Start - 1})
	}
	if s[j-1].End > r.End {
		keep = append(keep, Range{r.End + 1, s[j-1].End})
	}
	return i, j, keep
}

// join plans putting the bytes of r into the set: s[i:j] are the ranges
// r overlaps or touches, to be replaced by merged, one range over them
// and r.
func (s spans) join(r Range) (i, j int, merged Range) {
	lo, hi := r.Start, r.End
	if lo > 0 {
		lo--
	}
	if hi < MaxOffset {
		hi++
	}
	i, j = s.from(lo), s.after(hi)
	if i < j {
		r.Start = min(r.Start, s[i].Start)
		r.End = max(r.End, s[j-1].End)
	}
	return i, j, r
}

// spansReplace replaces s[i:j] with with, reusing the slice where it can.
func spansReplace(s spans, i, j int, with []Range) spans {
	d := len(with) - (j - i)
	switch {
	case d > 0:
		s = append(s, with[:d]...) // grow by d
		copy(s[j+d:], s[j:len(s)-d])
	case d < 0:
		copy(s[j+d:], s[j:])
		s = s[:len(s)+d]
	}
	copy(s[i:], with)
	return s
}
