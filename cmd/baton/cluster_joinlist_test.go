package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/cluster"
	"github.com/batonlock/baton/internal/freeport"
	"github.com/batonlock/baton/node"
)

// The messages a node logs when it leaves cluster.Node.JoinList.
const (
	msgFormedList = "formed a new cluster: every other member of the -join list answered that it is in no cluster"
	msgJoinedList = "joined the cluster through the -join list"
	// msgBootstrapIgnored: -bootstrap on a data directory with a cluster.
	msgBootstrapIgnored = "-bootstrap is ignored: the data directory holds a cluster already; remove -bootstrap (or give every node the same -join list): started on a lost data directory, -bootstrap forms a second cluster"
)

// listCluster is three nodes n1..n3 started with the same -join list of
// their admin addresses, each with fixed addresses and a data directory
// of its own, so that a node is restarted with identical flags.
type listCluster struct {
	t     *testing.T
	args  map[string][]string
	dirs  map[string]string
	nodes map[string]*clusterProc
}

func newListCluster(t *testing.T) *listCluster {
	lc := &listCluster{t: t, args: map[string][]string{}, dirs: map[string]string{}, nodes: map[string]*clusterProc{}}
	ids := []string{"n1", "n2", "n3"}
	admins := map[string]string{}
	for _, id := range ids {
		admins[id] = freeport.Addr(t)
	}
	list := admins["n1"] + "," + admins["n2"] + "," + admins["n3"]
	base := t.TempDir()
	for _, id := range ids {
		lc.dirs[id] = filepath.Join(base, id)
		lc.args[id] = []string{"-node-id", id, "-listen", freeport.Addr(t), "-raft-listen", freeport.Addr(t),
			"-admin-listen", admins[id], "-ops-listen", "127.0.0.1:0", "-data-dir", lc.dirs[id], "-join", list}
	}
	return lc
}

// start starts the nodes ids at once (each waits for the others'
// answers) and waits until they listen.
func (lc *listCluster) start(ids ...string) {
	lc.t.Helper()
	for _, id := range ids {
		lc.nodes[id] = &clusterProc{batonProc: startBaton(lc.t, lc.args[id]...), id: id}
	}
	for _, id := range ids {
		lc.listening(id)
	}
}

// listening waits until node id listens and records its addresses.
func (lc *listCluster) listening(id string) {
	lc.t.Helper()
	c := lc.nodes[id]
	rec := c.waitLog(lc.t, "baton listening")
	c.addr, _ = rec["addr"].(string)
	c.admin, _ = rec["admin_addr"].(string)
	c.ops, _ = rec["ops_addr"].(string)
}

// kill ends node id with SIGKILL.
func (lc *listCluster) kill(id string) {
	lc.t.Helper()
	p := lc.nodes[id]
	p.cmd.Process.Kill()
	<-p.exited
}

// wipe kills node id and removes its data directory.
func (lc *listCluster) wipe(id string) {
	lc.t.Helper()
	lc.kill(id)
	if err := os.RemoveAll(lc.dirs[id]); err != nil {
		lc.t.Fatal(err)
	}
}

// TestClusterJoinListWipedNodeRejoins: three nodes started with the same
// -join list form one cluster (only the first of the list forms it). A
// node that loses its data directory and starts again with identical
// flags joins the cluster again as a new incarnation, the first of the
// list too: it never forms a second cluster (issue: -bootstrap or a
// -join of itself formed one), and its tokens stay above the old ones.
func TestClusterJoinListWipedNodeRejoins(t *testing.T) {
	t.Parallel()
	lc := newListCluster(t)
	lc.start("n1", "n2", "n3")
	for _, id := range []string{"n1", "n2", "n3"} {
		waitStatus(t, lc.nodes[id], "a ring of 3", func(st cluster.Status) bool { return len(st.Ring) == 3 })
	}
	formed := 0
	for _, id := range []string{"n1", "n2", "n3"} {
		if strings.Contains(lc.nodes[id].stderr.String(), msgFormedList) {
			formed++
		}
	}
	if formed != 1 || !strings.Contains(lc.nodes["n1"].stderr.String(), msgFormedList) {
		t.Fatalf("%d nodes formed a cluster, want n1 alone", formed)
	}
	id := waitStatus(t, lc.nodes["n2"], "a cluster id", func(st cluster.Status) bool { return st.ClusterID != "" }).ClusterID

	name := nameOwnedBy(t, "n1", "wiped")
	c, tok1 := waitGrant(t, lc.nodes["n1"].addr, name, time.Second)
	c.Close()

	for _, victim := range []string{"n3", "n1"} {
		lc.wipe(victim)
		start := time.Now()
		lc.start(victim)
		if out := lc.nodes[victim].stderr.String(); strings.Contains(out, "formed a new cluster") || !strings.Contains(out, msgJoinedList) {
			t.Fatalf("wiped %s did not join the cluster again:\n%s", victim, out)
		}
		st := waitStatus(t, lc.nodes[victim], "a ring of 3", func(st cluster.Status) bool { return len(st.Ring) == 3 })
		if st.ClusterID != id {
			t.Fatalf("wiped %s is in cluster %q, want %q", victim, st.ClusterID, id)
		}
		t.Logf("wiped %s back in cluster %s after %v", victim, id, time.Since(start).Round(time.Millisecond))
	}
	c, tok2 := waitGrant(t, lc.nodes["n1"].addr, name, time.Second)
	c.Close()
	e1, _ := cluster.SplitToken(tok1)
	e2, _ := cluster.SplitToken(tok2)
	if tok2 <= tok1 || e2 <= e1 {
		t.Fatalf("token %#x (epoch %d) after n1 lost its data directory, not above %#x (epoch %d)", tok2, e2, tok1, e1)
	}
}

// TestClusterJoinListWipedNodeWaits: the first node of the list loses its
// data directory while the other two are down (or cut off): restarted
// with identical flags, it must not form a cluster of its own; it waits,
// saying for whom, and joins once they are back.
func TestClusterJoinListWipedNodeWaits(t *testing.T) {
	t.Parallel()
	lc := newListCluster(t)
	lc.start("n1", "n2", "n3")
	for _, id := range []string{"n1", "n2", "n3"} {
		waitStatus(t, lc.nodes[id], "a ring of 3", func(st cluster.Status) bool { return len(st.Ring) == 3 })
	}
	id := waitStatus(t, lc.nodes["n1"], "a cluster id", func(st cluster.Status) bool { return st.ClusterID != "" }).ClusterID
	lc.kill("n2")
	lc.kill("n3")
	lc.wipe("n1")

	n1 := &clusterProc{batonProc: startBaton(t, lc.args["n1"]...), id: "n1"}
	lc.nodes["n1"] = n1
	n1.waitLog(t, "waiting for the members of the -join list: this node has new Raft state and forms a cluster only as the first of the list, once every other member answers that it is in no cluster")
	// Give it time to do the wrong thing: several rounds of questions.
	time.Sleep(3 * time.Second)
	if out := n1.stderr.String(); strings.Contains(out, "formed a new cluster") || strings.Contains(out, "baton listening") {
		t.Fatalf("wiped n1 formed a cluster while n2 and n3 were out of reach:\n%s", out)
	}
	if got := strings.Count(n1.stderr.String(), "waiting for the members of the -join list"); got > 1 {
		t.Errorf("the wait was logged %d times in about 3 s, want at most once per %v", got, node.WaitingLogEvery)
	}

	// n2 and n3 come back from their data directories: n1 joins them.
	lc.nodes["n2"] = &clusterProc{batonProc: startBaton(t, lc.args["n2"]...), id: "n2"}
	lc.nodes["n3"] = &clusterProc{batonProc: startBaton(t, lc.args["n3"]...), id: "n3"}
	n1.waitLog(t, msgJoinedList)
	lc.listening("n1")
	st := waitStatus(t, n1, "a ring of 3", func(st cluster.Status) bool { return len(st.Ring) == 3 })
	if st.ClusterID != id {
		t.Fatalf("n1 is in cluster %q, want %q", st.ClusterID, id)
	}
	// The restarted leader's first entries, proposed before it applied
	// its log, must not look like another cluster's.
	for _, n := range lc.nodes {
		if strings.Contains(n.stderr.String(), "now follows another cluster") {
			t.Errorf("%s took a whole-cluster restart for another cluster's state", n.id)
		}
	}
}

// TestClusterBootstrapRestartWarns: -bootstrap on a data directory that
// holds a cluster is ignored, with a warning that says to remove it:
// kept in a node's configuration, it forms a second cluster the day the
// node starts on a lost data directory.
func TestClusterBootstrapRestartWarns(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "n1")
	args := []string{"-node-id", "n1", "-listen", "127.0.0.1:0", "-raft-listen", freeport.Addr(t),
		"-admin-listen", "127.0.0.1:0", "-data-dir", dir, "-bootstrap"}
	p := startBaton(t, args...)
	p.waitLog(t, "baton listening")
	if strings.Contains(p.stderr.String(), msgBootstrapIgnored) {
		t.Fatal("warned on the first start")
	}
	p.cmd.Process.Kill()
	<-p.exited
	p = startBaton(t, args...)
	rec := p.waitLog(t, msgBootstrapIgnored)
	if rec["level"] != "WARN" {
		t.Errorf("the warning: %v", rec)
	}
}

// TestClusterBootstrapKeptRefused: a node restarted with -bootstrap on a
// data directory whose cluster others have joined refuses to start,
// naming the fix: kept in its configuration, -bootstrap would form a
// second cluster the day that directory is lost.
func TestClusterBootstrapKeptRefused(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "n1")
	raftAddr := freeport.Addr(t)
	n1 := startNodeAt(t, "n1", dir, raftAddr, "", true)
	n2 := startNode(t, "n2", n1.admin)
	waitStatus(t, n2, "a ring of 2", func(st cluster.Status) bool { return len(st.Ring) == 2 })
	n1.cmd.Process.Kill()
	<-n1.exited

	p := startBaton(t, "-node-id", "n1", "-listen", "127.0.0.1:0", "-raft-listen", raftAddr,
		"-admin-listen", "127.0.0.1:0", "-data-dir", dir, "-bootstrap")
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("a node with -bootstrap kept on a cluster of 2 did not exit")
	}
	if code := p.cmd.ProcessState.ExitCode(); code != exitError {
		t.Errorf("exit %d, want %d", code, exitError)
	}
	if out := p.stderr.String(); !strings.Contains(out, "remove -bootstrap from this node's configuration") || !strings.Contains(out, "n1, n2") {
		t.Errorf("the refusal does not name the fix and the voters:\n%s", out)
	}
	// Without -bootstrap it rejoins from its data directory.
	p = startBaton(t, "-node-id", "n1", "-listen", "127.0.0.1:0", "-raft-listen", raftAddr,
		"-admin-listen", "127.0.0.1:0", "-data-dir", dir)
	p.waitLog(t, "rejoining the cluster from the data directory")
}
