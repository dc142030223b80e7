package cluster

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestFormedNodeAbsorbedTakesFreshEpoch: node-3 loses its data
// directory and forms a cluster of its own (a -bootstrap kept in its
// configuration), with its first epoch from the clock floor, the first
// the old cluster used. When the old cluster's leader reaches it, Raft
// replaces its state with the old cluster's; the node must stop serving
// at once, and serve again only under a fresh epoch of the cluster it
// now follows, above every epoch used, after the warm-up of new Raft
// state (issue: it kept its epoch and reissued old tokens).
func TestFormedNodeAbsorbedTakesFreshEpoch(t *testing.T) {
	t.Parallel()
	// Its epoch at or below the old cluster's last (the clock floor's, as
	// the issue saw), or above it (it took many in its own cluster):
	// either way the next one is above both.
	t.Run("below", func(t *testing.T) { testFormedNodeAbsorbed(t, 1) })
	t.Run("above", func(t *testing.T) { testFormedNodeAbsorbed(t, 24) })
}

func testFormedNodeAbsorbed(t *testing.T, ownEpochs int) {
	nodes := startCluster(t, 3)
	ctx := ctxT(t)
	// Enough entries for the old cluster to compact its log, so that it
	// reaches the node with a snapshot, and epochs above the floor.
	for range 12 {
		if _, err := nodes[0].AcquireEpoch(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// A longer log than the second cluster's, without more epochs: a
	// second cluster with the longer log at the same term could win
	// Raft's election over the first (Raft has no cluster id on its
	// messages), which this test does not cover.
	for i := range 40 {
		if err := nodes[0].RaiseLease(ctx, time.Duration(i+1)*125*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	oldID := nodes[0].ClusterID()
	if oldID == "" || nodes[1].ClusterID() != oldID {
		t.Fatalf("cluster ids %q, %q: want one, the same on every member", oldID, nodes[1].ClusterID())
	}
	nodes[2].stop()

	r := startNode(t, "node-3", filepath.Join(t.TempDir(), "wiped"), "127.0.0.1:0", "127.0.0.1:0")
	if err := r.Bootstrap(ctx); err != nil {
		t.Fatal(err)
	}
	var held uint64
	for range ownEpochs {
		e, err := r.AcquireEpoch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = e
	}
	if r.ClusterID() == oldID || r.ClusterID() == "" {
		t.Fatalf("the second cluster's id %q (the first's %q)", r.ClusterID(), oldID)
	}
	if err := r.WaitContact(ctx); err != nil {
		t.Fatal(err)
	}
	name := nameOwnedBy(t, nodes[0].Ring(), "node-3")
	if d := r.Route(name, false, time.Now().Add(time.Second)); d.Action != Serve {
		t.Fatalf("the second cluster's only node: %v, want serve (it formed it)", d.Action)
	}
	if above := held > nodes[0].Metadata().LastEpoch; above != (ownEpochs > 1) {
		t.Fatalf("the second cluster's epoch %d, the first's last %d: not the case this test is for", held, nodes[0].Metadata().LastEpoch)
	}

	// The old cluster reaches it (here by recording its new Raft
	// address; after a partition, at the old one).
	if err := r.Join(ctx, nodes[0].admin.Addr().String()); err != nil {
		t.Fatal(err)
	}
	if err := waitUntil(ctx, func() bool { return r.ClusterID() == oldID }); err != nil {
		t.Fatalf("node-3 follows cluster %q, want %q", r.ClusterID(), oldID)
	}
	if r.ClusterChanges() == 0 {
		t.Error("the replacement of the node's state was not noticed")
	}
	if d := r.Route(name, false, time.Now()); d.Action == Serve || d.Action == Queue {
		t.Fatalf("after following the old cluster, under epoch %d of the second: %v, want nothing served before a fresh epoch", held, d.Action)
	}
	e, err := r.AcquireEpoch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	md := nodes[0].Metadata()
	if e <= held || e != md.Epochs["node-3"] || e != md.LastEpoch || r.Tokens().Epoch() != e {
		t.Fatalf("fresh epoch %d: want above %d (held) and the old cluster's last, %d", e, held, md.LastEpoch)
	}
	if err := r.WaitContact(ctx); err != nil {
		t.Fatal(err)
	}
	if d := r.Route(name, false, time.Now()); d.Action != Queue {
		t.Fatalf("with the fresh epoch: %v, want queued for the warm-up of new Raft state", d.Action)
	}
}

// TestBelongsAnswer: GET /cluster/v1/cluster says whether a node is in a
// cluster and which; only with the cluster's secret, since the answer
// decides whether another node forms one.
func TestBelongsAnswer(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	n := startNode(t, "node-1", filepath.Join(t.TempDir(), "n1"), "127.0.0.1:0", "127.0.0.1:0")
	get := func(secret string) (int, Belonging) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, "http://"+n.admin.Addr().String()+pathCluster, nil)
		if err != nil {
			t.Fatal(err)
		}
		SetRequestSecret(req, []byte(secret))
		resp, err := n.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b Belonging
		_ = json.NewDecoder(resp.Body).Decode(&b)
		return resp.StatusCode, b
	}
	if code, b := get(testSecret); code != http.StatusOK || b.Member || b.ID != "node-1" {
		t.Fatalf("a new node: %d %+v, want 200, in no cluster", code, b)
	}
	if code, _ := get(""); code != http.StatusUnauthorized {
		t.Errorf("without the secret: %d, want 401", code)
	}
	if code, _ := get("another secret of the right size"); code != http.StatusForbidden {
		t.Errorf("with another secret: %d, want 403", code)
	}
	if err := n.Bootstrap(ctx); err != nil {
		t.Fatal(err)
	}
	if code, b := get(testSecret); code != http.StatusOK || !b.Member || b.ClusterID == "" || b.ClusterID != n.Status().ClusterID {
		t.Fatalf("after forming: %d %+v, want in a cluster with its id (status %q)", code, b, n.Status().ClusterID)
	}
}

// TestSplitJoinList: the -join list's parsing refuses what it cannot use.
func TestSplitJoinList(t *testing.T) {
	t.Parallel()
	if got, err := SplitJoinList(" a:1, b:2 ,c:3"); err != nil || !slices.Equal(got, []string{"a:1", "b:2", "c:3"}) {
		t.Errorf("a list of three: %q, %v", got, err)
	}
	for _, bad := range []string{"a:1,,b:2", "a:1,a:1", "a:1,b", ","} {
		if _, err := SplitJoinList(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestFSMClusterID: the first entry with an id sets the cluster's; an
// entry without one (a leader elected after a restart that has not
// applied its log yet stamps none) is not another cluster's, and the id
// stays; an entry or a snapshot with another id is.
func TestFSMClusterID(t *testing.T) {
	t.Parallel()
	f := newFSM()
	var foreign []bool
	f.onApplied = func(md *Metadata, fo, _ bool) { foreign = append(foreign, fo) }
	applyCmd(t, f, 1, command{Op: opPutMember, Member: Member{ID: "a", RaftAddr: "127.0.0.1:1", State: Serving}, ClusterID: "x"})
	applyCmd(t, f, 2, command{Op: opRaiseLease, Lease: time.Second})
	applyCmd(t, f, 3, command{Op: opRaiseLease, Lease: 2 * time.Second, ClusterID: "x"})
	if md, _ := f.read(); md.ClusterID != "x" || !slices.Equal(foreign, []bool{false, false, false}) {
		t.Fatalf("cluster id %q, foreign %v: want x, none foreign", md.ClusterID, foreign)
	}
	applyCmd(t, f, 4, command{Op: opRaiseLease, Lease: 3 * time.Second, ClusterID: "y"})
	if md, _ := f.read(); md.ClusterID != "y" || !foreign[3] {
		t.Fatalf("an entry of cluster y: id %q, foreign %v", md.ClusterID, foreign)
	}
	snap, _ := json.Marshal(Metadata{ClusterID: "z"})
	if err := f.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	if md, _ := f.read(); md.ClusterID != "z" || !foreign[4] {
		t.Fatalf("a snapshot of cluster z: id %q, foreign %v", md.ClusterID, foreign)
	}
}

// TestFormedNodeOverwrittenEntryByEntryServesNothing: when the old
// cluster still has the entries the formed node lacks, Raft overwrites
// its log entry by entry and the node applies them on top of its own
// state: its members and ring mix both clusters. It must serve nothing
// at all, not even after a fresh epoch and a warm-up, and say to start
// it again on an empty data directory.
func TestFormedNodeOverwrittenEntryByEntryServesNothing(t *testing.T) {
	t.Parallel()
	noCompaction := func(c *Config) { c.SnapshotThreshold, c.SnapshotInterval = 1<<20, time.Hour }
	nodes := startClusterWith(t, 3, noCompaction)
	ctx := ctxT(t)
	for range 4 {
		if _, err := nodes[0].AcquireEpoch(ctx); err != nil {
			t.Fatal(err)
		}
	}
	oldID := nodes[0].ClusterID()
	nodes[2].stop()
	r := startNodeWith(t, "node-3", filepath.Join(t.TempDir(), "wiped"), "127.0.0.1:0", "127.0.0.1:0", noCompaction)
	if err := r.Bootstrap(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := r.AcquireEpoch(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Join(ctx, nodes[0].admin.Addr().String()); err != nil {
		t.Fatal(err)
	}
	if err := waitUntil(ctx, func() bool { return r.ClusterID() == oldID }); err != nil {
		t.Fatalf("node-3 follows cluster %q, want %q", r.ClusterID(), oldID)
	}
	if !r.Mixed() || !r.Status().MixedState || r.InContact(time.Now()) {
		t.Fatalf("mixed %v, status %v, in contact %v: want a node that serves nothing", r.Mixed(), r.Status().MixedState, r.InContact(time.Now()))
	}
	// Its mixed state lacks records the old cluster has (here, typically,
	// the leader's: it cannot even find the leader to ask for an epoch).
	t.Logf("members in the mixed state: %v", r.Members())
	name := nameOwnedBy(t, nodes[0].Ring(), "node-3")
	// Not after any warm-up either.
	if d := r.Route(name, false, time.Now().Add(time.Hour)); d.Action != NoContact {
		t.Fatalf("a node with a mixed state: %v, want nothing served", d.Action)
	}
}
