package main

import (
	"path/filepath"
	"testing"
	"time"
)

// A node given -join with its own admin address forms the cluster on a
// new data directory (every pod of a StatefulSet joins pod 0, pod 0
// included), and on a restart rejoins through itself.
func TestClusterJoinSelfForms(t *testing.T) {
	admin := freeAddr(t)
	dir := filepath.Join(t.TempDir(), "n1")
	args := []string{"-node-id", "n1", "-listen", "127.0.0.1:0", "-raft-listen", freeAddr(t),
		"-admin-listen", admin, "-data-dir", dir, "-join", admin}
	p := startBaton(t, args...)
	if rec := p.waitLog(t, "formed a new cluster"); rec["join_self"] != true {
		t.Fatalf("formed a new cluster: %v, want join_self", rec)
	}
	addr, _ := p.waitLog(t, "baton listening")["addr"].(string)
	c, tok1 := waitGrant(t, addr, "self", time.Second)
	c.Close()
	p.cmd.Process.Kill()
	<-p.exited

	p = startBaton(t, args...)
	p.waitLog(t, "joined the cluster")
	addr, _ = p.waitLog(t, "baton listening")["addr"].(string)
	c, tok2 := waitGrant(t, addr, "self", time.Second)
	c.Close()
	if tok2 <= tok1 {
		t.Fatalf("token %#x after the restart, not above %#x", tok2, tok1)
	}
}
