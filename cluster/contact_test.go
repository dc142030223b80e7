package cluster

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Short failover timings for the tests: T_self 1 s, T 1.5 s (above
// 1 s × 1.0202 + a 200 ms tick).
const (
	testSelfStop    = time.Second
	testRemoveAfter = 1500 * time.Millisecond
)

func TestValidateFailover(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		selfStop, removeAfter time.Duration
		ok                    bool
	}{
		{DefaultSelfStop, DefaultRemoveAfter, true},
		{testSelfStop, testRemoveAfter, true},
		{5 * time.Second, 5 * time.Second, false},                      // T = T_self: the mutation remove-at-tself
		{5 * time.Second, 5*time.Second + 350*time.Millisecond, false}, // below 5 s × 1.0202 + 250 ms = 5.351 s
		{5 * time.Second, 5*time.Second + 352*time.Millisecond, true},  // just above
		{0, time.Second, false},
		{time.Second, -time.Second, false},
	} {
		err := ValidateFailover(c.selfStop, c.removeAfter)
		if (err == nil) != c.ok {
			t.Errorf("ValidateFailover(%v, %v) = %v, want ok %v", c.selfStop, c.removeAfter, err, c.ok)
		}
		if err != nil && c.selfStop > 0 && c.removeAfter > 0 && !errors.Is(err, ErrFailoverTimings) {
			t.Errorf("ValidateFailover(%v, %v) = %v, want ErrFailoverTimings", c.selfStop, c.removeAfter, err)
		}
	}
	_, err := Open(Config{ID: "n", RaftAddr: "127.0.0.1:0", DataDir: t.TempDir(), SelfStop: 5 * time.Second, RemoveAfter: 5 * time.Second})
	if !errors.Is(err, ErrFailoverTimings) {
		t.Errorf("Open with T = T_self: %v, want ErrFailoverTimings", err)
	}
}

func TestWarmupScaledForDrift(t *testing.T) {
	t.Parallel()
	got := WarmupFor(10*time.Second, 2*time.Second)
	want := 10*time.Second*101/99 + 2*time.Second // 12.202 s
	if got < want || got > want+time.Millisecond {
		t.Errorf("WarmupFor(10s, 2s) = %v, want %v", got, want)
	}
	if got := WarmupFor(0, 2*time.Second); got != 2*time.Second {
		t.Errorf("WarmupFor(0, 2s) = %v", got)
	}
	if got := ContactInterval(DefaultSelfStop); got != 250*time.Millisecond {
		t.Errorf("ContactInterval(5s) = %v", got)
	}
	if got := ContactInterval(time.Second); got != 200*time.Millisecond {
		t.Errorf("ContactInterval(1s) = %v", got)
	}
}

// cuttable is an http.RoundTripper that fails every request while cut:
// the node's member API calls (its contact requests among them) fail,
// while its Raft link is left alone. With lose, a request is lost
// instead, as a network cut drops packets: it hangs until its context
// ends.
type cuttable struct {
	inner http.RoundTripper
	cut   atomic.Bool
	lose  bool
}

func (c *cuttable) RoundTrip(r *http.Request) (*http.Response, error) {
	if c.cut.Load() && c.lose {
		<-r.Context().Done()
		return nil, r.Context().Err()
	}
	if c.cut.Load() {
		return nil, errors.New("cut")
	}
	return c.inner.RoundTrip(r)
}

// startCuttableCluster starts size nodes with the short failover timings
// (removeAfter for T) whose member API calls can be cut, one switch per
// node; changes follow.
func startCuttableCluster(t *testing.T, size int, removeAfter time.Duration, changes ...func(*Config)) ([]*testNode, map[string]*cuttable) {
	t.Helper()
	cuts := map[string]*cuttable{}
	nodes := startClusterWith(t, size, func(c *Config) {
		cut := &cuttable{inner: c.HTTPClient.Transport}
		cuts[c.ID] = cut
		c.HTTPClient = &http.Client{Timeout: c.HTTPClient.Timeout, Transport: cut}
		c.SelfStop, c.RemoveAfter = testSelfStop, removeAfter
		for _, change := range changes {
			change(c)
		}
	})
	for _, n := range nodes {
		if err := n.WaitContact(ctxT(t)); err != nil {
			t.Fatalf("%s: %v", n.ID(), err)
		}
	}
	return nodes, cuts
}

// splitLeader waits for the leader of nodes and returns it with the
// others.
func splitLeader(t *testing.T, nodes []*testNode) (leader *testNode, others []*testNode) {
	t.Helper()
	leader = leaderOf(t, nodes)
	for _, n := range nodes {
		if n != leader {
			others = append(others, n)
		}
	}
	return leader, others
}

// A follower that still hears the leader (its Raft link is up: Raft's own
// last contact stays fresh) but is not heard by it stops serving after
// T_self, before the leader removes it after T; it applies its removal
// and never serves again, even once it is heard again.
func TestFollowerCutOffStopsBeforeRemoval(t *testing.T) {
	// Serial (no t.Parallel): it bounds the time to the self-stop, which load beside it would stretch.
	nodes, cuts := startCuttableCluster(t, 3, testRemoveAfter)
	ctx := ctxT(t)
	leader, others := splitLeader(t, nodes)
	f := others[0]
	name := nameOwnedBy(t, f.Ring(), f.ID())
	if _, err := f.AcquireEpoch(ctx); err != nil {
		t.Fatal(err)
	}
	if d := f.Route(name, false, time.Now()); d.Action != Serve {
		t.Fatalf("%s before the cut: %v", name, d.Action)
	}
	cut := time.Now()
	cuts[f.ID()].cut.Store(true)
	var stopped, removed time.Duration
	err := waitUntil(ctx, func() bool {
		if stopped == 0 && !f.InContact(time.Now()) {
			stopped = time.Since(cut)
			if d := f.Route(name, false, time.Now()); d.Action != NoContact {
				t.Errorf("%s after the self-stop: %v, want no-contact", name, d.Action)
			}
		}
		if removed == 0 && !leader.Ring().Has(f.ID()) {
			removed = time.Since(cut)
		}
		return stopped != 0 && removed != 0
	})
	if err != nil {
		t.Fatalf("stopped after %v, removed after %v: %v", stopped, removed, err)
	}
	t.Logf("cut %s off: it stopped serving after %v (T_self %v), the leader removed it after %v (T %v); Raft's last contact of the leader on it: %v ago",
		f.ID(), stopped.Round(time.Millisecond), testSelfStop, removed.Round(time.Millisecond), testRemoveAfter, time.Since(f.raft.LastContact()).Round(time.Millisecond))
	if stopped >= removed {
		t.Errorf("stopped serving after %v, not before its removal after %v", stopped, removed)
	}
	if stopped > testSelfStop+2*time.Second {
		t.Errorf("stopped serving after %v, want about T_self %v", stopped, testSelfStop)
	}
	// The leader last heard it up to a contact interval before the cut.
	if removed < testRemoveAfter-ContactInterval(testSelfStop) {
		t.Errorf("removed after %v, before T %v less a contact interval", removed, testRemoveAfter)
	}
	if err := waitUntil(ctx, func() bool { return leader.AutoRemovals() == 1 }); err != nil {
		t.Errorf("leader's automatic removals: %d", leader.AutoRemovals())
	}
	if err := waitUntil(ctx, f.Removed); err != nil {
		t.Fatalf("%s never applied its removal: %v", f.ID(), err)
	}
	cuts[f.ID()].cut.Store(false)
	time.Sleep(3 * ContactInterval(testSelfStop))
	if f.InContact(time.Now()) {
		t.Errorf("%s serves again after it was removed", f.ID())
	}
	if d := f.Route(name, false, time.Now()); d.Action != NoContact {
		t.Errorf("%s on the removed node: %v", name, d.Action)
	}
	if st := f.Status(); st.QuorumContact || !st.Removed {
		t.Errorf("removed node's status: quorum_contact %v, removed %v", st.QuorumContact, st.Removed)
	}
	// Restarted on its data directory and joined again, it is a member
	// again: its names are handed over to it by their owners since.
	dir, raftAddr, adminAddr := f.dir, f.raftAddr, f.admin.Addr().String()
	f.stop()
	r := startNodeWith(t, f.ID(), dir, raftAddr, adminAddr, func(c *Config) { c.SelfStop, c.RemoveAfter = testSelfStop, testRemoveAfter })
	if err := r.Join(ctx, leader.admin.Addr().String()); err != nil {
		t.Fatalf("the removed node joins again: %v", err)
	}
	if err := r.WaitContact(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := r.AcquireEpoch(ctx); err != nil {
		t.Fatal(err)
	}
	name = nameOwnedBy(t, r.Ring(), r.ID())
	if d := r.Route(name, false, time.Now()); d.Action != Serve && d.Action != Queue {
		t.Errorf("%s on the node joined again: %v, want serve (handed over) or queue", name, d.Action)
	}
}

// A node whose contact comes back before its removal serves again, but
// gates the names it owns for the warm-up: it ended its claims, and their
// holders may still believe they hold them.
func TestContactBackGatesNames(t *testing.T) {
	// Serial (no t.Parallel): the warm-up it reads must start within a second of the contact's return.
	nodes, cuts := startCuttableCluster(t, 3, time.Hour)
	ctx := ctxT(t)
	leader, others := splitLeader(t, nodes)
	f := others[0]
	if _, err := f.AcquireEpoch(ctx); err != nil {
		t.Fatal(err)
	}
	name := nameOwnedBy(t, f.Ring(), f.ID())
	cuts[f.ID()].cut.Store(true)
	if err := waitUntil(ctx, func() bool { return !f.InContact(time.Now()) }); err != nil {
		t.Fatal(err)
	}
	cuts[f.ID()].cut.Store(false)
	if err := f.WaitContact(ctx); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	d := f.Route(name, false, time.Now())
	w := f.Warmup()
	if d.Action != Queue || d.Until.Before(back.Add(w-time.Second)) || d.Until.After(back.Add(w)) {
		t.Fatalf("%s after contact came back: %+v, want queued for the warm-up %v", name, d, w)
	}
	if d := f.Route(name, false, d.Until); d.Action != Serve {
		t.Errorf("%s after the warm-up: %v", name, d.Action)
	}
	if f.Removed() || !leader.Ring().Has(f.ID()) {
		t.Errorf("removed with T an hour")
	}
}

// A killed leader is removed by the new leader about T after its
// election (every silence timer starts then).
func TestKilledLeaderRemovedByNewLeader(t *testing.T) {
	t.Parallel()
	nodes, _ := startCuttableCluster(t, 3, testRemoveAfter)
	ctx := ctxT(t)
	dead, alive := splitLeader(t, nodes)
	killed := time.Now()
	dead.stop()
	leader := leaderOf(t, alive)
	elected := time.Since(killed)
	if err := waitUntil(ctx, func() bool { return !leader.Ring().Has(dead.ID()) }); err != nil {
		t.Fatalf("the dead leader was never removed: %v", err)
	}
	removed := time.Since(killed)
	t.Logf("killed leader %s; %s elected after %v, removed it after %v (T %v)", dead.ID(), leader.ID(),
		elected.Round(time.Millisecond), removed.Round(time.Millisecond), testRemoveAfter)
	if removed < elected+testRemoveAfter {
		t.Errorf("removed %v after the kill, before election %v + T %v", removed, elected, testRemoveAfter)
	}
	for _, n := range alive {
		if !n.InContact(time.Now()) {
			t.Errorf("%s lost contact", n.ID())
		}
	}
}

// A member stopped by a planned stop (SIGTERM: marked stopped, out of the
// ring) is not removed however long it is silent, and comes back.
func TestStoppedMemberNotRemoved(t *testing.T) {
	t.Parallel()
	shortHandoff := func(c *Config) { c.HandoffTimeout = 2 * time.Second }
	nodes, _ := startCuttableCluster(t, 3, testRemoveAfter, shortHandoff)
	ctx := ctxT(t)
	leader, others := splitLeader(t, nodes)
	f := others[len(others)-1]
	f.SetMover(newFakeMover(f.ID()))
	if err := f.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	f.stop()
	time.Sleep(3 * testRemoveAfter)
	m, ok := leader.Metadata().Members[f.ID()]
	if !ok || m.State != Stopped {
		t.Fatalf("stopped member after 3 T: %+v, present %v", m, ok)
	}
	if got := leader.AutoRemovals(); got != 0 {
		t.Errorf("automatic removals: %d", got)
	}
	r := startNodeWith(t, f.ID(), f.dir, f.raftAddr, f.admin.Addr().String(), func(c *Config) {
		c.SelfStop, c.RemoveAfter = testSelfStop, testRemoveAfter
		shortHandoff(c)
	})
	r.SetMover(newFakeMover(r.ID()))
	if err := r.Rejoin(ctx); err != nil {
		t.Fatalf("rejoin: %v", err)
	}
	if err := r.WaitContact(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * testRemoveAfter)
	if !leader.Ring().Has(r.ID()) || !r.InContact(time.Now()) {
		t.Errorf("the rejoined member: in the ring %v, in contact %v", leader.Ring().Has(r.ID()), r.InContact(time.Now()))
	}
}

// A contact request is answered OK only by the leader and only for a
// member.
func TestContactRequestNeedsLeaderAndMember(t *testing.T) {
	t.Parallel()
	nodes, _ := startCuttableCluster(t, 2, testRemoveAfter)
	ctx := ctxT(t)
	leader := leaderOf(t, nodes)
	follower := nodes[0]
	if follower == leader {
		follower = nodes[1]
	}
	err := follower.post(ctx, leader.admin.Addr().String(), pathContact, []byte(`{"id":"stranger"}`), false, nil)
	var he *httpError
	if !errors.As(err, &he) || he.Status != http.StatusNotFound {
		t.Errorf("a stranger's contact: %v, want 404", err)
	}
	err = leader.post(ctx, follower.admin.Addr().String(), pathContact, []byte(`{"id":"`+leader.ID()+`"}`), false, nil)
	if !errors.As(err, &he) || he.Status != http.StatusServiceUnavailable || !strings.Contains(he.Msg, "not the leader") {
		t.Errorf("a contact to a follower: %v, want 503", err)
	}
	if err := follower.post(ctx, leader.admin.Addr().String(), pathContact, []byte(`{"id":"`+follower.ID()+`"}`), false, nil); err != nil {
		t.Errorf("a member's contact to the leader: %v", err)
	}
}

// TestRemovedNodeRestartedServes: a node killed, removed as silent, then
// started again on its data directory with its command line unchanged
// applies its old removal while it catches up, then its join: it must
// serve again (its names granted after the restart warm-up), not stay
// marked removed for good. It comes back through a member it is told
// (-join) or, told none, through the members it knows: removed, it
// hears from no leader.
func TestRemovedNodeRestartedServes(t *testing.T) {
	t.Parallel()
	for _, via := range []string{"join", "rejoin"} {
		t.Run(via, func(t *testing.T) { testRemovedNodeRestartedServes(t, via == "join") })
	}
}

func testRemovedNodeRestartedServes(t *testing.T, join bool) {
	nodes, _ := startCuttableCluster(t, 3, testRemoveAfter)
	ctx := ctxT(t)
	leader, others := splitLeader(t, nodes)
	dead := others[len(others)-1]
	raiseLease(t, leader, dead, time.Second)
	dir, raftAddr, adminAddr := dead.dir, dead.raftAddr, dead.admin.Addr().String()
	dead.stop()
	if err := waitUntil(ctx, func() bool { return !leader.Ring().Has(dead.ID()) }); err != nil {
		t.Fatalf("the dead node was never removed: %v", err)
	}
	back := startNodeWith(t, dead.ID(), dir, raftAddr, adminAddr, func(c *Config) {
		c.SelfStop, c.RemoveAfter = testSelfStop, testRemoveAfter
	})
	returned := time.Now()
	if !back.Restarted() {
		t.Fatal("the node found no cluster in its data directory")
	}
	rejoin := back.Rejoin
	if join {
		rejoin = func(ctx context.Context) error { return back.Join(ctx, leader.admin.Addr().String()) }
	}
	if err := rejoin(ctx); err != nil {
		t.Fatalf("back into the cluster: %v", err)
	}
	if _, err := back.AcquireEpoch(ctx); err != nil {
		t.Fatal(err)
	}
	if err := back.WaitContact(ctx); err != nil {
		t.Fatalf("no quorum contact after the join (removed: %v): %v", back.Removed(), err)
	}
	// The warm-up runs from the join, not from the start: under load the
	// join alone took seconds, so the bound counts from the contact.
	contact := time.Now()
	name := nameOwnedBy(t, back.Ring(), back.ID())
	limit := contact.Sub(returned) + back.Warmup() + 2*time.Second
	for {
		d := back.Route(name, false, time.Now())
		if d.Action == Serve {
			if early := time.Since(returned); early < back.Warmup()-100*time.Millisecond {
				t.Fatalf("%s serves its %s %v after its return, before the restart warm-up %v", back.ID(), name, early, back.Warmup())
			}
			break
		}
		if time.Since(returned) > limit {
			t.Fatalf("%s routes its %s as %+v %v after its return (removed: %v), want serve within the warm-up %v",
				back.ID(), name, d, time.Since(returned).Round(time.Millisecond), back.Removed(), back.Warmup())
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("served its names %v after its return (warm-up %v)", time.Since(returned).Round(time.Millisecond), back.Warmup())
}

// TestRemovedWhileStartingJoinsAgain: a node restarted just before the
// removal timeout finds itself still a member (its join is a no-op), and
// is then removed as silent while it catches up. WaitServing joins it
// again instead of waiting for contact that never comes.
func TestRemovedWhileStartingJoinsAgain(t *testing.T) {
	t.Parallel()
	nodes, _ := startCuttableCluster(t, 3, testRemoveAfter)
	ctx := ctxT(t)
	leader, others := splitLeader(t, nodes)
	dead := others[len(others)-1]
	dir, raftAddr, adminAddr := dead.dir, dead.raftAddr, dead.admin.Addr().String()
	dead.stop()
	cut := &cuttable{}
	back := startNodeWith(t, dead.ID(), dir, raftAddr, adminAddr, func(c *Config) {
		cut.inner = c.HTTPClient.Transport
		c.HTTPClient = &http.Client{Timeout: c.HTTPClient.Timeout, Transport: cut}
		c.SelfStop, c.RemoveAfter = testSelfStop, testRemoveAfter
	})
	if err := back.Rejoin(ctx); err != nil {
		t.Fatalf("rejoin while still a member: %v", err)
	}
	// Its contact requests fail until the leader removes it.
	cut.cut.Store(true)
	if err := waitUntil(ctx, back.Removed); err != nil {
		t.Fatalf("the restarted node never applied its removal: %v", err)
	}
	cut.cut.Store(false)
	if !leader.Ring().Has(back.ID()) {
		t.Logf("removed from the ring at version %d", leader.Ring().Version())
	}
	if err := back.WaitServing(ctx, back.Rejoin); err != nil {
		t.Fatalf("WaitServing after a removal while starting: %v", err)
	}
	if back.Removed() || !back.InContact(time.Now()) {
		t.Fatalf("removed %v, in contact %v after WaitServing", back.Removed(), back.InContact(time.Now()))
	}
	if err := waitUntil(ctx, func() bool { return leader.Ring().Has(back.ID()) }); err != nil {
		t.Fatalf("not back in the leader's ring: %v", err)
	}
}

// TestShortCutKeepsContact: a cut of a follower's member API calls
// shorter than its self-stop time, minus a contact interval, never stops
// it from serving. A contact request lost in the cut hangs until its
// timeout; contact must come back with the first request sent after the
// cut heals, not after that timeout.
func TestShortCutKeepsContact(t *testing.T) {
	// Serial (no t.Parallel): a cut shorter than the self-stop by two contact intervals must not stop the node, a margin that load eats.
	const selfStop, removeAfter = 3 * time.Second, 3500 * time.Millisecond
	var holes []*cuttable
	nodes := startClusterWith(t, 3, func(c *Config) {
		b := &cuttable{inner: c.HTTPClient.Transport, lose: true}
		holes = append(holes, b)
		c.HTTPClient = &http.Client{Timeout: c.HTTPClient.Timeout, Transport: b}
		c.SelfStop, c.RemoveAfter = selfStop, removeAfter
	})
	ctx := ctxT(t)
	for _, n := range nodes {
		if err := n.WaitContact(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var cut *testNode
	var hole *cuttable
	for i, n := range nodes {
		if !n.IsLeader() {
			cut, hole = n, holes[i]
		}
	}
	interval := ContactInterval(selfStop)
	cutFor := selfStop - 2*interval - 500*time.Millisecond // 2 s
	hole.cut.Store(true)
	start := time.Now()
	lost := time.Duration(-1)
	for time.Since(start) < cutFor+selfStop {
		if time.Since(start) >= cutFor && hole.cut.Load() {
			hole.cut.Store(false)
		}
		if !cut.InContact(time.Now()) && lost < 0 {
			lost = time.Since(start)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("cut %v (self-stop %v); contact age at the end %v", cutFor, selfStop, cut.ContactAge().Round(time.Millisecond))
	if lost >= 0 {
		t.Fatalf("a cut of %v stopped the node from serving %v after it began (self-stop %v)", cutFor, lost.Round(time.Millisecond), selfStop)
	}
}
