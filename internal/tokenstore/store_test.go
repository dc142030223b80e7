package tokenstore

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

func open(t *testing.T, dir string, opts Options) *Store {
	t.Helper()
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// On first use, tokens start above the in-memory clock rule, so they
// continue upward from a server that ran without a data directory.
func TestFirstUseStartsAboveClockRule(t *testing.T) {
	now := time.Unix(1_700_000_000, 900_000_000)
	s := open(t, t.TempDir(), Options{Now: func() time.Time { return now }})
	if tok, want := s.Next(), uint64(1_700_000_001)<<20; tok != want {
		t.Errorf("first token %d, want %d", tok, want)
	}
}

func TestFirstUseBeforeEpochFails(t *testing.T) {
	_, err := Open(t.TempDir(), Options{Now: func() time.Time { return time.Unix(-10, 0) }})
	if err == nil || !strings.Contains(err.Error(), "1970") {
		t.Errorf("Open with a clock before 1970: %v, want an error naming 1970", err)
	}
}

// A restart starts above every token issued before, and needs no clock
// once the file exists. Close only waits for a background write in
// flight; the next Open reads what the last completed reservation wrote,
// which is all a kill -9 leaves too (cmd/baton tests the real kill).
func TestRestartStartsAbove(t *testing.T) {
	dir := t.TempDir()
	noClock := func() time.Time { t.Fatal("clock read with an existing file"); return time.Time{} }
	var last uint64
	for round := range 5 {
		opts := Options{Block: 8}
		if round > 0 {
			opts.Now = noClock
		}
		s, err := Open(dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 + round*7 { // across blocks in later rounds
			tok := s.Next()
			if tok <= last {
				t.Fatalf("round %d token %d: %d <= previous %d", round, i, tok, last)
			}
			last = tok
		}
		s.Close()
	}
}

// Issuing a token never runs past the durable mark, even with a block of
// one: each token then waits for its own write.
func TestNeverAboveDurableMark(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{Block: 1, Now: func() time.Time { return time.Unix(1, 0) }})
	for range 50 {
		tok := s.Next()
		b, err := os.ReadFile(filepath.Join(dir, FileName))
		if err != nil {
			t.Fatal(err)
		}
		mark, err := decode(b)
		if err != nil {
			t.Fatal(err)
		}
		if tok >= mark {
			t.Fatalf("token %d issued at or above the durable mark %d", tok, mark)
		}
	}
}

func TestCorruptFileFailsOpen(t *testing.T) {
	good := string(encode(12345))
	cases := map[string]string{
		"empty":        "",
		"garbage":      "hello\n",
		"truncated":    good[:len(good)-5],
		"digit flip":   strings.Replace(good, "12345", "12344", 1),
		"trailing":     good + "x",
		"bad number":   strings.Replace(good, "12345", "-1", 1),
		"other header": strings.Replace(good, "baton-tokens 1", "baton-tokens 2", 1),
	}
	for name, content := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, FileName), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := Open(dir, Options{})
			if !errors.Is(err, ErrCorrupt) {
				if s != nil {
					s.Close()
				}
				t.Fatalf("Open: %v, want ErrCorrupt", err)
			}
			if !strings.Contains(err.Error(), filepath.Join(dir, FileName)) {
				t.Errorf("error %q does not name the file", err)
			}
		})
	}
	// The good content opens and continues above it.
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, FileName), []byte(good), 0o600)
	if tok := open(t, dir, Options{}).Next(); tok != 12345 {
		t.Errorf("first token after a mark of 12345: %d", tok)
	}
}

func TestUnreadableFileFailsOpen(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, FileName), 0o700); err != nil { // a directory in its place
		t.Fatal(err)
	}
	if s, err := Open(dir, Options{}); err == nil {
		s.Close()
		t.Fatal("Open succeeded with a directory where the file should be")
	}
}

// When the next block cannot be written and the current one is used up,
// the store calls Fatal instead of issuing a token it has not recorded.
func TestWriteFailureIsFatalOnlyWhenExhausted(t *testing.T) {
	dir := t.TempDir()
	var bg, fatal []error
	s := open(t, dir, Options{Block: 4, Now: func() time.Time { return time.Unix(1, 0) },
		OnError: func(err error) { bg = append(bg, err) },
		Fatal:   func(err error) { fatal = append(fatal, err); panic("fatal") }})
	// Make writes fail: a directory where the temporary file goes.
	if err := os.Mkdir(filepath.Join(dir, FileName+".tmp"), 0o700); err != nil {
		t.Fatal(err)
	}
	first := s.Next()
	got := []uint64{first}
	func() {
		defer func() { recover() }()
		for range 10 {
			got = append(got, s.Next())
		}
	}()
	if len(fatal) != 1 {
		t.Fatalf("Fatal called %d times; tokens %v", len(fatal), got)
	}
	if len(got) != 4 {
		t.Errorf("issued %v before failing, want the 4 tokens of the durable block", got)
	}
	s.Close()
	if len(bg) == 0 {
		t.Error("OnError was not told of the failed background reservation")
	}
}

// Two stores on one directory would issue the same tokens: the second
// Open fails while the first is open, and succeeds once it is closed.
func TestOneStorePerDirectory(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no flock")
	}
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	tok := s.Next()
	if s2, err := Open(dir, Options{}); !errors.Is(err, ErrInUse) {
		if s2 != nil {
			s2.Close()
		}
		t.Fatalf("second Open: %v, want ErrInUse", err)
	}
	s.Close()
	s2 := open(t, dir, Options{})
	if tok2 := s2.Next(); tok2 <= tok {
		t.Errorf("after the first store closed: token %d <= %d", tok2, tok)
	}
}
