package python_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// suiteTimeout bounds the whole Python suite (single server, TLS and a
// three-node cluster take about 20 s on the 2-core CI machine).
const suiteTimeout = 4 * time.Minute

// buildTimeout bounds building baton for the suite (a cold build cache).
const buildTimeout = 5 * time.Minute

// findPython returns a Python 3.9+ interpreter that has pytest:
// $BATON_PYTHON, else python3 on PATH, else the system's /usr/bin/python3
// (where Debian's python3-pytest installs it). Without one the test is
// skipped, or fails when CI is "true": CI installs it and must not pass
// by skipping.
func findPython(t *testing.T) string {
	t.Helper()
	var cands []string
	if p := os.Getenv("BATON_PYTHON"); p != "" {
		cands = append(cands, p)
	}
	if p, err := exec.LookPath("python3"); err == nil {
		cands = append(cands, p)
	}
	cands = append(cands, "/usr/bin/python3")
	for _, p := range cands {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := exec.CommandContext(ctx, p, "-c", "import sys, pytest; assert sys.version_info >= (3, 9)").Run()
		cancel()
		if err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("no python3 (3.9+) with pytest among %v (.ci/run installs python3-pytest)", cands)
	}
	t.Skipf("no python3 (3.9+) with pytest among %v", cands)
	return ""
}

// TestPythonClient runs the Python client's pytest suite against real
// 'baton serve' processes built from this tree.
func TestPythonClient(t *testing.T) {
	py := findPython(t)
	bin := filepath.Join(t.TempDir(), "baton")
	bctx, bcancel := context.WithTimeout(context.Background(), buildTimeout)
	defer bcancel()
	build := exec.CommandContext(bctx, "go", "build", "-o", bin, "github.com/batonlock/baton/cmd/baton")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), suiteTimeout)
	defer cancel()
	// A test that hangs dumps every thread's stack after a minute.
	cmd := exec.CommandContext(ctx, py, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-o", "faulthandler_timeout=60", "tests")
	cmd.Env = append(os.Environ(), "BATON_BIN="+bin, "PYTHONDONTWRITEBYTECODE=1")
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	t.Logf("pytest:\n%s", out)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("the Python suite did not finish within %v", suiteTimeout)
	}
	if err != nil {
		t.Fatalf("pytest failed: %v", err)
	}
}

// TestPythonClientTestkit runs the client test kit ('baton testkit',
// docs/testkit.md) against the Python client through its adapter: every
// scenario must pass, or be skipped only for what the client does not
// offer (the adapter says so).
func TestPythonClientTestkit(t *testing.T) {
	py := findPython(t)
	bin := filepath.Join(t.TempDir(), "baton")
	ctx, cancel := context.WithTimeout(context.Background(), suiteTimeout)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/batonlock/baton/cmd/baton").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// A lease and tolerance wider than the kit's defaults: the machine
	// runs other tests beside this one.
	cmd := exec.CommandContext(ctx, bin, "testkit", "--lease", "2s", "--tolerance", "300ms", "--", py, "testkit_adapter.py")
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	t.Logf("baton testkit:\n%s", out)
	if err != nil {
		t.Fatalf("baton testkit: %v", err)
	}
}
