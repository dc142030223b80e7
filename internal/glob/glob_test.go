package glob

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestMatch(t *testing.T) {
	tests := []struct {
		pattern, name string
		want          bool
	}{
		{"", "", true},
		{"", "a", false},
		{"job", "job", true},
		{"job", "Job", false}, // case sensitive
		{"job", "jobs", false},
		{"job", "a/job", false}, // whole string
		{"*", "", true},
		{"*", "anything/at/all", true},
		{"jobs/*", "jobs/nightly", true},
		{"jobs/*", "jobs/a/b", true}, // '*' crosses '/'
		{"jobs/*", "jobs/", true},
		{"jobs/*", "job/x", false},
		{"*/deploy", "eu/prod/deploy", true},
		{"*/deploy", "deploy", false},
		{"?", "a", true},
		{"?", "", false},
		{"?", "ab", false},
		{"?", "é", true},   // one rune, two bytes
		{"?", "日", true},   // three bytes
		{"??", "é", false}, // not two bytes
		{"a?c", "a/c", true},
		{"a*b*c", "abc", true},
		{"a*b*c", "aXbYc", true},
		{"a*b*c", "acb", false},
		{"a*a", "a", false},
		{"a*a", "aa", true},
		{"*a*", "bab", true},
		{"**", "x", true},
		{"*?", "", false},
		{"*?", "x", true},
		{"?*?", "x", false},
		{"?*?", "xy", true},
		{"*.lock", "db.lock", true},
		{"*.lock", "db.lock.bak", false},
		{"x*y*z", "xyyyzzz", true},
		{"ab*ba", "aba", false},
	}
	for _, tt := range tests {
		if got := Match(tt.pattern, tt.name); got != tt.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tt.pattern, tt.name, got, tt.want)
		}
	}
}

func TestCompileInvalid(t *testing.T) {
	if _, err := Compile("a\xffb"); err != ErrInvalidPattern {
		t.Fatalf("Compile(invalid UTF-8) error = %v, want ErrInvalidPattern", err)
	}
	if Match("\xff", "\xff") {
		t.Fatal("an invalid pattern matched")
	}
}

func TestZeroPattern(t *testing.T) {
	var p Pattern
	if !p.Match("") || p.Match("a") {
		t.Fatal("zero Pattern must match only the empty name")
	}
}

// TestPathological runs patterns that make naive backtracking matchers take
// exponential time. Each must finish at once.
func TestPathological(t *testing.T) {
	name := strings.Repeat("a", 255)
	for _, pattern := range []string{
		strings.Repeat("a*", 60) + "b",
		strings.Repeat("*a", 60) + "*b",
		strings.Repeat("*?", 100) + "b",
	} {
		start := time.Now()
		if Match(pattern, name) {
			t.Errorf("Match(%.20q..., a^255) = true", pattern)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("Match(%.20q..., a^255) took %v", pattern, d)
		}
	}
	if !Match(strings.Repeat("a*", 60)+"a", name) {
		t.Error("(a*)^60 a must match a^255")
	}
}

// reference is the textbook recursive matcher: obviously right,
// exponential in the worst case. Inputs are kept small.
func reference(p, s []rune) bool {
	if len(p) == 0 {
		return len(s) == 0
	}
	switch p[0] {
	case '*':
		for i := 0; i <= len(s); i++ {
			if reference(p[1:], s[i:]) {
				return true
			}
		}
		return false
	case '?':
		return len(s) > 0 && reference(p[1:], s[1:])
	}
	return len(s) > 0 && s[0] == p[0] && reference(p[1:], s[1:])
}

func TestAgainstReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []rune("ab/é")
	pat := []rune("ab/é*?")
	randString := func(runes []rune, n int) string {
		var b strings.Builder
		for range rng.IntN(n + 1) {
			b.WriteRune(runes[rng.IntN(len(runes))])
		}
		return b.String()
	}
	for range 20000 {
		p, s := randString(pat, 7), randString(alphabet, 8)
		if got, want := Match(p, s), reference([]rune(p), []rune(s)); got != want {
			t.Fatalf("Match(%q, %q) = %v, reference says %v", p, s, got, want)
		}
	}
}

func FuzzMatch(f *testing.F) {
	f.Add("a*b?c", "axxbyc")
	f.Add("*/*", "x/y")
	f.Add("?", "é")
	f.Fuzz(func(t *testing.T, p, s string) {
		if len(p) > 12 || len(s) > 16 || !utf8.ValidString(p) || !utf8.ValidString(s) {
			return
		}
		if got, want := Match(p, s), reference([]rune(p), []rune(s)); got != want {
			t.Fatalf("Match(%q, %q) = %v, reference says %v", p, s, got, want)
		}
	})
}

// TestLimits: over-long and star-heavy patterns are refused, and a run of
// stars compiles to one star, so the worst accepted pattern is cheap.
func TestLimits(t *testing.T) {
	if _, err := Compile(strings.Repeat("*", 1_000_000)); !errors.Is(err, ErrTooLong) {
		t.Errorf("a million stars: err = %v, want ErrTooLong", err)
	}
	if _, err := Compile(strings.Repeat("a", MaxLen+1)); !errors.Is(err, ErrTooLong) {
		t.Errorf("MaxLen+1 bytes: err = %v, want ErrTooLong", err)
	}
	if _, err := Compile(strings.Repeat("*a", MaxStars+1)); !errors.Is(err, ErrTooManyStars) {
		t.Errorf("MaxStars+1 runs: err = %v, want ErrTooManyStars", err)
	}
	if _, err := Compile(strings.Repeat("*a", MaxStars)); err != nil {
		t.Errorf("MaxStars runs: %v", err)
	}
	run, err := Compile(strings.Repeat("*", MaxLen))
	if err != nil {
		t.Fatalf("one run of MaxLen stars: %v", err)
	}
	if len(run.segs) != 2 || !run.Match("anything") {
		t.Errorf("a run of stars compiled to %d segments", len(run.segs))
	}
	if !Match("a**b***c", "aXbc") || Match("a**b", "ab/") {
		t.Error("runs of stars must mean one star")
	}

	// The worst patterns within the limits against 3,000 names of 255
	// bytes: bounded work, far below a second.
	names := make([]string, 3000)
	for i := range names {
		names[i] = strings.Repeat("a", 254) + string(rune('b'+i%3))
	}
	for _, src := range []string{
		strings.Repeat("*a", MaxStars-1) + "*c",
		"*" + strings.Repeat("?", 127) + "c*d",
		strings.Repeat("*", MaxLen),
	} {
		p := MustCompile(src)
		start := time.Now()
		for _, n := range names {
			p.Match(n)
		}
		d := time.Since(start)
		t.Logf("%.16q...: 3000 names in %v", src, d)
		if d > 2*time.Second {
			t.Errorf("%.16q...: 3000 names took %v", src, d)
		}
	}
}
