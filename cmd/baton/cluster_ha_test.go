package main

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/cluster"
	"github.com/batonlock/baton/internal/opstest"
	"github.com/batonlock/baton/protocol"
)

// The acceptance of high availability (docs/high-availability.md) on a
// real 3-node cluster with short failover settings (T_self 1 s, T 1.5 s)
// and automatic removal only: no 'baton cluster remove'.

// haLease is the holder's lease: longer than the failover time, about
// 1.8 × (T + 1 s) = 4.5 s with T 1.5 s, with room for a loaded machine.
const haLease = 8 * time.Second

// A Go client's resumable Session, given every node (Config.Nodes), holds
// a lock in Do through a kill -9 of the lock's owner node: the leader
// removes the dead node by itself, the name's new owner accepts the
// client's re-assertion, Do's context is never cancelled, the token is
// unchanged, and a client contending through another node is granted
// only once the holder releases.
func TestClusterHAHolderKeepsLockThroughOwnerKill(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, failoverArgs...)
	leader, victim := leaderAndFollower(t, nodes)
	live := others(nodes, victim)
	name := servedName(t, victim, "ha-holder", haLease)

	client := baton.New(baton.Config{Address: live[0].addr, Nodes: []string{victim.addr, live[1].addr}})
	// Resumable by default: the client was given the cluster.
	s, err := client.OpenSession(t.Context(), baton.SessionOptions{Lease: haLease, Label: "ha-holder"})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Resumable() {
		t.Fatal("a session of a Client given the cluster's nodes is not resumable")
	}
	t.Cleanup(func() { s.Close() })
	h := &resumableHolder{s: s, token: make(chan uint64, 1), finish: make(chan struct{}),
		cancelled: make(chan error, 1), done: make(chan error, 1)}
	go func() { h.done <- runHolder(t.Context(), s, name, h) }()
	var tok uint64
	select {
	case tok = <-h.token:
		h.token <- tok
	case err := <-h.done:
		t.Fatalf("Do: %v", err)
	case <-time.After(2 * opstest.Timeout):
		t.Fatal("the holder was not granted")
	}
	// The claim went straight to its owner, the node about to die.
	if _, out, _ := cli("show", "--admin", victim.admin, name); !strings.Contains(out, strconv.FormatUint(tok, 10)) {
		t.Fatalf("%s not held at its owner %s with token %d: %q", name, victim.id, tok, out)
	}

	// Timed from before the kill: the node's last contact is no later,
	// and its exit is seen late on a loaded machine, which would shorten
	// what is measured against the bound below.
	killed := time.Now()
	if err := victim.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-victim.exited
	var removed, accepted time.Duration
	for deadline := killed.Add(2 * opstest.Timeout); accepted == 0; {
		select {
		case cause := <-h.cancelled:
			t.Fatalf("fn's context cancelled %v after the kill: %v", time.Since(killed), cause)
		case err := <-h.done:
			t.Fatalf("Do returned %v after the kill: %v", time.Since(killed), err)
		default:
		}
		if removed == 0 {
			if st, err := status(t, leader); err == nil && !slices.Contains(st.Ring, victim.id) {
				removed = time.Since(killed)
			}
		}
		for _, n := range live {
			if _, out, _ := cli("show", "--admin", n.admin, name); strings.Contains(out, strconv.FormatUint(tok, 10)) {
				accepted = time.Since(killed)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never shown held with token %d on a live node after the kill (removed after %v)", name, tok, removed)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if removed == 0 {
		t.Fatalf("the re-assertion was accepted before %s's removal was seen", victim.id)
	}
	t.Logf("owner %s killed: removed after %v (T %v), the holder's re-assertion accepted after %v (lease %v), token %d",
		victim.id, removed.Round(time.Millisecond), failRemoveAfter, accepted.Round(time.Millisecond), haLease, tok)

	// A contender through the other live node waits, heartbeating, past
	// the lease the dead node's session would have kept the claim for.
	contender := opstest.Dial(t, live[1].addr)
	contender.Acquire(name, haLease)
	contender.Expect(protocol.TypeWaiting, 0)
	for time.Since(killed) < haLease+time.Second {
		select {
		case cause := <-h.cancelled:
			t.Fatalf("fn's context cancelled %v after the kill: %v", time.Since(killed), cause)
		default:
		}
		time.Sleep(100 * time.Millisecond)
		contender.Heartbeat()
		if f := contender.Read(); f.Type != protocol.TypeWaiting {
			t.Fatalf("contender via %s, %v after the kill: %v, want WAITING while the holder holds", live[1].id, time.Since(killed), f)
		}
	}
	if s.Err() != nil {
		t.Fatalf("holder's session: %v", s.Err())
	}
	h.end(t, tok)
	released := time.Now()
	for {
		contender.Heartbeat()
		f := contender.Read()
		if f.Type == protocol.TypeAcquired {
			if f.Token <= tok {
				t.Fatalf("contender granted token %d, not above the holder's %d", f.Token, tok)
			}
			// A new grant of a name that moved waits for the end of
			// its warm-up (W from the removal); the re-asserted
			// claim did not.
			t.Logf("contender granted %v after the holder released (%v after the kill; removal + W = %v), token %d",
				time.Since(released).Round(time.Millisecond), time.Since(killed).Round(time.Millisecond),
				(removed + cluster.WarmupFor(haLease, cluster.DefaultGateSlack)).Round(time.Millisecond), f.Token)
			break
		}
		if f.Type != protocol.TypeWaiting || time.Since(released) > 2*opstest.Timeout {
			t.Fatalf("contender after the release: %v (%v)", f, time.Since(released))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A kill -9 of a node with a lock whose holder died with it: the lock is
// granted again about T + W after the death, and the warm-up costs
// nothing to a name owned by a surviving node (p50 of a claim and its
// release, before the kill and during the warm-up).
func TestClusterHAGrantAfterDeathAndWarmupCost(t *testing.T) {
	// Serial (no t.Parallel): it compares claim latencies before and during the warm-up, which a change of load beside it would skew.
	nodes := startCluster(t, failoverArgs...)
	leader, victim := leaderAndFollower(t, nodes)
	live := others(nodes, victim)
	const lease = 2 * time.Second
	orphan := servedName(t, victim, "ha-orphan", lease)
	waitGrant(t, victim.addr, orphan, lease) // its holder is the victim's client: it dies with it
	warmup := cluster.WarmupFor(lease, cluster.DefaultGateSlack)

	stay := servedName(t, live[0], "ha-stay", lease) // past the new cluster's warm-up
	s, err := baton.New(baton.Config{Address: live[0].addr, Routing: baton.RoutingOff}).OpenSession(t.Context(),
		baton.SessionOptions{Lease: lease, Label: "ha-stay"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	claimOnce := func() time.Duration {
		start := time.Now()
		cl, err := s.TryAcquire(t.Context(), stay, baton.Exclusive)
		if err != nil {
			t.Fatalf("%s via its owner %s: %v", stay, live[0].id, err)
		}
		if err := cl.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		return time.Since(start)
	}
	var before []time.Duration
	for range 50 {
		before = append(before, claimOnce())
	}

	if err := victim.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-victim.exited
	killed := time.Now()
	removedAt := waitRemoved(t, leader, victim.id)
	removed := removedAt.Sub(killed)
	// The orphan's waiter, via a live node, heartbeating; meanwhile the
	// surviving owner's name is claimed and released in a loop.
	w := opstest.Dial(t, live[1].addr)
	w.Acquire(orphan, lease)
	w.Expect(protocol.TypeWaiting, 0)
	var during []time.Duration
	var granted time.Duration
	for granted == 0 {
		if time.Since(killed) > 4*opstest.Timeout {
			t.Fatalf("%s not granted within %v of the kill", orphan, 4*opstest.Timeout)
		}
		for range 5 {
			during = append(during, claimOnce())
		}
		time.Sleep(20 * time.Millisecond)
		w.Heartbeat()
		switch f := w.Read(); f.Type {
		case protocol.TypeAcquired:
			granted = time.Since(killed)
		case protocol.TypeWaiting:
		default:
			t.Fatalf("waiter via %s: %v", live[1].id, f)
		}
	}
	p50b, p50d := median(before), median(during)
	t.Logf("node %s killed: removed after %v; %s (holder gone) granted again after %v (T + W = %v + %v = %v)",
		victim.id, removed.Round(time.Millisecond), orphan, granted.Round(time.Millisecond),
		failRemoveAfter, warmup, failRemoveAfter+warmup)
	t.Logf("%s on surviving owner %s: p50 of claim + release %v before the kill (%d), %v during the warm-up (%d)",
		stay, live[0].id, p50b, len(before), p50d, len(during))
	if granted < failRemoveAfter-cluster.ContactInterval(failSelfStop)+warmup {
		t.Errorf("%s granted %v after the kill, before T + W less a contact interval", orphan, granted)
	}
	if len(during) < 20 {
		t.Errorf("only %d claims of %s during the warm-up", len(during), stay)
	}
	// Generous: a loaded machine; a gated name would wait seconds.
	if p50d > 10*p50b+50*time.Millisecond {
		t.Errorf("%s p50 %v during the warm-up, %v before: the warm-up cost a name that did not move", stay, p50d, p50b)
	}
}

// median returns the middle of ds.
func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
