package cluster

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

// A follower whose state machine is paused falls behind a ring change:
// CaughtUp says so until it has applied the leader's ring, then nil.
func TestCaughtUpFollowerBehind(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	ctx := ctxT(t)
	leader := leaderOf(t, nodes)
	var follower *testNode
	for _, n := range nodes {
		if n != leader {
			follower = n
			break
		}
	}
	for _, n := range nodes {
		if err := n.CaughtUp(ctx); err != nil {
			t.Fatalf("%s before the pause: %v", n.ID(), err)
		}
	}
	release := make(chan struct{})
	var once sync.Once
	resume := func() { once.Do(func() { close(release) }) }
	defer resume()
	pause := func() { <-release }
	follower.fsm.beforeApply.Store(&pause)

	// A ring change the follower receives but cannot apply: node-2 or
	// node-3 (whichever is not the follower) is removed.
	var gone *testNode
	for _, n := range nodes {
		if n != leader && n != follower {
			gone = n
		}
	}
	if err := leader.Remove(ctx, gone.ID()); err != nil {
		t.Fatal(err)
	}
	gone.stop()
	if v := leader.AppliedRingVersion(); v != 4 {
		t.Fatalf("leader ring %d after the removal, want 4", v)
	}
	err := follower.CaughtUp(ctx)
	t.Logf("paused follower %s: %v", follower.ID(), err)
	if !errors.Is(err, ErrBehind) {
		t.Fatalf("paused follower %s: CaughtUp = %v, want ErrBehind", follower.ID(), err)
	}
	if err := leader.CaughtUp(ctx); err != nil {
		t.Fatalf("leader: %v", err)
	}
	start := time.Now()
	follower.fsm.beforeApply.Store(nil)
	resume()
	if err := follower.WaitRing(ctx, 4); err != nil {
		t.Fatal(err)
	}
	if err := follower.CaughtUp(ctx); err != nil {
		t.Fatalf("follower after it resumed: %v", err)
	}
	t.Logf("caught up %v after it resumed", time.Since(start))
}

// Every node reports the membership and ring changes it applies, in log
// order: joins, the rings they make, a planned leave and a removal; a
// node restarted from its data directory reports what it applies again
// as replayed.
func TestMembershipEvents(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	base := t.TempDir()
	type rec struct {
		mu     sync.Mutex
		events []Event
	}
	recs := map[string]*rec{}
	var nodes []*testNode
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("node-%d", i)
		r := &rec{}
		recs[id] = r
		n := startNodeWith(t, id, filepath.Join(base, id), "127.0.0.1:0", "127.0.0.1:0", func(c *Config) {
			c.OnEvent = func(e Event) { r.mu.Lock(); r.events = append(r.events, e); r.mu.Unlock() }
		})
		var err error
		if i == 1 {
			err = n.Bootstrap(ctx)
		} else {
			err = n.Join(ctx, nodes[0].admin.Addr().String())
		}
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	waitSameRing(t, nodes, 3)
	if err := nodes[2].Leave(ctx); err != nil {
		t.Fatal(err)
	}
	waitSameRing(t, nodes[:2], 4)
	summary := func(id string) []string {
		r := recs[id]
		r.mu.Lock()
		defer r.mu.Unlock()
		var out []string
		var last uint64
		for _, e := range r.events {
			if e.Index < last {
				t.Errorf("%s: event %v at index %d after index %d", id, e.Kind, e.Index, last)
			}
			last = e.Index
			if e.Replayed {
				t.Errorf("%s: %v replayed in a first run", id, e.Kind)
			}
			switch e.Kind {
			case EventRing:
				out = append(out, fmt.Sprintf("ring %d %v", e.RingVersion, e.Ring))
			default:
				out = append(out, fmt.Sprintf("%s %s", e.Kind, e.Member.ID))
			}
		}
		return out
	}
	want := []string{
		"join node-1", "ring 1 [node-1]",
		"join node-2", "ring 2 [node-1 node-2]",
		"join node-3", "ring 3 [node-1 node-2 node-3]",
		"leave node-3", "remove node-3", "ring 4 [node-1 node-2]",
	}
	for _, id := range []string{"node-1", "node-2"} {
		if err := waitUntil(ctx, func() bool { return len(summary(id)) >= len(want) }); err != nil {
			t.Fatalf("%s: events %v", id, summary(id))
		}
		if got := summary(id); !slices.Equal(got, want) {
			t.Errorf("%s: events\n%v\nwant\n%v", id, got, want)
		}
	}
}

// A node restarted from its data directory reports the changes it
// applies again as replayed (from its log, or the ring of its snapshot
// at index 0), and a change made after the restart as new.
func TestMembershipEventsReplayed(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	dir := t.TempDir()
	var mu sync.Mutex
	var events []Event
	record := func(c *Config) {
		c.OnEvent = func(e Event) { mu.Lock(); events = append(events, e); mu.Unlock() }
	}
	n := startNodeWith(t, "node-1", dir, "127.0.0.1:0", "127.0.0.1:0", record)
	if err := n.Bootstrap(ctx); err != nil {
		t.Fatal(err)
	}
	raftAddr, adminAddr := n.RaftAddr(), n.admin.Addr().String()
	n.stop()
	mu.Lock()
	first := len(events)
	mu.Unlock()
	if first != 2 {
		t.Fatalf("%d events before the restart, want join and ring: %+v", first, events)
	}

	r := startNodeWith(t, "node-1", dir, raftAddr, adminAddr, record)
	if err := r.WaitRing(ctx, 1); err != nil {
		t.Fatal(err)
	}
	n2 := startNode(t, "node-2", filepath.Join(t.TempDir(), "n2"), "127.0.0.1:0", "127.0.0.1:0")
	if err := n2.Join(ctx, adminAddr); err != nil {
		t.Fatal(err)
	}
	if err := r.WaitRing(ctx, 2); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	var replayed, fresh []string
	for _, e := range events[first:] {
		s := fmt.Sprintf("%s %s%v", e.Kind, e.Member.ID, e.Ring)
		if e.Replayed {
			replayed = append(replayed, s)
		} else {
			fresh = append(fresh, s)
		}
	}
	t.Logf("after the restart: replayed %v, new %v", replayed, fresh)
	if len(replayed) == 0 || replayed[len(replayed)-1] != "ring [node-1]" {
		t.Errorf("replayed %v, want the ring of node-1 at least", replayed)
	}
	if want := []string{"join node-2[]", "ring [node-1 node-2]"}; !slices.Equal(fresh, want) {
		t.Errorf("new events %v, want %v", fresh, want)
	}
}
