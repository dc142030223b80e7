package main

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/batonlock/baton/internal/testkit"
)

// buildTestkitAdapter compiles an adapter of internal/testkit.
func buildTestkitAdapter(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	out, err := exec.Command("go", "build", "-o", bin, "github.com/batonlock/baton/internal/testkit/"+name).CombinedOutput()
	if err != nil {
		t.Fatalf("go build %s: %v\n%s", name, err, out)
	}
	return bin
}

// TestTestkitGoClient: 'baton testkit' against the Go client's adapter
// passes every scenario and exits 0.
func TestTestkitGoClient(t *testing.T) {
	// Not beside other tests (no t.Parallel): the testkit checks the
	// client's timings within a tolerance. Its scenarios run side by side
	// (one 'baton testkit --run' each): each has its own fake server and
	// adapter process, which mostly sleep, and run one after another they
	// took 30 s.
	bin := buildTestkitAdapter(t, "goadapter")
	for _, sc := range testkit.Scenarios() {
		t.Run(sc.Name, func(t *testing.T) {
			t.Parallel()
			// A lease and tolerance wider than the defaults: this machine
			// runs other tests beside this one.
			code, out, errOut := cli("testkit", "--run", "^"+regexp.QuoteMeta(sc.Name)+"$", "--lease", "2s", "--tolerance", "300ms", "--", bin)
			if code != exitOK {
				t.Fatalf("exit %d, want 0\n%s\n%s", code, out, errOut)
			}
			if !strings.Contains(out, "PASS  "+sc.Name+" ") || !strings.Contains(out, "1 passed, 0 failed, 0 skipped") {
				t.Fatalf("the scenario did not pass:\n%s", out)
			}
		})
	}
}

// TestTestkitFailsABrokenClient: a client that never tells its work the
// claim is lost fails, the exit status is 1, and --json reports each
// scenario with its times.
func TestTestkitFailsABrokenClient(t *testing.T) {
	t.Parallel() // a client that never reports lost fails however late it runs
	bin := buildTestkitAdapter(t, "mutant")
	// The mutation through env(1), not t.Setenv, which forbids t.Parallel.
	code, out, errOut := cli("testkit", "--json", "--run", "^(silent-after-grant|revoked)$", "--", "env", "BATON_TESTKIT_MUTANT=never-lost", bin)
	if code != exitError {
		t.Fatalf("exit %d, want 1\n%s\n%s", code, out, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want one per scenario:\n%s", len(lines), out)
	}
	for _, l := range lines {
		var r struct {
			Scenario, Status, Detail string
			Times                    []struct {
				What string
				MS   float64
			}
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		if r.Status != "fail" || !strings.Contains(r.Detail, "did not report lost") || len(r.Times) == 0 {
			t.Errorf("%s: %s %q with %d times, want a failure for the missing lost, with times", r.Scenario, r.Status, r.Detail, len(r.Times))
		}
	}
}

// TestTestkitSkipsWhatTheClientLacks: an adapter that prints unsupported
// makes its scenario a skip, and a run of skips exits 0.
func TestTestkitSkipsWhatTheClientLacks(t *testing.T) {
	t.Parallel()
	bin := buildTestkitAdapter(t, "mutant")
	code, out, errOut := cli("testkit", "--run", "resumable", "--", bin)
	if code != exitOK || !strings.Contains(out, "SKIP  resumable-reassert") || !strings.Contains(out, "0 passed, 0 failed, 1 skipped") {
		t.Fatalf("exit %d, want 0 with one skip\n%s\n%s", code, out, errOut)
	}
}

func TestTestkitUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"testkit"}, "no adapter command"},
		{[]string{"testkit", "--run", "("}, "--run"},
		{[]string{"testkit", "--run", "no-such-scenario", "--", "x"}, "matches no scenario"},
		{[]string{"testkit", "--lease", "500ms", "--", "x"}, "--lease must be at least"},
		{[]string{"testkit", "--lease", "1s", "--tolerance", "200ms", "--", "x"}, "below a fifth"},
		{[]string{"testkit", "--timeout", "0", "--", "x"}, "--timeout must be positive"},
		{[]string{"testkit", "--tolerance", "-1s", "--", "x"}, "--tolerance must not be negative"},
		{[]string{"testkit", "--bogus"}, "flag provided but not defined"},
	} {
		code, _, errOut := cli(tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
	code, out, _ := cli("testkit", "--list")
	if code != exitOK || !strings.Contains(out, "anchor-send-time\n    the anchor is the CLAIM's send time") {
		t.Errorf("--list: exit %d:\n%s", code, out)
	}
}

// TestTestkitAdapterThatCannotStart: a command that does not exist fails
// every scenario with the reason, not a hang.
func TestTestkitAdapterThatCannotStart(t *testing.T) {
	code, out, _ := cli("testkit", "--run", "revoked", "--", filepath.Join(t.TempDir(), "none"))
	if code != exitError || !strings.Contains(out, "cannot start the adapter") {
		t.Fatalf("exit %d, want 1 naming the start failure:\n%s", code, out)
	}
}
