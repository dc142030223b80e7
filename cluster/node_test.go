package cluster

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Raft timing for the tests: fast enough for a quick election, slow
// enough for the race detector on a loaded two-core machine.
const (
	testHeartbeat = 300 * time.Millisecond
	testElection  = 300 * time.Millisecond
	testLease     = 150 * time.Millisecond
	testWait      = 30 * time.Second // the bound of every wait
	testSlack     = 300 * time.Millisecond
)

// testSecret is the test nodes' cluster secret (Config.Secret).
const testSecret = "a test cluster's secret"

// testHandoff is the nodes' hand-off timeout; a test that shortens it
// does so in its nodes' Config (the tests run side by side).
const testHandoff = 10 * time.Second

type testNode struct {
	*Node
	dir      string
	raftAddr string
	admin    net.Listener
	srv      *http.Server
	client   *http.Client
	down     bool
}

// startNode opens a node on loopback with its admin Handler served on
// adminAddr ("127.0.0.1:0" for a new one) and raftAddr.
func startNode(t *testing.T, id, dir, raftAddr, adminAddr string) *testNode {
	t.Helper()
	return startNodeWith(t, id, dir, raftAddr, adminAddr, nil)
}

// startNodeWith is startNode with a change to the Config; with
// cfg.ServerTLS set the admin listener serves it too.
func startNodeWith(t *testing.T, id, dir, raftAddr, adminAddr string, change func(*Config)) *testNode {
	t.Helper()
	ln, err := net.Listen("tcp", adminAddr)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
	cfg := Config{
		ID: id, RaftAddr: raftAddr, DataDir: dir,
		ProtocolAddr: "127.0.0.1:7" + id[len(id)-1:], AdminAddr: ln.Addr().String(),
		HTTPClient:       client,
		HeartbeatTimeout: testHeartbeat, ElectionTimeout: testElection, LeaderLeaseTimeout: testLease,
		SnapshotThreshold: 8, SnapshotInterval: 50 * time.Millisecond,
		GateSlack: testSlack, HandoffTimeout: testHandoff,
		// No automatic removal in the tests that do not test it: a
		// test's own removal must not find the member gone.
		RemoveAfter: time.Hour,
		// Every member request carries the secret, forwarded ones too.
		Secret: []byte(testSecret),
	}
	if change != nil {
		change(&cfg)
	}
	if cfg.ServerTLS != nil {
		client.Transport.(*http.Transport).TLSClientConfig = cfg.ClientTLS
		cfg.Scheme = "https"
		ln = tls.NewListener(ln, cfg.ServerTLS)
	}
	n, err := Open(cfg)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	tn := &testNode{Node: n, dir: dir, raftAddr: n.RaftAddr(), admin: ln, client: client,
		srv: &http.Server{Handler: n.Handler(), ReadHeaderTimeout: 5 * time.Second}}
	go tn.srv.Serve(ln)
	t.Cleanup(tn.stop)
	return tn
}

// stop shuts the node down without leaving the cluster (a crash, to the
// others) and closes its admin listener.
func (tn *testNode) stop() {
	if tn.down {
		return
	}
	tn.down = true
	_ = tn.Shutdown()
	_ = tn.srv.Close()
	tn.client.CloseIdleConnections()
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	t.Cleanup(cancel)
	return ctx
}

// startCluster bootstraps node-1 and joins node-2.. through alternating
// members (so that a follower forwards some joins to the leader).
func startCluster(t *testing.T, size int) []*testNode {
	t.Helper()
	return startClusterWith(t, size, nil)
}

// startClusterWith is startCluster with a change to each node's Config.
func startClusterWith(t *testing.T, size int, change func(*Config)) []*testNode {
	t.Helper()
	ctx := ctxT(t)
	base := t.TempDir()
	var nodes []*testNode
	for i := 1; i <= size; i++ {
		id := fmt.Sprintf("node-%d", i)
		n := startNodeWith(t, id, filepath.Join(base, id), "127.0.0.1:0", "127.0.0.1:0", change)
		if i == 1 {
			if err := n.Bootstrap(ctx); err != nil {
				t.Fatalf("bootstrap: %v", err)
			}
		} else {
			via := nodes[(i-2)%len(nodes)]
			if err := n.Join(ctx, via.admin.Addr().String()); err != nil {
				t.Fatalf("%s joins via %s: %v", id, via.ID(), err)
			}
		}
		nodes = append(nodes, n)
	}
	waitSameRing(t, nodes, uint64(size))
	return nodes
}

// waitSameRing waits until every live node has applied ring version and
// checks that they agree on its members and on owners.
func waitSameRing(t *testing.T, nodes []*testNode, version uint64) {
	t.Helper()
	ctx := ctxT(t)
	var ref *Ring
	for _, n := range nodes {
		if n.down {
			continue
		}
		if err := n.WaitRing(ctx, version); err != nil {
			t.Fatalf("%s: ring version %d not applied (at %d): %v", n.ID(), version, n.AppliedRingVersion(), err)
		}
		r := n.Ring()
		if r.Version() != version {
			t.Fatalf("%s: ring version %d, want %d", n.ID(), r.Version(), version)
		}
		if ref == nil {
			ref = r
			continue
		}
		if !slices.Equal(r.Members(), ref.Members()) {
			t.Fatalf("%s ring %v, other ring %v", n.ID(), r.Members(), ref.Members())
		}
		for _, name := range names(1000) {
			if r.Owner(name) != ref.Owner(name) {
				t.Fatalf("%s: owner of %s differs", n.ID(), name)
			}
		}
	}
}

// leaderOf waits, bounded, until one of nodes is the leader.
func leaderOf(t *testing.T, nodes []*testNode) *testNode {
	t.Helper()
	var leader *testNode
	err := waitUntil(ctxT(t), func() bool {
		for _, n := range nodes {
			if !n.down && n.IsLeader() {
				leader = n
				return true
			}
		}
		return false
	})
	if err != nil {
		t.Fatalf("no leader: %v", err)
	}
	return leader
}

// waitUntil polls cond every 5 ms until it holds or ctx ends.
func waitUntil(ctx context.Context, cond func() bool) error {
	for !cond() {
		if err := sleepCtx(ctx, 5*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

func TestBootstrapJoinSameRing(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	ctx := ctxT(t)
	want := []string{"node-1", "node-2", "node-3"}
	for _, n := range nodes {
		if got := n.Ring().Members(); !slices.Equal(got, want) {
			t.Errorf("%s: ring %v", n.ID(), got)
		}
		md := n.Metadata()
		if m := md.Members["node-2"]; m.State != Serving || m.RaftAddr != nodes[1].RaftAddr() || m.AdminAddr != nodes[1].admin.Addr().String() || m.ProtocolAddr != "127.0.0.1:72" {
			t.Errorf("%s: record of node-2 %+v", n.ID(), m)
		}
		// A loaded machine may be between leaders: wait, bounded.
		if err := waitUntil(ctxT(t), func() bool { _, ok := n.Leader(); return ok }); err != nil {
			t.Errorf("%s: no leader known: %v", n.ID(), err)
		}
		// The bootstrap node applied every ring; a node that joined may
		// have started from a snapshot (a planned change writes several
		// entries, and the tests snapshot every 8), with the latest ring.
		if h := n.History(); n == nodes[0] && len(h) != 3 || len(h) == 0 || h[len(h)-1].Ring.Version() != 3 {
			t.Errorf("%s: history of %d rings, want 3 (the bootstrap node) or ending with ring 3", n.ID(), len(h))
		}
	}
	// Epochs start above the clock tokens of a single server.
	e, err := nodes[2].AcquireEpoch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if clockTok := uint64(time.Now().Unix()+1) << 20; e<<EpochShift <= clockTok {
		t.Errorf("first epoch %d: tokens from %d, not above clock tokens %d", e, e<<EpochShift, clockTok)
	}
	// The ring a join commits is the same everywhere, from any member.
	n4 := startNode(t, "node-4", filepath.Join(t.TempDir(), "node-4"), "127.0.0.1:0", "127.0.0.1:0")
	if err := n4.Join(ctx, nodes[2].admin.Addr().String()); err != nil {
		t.Fatal(err)
	}
	all := append(slices.Clone(nodes), n4)
	waitSameRing(t, all, 4)
	m, _ := moved(NewRing(3, want), all[0].Ring(), names(100000))
	t.Logf("join of a 4th node moved %d of 100000 names", m)
	if voters, _ := nodes[0].Voters(); len(voters) != 4 {
		t.Errorf("voters %v", voters)
	}
	// Remove it again, from a member that is not the leader if possible.
	via := nodes[0]
	for _, n := range nodes {
		if !n.IsLeader() {
			via = n
		}
	}
	if err := via.Remove(ctx, "node-4"); err != nil {
		t.Fatal(err)
	}
	waitSameRing(t, nodes, 5)
	if got := nodes[0].Ring().Members(); !slices.Equal(got, want) {
		t.Errorf("after removal: ring %v", got)
	}
	if voters, _ := nodes[1].Voters(); slices.Contains(voters, "node-4") {
		t.Errorf("node-4 still a voter: %v", voters)
	}
	if err := via.Remove(ctx, "node-4"); !errors.Is(err, ErrUnknownMember) {
		t.Errorf("second removal: %v", err)
	}
}

// Kill the leader (shut it down without leaving): a new leader is elected,
// the ring still lists the dead node, and its names have no live owner
// until it is removed (fail closed).
func TestLeaderKillFailsClosed(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	ctx := ctxT(t)
	dead := leaderOf(t, nodes)
	var alive []*testNode
	for _, n := range nodes {
		if n != dead {
			alive = append(alive, n)
		}
	}
	killed := time.Now()
	dead.stop()
	leader := leaderOf(t, alive)
	elected := time.Since(killed)
	t.Logf("killed leader %s; %s elected after %v (heartbeat and election timeouts %v)", dead.ID(), leader.ID(), elected, testHeartbeat)
	// Generous: a loaded machine under -race may need several rounds.
	if elected > 50*testElection {
		t.Errorf("election took %v, more than 50 election timeouts", elected)
	}
	deadline := time.Now().Add(testWait)
	// The ring still lists the dead node everywhere: its names are owned by
	// it, and no live node serves them.
	var deadNames []string
	for _, name := range names(3000) {
		if alive[0].Ring().Owner(name) == dead.ID() {
			deadNames = append(deadNames, name)
		}
	}
	if len(deadNames) < 500 {
		t.Fatalf("dead node owns only %d of 3000 names", len(deadNames))
	}
	for _, n := range alive {
		if !n.Ring().Has(dead.ID()) {
			t.Fatalf("%s: dead node left the ring without removal: %v", n.ID(), n.Ring().Members())
		}
		for _, name := range deadNames {
			if m, _ := n.Owner(name); m.ID != dead.ID() || n.Serves(name) {
				t.Fatalf("%s: %s owned by %s, served here %v", n.ID(), name, m.ID, n.Serves(name))
			}
		}
	}
	// The new leader reports the dead node unreachable.
	for {
		if _, ok := leader.Unreachable()[dead.ID()]; ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("leader never reported %s unreachable", dead.ID())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st := leader.Status(); !slices.Contains(st.Unreachable, dead.ID()) || !slices.Contains(st.Ring, dead.ID()) {
		t.Errorf("status %+v", st)
	}
	// Writes still work with two of three: epochs, then the removal that
	// gives the dead node's names a live owner.
	before := alive[0].AppliedRingVersion()
	if _, err := alive[1].AcquireEpoch(ctx); err != nil {
		t.Fatal(err)
	}
	if err := alive[0].Remove(ctx, dead.ID()); err != nil {
		t.Fatal(err)
	}
	waitSameRing(t, alive, before+1)
	for _, name := range deadNames {
		m, ok := alive[0].Owner(name)
		if !ok || m.ID == dead.ID() || !slices.ContainsFunc(alive, func(n *testNode) bool { return n.ID() == m.ID }) {
			t.Fatalf("after removal %s is owned by %+v", name, m)
		}
	}
}

// A node restarted from its data directory rejoins by itself, and its
// next epoch is above the one it had.
func TestRestartRejoinsEpochRises(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	ctx := ctxT(t)
	n3 := nodes[2]
	var e1 uint64
	// Enough writes to cross the snapshot threshold, so that the restart
	// goes through a snapshot and its restore.
	for range 12 {
		e, err := n3.AcquireEpoch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if e <= e1 {
			t.Fatalf("epoch %d after %d", e, e1)
		}
		e1 = e
	}
	if err := n3.raft.Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	if err := nodes[0].RaiseLease(ctx, 7*time.Second); err != nil {
		t.Fatal(err)
	}
	raftAddr, adminAddr := n3.RaftAddr(), n3.admin.Addr().String()
	n3.stop()
	r := startNode(t, n3.ID(), n3.dir, raftAddr, adminAddr)
	if !r.Restarted() {
		t.Fatal("restarted node found no state")
	}
	if err := r.Bootstrap(ctx); !errors.Is(err, ErrExistingState) {
		t.Errorf("bootstrap of a restarted node: %v", err)
	}
	e2, err := r.AcquireEpoch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("epoch before the restart %d, after %d", e1, e2)
	if e2 <= e1 {
		t.Errorf("epoch after restart %d, not above %d", e2, e1)
	}
	if md := r.Metadata(); md.MaxLease != 7*time.Second || md.Epochs[r.ID()] != e2 {
		t.Errorf("restarted node's metadata: max lease %v, epochs %v", md.MaxLease, md.Epochs)
	}
	waitSameRing(t, []*testNode{nodes[0], nodes[1], r}, 3)
}

// A planned leave, of a follower and then of the leader: each leaves the
// ring and the Raft configuration, and the rest keep a leader.
func TestLeave(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 4)
	ctx := ctxT(t)
	leader := leaderOf(t, nodes)
	follower := nodes[0]
	if follower == leader {
		follower = nodes[1]
	}
	if err := follower.Leave(ctx); err != nil {
		t.Fatalf("follower leaves: %v", err)
	}
	follower.stop()
	rest := slices.DeleteFunc(slices.Clone(nodes), func(n *testNode) bool { return n == follower })
	waitSameRing(t, rest, 5)
	if leader.Ring().Has(follower.ID()) {
		t.Fatal("left follower still in the ring")
	}
	// The log marks the follower leaving before it removes it.
	var ops []string
	first, _ := leader.store.FirstIndex()
	last, _ := leader.store.LastIndex()
	for i := first; i <= last; i++ {
		var l raft.Log
		if leader.store.GetLog(i, &l) != nil || l.Type != raft.LogCommand {
			continue
		}
		var c command
		if json.Unmarshal(l.Data, &c) == nil && (c.Member.ID == follower.ID() || c.ID == follower.ID()) &&
			(c.Op == opPutMember || c.Op == opRemoveMember) {
			ops = append(ops, c.Op+":"+string(c.Member.State))
		}
	}
	if n := len(ops); n < 2 || ops[n-2] != opPutMember+":"+string(Leaving) || ops[n-1] != opRemoveMember+":" {
		t.Errorf("the leave's log entries: %v, want ... put_member:leaving remove_member:", ops)
	}
	if err := leader.Leave(ctx); err != nil {
		t.Fatalf("leader leaves: %v", err)
	}
	leader.stop()
	rest = slices.DeleteFunc(rest, func(n *testNode) bool { return n == leader })
	waitSameRing(t, rest, 6)
	if voters, err := rest[0].Voters(); err != nil || len(voters) != 2 || slices.Contains(voters, leader.ID()) {
		t.Errorf("voters %v %v", voters, err)
	}
	if _, err := rest[1].AcquireEpoch(ctx); err != nil {
		t.Errorf("the remaining two cannot write: %v", err)
	}
}

// Raft's heartbeat fast path must stay off: Shutdown closes the store
// while a fast-path heartbeat may still write the term to it, which made
// Raft panic ("failed to save current term: database not open") in a run
// of these tests under load.
func TestHeartbeatFastPathOff(t *testing.T) {
	t.Parallel()
	n := startNode(t, "node-1", t.TempDir(), "127.0.0.1:0", "127.0.0.1:0")
	fn := reflect.ValueOf(n.trans).Elem().FieldByName("heartbeatFn")
	if !fn.IsValid() {
		t.Skip("raft.NetworkTransport has no heartbeatFn field any more: check this rule against the new version")
	}
	if !fn.IsNil() {
		t.Error("the transport's heartbeat fast path is on")
	}
}

// The node's token source: nothing before an epoch, the epoch installed by
// AcquireEpoch, and the next epoch committed by itself when half of one
// is used.
func TestNodeTokensRenew(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 1)
	ctx := ctxT(t)
	n := nodes[0]
	tk := n.Tokens()
	if _, err := tk.TryNext(); !errors.Is(err, ErrNoEpoch) {
		t.Fatalf("before an epoch: %v", err)
	}
	e, err := n.AcquireEpoch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first := tk.Next()
	if first != e<<EpochShift|1 {
		t.Fatalf("first token %d, want epoch %d counter 1", first, e)
	}
	tk.mu.Lock()
	tk.counter = renewAt - 1
	tk.mu.Unlock()
	low := tk.Next()
	if err := waitUntil(ctx, func() bool { return tk.Epoch() > e }); err != nil {
		t.Fatalf("epoch not renewed: %v", err)
	}
	if next := tk.Next(); next <= low {
		t.Errorf("token after renewal %d, not above %d", next, low)
	}
	if got := n.Metadata().Epochs[n.ID()]; got != tk.Epoch() {
		t.Errorf("metadata epoch %d, tokens %d", got, tk.Epoch())
	}
}

// A serving member restarted on another admin address joins again to
// record it: its record changes, the ring does not.
func TestRejoinNewAddressKeepsRing(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	ctx := ctxT(t)
	n3 := nodes[2]
	raftAddr := n3.RaftAddr()
	n3.stop()
	r := startNode(t, n3.ID(), n3.dir, raftAddr, "127.0.0.1:0")
	if err := r.Join(ctx, nodes[0].admin.Addr().String()); err != nil {
		t.Fatal(err)
	}
	want := r.admin.Addr().String()
	if err := r.waitFor(ctx, func(md *Metadata) bool { return md.Members[r.ID()].AdminAddr == want }); err != nil {
		t.Fatalf("new admin address not recorded: %v", err)
	}
	if err := nodes[0].waitFor(ctx, func(md *Metadata) bool { return md.Members[r.ID()].AdminAddr == want }); err != nil {
		t.Fatal(err)
	}
	if v := nodes[0].AppliedRingVersion(); v != 3 {
		t.Errorf("ring version %d after a re-join, want 3 (unchanged)", v)
	}
	waitSameRing(t, []*testNode{nodes[0], nodes[1], r}, 3)
}
