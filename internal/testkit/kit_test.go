package testkit

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
)

// build compiles the package at pkg (relative to this one) once per test
// binary.
var (
	buildMu sync.Mutex
	built   = map[string]string{}
	tmpDir  string
)

func build(t *testing.T, pkg string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if bin, ok := built[pkg]; ok {
		return bin
	}
	bin := filepath.Join(tmpDir, filepath.Base(pkg))
	out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	built[pkg] = bin
	return bin
}

func TestMain(m *testing.M) {
	var err error
	if tmpDir, err = os.MkdirTemp("", "testkit"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(tmpDir)
	os.Exit(code)
}

// report renders results for a failure message.
func report(res []Result) string {
	var b strings.Builder
	for _, r := range res {
		b.WriteString("\n" + r.Scenario + ": " + string(r.Status) + " " + r.Detail)
		for _, m := range r.Marks {
			fmt.Fprintf(&b, "\n    %8.1fms %s", m.MS, m.What)
		}
	}
	return b.String()
}

// The lease and tolerance of the tests: wide enough for a machine that
// runs other tests beside these, narrow enough that every mutation is
// still far outside (the anchor mutations by L/2, the close ones by the
// stop time, 300ms, against half the tolerance).
const (
	testLease     = 2 * time.Second
	testTolerance = 300 * time.Millisecond
)

func run(t *testing.T, opts Options) []Result {
	t.Helper()
	if opts.Lease == 0 {
		opts.Lease, opts.Tolerance = testLease, testTolerance
	}
	res, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// A client written from docs/protocol.md alone passes too, and a client
// that lacks resumable sessions is skipped there, not failed.
// (The Go client's own run is cmd/baton's TestTestkitGoClient, through
// the subcommand.)
func TestMinimalClientPasses(t *testing.T) {
	t.Parallel()
	res := run(t, Options{Command: []string{build(t, "./mutant")}})
	for _, r := range res {
		want := Pass
		if r.Scenario == "resumable-reassert" { // it says it lacks them
			want = Skip
		}
		if r.Status != want {
			t.Errorf("%s: %s, want %s: %s%s", r.Scenario, r.Status, want, r.Detail, report([]Result{r}))
		}
	}
}

// Each mutation of the minimal client breaks one rule; the scenarios
// meant to catch it must fail, and the others still pass.
func TestMutantsFail(t *testing.T) {
	t.Parallel()
	bin := build(t, "./mutant")
	for _, tc := range []struct {
		mutant string
		fail   []string
		why    string // in the detail of the first failing scenario
	}{
		{"anchor-at-arrival", []string{"anchor-send-time", "v1-anchor-send-time"}, "a client with the bug"},
		{"never-lost", []string{"silent-after-grant", "revoked", "session-error", "v1-anchor-send-time"}, "did not report lost"},
		{"close-first", []string{"close-after-told"}, "before the work was told"},
		{"close-at-give-up", []string{"close-after-told"}, "while the work was still running"},
		{"ignore-violation", []string{"violation-unsolicited-answer", "violation-promoted-held"}, "the violation + tolerance"},
		{"ignore-revoked", []string{"revoked"}, "did not report lost"},
		{"push-confirms", []string{"push-does-not-confirm"}, "after the bound"},
		{"no-ping", []string{"stops-answering"}, "while the server answered"},
		{"no-push-counting", []string{"v1-push-counting"}, "closed the connection"},
		{"strict-release", []string{"revoked-crosses-release"}, "did not report released"},
	} {
		t.Run(tc.mutant, func(t *testing.T) {
			t.Parallel() // the kit and its adapters mostly sleep
			// Run the scenarios meant to fail, and one that should not,
			// to show the mutant is otherwise a working client (one that
			// sends no PING loses every claim it holds for 0.8·L).
			witness := "split-frames"
			if tc.mutant == "no-ping" {
				witness = "revoked"
			}
			names := append(slices.Clone(tc.fail), witness)
			re := regexp.MustCompile("^(" + strings.Join(names, "|") + ")$")
			res := run(t, Options{Command: []string{bin}, Run: re, Env: append(os.Environ(), "BATON_TESTKIT_MUTANT="+tc.mutant)})
			for _, r := range res {
				want := Pass
				if slices.Contains(tc.fail, r.Scenario) {
					want = Fail
				}
				if r.Status != want || strings.Contains(r.Detail, "cannot start") ||
					(r.Scenario == tc.fail[0] && !strings.Contains(r.Detail, tc.why)) {
					t.Errorf("%s: %s, want %s: %s%s", r.Scenario, r.Status, want, r.Detail, report([]Result{r}))
				} else {
					t.Logf("%s: %s: %s", r.Scenario, r.Status, r.Detail)
				}
			}
		})
	}
}

// A client that does not fall back to version 1 (it reports the
// refused opening as an error) is skipped in the version 1 scenarios.
func TestNoFallbackIsSkipped(t *testing.T) {
	res := run(t, Options{
		Command: []string{"sh", "-c", `echo '{"event":"error","message":"unsupported protocol version"}'; read line`},
		Run:     regexp.MustCompile("^v1-"), Timeout: 5 * time.Second})
	if len(res) != 2 {
		t.Fatalf("%d results, want the 2 version 1 scenarios", len(res))
	}
	for _, r := range res {
		if r.Status != Skip || !strings.Contains(r.Detail, "fallback to version 1") {
			t.Errorf("%s: %s %q, want a skip for the missing fallback", r.Scenario, r.Status, r.Detail)
		}
	}
}

// An adapter that misbehaves fails each scenario with a clear reason,
// promptly, and never hangs the kit.
func TestBadAdapters(t *testing.T) {
	re := regexp.MustCompile("^revoked$")
	for _, tc := range []struct {
		script, want string
	}{
		{"echo not json; read line", "not an event"},
		{"exit 0", "ended its output before its client connected"},
		{`echo '{"event":"error","message":"no server"}'; read line`, "no server"},
		{`echo '{"event":"unsupported","feature":"resumable"}'; read line`, "does not support resumable"},
	} {
		start := time.Now()
		res := run(t, Options{Command: []string{"sh", "-c", tc.script}, Run: re, Timeout: 5 * time.Second})
		if len(res) == 1 && res[0].Status == Pass {
			t.Errorf("%q passed", tc.script)
		}
		if len(res) != 1 || !strings.Contains(res[0].Detail, tc.want) {
			t.Errorf("%q: %+v, want a result saying %q", tc.script, res, tc.want)
		}
		if d := time.Since(start); d > 8*time.Second {
			t.Errorf("%q: the run took %v", tc.script, d)
		}
	}
}

// The fake server answers a client that asks for the ring as a single
// server does (a routing client may ask before it claims), and refuses
// to guess at a request it does not know.
func TestAnswerer(t *testing.T) {
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	a := &answerer{p: &peer{k: &kit{t0: time.Now()}, conn: c1}}
	done := make(chan error, 1)
	go func() { done <- a.answer(rx{f: protocol.Frame{Type: protocol.TypeRing, Flags: 1}, at: time.Now()}) }()
	c2.SetReadDeadline(time.Now().Add(2 * time.Second))
	f, err := protocol.ReadServerFrameV2(c2)
	if err != nil || f.Type != protocol.TypeRingEnd || f.Ring != 0 || f.Flags != 0 {
		t.Fatalf("answer to RING: %v, %v; want RINGEND version 0, count 0, not pushed", f, err)
	}
	if err := <-done; err != nil || a.lastAnswered.IsZero() {
		t.Fatalf("answer: %v, lastAnswered %v", err, a.lastAnswered)
	}
	if err := a.answer(rx{f: protocol.Frame{Type: protocol.TypeRange}}); err == nil {
		t.Fatal("a RANGE was answered; the kit has no range locks to answer it with")
	}
}
