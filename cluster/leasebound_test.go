package cluster

import (
	"sync"
	"testing"
	"time"
)

func TestLeaseBoundLowering(t *testing.T) {
	t.Parallel()
	members := []string{"a", "b", "c"}
	var b LeaseBound
	b.Raise(time.Hour)
	b.SetCeiling(time.Minute)
	if b.MaxLease != time.Hour || b.Ceiling != time.Minute || b.Lowering == nil {
		t.Fatalf("a ceiling below the largest lease starts a lowering: %+v", b)
	}
	if err := b.Ack("a", time.Second, members); err == nil {
		t.Error("an acknowledgement of another target was accepted")
	}
	if err := b.Ack("x", time.Minute, members); err == nil {
		t.Error("an acknowledgement from no member was accepted")
	}
	for _, id := range []string{"b", "a", "b"} {
		if err := b.Ack(id, time.Minute, members); err != nil {
			t.Fatal(err)
		}
	}
	if b.MaxLease != time.Hour || !b.Acked("a") || b.Acked("c") {
		t.Fatalf("lowered before every member acknowledged: %+v", b)
	}
	if err := b.Ack("c", time.Minute, members); err != nil {
		t.Fatal(err)
	}
	if b.MaxLease != time.Minute || b.Lowering != nil || b.Ceiling != time.Minute {
		t.Fatalf("not lowered once every member acknowledged: %+v", b)
	}
	// A raise above the ceiling is still recorded: a node that has not
	// applied the ceiling yet may grant it.
	b.Raise(2 * time.Minute)
	if b.MaxLease != 2*time.Minute {
		t.Errorf("a raise after the lowering was lost: %v", b.MaxLease)
	}
	// A ceiling at or above the largest lease needs no lowering.
	b.SetCeiling(3 * time.Minute)
	if b.Lowering != nil || b.MaxLease != 2*time.Minute {
		t.Errorf("a raised ceiling: %+v", b)
	}
}

func TestLeaseBoundRemovalCancelsOrCompletes(t *testing.T) {
	t.Parallel()
	var b LeaseBound
	b.Raise(time.Hour)
	b.SetCeiling(time.Minute)
	_ = b.Ack("a", time.Minute, []string{"a", "b", "c"})
	// b had not acknowledged: it may have died with an hour-long session,
	// and the take-over of its names must warm up for it.
	b.MemberRemoved("b", []string{"a", "c"})
	if b.Lowering != nil || b.MaxLease != time.Hour {
		t.Fatalf("the removal of a member that had not acknowledged did not cancel: %+v", b)
	}
	b.SetCeiling(time.Minute)
	_ = b.Ack("a", time.Minute, []string{"a", "c"})
	_ = b.Ack("c", time.Minute, []string{"a", "c", "d"})
	// d joined and has not acknowledged; a, which had, is removed: the
	// lowering waits for d only.
	b.MemberRemoved("a", []string{"c", "d"})
	if b.Lowering == nil || b.MaxLease != time.Hour {
		t.Fatalf("%+v", b)
	}
	_ = b.Ack("d", time.Minute, []string{"c", "d"})
	if b.Lowering != nil || b.MaxLease != time.Minute {
		t.Fatalf("%+v", b)
	}
}

// fakeSessions is a LeaseSessions whose longest lease a test sets.
type fakeSessions struct {
	mu      sync.Mutex
	ceiling time.Duration
	longest time.Duration
}

func (f *fakeSessions) SetLeaseCeiling(d time.Duration) { f.mu.Lock(); f.ceiling = d; f.mu.Unlock() }
func (f *fakeSessions) LongestLease() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.longest
}
func (f *fakeSessions) set(d time.Duration) { f.mu.Lock(); f.longest = d; f.mu.Unlock() }
func (f *fakeSessions) get() time.Duration  { f.mu.Lock(); defer f.mu.Unlock(); return f.ceiling }

// TestLowerLeaseWaitsForSessions lowers the largest lease of three
// in-process nodes: the ceiling reaches every server at once, and the
// largest lease comes down only once the node with a longer session has
// none left.
func TestLowerLeaseWaitsForSessions(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	ctx := ctxT(t)
	sessions := make([]*fakeSessions, len(nodes))
	for i, n := range nodes {
		sessions[i] = &fakeSessions{}
		n.SetLeaseSessions(sessions[i])
	}
	if err := nodes[0].RaiseLease(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	sessions[2].set(time.Hour)
	if err := nodes[1].SetLeaseCeiling(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	for i, n := range nodes {
		if err := n.waitFor(ctx, func(md *Metadata) bool { return md.Ceiling == time.Minute }); err != nil {
			t.Fatal(err)
		}
		if got := sessions[i].get(); got != time.Minute {
			t.Errorf("%s: server's ceiling %v once applied, want 1m", n.ID(), got)
		}
	}
	// node-1 and node-2 acknowledge; node-3's hour-long session holds
	// the lowering up.
	if err := nodes[0].waitFor(ctx, func(md *Metadata) bool { return md.Lowering != nil && len(md.Lowering.Acked) == 2 }); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * leaseCheckEvery)
	if md := nodes[0].Metadata(); md.MaxLease != time.Hour || md.Acked("node-3") {
		t.Fatalf("lowered while node-3 has a longer session: %+v", md.LeaseBound)
	}
	sessions[2].set(30 * time.Second)
	if err := nodes[0].waitFor(ctx, func(md *Metadata) bool { return md.MaxLease == time.Minute && md.Lowering == nil }); err != nil {
		t.Fatalf("not lowered once the session ended: %v (%+v)", err, nodes[0].Metadata().LeaseBound)
	}
	if err := nodes[2].waitFor(ctx, func(md *Metadata) bool { return md.MaxLease == time.Minute }); err != nil {
		t.Fatal(err)
	}
	if st := nodes[2].Status(); st.MaxLease != "1m0s" || st.LeaseCeiling != "1m0s" {
		t.Errorf("status: max_lease %s, lease_ceiling %s", st.MaxLease, st.LeaseCeiling)
	}
}
