package cluster

import (
	"path/filepath"
	"testing"
	"time"
)

// nameOwnedBy returns a name that ring r gives to id.
func nameOwnedBy(t *testing.T, r *Ring, id string) string {
	t.Helper()
	for _, name := range names(1000) {
		if r.Owner(name) == id {
			return name
		}
	}
	t.Fatalf("no name owned by %s", id)
	return ""
}

func TestRouteOneHopEpochAndWarmup(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	ctx := ctxT(t)
	n1, n2 := nodes[0], nodes[1]
	name := nameOwnedBy(t, n1.Ring(), "node-2")
	now := time.Now()
	if d := n1.Route(name, false, now); d.Action != Forward || d.Owner.ID != "node-2" || d.Owner.ProtocolAddr != "127.0.0.1:72" || d.RingVersion != 3 {
		t.Errorf("non-owner, direct: %+v", d)
	}
	if d := n1.Route(name, true, now); d.Action != NotOwner {
		t.Errorf("non-owner, forwarded: %v, want not-owner (never a second hop)", d.Action)
	}
	// The owner has no epoch yet: not ready, forwarded or not.
	if d := n2.Route(name, true, now); d.Action != NotReady {
		t.Errorf("owner without an epoch: %v", d.Action)
	}
	if _, err := n2.AcquireEpoch(ctx); err != nil {
		t.Fatal(err)
	}
	// node-2 took its names when it joined, handed over by their prior
	// owner (handoff.go): no warm-up, however long the largest lease.
	const lease = 5 * time.Second
	if err := n1.RaiseLease(ctx, lease); err != nil {
		t.Fatal(err)
	}
	if err := n2.waitFor(ctx, func(md *Metadata) bool { return md.MaxLease == lease }); err != nil {
		t.Fatal(err)
	}
	if d := n2.Route(name, true, time.Now()); d.Action != Serve {
		t.Errorf("owner of handed-over names: %+v", d)
	}
	if d := NewRing(0, nil).Owner(name); d != "" {
		t.Error(d)
	}
	for a := Serve; a <= NoOwner+1; a++ {
		if a.String() == "" {
			t.Errorf("action %d has no name", a)
		}
	}
}

// After a dead owner is removed, a survivor takes its names: not ready
// until a fresh epoch, then queued for the largest lease plus the slack;
// names the survivor owned before are served all along.
func TestRouteTakeoverFailsClosed(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	ctx := ctxT(t)
	for _, n := range nodes {
		if _, err := n.AcquireEpoch(ctx); err != nil {
			t.Fatal(err)
		}
		n.HandedOver(1)
		n.HandedOver(2)
		n.HandedOver(3)
	}
	const lease = 5 * time.Second
	if err := nodes[0].RaiseLease(ctx, lease); err != nil {
		t.Fatal(err)
	}
	dead, n1 := nodes[2], nodes[0]
	before := n1.Ring()
	moving := nameOwnedBy(t, before, "node-3")
	dead.stop()
	if err := n1.Remove(ctx, "node-3"); err != nil {
		t.Fatal(err)
	}
	if err := n1.WaitRing(ctx, 4); err != nil {
		t.Fatal(err)
	}
	owner := n1.Ring().Owner(moving)
	var taker *testNode
	for _, n := range nodes[:2] {
		if n.ID() == owner {
			taker = n
		}
	}
	if err := taker.WaitRing(ctx, 4); err != nil {
		t.Fatal(err)
	}
	if d := taker.Route(moving, false, time.Now()); d.Action != NotReady {
		t.Errorf("taken name before a fresh epoch: %v", d.Action)
	}
	kept := nameOwnedBy(t, before, taker.ID())
	if d := taker.Route(kept, false, time.Now()); d.Action != Serve {
		t.Errorf("a name that did not move: %v, want serve all along", d.Action)
	}
	if _, err := taker.AcquireEpoch(ctx); err != nil {
		t.Fatal(err)
	}
	d := taker.Route(moving, false, time.Now())
	if d.Action != Queue {
		t.Fatalf("taken name after the epoch: %+v", d)
	}
	if d.Since != 4 {
		t.Errorf("taken over in ring %d, want 4 (the removal)", d.Since)
	}
	if left := time.Until(d.Until); left <= testSlack || left > WarmupFor(lease, testSlack) {
		t.Errorf("warm-up ends in %v, want between the slack %v and lease·(1+ρ)/(1−ρ)+slack %v", left, testSlack, WarmupFor(lease, testSlack))
	}
	// A lease raised after the take-over does not lengthen its warm-up:
	// the removed owner granted none longer than the one recorded then.
	if err := nodes[0].RaiseLease(ctx, 4*lease); err != nil {
		t.Fatal(err)
	}
	if err := taker.waitFor(ctx, func(md *Metadata) bool { return md.MaxLease == 4*lease }); err != nil {
		t.Fatal(err)
	}
	if d2 := taker.Route(moving, false, time.Now()); d2.Action != Queue || !d2.Until.Equal(d.Until) {
		t.Errorf("after a longer lease was recorded: %+v, want queued until %v still", d2, d.Until)
	}
	if w, want := taker.Warmup(), WarmupFor(4*lease, testSlack); w != want || w <= 4*lease+testSlack {
		t.Errorf("Warmup %v, want %v (above lease+slack %v: scaled for clock drift)", w, want, 4*lease+testSlack)
	}
	// More ring changes than the history keeps, within the warm-up: the
	// ring before the take-over is gone, so the node cannot tell which
	// names it gained, and gates every one until the warm-up ends (fail
	// closed), the name it kept too.
	taker.fsm.mu.Lock()
	cur := taker.fsm.ring
	for v := cur.Version() + 1; v <= cur.Version()+DefaultHistory; v++ {
		taker.fsm.history.Add(NewRing(v, cur.Members()), time.Now())
	}
	taker.fsm.mu.Unlock()
	if d3 := taker.Route(kept, false, time.Now()); d3.Action != Queue || !d3.Until.Equal(d.Until) {
		t.Errorf("a kept name once the ring before the take-over is dropped: %+v, want queued until %v", d3, d.Until)
	}
	if d := taker.Route(moving, false, d.Until); d.Action != Serve {
		t.Errorf("taken name after the warm-up: %v", d.Action)
	}
	if d := taker.Route(kept, false, d.Until); d.Action != Serve {
		t.Errorf("kept name after the warm-up: %v", d.Action)
	}
}

// raiseLease records lease as the cluster's largest through via and
// waits until on has applied it.
func raiseLease(t *testing.T, via, on *testNode, lease time.Duration) {
	t.Helper()
	ctx := ctxT(t)
	if err := via.RaiseLease(ctx, lease); err != nil {
		t.Fatal(err)
	}
	if err := on.waitFor(ctx, func(md *Metadata) bool { return md.MaxLease == lease }); err != nil {
		t.Fatal(err)
	}
}

// A node restarted from its data directory lost its lock state: all its
// names warm up.
func TestRouteRestartWarmsUp(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	ctx := ctxT(t)
	const lease = 5 * time.Second
	n3 := nodes[2]
	raiseLease(t, nodes[0], n3, lease)
	raftAddr, adminAddr := n3.RaftAddr(), n3.admin.Addr().String()
	n3.stop()
	started := time.Now()
	r := startNode(t, n3.ID(), n3.dir, raftAddr, adminAddr)
	if _, err := r.AcquireEpoch(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.WaitContact(ctx); err != nil {
		t.Fatal(err)
	}
	for v := uint64(1); v <= 3; v++ {
		r.HandedOver(v) // rules out the join's own gate: this is the restart's
	}
	name := nameOwnedBy(t, r.Ring(), "node-3")
	waitContact(t, r)
	d := r.Route(name, false, time.Now())
	if d.Action != Queue || d.Until.Before(started.Add(lease)) || d.Until.After(time.Now().Add(WarmupFor(lease, testSlack))) {
		t.Fatalf("restarted owner: %+v, want queued until about %v after the restart", d, WarmupFor(lease, testSlack))
	}
	if d.Since != 0 {
		t.Errorf("a restart's gate names ring %d, want 0 (any ring re-asserts)", d.Since)
	}
	if d := r.Route(name, false, d.Until); d.Action != Serve {
		t.Errorf("after the warm-up: %v", d.Action)
	}
}

// TestRouteWipedNodeWarmsUp: a node that lost its data directory and
// starts again under its id, with -join (new Raft state), finds its old
// record still serving in the ring: nothing is handed over to it, and it
// has forgotten who held its names. It warms them up as any restarted
// node does (model: cluster, mutation wiped-serves).
func TestRouteWipedNodeWarmsUp(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	ctx := ctxT(t)
	const lease = 5 * time.Second
	n3 := nodes[2]
	raiseLease(t, nodes[0], n3, lease)
	n3.stop()
	started := time.Now()
	r := startNode(t, n3.ID(), filepath.Join(t.TempDir(), "wiped"), "127.0.0.1:0", "127.0.0.1:0")
	if r.Restarted() {
		t.Fatal("a wiped data directory held a cluster")
	}
	if err := r.Join(ctx, nodes[0].admin.Addr().String()); err != nil {
		t.Fatalf("join under the old id: %v", err)
	}
	if _, err := r.AcquireEpoch(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.WaitContact(ctx); err != nil {
		t.Fatal(err)
	}
	name := nameOwnedBy(t, r.Ring(), "node-3")
	d := r.Route(name, false, time.Now())
	if d.Action != Queue || d.Until.Before(started.Add(lease)) || d.Until.After(time.Now().Add(WarmupFor(lease, testSlack))) {
		t.Fatalf("wiped owner: %+v, want queued until about %v after its start", d, WarmupFor(lease, testSlack))
	}
	if d := r.Route(name, false, d.Until); d.Action != Serve {
		t.Errorf("after the warm-up: %v", d.Action)
	}
}

// A name that moved away and came back since the node's epoch (a join,
// then its removal) needs a fresh epoch: the other owner issued tokens
// under a later epoch meanwhile.
func TestRouteNameBackNeedsFreshEpoch(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	ctx := ctxT(t)
	n1 := nodes[0]
	if _, err := n1.AcquireEpoch(ctx); err != nil {
		t.Fatal(err)
	}
	for v := uint64(1); v <= 5; v++ {
		n1.HandedOver(v)
	}
	three := n1.Ring()
	four := NewRing(4, append(three.Members(), "node-4"))
	var name, stays string
	for _, nm := range names(2000) {
		switch {
		case three.Owner(nm) == "node-1" && four.Owner(nm) == "node-4" && name == "":
			name = nm
		case three.Owner(nm) == "node-1" && four.Owner(nm) == "node-1" && stays == "":
			stays = nm
		}
	}
	if name == "" || stays == "" {
		t.Fatal("no suitable names")
	}
	if d := n1.Route(name, false, time.Now()); d.Action != Serve {
		t.Fatalf("before the join: %v", d.Action)
	}
	n4 := startNode(t, "node-4", filepath.Join(t.TempDir(), "node-4"), "127.0.0.1:0", "127.0.0.1:0")
	if err := n4.Join(ctx, n1.admin.Addr().String()); err != nil {
		t.Fatal(err)
	}
	if err := n1.Remove(ctx, "node-4"); err != nil {
		t.Fatal(err)
	}
	if err := n1.WaitRing(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if d := n1.Route(name, false, time.Now()); d.Action != NotReady {
		t.Errorf("a name back since the epoch: %v, want not-ready", d.Action)
	}
	if d := n1.Route(stays, false, time.Now()); d.Action != Serve {
		t.Errorf("a name owned all along: %v, want serve", d.Action)
	}
	if _, err := n1.AcquireEpoch(ctx); err != nil {
		t.Fatal(err)
	}
	if d := n1.Route(name, false, time.Now()); d.Action != Serve {
		t.Errorf("after a fresh epoch: %v", d.Action)
	}
}

// A node's first ring gave it every name with no hand-off: its names are
// gated for the warm-up of the largest lease recorded then. A longer
// lease recorded later (a client's first long lease) does not gate them
// again.
func TestRouteLaterLeaseDoesNotRegate(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	ctx := ctxT(t)
	n1 := nodes[0]
	if _, err := n1.AcquireEpoch(ctx); err != nil {
		t.Fatal(err)
	}
	name := nameOwnedBy(t, n1.Ring(), "node-1")
	waitContact(t, n1)
	deadline := time.Now().Add(testWait)
	for n1.Route(name, false, time.Now()).Action != Serve {
		if time.Now().After(deadline) {
			t.Fatalf("node-1's %s never served: %+v", name, n1.Route(name, false, time.Now()))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := n1.RaiseLease(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := n1.waitFor(ctx, func(md *Metadata) bool { return md.MaxLease == 20*time.Second }); err != nil {
		t.Fatal(err)
	}
	if d := n1.Route(name, false, time.Now()); d.Action != Serve {
		t.Errorf("after a longer lease was recorded, node-1 routes its %s as %+v, want serve", name, d)
	}
}
