package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// fakeMover stands for the server: it records what it was asked to
// export and install, and may block its export until released.
type fakeMover struct {
	id      string
	mu      sync.Mutex
	exports int
	moved   map[string]string // name -> new owner, over names(1000)
	from    []string          // Install calls, by sender
	got     []string          // their states
	block   chan struct{}     // Export waits for it to close, if set
	started chan struct{}     // closed when Export begins, if set
	// failInstalls is how many Install calls fail before one succeeds.
	failInstalls int
	// later is how many Export calls answer "not yet" (holders being
	// told) before one exports; laterCalls counts them.
	later, laterCalls int
}

// notYet is the fake's "not yet" (the server's holders being told).
type notYet struct{}

func (notYet) Error() string             { return "not yet" }
func (notYet) RetryAfter() time.Duration { return 20 * time.Millisecond }

func newFakeMover(id string) *fakeMover { return &fakeMover{id: id, moved: map[string]string{}} }

func (m *fakeMover) Export(newOwner func(name string) string) (map[string]json.RawMessage, error) {
	m.mu.Lock()
	block, started := m.block, m.started
	m.started = nil
	m.mu.Unlock()
	if started != nil {
		close(started)
	}
	if block != nil {
		<-block
	}
	out := map[string]json.RawMessage{}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.later > 0 {
		m.later--
		m.laterCalls++
		return nil, notYet{}
	}
	m.exports++
	for _, name := range names(1000) {
		if o := newOwner(name); o != "" {
			m.moved[name] = o
			out[o] = json.RawMessage(fmt.Sprintf(`"state of %s, export %d"`, m.id, m.exports))
		}
	}
	return out, nil
}

func (m *fakeMover) Install(from string, state json.RawMessage) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failInstalls > 0 {
		m.failInstalls--
		return errors.New("install refused by the test")
	}
	m.from = append(m.from, from)
	m.got = append(m.got, string(state))
	return nil
}

func (m *fakeMover) Evict(gone func(name string) bool) {}

// releaser returns a channel that blocks an export and a function that
// closes it once; it is also closed when the test ends, before the nodes
// shut down (their hand-off loops wait for the export).
func releaser(t *testing.T) (chan struct{}, func()) {
	ch := make(chan struct{})
	release := sync.OnceFunc(func() { close(ch) })
	t.Cleanup(release)
	return ch, release
}

// withMovers gives each node a fakeMover.
func withMovers(nodes []*testNode) map[string]*fakeMover {
	out := map[string]*fakeMover{}
	for _, n := range nodes {
		m := newFakeMover(n.ID())
		n.SetMover(m)
		out[n.ID()] = m
	}
	return out
}

// A join is a planned change: the new ring is proposed as pending; every
// prior owner freezes the names that move (Route: frozen) and hands them
// to the joiner, which installs each state; only then is the ring
// committed, marked handed over, and the joiner serves the names at once.
func TestPlannedJoinHandsOver(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	ctx := ctxT(t)
	movers := withMovers(nodes)
	// node-2's export waits, so the change stays pending a while.
	block, release := releaser(t)
	started := make(chan struct{})
	movers["node-2"].mu.Lock()
	movers["node-2"].block, movers["node-2"].started = block, started
	movers["node-2"].mu.Unlock()

	n4 := startNode(t, "node-4", filepath.Join(t.TempDir(), "node-4"), "127.0.0.1:0", "127.0.0.1:0")
	m4 := newFakeMover("node-4")
	n4.SetMover(m4)
	joined := make(chan error, 1)
	go func() { joined <- n4.Join(ctx, nodes[2].admin.Addr().String()) }()
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("node-2 was never asked to export")
	}
	next := NewRing(0, []string{"node-1", "node-2", "node-3", "node-4"})
	moving := ""
	for _, name := range names(1000) {
		if nodes[1].Ring().Owner(name) == "node-2" && next.Owner(name) == "node-4" {
			moving = name
			break
		}
	}
	if p := nodes[1].Pending(); p == nil || p.Version != 4 || !slices.Equal(p.Members, next.Members()) {
		t.Fatalf("pending change on node-2: %+v", p)
	}
	if _, err := nodes[1].AcquireEpoch(ctx); err != nil {
		t.Fatal(err)
	}
	if d := nodes[1].Route(moving, false, time.Now()); d.Action != Frozen {
		t.Errorf("node-2 routes %s, which moves to node-4, as %v, want frozen", moving, d.Action)
	}
	if v := nodes[0].AppliedRingVersion(); v != 3 {
		t.Errorf("the ring switched to version %d before node-2 handed over", v)
	}
	release()
	if err := <-joined; err != nil {
		t.Fatalf("join: %v", err)
	}
	all := append(slices.Clone(nodes), n4)
	waitSameRing(t, all, 4)
	for _, n := range all {
		if md := n.Metadata(); !md.RingHandedOver || md.Pending != nil {
			t.Errorf("%s: ring 4 handed over %v, pending %+v", n.ID(), md.RingHandedOver, md.Pending)
		}
	}
	m4.mu.Lock()
	from := slices.Sorted(slices.Values(m4.from))
	m4.mu.Unlock()
	if !slices.Equal(from, []string{"node-1", "node-2", "node-3"}) {
		t.Errorf("node-4 installed hand-offs from %v, want one from each prior owner", from)
	}
	for id, m := range movers {
		m.mu.Lock()
		for name, o := range m.moved {
			if o != "node-4" || next.Owner(name) != "node-4" {
				t.Errorf("%s exported %s for %s", id, name, o)
			}
		}
		m.mu.Unlock()
	}
	if _, err := n4.AcquireEpoch(ctx); err != nil {
		t.Fatal(err)
	}
	waitContact(t, n4)
	if d := n4.Route(moving, false, time.Now()); d.Action != Serve {
		t.Errorf("node-4 routes its handed-over %s as %v, want serve (no warm-up)", moving, d.Action)
	}
	if d := nodes[1].Route(moving, false, time.Now()); d.Action != Forward || d.Owner.ID != "node-4" {
		t.Errorf("node-2 routes %s as %+v after the change, want forward to node-4", moving, d)
	}
}

// A prior owner that does not hand over within the hand-off timeout does
// not hold the change up forever: the leader commits it, not handed over,
// and the new owner gates the names for the warm-up (fail closed).
func TestPlannedJoinTimesOutGated(t *testing.T) {
	t.Parallel()
	const handoff = time.Second
	short := func(c *Config) { c.HandoffTimeout = handoff }
	nodes := startClusterWith(t, 3, short)
	ctx := ctxT(t)
	movers := withMovers(nodes)
	block, _ := releaser(t)
	movers["node-3"].mu.Lock()
	movers["node-3"].block = block
	movers["node-3"].mu.Unlock()
	n4 := startNodeWith(t, "node-4", filepath.Join(t.TempDir(), "node-4"), "127.0.0.1:0", "127.0.0.1:0", short)
	start := time.Now()
	if err := n4.Join(ctx, nodes[0].admin.Addr().String()); err != nil {
		t.Fatalf("join: %v", err)
	}
	took := time.Since(start)
	all := append(slices.Clone(nodes), n4)
	waitSameRing(t, all, 4)
	t.Logf("joined, not handed over, after %v (hand-off timeout %v)", took, handoff)
	if took < handoff {
		t.Errorf("the join committed after %v, before the hand-off timeout", took)
	}
	if md := n4.Metadata(); md.RingHandedOver {
		t.Fatal("ring 4 marked handed over without node-3's hand-off")
	}
	if _, err := n4.AcquireEpoch(ctx); err != nil {
		t.Fatal(err)
	}
	next := n4.Ring()
	for _, name := range names(1000) {
		if NewRing(0, []string{"node-1", "node-2", "node-3"}).Owner(name) == "node-3" && next.Owner(name) == "node-4" {
			waitContact(t, n4)
			if d := n4.Route(name, false, time.Now()); d.Action != Queue {
				t.Fatalf("node-4 routes %s, taken without node-3's hand-off, as %v, want queue (warm-up)", name, d.Action)
			}
			return
		}
	}
	t.Fatal("no name moved from node-3 to node-4")
}

// Leadership that moves in the middle of a planned leave does not lose
// it: the old leader's commit fails, the leaving node's request reaches
// the new leader, which finds the change pending, waits for the hand-off
// and commits it handed over. (A leader that dies instead is a receiver
// of the leaving node's names: the change then commits without the
// hand-off, gated, as TestPlannedJoinTimesOutGated shows.)
func TestPlannedLeaveSurvivesLeaderChange(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	ctx := ctxT(t)
	movers := withMovers(nodes)
	leader := leaderOf(t, nodes)
	var leaving, other *testNode
	for _, n := range nodes {
		switch {
		case n == leader:
		case leaving == nil:
			leaving = n
		default:
			other = n
		}
	}
	block, release := releaser(t)
	started := make(chan struct{})
	m := movers[leaving.ID()]
	m.mu.Lock()
	m.block, m.started = block, started
	m.mu.Unlock()
	left := make(chan error, 1)
	go func() { left <- leaving.Leave(ctx) }()
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the leaving node was never asked to export")
	}
	if err := leader.raft.LeadershipTransferToServer(raft.ServerID(other.ID()), raft.ServerAddress(other.raftAddr)).Error(); err != nil {
		t.Fatalf("leadership transfer: %v", err)
	}
	newLeader := leaderOf(t, []*testNode{other})
	t.Logf("leadership moved from %s to %s mid-leave", leader.ID(), newLeader.ID())
	// A new leader applies the log it has once it commits in its term.
	if err := waitUntil(ctx, func() bool { p := newLeader.Pending(); return p != nil && p.Member == leaving.ID() }); err != nil {
		t.Fatalf("the new leader has no pending leave of %s: %+v", leaving.ID(), newLeader.Pending())
	}
	release()
	if err := <-left; err != nil {
		t.Fatalf("leave: %v", err)
	}
	if err := waitUntil(ctx, func() bool { return !newLeader.Ring().Has(leaving.ID()) }); err != nil {
		t.Fatal(err)
	}
	if md := newLeader.Metadata(); !md.RingHandedOver {
		t.Errorf("the leave was committed without its hand-off: %+v", md)
	}
	m.mu.Lock()
	gone := len(m.moved)
	m.mu.Unlock()
	if gone == 0 {
		t.Error("the leaving node exported no names")
	}
	if voters, err := newLeader.Voters(); err != nil || slices.Contains(voters, leaving.ID()) {
		t.Errorf("voters after the leave: %v %v", voters, err)
	}
}

// Stop takes a node out of the ring after handing its names over but
// keeps it a voter; Rejoin, after a restart on its data directory, puts
// it back, with the names handed back by their owners. The bootstrap
// node too, whose log, replayed at its restart, starts with a ring that
// gave it every name with no hand-off.
func TestStopAndRejoin(t *testing.T) {
	t.Parallel()
	for _, i := range []int{2, 0} {
		t.Run(fmt.Sprintf("node-%d", i+1), func(t *testing.T) { testStopAndRejoin(t, i) })
	}
}

func testStopAndRejoin(t *testing.T, i int) {
	// No snapshots: the restarted node replays its whole log, as a node
	// does whose log is shorter than the default snapshot threshold.
	noSnapshots := func(c *Config) { c.SnapshotThreshold, c.SnapshotInterval = 1<<20, time.Hour }
	nodes := startClusterWith(t, 3, noSnapshots)
	ctx := ctxT(t)
	withMovers(nodes)
	n3 := nodes[i]
	other := nodes[(i+1)%3]
	// A long largest lease: a restarted node that lost its names' state
	// would gate them for it.
	const lease = 20 * time.Second
	if err := other.RaiseLease(ctx, lease); err != nil {
		t.Fatal(err)
	}
	if err := n3.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	waitSameRing(t, nodes, 4)
	id := n3.ID()
	if md := other.Metadata(); md.Members[id].State != Stopped || !md.RingHandedOver {
		t.Fatalf("after the stop: %+v", md.Members[id])
	}
	if voters, err := other.Voters(); err != nil || !slices.Contains(voters, id) {
		t.Fatalf("a stopped node is still a voter: %v %v", voters, err)
	}
	dir, raftAddr, adminAddr := n3.dir, n3.raftAddr, n3.admin.Addr().String()
	n3.stop()
	n3 = startNodeWith(t, id, dir, raftAddr, adminAddr, noSnapshots)
	rctx, cancel := context.WithTimeout(ctx, testWait)
	defer cancel()
	if err := n3.Rejoin(rctx); err != nil {
		t.Fatalf("rejoin: %v", err)
	}
	nodes[i] = n3
	waitSameRing(t, nodes, 5)
	if md := other.Metadata(); md.Members[id].State != Serving || !md.RingHandedOver {
		t.Fatalf("after the rejoin: %+v, handed over %v", md.Members[id], md.RingHandedOver)
	}
	// It stopped after handing its names over, so it lost no name's
	// state: the names handed back are served at once, without the
	// restart warm-up (the largest lease plus the slack).
	if _, err := n3.AcquireEpoch(ctx); err != nil {
		t.Fatal(err)
	}
	name := nameOwnedBy(t, n3.Ring(), id)
	waitContact(t, n3)
	if d := n3.Route(name, false, time.Now()); d.Action != Serve {
		t.Errorf("%s, back after a stop, routes its %s as %+v, want serve", id, name, d)
	}
}

// A node restarted without having stopped (a crash) lost the state of
// the names it owns: it gates them for the warm-up, even after a planned
// change hands it more.
func TestCrashRestartStaysGated(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	ctx := ctxT(t)
	withMovers(nodes)
	const lease = 20 * time.Second
	if err := nodes[0].RaiseLease(ctx, lease); err != nil {
		t.Fatal(err)
	}
	if err := nodes[2].waitFor(ctx, func(md *Metadata) bool { return md.MaxLease == lease }); err != nil {
		t.Fatal(err)
	}
	n3 := nodes[2]
	// A snapshot, so that the restarted node restores its ring from it
	// (a ring with no change behind it in this run).
	if err := n3.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	dir, raftAddr, adminAddr := n3.dir, n3.raftAddr, n3.admin.Addr().String()
	n3.stop()
	n3 = startNode(t, "node-3", dir, raftAddr, adminAddr)
	n3.SetMover(newFakeMover("node-3"))
	if err := n3.Rejoin(ctx); err != nil {
		t.Fatalf("rejoin: %v", err)
	}
	// A leave of node-2 hands node-3 more names.
	nodes[2] = n3
	if err := nodes[1].Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if err := waitUntil(ctx, func() bool { return !n3.Ring().Has("node-2") }); err != nil {
		t.Fatal(err)
	}
	if _, err := n3.AcquireEpoch(ctx); err != nil {
		t.Fatal(err)
	}
	if err := n3.WaitContact(ctx); err != nil {
		t.Fatal(err)
	}
	name := nameOwnedBy(t, n3.Ring(), "node-3")
	waitContact(t, n3)
	if d := n3.Route(name, false, time.Now()); d.Action != Queue {
		t.Errorf("node-3, restarted after a crash, routes its %s as %+v, want queue (restart warm-up)", name, d)
	}
}

// A hand-off for a change that is not pending on the receiver (committed
// already, or never proposed) is refused with 409 and installs nothing,
// so a late or repeated hand-off cannot put state on a node that owns the
// names, or no longer will; a malformed one gets 400.
func TestHandoffRefusedWhenNotPending(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	ctx := ctxT(t)
	movers := withMovers(nodes)
	n := nodes[2]
	post := func(body string) error {
		return n.post(ctx, n.admin.Addr().String(), pathHandoff, []byte(body), false, nil)
	}
	var he *httpError
	if err := post(`{"from":"node-1","version":3,"base":2,"state":"x"}`); !errors.As(err, &he) || he.Status != http.StatusConflict {
		t.Errorf("hand-off of committed ring 3: %v, want 409", err)
	}
	if err := post(`{"version":3}`); !errors.As(err, &he) || he.Status != http.StatusBadRequest {
		t.Errorf("hand-off without a sender: %v, want 400", err)
	}
	m := movers[n.ID()]
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.from) != 0 {
		t.Errorf("installed %v", m.got)
	}
}

// A node that took names over from a removed node, and is still warming
// them up, hands nothing over to a node that joins meanwhile: the
// joiner would serve those names at once, while a holder of the removed
// node may still believe it holds them (the cluster fault suite found
// this: TestClusterFaultInjectionLongLease/join). The joiner gets such a
// name only once the warm-up has passed, or gated.
func TestJoinDuringTakeoverWarmupStaysGated(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	ctx := ctxT(t)
	withMovers(nodes)
	const lease = 3 * time.Second
	if err := nodes[0].RaiseLease(ctx, lease); err != nil {
		t.Fatal(err)
	}
	w := WarmupFor(lease, testSlack)
	dead, n1 := nodes[2], nodes[0]
	before := n1.Ring()
	dead.stop()
	if err := n1.Remove(ctx, "node-3"); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	waitSameRing(t, nodes[:2], 4)

	n4 := startNode(t, "node-4", filepath.Join(t.TempDir(), "node-4"), "127.0.0.1:0", "127.0.0.1:0")
	n4.SetMover(newFakeMover("node-4"))
	if err := n4.Join(ctx, n1.admin.Addr().String()); err != nil {
		t.Fatalf("join: %v", err)
	}
	joined := time.Since(removed)
	waitSameRing(t, []*testNode{nodes[0], nodes[1], n4}, 5)
	if _, err := n4.AcquireEpoch(ctx); err != nil {
		t.Fatal(err)
	}
	waitContact(t, n4)
	next := n4.Ring()
	checked := 0
	for _, name := range names(2000) {
		if before.Owner(name) != "node-3" || next.Owner(name) != "node-4" {
			continue
		}
		checked++
		now := time.Now()
		d := n4.Route(name, false, now)
		if d.Action == NoContact {
			t.Fatalf("node-4 lost quorum contact: %+v", d)
		}
		if d.Action == Serve && now.Before(removed.Add(w)) {
			t.Fatalf("node-4 serves %s, taken from the removed node-3, %v after the removal: before the warm-up %v", name, now.Sub(removed), w)
		}
	}
	if checked == 0 {
		t.Fatal("no name of node-3 moved to node-4")
	}
	t.Logf("join committed %v after the removal (warm-up %v); %d names of node-3 checked on node-4", joined, w, checked)
}

// A prior owner whose hand-off is not acknowledged (the new owner failed
// to install it) resends the state it exported, and never exports again:
// its first export took the moving claims out of its table, so a second
// would hand over nothing and the change would commit handed over while
// their clients still believe they hold them (the continuation model's
// mutation export-again).
func TestHandoffRetryResendsTheSameExport(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	ctx := ctxT(t)
	movers := withMovers(nodes)
	n4 := startNode(t, "node-4", filepath.Join(t.TempDir(), "node-4"), "127.0.0.1:0", "127.0.0.1:0")
	m4 := newFakeMover("node-4")
	m4.failInstalls = 2 // two prior owners' first POSTs fail
	n4.SetMover(m4)
	if err := n4.Join(ctx, nodes[0].admin.Addr().String()); err != nil {
		t.Fatalf("join: %v", err)
	}
	waitSameRing(t, append(slices.Clone(nodes), n4), 4)
	if md := n4.Metadata(); !md.RingHandedOver {
		t.Errorf("ring 4 not handed over: %+v", md)
	}
	for id, m := range movers {
		m.mu.Lock()
		if m.exports != 1 {
			t.Errorf("%s exported %d times for one change, want once", id, m.exports)
		}
		m.mu.Unlock()
	}
	m4.mu.Lock()
	defer m4.mu.Unlock()
	t.Logf("node-4 installed %v", m4.got)
	if len(m4.got) != 3 {
		t.Fatalf("node-4 installed %d states, want one from each prior owner", len(m4.got))
	}
	for i, st := range m4.got {
		if want := fmt.Sprintf(`"state of %s, export 1"`, m4.from[i]); st != want {
			t.Errorf("node-4 installed %s, want the first export %s", st, want)
		}
	}
}

// An Export that answers "not yet" (the server's version 1 holders of
// moving names told, not gone yet) is called again shortly, not treated
// as a failure, and the change is handed over once it exports.
func TestHandoffExportLater(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	ctx := ctxT(t)
	movers := withMovers(nodes)
	for _, m := range movers {
		m.mu.Lock()
		m.later = 3
		m.mu.Unlock()
	}
	n4 := startNode(t, "node-4", filepath.Join(t.TempDir(), "node-4"), "127.0.0.1:0", "127.0.0.1:0")
	n4.SetMover(newFakeMover("node-4"))
	if err := n4.Join(ctx, nodes[0].admin.Addr().String()); err != nil {
		t.Fatalf("join: %v", err)
	}
	waitSameRing(t, append(slices.Clone(nodes), n4), 4)
	if md := n4.Metadata(); !md.RingHandedOver {
		t.Errorf("ring 4 not handed over after the exports that waited: %+v", md)
	}
	for id, m := range movers {
		m.mu.Lock()
		if m.laterCalls != 3 || m.exports != 1 {
			t.Errorf("%s: %d calls answered not yet and %d exports, want 3 and 1", id, m.laterCalls, m.exports)
		}
		m.mu.Unlock()
	}
}

// waitContact waits until n has quorum contact: a node that has just
// joined routes everything as no-contact until its first contact
// request is answered.
func waitContact(t *testing.T, n *testNode) {
	t.Helper()
	for deadline := time.Now().Add(testWait); !n.InContact(time.Now()); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s never got quorum contact", n.ID())
		}
	}
}
