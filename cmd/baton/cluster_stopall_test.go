package main

import (
	"syscall"
	"testing"
	"time"
)

// SIGTERM to every node at once (a whole cluster shut down, as
// 'systemctl stop' on every host does): each node tries its planned
// leave, the last ones find no leader, and must give up soon and stop in
// the ring (fail closed) rather than wait out the whole stop timeout.
func TestClusterStopAllAtOnce(t *testing.T) {
	nodes := startCluster(t)
	start := time.Now()
	for _, n := range nodes {
		if err := n.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	// Raft's default election timeout is 1 s; a node without a leader
	// for leaderlessStopWait gives up its leave. Well under stopTimeout.
	bound := leaderlessStopWait + 10*time.Second
	for id, n := range nodes {
		select {
		case <-n.exited:
			t.Logf("%s exited %v after the SIGTERMs", id, time.Since(start).Round(time.Millisecond))
		case <-time.After(time.Until(start.Add(bound))):
			t.Fatalf("%s still running %v after SIGTERM to every node (bound %v, stop timeout %v):\n%s",
				id, time.Since(start).Round(time.Millisecond), bound, stopTimeout, n.stderr.String())
		}
	}
	if bound >= stopTimeout {
		t.Fatalf("bound %v is not under the stop timeout %v: the test could not fail", bound, stopTimeout)
	}
}
