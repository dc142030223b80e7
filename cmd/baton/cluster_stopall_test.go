package main

import (
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/node"
)

// SIGTERM to every node at once (a whole cluster shut down, as
// 'systemctl stop' on every host does): each node tries its planned
// leave, the last ones find no leader, and must give up soon and stop in
// the ring (fail closed) rather than wait out the whole stop timeout.
func TestClusterStopAllAtOnce(t *testing.T) {
	// Serial (no t.Parallel): it bounds the time the nodes take to exit.
	nodes := startCluster(t)
	start := time.Now()
	for _, n := range nodes {
		if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	// Raft's default election timeout is 1 s; a node without a leader
	// for node.LeaderlessStopWait gives up its leave. Well under node.StopTimeout.
	bound := node.LeaderlessStopWait + 10*time.Second
	for id, n := range nodes {
		select {
		case <-n.exited:
			t.Logf("%s exited %v after the SIGTERMs", id, time.Since(start).Round(time.Millisecond))
		case <-time.After(time.Until(start.Add(bound))):
			t.Fatalf("%s still running %v after SIGTERM to every node (bound %v, stop timeout %v):\n%s",
				id, time.Since(start).Round(time.Millisecond), bound, node.StopTimeout, n.stderr.String())
		}
	}
	if bound >= node.StopTimeout {
		t.Fatalf("bound %v is not under the stop timeout %v: the test could not fail", bound, node.StopTimeout)
	}
}
