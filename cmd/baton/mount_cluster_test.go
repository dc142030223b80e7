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
	// Serial (no t.Parallel): it bounds the time to the next flock after the kill.
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

// TestMountResumableSurvivesNodeKill: a --resumable 'baton mount' whose
// node is killed (kill -9) keeps its flock(1) lock: its session resumes
// through the next --server address and re-asserts the lock at the key's
// owner, which kept it. A flock(1) through another mount is refused (-n)
// or blocked throughout, past the lease, and proceeds only when the
// holder lets go; the holder never sees an error.
func TestMountResumableSurvivesNodeKill(t *testing.T) {
	t.Parallel()
	flock := needTool(t, "flock")
	needFUSE(t)
	nodes := startCluster(t, failoverArgs...)
	dir := t.TempDir()
	src, a, b := filepath.Join(dir, "shared"), filepath.Join(dir, "a"), filepath.Join(dir, "b")
	for _, d := range []string{src, a, b} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Mount a talks to a node that neither owns "test:f" nor leads, so
	// that its death moves no key of the test and elects no leader.
	leader, _ := leaderAndFollower(t, nodes)
	owner := nodes[cluster.NewRing(0, []string{"n1", "n2", "n3"}).Owner("test:f")]
	var victim, other *clusterProc
	for _, n := range others(nodes, owner) {
		if n != leader && victim == nil {
			victim = n
		} else {
			other = n
		}
	}
	const lease = 4 * time.Second
	servers := victim.addr + "," + other.addr + "," + owner.addr
	startMount(t, servers, src, a, "host-a", "--resumable", "--lease", lease.String())
	startMount(t, other.addr, src, b, "host-b")
	if err := os.WriteFile(filepath.Join(a, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// The holder writes through the lock, and once more after the kill.
	h := startHolder(t, flock, filepath.Join(a, "f"), "sh", "-c", "echo held; read x; echo again >> "+filepath.Join(a, "f")+" && echo wrote")
	h.line(t)
	w := startHolder(t, flock, filepath.Join(b, "f"), "echo", "got")
	waitBlocked(t, w.cmd.Process.Pid)

	if err := victim.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-victim.exited
	killed := time.Now()
	for time.Since(killed) < lease+time.Second {
		if err := exec.Command(flock, "-n", filepath.Join(b, "f"), "true").Run(); err == nil {
			t.Fatalf("flock -n through mount b succeeded %v after the kill of mount a's node, while a's flock holds the file", time.Since(killed))
		}
		time.Sleep(200 * time.Millisecond)
	}
	select {
	case l := <-w.lines:
		t.Fatalf("the blocked flock through mount b went on (%q) while a's flock holds the file", l)
	default:
	}
	released := time.Now()
	h.in.Close()
	if l := h.line(t); l != "wrote" {
		t.Fatalf("the holder printed %q after the kill, want its write to succeed", l)
	}
	if l := w.line(t); l != "got" {
		t.Fatalf("waiter printed %q", l)
	}
	t.Logf("node %s of mount a killed; its flock held past the lease (%v), and the blocked flock through mount b proceeded %v after the holder let go",
		victim.id, lease, time.Since(released))
}
