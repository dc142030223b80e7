// Package node_test runs the JavaScript client's own test suite (Node's
// test runner) against a real baton built from this module.
package node_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// suiteTimeout bounds the whole Node suite: single-server, TLS and two
// three-node clusters take about 30 s on two busy cores.
const suiteTimeout = 4 * time.Minute

// TestNodeClient builds baton, sets BATON_BIN and runs `node --test` on
// test/*.test.js in this directory (named, since Node 20 would run every
// file under test/, helpers included). Without node it is skipped, or fails when CI
// is "true": CI installs node and must not pass by skipping.
func TestNodeClient(t *testing.T) {
	node, bin := nodeAndBaton(t)
	files, err := filepath.Glob(filepath.Join("test", "*.test.js"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no test files in test/: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), suiteTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{"--test", "--test-reporter=spec"}, files...)...)
	cmd.Env = append(os.Environ(), "BATON_BIN="+bin)
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("node --test did not finish within %v:\n%s", suiteTimeout, out)
	}
	if err != nil {
		t.Fatalf("node --test: %v\n%s", err, out)
	}
	// Under CI nothing may pass by skipping (openssl missing, say).
	if os.Getenv("CI") == "true" && !strings.Contains(string(out), "skipped 0\n") {
		t.Fatalf("node --test skipped tests under CI:\n%s", out)
	}
	t.Logf("node --test:\n%s", out)
}

// TestNodeClientTestkit runs the client test kit ('baton testkit',
// docs/testkit.md) against the JavaScript client through its adapter:
// every scenario must pass, or be skipped only for what the client does
// not offer (it says so on its adapter's stdout).
func TestNodeClientTestkit(t *testing.T) {
	node, bin := nodeAndBaton(t)
	ctx, cancel := context.WithTimeout(context.Background(), suiteTimeout)
	defer cancel()
	// A lease and tolerance wider than the kit's defaults: the machine
	// runs other tests beside this one, and Node takes a while to start.
	cmd := exec.CommandContext(ctx, bin, "testkit", "--lease", "2s", "--tolerance", "300ms", "--", node, "testkit-adapter.mjs")
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	t.Logf("baton testkit:\n%s", out)
	if err != nil {
		t.Fatalf("baton testkit: %v", err)
	}
}

// nodeAndBaton finds node, or skips (fails when CI is "true": CI installs
// it and must not pass by skipping), and builds baton into the test's
// directory.
func nodeAndBaton(t *testing.T) (node, bin string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("node is not installed (.ci/run installs it): %v", err)
		}
		t.Skipf("node is not installed: %v", err)
	}
	bin = filepath.Join(t.TempDir(), "baton")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/batonlock/baton/cmd/baton").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/baton: %v\n%s", err, out)
	}
	return node, bin
}
