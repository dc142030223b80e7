package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/cluster"
)

// TestMountFlockCluster: two 'baton mount's of one directory, connected
// to different nodes of a three-node cluster: a flock(1) through one
// holds the file against the other (the key's owner serves both, one of
// them relayed), and a blocked flock(1) proceeds when the holder lets go.
func TestMountFlockCluster(t *testing.T) {
	flock := needTool(t, "flock")
	needFUSE(t)
	nodes := startCluster(t)
	dir := t.TempDir()
	src, a, b := filepath.Join(dir, "shared"), filepath.Join(dir, "a"), filepath.Join(dir, "b")
	for _, d := range []string{src, a, b} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The key of "f" ("test:f") is owned by one node: mount a goes to
	// another, so that its requests are relayed.
	owner := cluster.NewRing(0, []string{"n1", "n2", "n3"}).Owner("test:f")
	via := map[string]string{"n1": "n2", "n2": "n3", "n3": "n1"}[owner]
	procA := startMount(t, nodes[via].addr, src, a, "host-a")
	startMount(t, nodes[owner].addr, src, b, "host-b")
	if err := os.WriteFile(filepath.Join(a, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	h := startHolder(t, flock, filepath.Join(a, "f"), "sh", "-c", "echo held; read x")
	h.line(t)
	w := startHolder(t, flock, filepath.Join(b, "f"), "echo", "got")
	waitBlocked(t, w.cmd.Process.Pid)
	if err := exec.Command(flock, "-n", filepath.Join(b, "f"), "true").Run(); err == nil {
		t.Fatal("flock -n through mount b succeeded while mount a's flock holds the file")
	}
	released := time.Now()
	h.in.Close()
	if l := w.line(t); l != "got" {
		t.Fatalf("waiter printed %q", l)
	}
	t.Logf("owner %s, mount a relayed by %s: blocked flock(1) through mount b proceeded %v after the holder let go",
		owner, via, time.Since(released))

	// kill -9 of the relayed mount: its node releases its locks at the
	// owner at once (its connection closed), not a lease later.
	h = startHolder(t, flock, filepath.Join(a, "f"), "sh", "-c", "echo held; read x")
	h.line(t)
	w = startHolder(t, flock, filepath.Join(b, "f"), "echo", "got")
	waitBlocked(t, w.cmd.Process.Pid)
	killed := time.Now()
	if err := procA.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if l := w.line(t); l != "got" {
		t.Fatalf("waiter printed %q", l)
	}
	took := time.Since(killed)
	t.Logf("blocked flock(1) through mount b proceeded %v after kill -9 of mount a, relayed", took)
	if took > time.Second {
		t.Errorf("took %v after the kill, more than a second (the lease is 15 s)", took)
	}
}
