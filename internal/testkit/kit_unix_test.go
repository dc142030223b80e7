//go:build unix

package testkit

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// An adapter that ignores close, with a child that holds its output, is
// killed after 5s with everything it started.
func TestStuckAdapterIsKilledWithItsChildren(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child")
	script := `echo not json; sleep 30 & echo $! > ` + pidFile + `; while :; do sleep 1; done`
	start := time.Now()
	res := run(t, Options{Command: []string{"sh", "-c", script}, Run: regexp.MustCompile("^revoked$"), Timeout: 5 * time.Second})
	if len(res) != 1 || !strings.Contains(res[0].Detail, "not an event") {
		t.Fatalf("%+v, want a failure for the line that is not an event", res)
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("the run took %v", d)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	// Killed, it may take a moment to be reaped by its new parent.
	for deadline := time.Now().Add(2 * time.Second); syscall.Kill(pid, 0) == nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the adapter's child %d outlived the scenario", pid)
		}
	}
}
