//go:build unix

package main

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/opstest"
)

// SIGKILL of 'baton run --resumable' holding a lock through one node of
// a three-node cluster: its kernel closes the connection without the
// DETACH a client that means to come back says first, so the node it
// was connected to releases the claim at the owner at once, and a
// 'baton run' waiting through another node runs well within a second
// (before DETACH: more than two leases). The owner is the third node,
// so both claims are relayed.
func TestClusterRunResumableKilledHolder(t *testing.T) {
	// Serial (no t.Parallel): it bounds the waiter's time to run after the kill.
	nodes := startCluster(t)
	const lease = 5 * time.Second
	holderNode, waiterNode, owner := nodes["n1"], nodes["n2"], nodes["n3"]
	name := servedName(t, owner, "killed", lease)
	holder := startRun(t, "--resumable", "--server", holderNode.addr, "--lease", lease.String(), name, "--", "sh", "-c", holdScript)
	tok := tokenOf(t, holder.line(), "held")
	waiter := startRun(t, "-v", "--server", waiterNode.addr, "--lease", lease.String(), name, "--", "sh", "-c", "echo ran $BATON_TOKEN")
	deadline := time.Now().Add(opstest.Timeout)
	for !strings.Contains(waiter.stderr.String(), "waiting for lock") {
		if time.Now().After(deadline) {
			t.Fatalf("the waiter does not wait; stderr:\n%s", waiter.stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
	killed := time.Now()
	if err := holder.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	got := tokenOf(t, waiter.line(), "ran")
	ran := time.Since(killed)
	t.Logf("the waiter through %s ran %v after SIGKILL of the holder through %s (owner %s, lease %v)",
		waiterNode.id, ran.Round(time.Millisecond), holderNode.id, owner.id, lease)
	if ran > time.Second {
		t.Errorf("the waiter ran %v after the holder was killed, want well under a second", ran)
	}
	if got <= tok {
		t.Errorf("the waiter's token %d is not above the holder's %d", got, tok)
	}
}
