// Package glob matches lock names against shell-like patterns, for the
// admin API's filters and the access-control list: '*' matches any run of
// characters (none and '/' included; a run of stars is one star), '?' one
// UTF-8 encoded rune, every other character itself (no escape, no class),
// and a pattern matches the whole name, case sensitively. Compile refuses
// a pattern over MaxLen bytes or MaxStars runs of stars, so an untrusted
// pattern costs bounded work. Matching never backtracks: each segment
// between stars goes at its leftmost possible position, so a match costs
// at most len(name)·(longest segment) + len(pattern) steps.
// User docs: docs/security.md, "Access-control list".
package glob

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// Limits on a pattern.
const (
	// MaxLen is the longest pattern, in bytes. Lock names have at most
	// 255 bytes; identities (URI SANs) rarely more than a few hundred.
	MaxLen = 2048
	// MaxStars is the most runs of '*' a pattern may have.
	MaxStars = 64
)

// Errors returned by Compile.
var (
	ErrInvalidPattern = errors.New("glob: pattern is not valid UTF-8")
	ErrTooLong        = fmt.Errorf("glob: pattern longer than %d bytes", MaxLen)
	ErrTooManyStars   = fmt.Errorf("glob: pattern has more than %d runs of '*'", MaxStars)
)

// Pattern is a compiled pattern. The zero value matches only the empty
// name.
type Pattern struct {
	src string
	// segs are the literal pieces between stars; '?' inside them matches
	// any one rune. With no star there is exactly one segment.
	segs [][]rune
	star bool // the pattern contains at least one '*'
}

// Compile parses pattern. It fails with ErrInvalidPattern, ErrTooLong or
// ErrTooManyStars.
func Compile(pattern string) (Pattern, error) {
	if len(pattern) > MaxLen {
		return Pattern{}, ErrTooLong
	}
	if !utf8.ValidString(pattern) {
		return Pattern{}, ErrInvalidPattern
	}
	p := Pattern{src: pattern}
	var cur []rune
	prevStar := false
	for _, r := range pattern {
		if r == '*' {
			if !prevStar { // "**" is "*"
				p.star = true
				p.segs = append(p.segs, cur)
				cur = nil
				if len(p.segs) > MaxStars {
					return Pattern{}, ErrTooManyStars
				}
			}
			prevStar = true
			continue
		}
		prevStar = false
		cur = append(cur, r)
	}
	p.segs = append(p.segs, cur)
	return p, nil
}

// MustCompile is Compile for patterns known to be valid; it panics
// otherwise.
func MustCompile(pattern string) Pattern {
	p, err := Compile(pattern)
	if err != nil {
		panic(err)
	}
	return p
}

// Match reports whether name matches pattern. An invalid pattern matches
// nothing.
func Match(pattern, name string) bool {
	p, err := Compile(pattern)
	return err == nil && p.Match(name)
}

// String returns the source of the pattern.
func (p Pattern) String() string { return p.src }

// Match reports whether the whole of name matches p. Invalid UTF-8 in name
// counts one rune per invalid byte.
func (p Pattern) Match(name string) bool {
	s := []rune(name)
	if !p.star {
		var seg []rune
		if len(p.segs) > 0 {
			seg = p.segs[0]
		}
		return len(s) == len(seg) && matchAt(seg, s, 0)
	}
	first, last := p.segs[0], p.segs[len(p.segs)-1]
	if len(s) < len(first)+len(last) || !matchAt(first, s, 0) || !matchAt(last, s, len(s)-len(last)) {
		return false
	}
	// The middle segments go, in order, into s[lo:hi]; leftmost placement
	// leaves the most room for the ones after.
	lo, hi := len(first), len(s)-len(last)
	for _, seg := range p.segs[1 : len(p.segs)-1] {
		i := find(seg, s[lo:hi])
		if i < 0 {
			return false
		}
		lo += i + len(seg)
	}
	return true
}

// matchAt reports whether seg matches s at offset i; the caller ensures
// that it fits.
func matchAt(seg, s []rune, i int) bool {
	for j, r := range seg {
		if r != '?' && r != s[i+j] {
			return false
		}
	}
	return true
}

// find returns the leftmost offset in s at which seg matches, or -1.
func find(seg, s []rune) int {
	for i := 0; i+len(seg) <= len(s); i++ {
		if matchAt(seg, s, i) {
			return i
		}
	}
	return -1
}
