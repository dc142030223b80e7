package main

import (
	"errors"
	"io"
	"net/http"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/cluster"
	"github.com/batonlock/baton/internal/opstest"
	"github.com/batonlock/baton/protocol"
)

// Short failover timings for the process tests: T_self 1 s, T 1.5 s.
const (
	failSelfStop    = time.Second
	failRemoveAfter = 1500 * time.Millisecond
)

var failoverArgs = []string{"-cluster-self-stop", failSelfStop.String(), "-cluster-remove-after", failRemoveAfter.String()}

// others returns the nodes but n.
func others(nodes map[string]*clusterProc, n *clusterProc) []*clusterProc {
	var out []*clusterProc
	for _, id := range []string{"n1", "n2", "n3"} {
		if nodes[id] != n {
			out = append(out, nodes[id])
		}
	}
	return out
}

// leaderAndFollower returns the leader of nodes and one follower.
func leaderAndFollower(t *testing.T, nodes map[string]*clusterProc) (leader, follower *clusterProc) {
	t.Helper()
	st := waitStatus(t, nodes["n1"], "a leader", func(st cluster.Status) bool { return st.Leader != "" })
	leader = nodes[st.Leader]
	return leader, others(nodes, leader)[0]
}

// waitRemoved waits, bounded, until n's ring no longer has id, and
// returns when it saw it.
func waitRemoved(t *testing.T, n *clusterProc, id string) time.Time {
	t.Helper()
	waitStatus(t, n, id+" out of the ring", func(st cluster.Status) bool {
		return !slices.Contains(st.Ring, id) && !slices.ContainsFunc(st.Members, func(m cluster.Member) bool { return m.ID == id })
	})
	return time.Now()
}

// (a) kill -9 of a follower: the leader removes it after about T, and a
// name it owned is granted on its new owner only after T + W (W the
// warm-up: the largest lease × (1+ρ)/(1−ρ) + 2 s), never before.
func TestClusterKillFollowerAutoRemoved(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, failoverArgs...)
	leader, victim := leaderAndFollower(t, nodes)
	live := others(nodes, victim)
	const lease = 2 * time.Second
	deadName := nameOwnedBy(t, victim.id, "dead")
	waitGrant(t, victim.addr, deadName, lease) // held by a client of the victim
	warmup := cluster.WarmupFor(lease, cluster.DefaultGateSlack)

	killed := time.Now()
	if err := victim.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-victim.exited
	// Waiters on both live nodes, heartbeating; none may be granted
	// before T + W (less the contact interval by which the leader may
	// have last heard the victim before the kill).
	var waiters []*opstest.Conn
	for _, n := range live {
		c := opstest.Dial(t, n.addr)
		c.Acquire(deadName, lease)
		c.Expect(protocol.TypeWaiting, 0)
		waiters = append(waiters, c)
	}
	removedSeen := time.Time{}
	var granted time.Duration
	earliest := failRemoveAfter - cluster.ContactInterval(failSelfStop) + warmup
	for granted == 0 {
		if time.Since(killed) > 4*opstest.Timeout {
			t.Fatalf("%s not granted within %v of the kill", deadName, 4*opstest.Timeout)
		}
		time.Sleep(50 * time.Millisecond)
		if removedSeen.IsZero() {
			if st, err := status(t, leader); err == nil && !slices.Contains(st.Ring, victim.id) {
				removedSeen = time.Now()
			}
		}
		for i, c := range waiters {
			c.Heartbeat()
			switch f := c.Read(); f.Type {
			case protocol.TypeAcquired:
				granted = time.Since(killed)
				t.Logf("%s granted via %s", deadName, live[i].id)
			case protocol.TypeWaiting:
			default:
				t.Fatalf("waiter via %s: %v", live[i].id, f)
			}
		}
	}
	if removedSeen.IsZero() {
		t.Fatalf("%s granted before its owner's removal was seen", deadName)
	}
	removed := removedSeen.Sub(killed)
	t.Logf("follower %s killed: removed after %v (T %v), %s granted after %v (T + W = %v + %v = %v)",
		victim.id, removed.Round(time.Millisecond), failRemoveAfter, deadName, granted.Round(time.Millisecond),
		failRemoveAfter, warmup, failRemoveAfter+warmup)
	if removed < failRemoveAfter-cluster.ContactInterval(failSelfStop) || removed > failRemoveAfter+opstest.Timeout {
		t.Errorf("removed %v after the kill, want about T %v", removed, failRemoveAfter)
	}
	if granted < earliest {
		t.Errorf("%s granted %v after the kill, before T + W less a contact interval = %v", deadName, granted, earliest)
	}
	if v := scrape(t, leader.ops)["baton_cluster_auto_removals_total"]; v != 1 {
		t.Errorf("leader's baton_cluster_auto_removals_total = %v, want 1", v)
	}
}

// (b) SIGSTOP of the node that owns names held by its clients, a version
// 1 connection and a version 2 session, both heartbeating all along: the
// leader removes it after T; after SIGCONT it confirms no heartbeat sent
// meanwhile (no answer but ERROR 0x03 to either) and is not ready.
func TestClusterSIGSTOPOwnerStopsServing(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, failoverArgs...)
	leader, victim := leaderAndFollower(t, nodes)
	const lease = 30 * time.Second // outlives the stop: only the self-stop ends them
	name1 := nameOwnedBy(t, victim.id, "frozen1")
	name2 := nameOwnedBy(t, victim.id, "frozen2")
	v1, _ := waitGrant(t, victim.addr, name1, lease)
	s := dialV2Session(t, victim, lease)
	var id uint32
	if f := s.claimV2(t, &id, name2); f.Type != protocol.TypeGranted {
		t.Fatalf("%s: %v", name2, f)
	}
	v1.Heartbeat()
	v1.Expect(protocol.TypeAcquired, 0)
	s.ping(t)
	waitReadyPlain(t, victim)

	if err := victim.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			victim.cmd.Process.Signal(syscall.SIGCONT)
		}
	}
	defer resume()
	// Heartbeats keep coming while it is stopped; they wait in its socket.
	beat := time.NewTicker(200 * time.Millisecond)
	defer beat.Stop()
	var removed time.Duration
	for removed == 0 {
		<-beat.C
		v1.Heartbeat()
		s.seq++
		s.Send(protocol.AppendPing(nil, s.seq))
		if st, err := status(t, leader); err == nil && !slices.Contains(st.Ring, victim.id) {
			removed = time.Since(stopped)
		}
		if time.Since(stopped) > 2*opstest.Timeout {
			t.Fatalf("%s not removed within %v of its SIGSTOP", victim.id, 2*opstest.Timeout)
		}
	}
	t.Logf("%s stopped: removed by the leader %s after %v (T %v)", victim.id, leader.id, removed.Round(time.Millisecond), failRemoveAfter)
	resume()
	// Everything it writes from now on: ERROR 0x03, then EOF.
	f := v1.Read()
	if f.Type != protocol.TypeError || f.Code != protocol.CodeNotOwner {
		t.Fatalf("version 1 holder after SIGCONT: %v, want ERROR 0x03 and no heartbeat answer", f)
	}
	if _, err := opstest.ReadFrame(v1.Conn); !errors.Is(err, io.EOF) {
		t.Errorf("version 1 holder after ERROR 0x03: %v, want EOF", err)
	}
	f2 := s.ReadV2()
	if f2.Type != protocol.TypeSessionError || f2.Code != protocol.CodeNotOwner {
		t.Fatalf("version 2 session after SIGCONT: %v, want ERROR 0x03 and no PONG", f2)
	}
	ended := time.Since(stopped)
	t.Logf("after SIGCONT both sessions ended with ERROR 0x03, %v after the SIGSTOP", ended.Round(time.Millisecond))
	if code := readyzPlain(t, victim); code == http.StatusOK {
		t.Errorf("%s ready after its removal", victim.id)
	}
	// A new session on it is refused, retryable.
	c := opstest.Dial(t, victim.addr)
	c.Acquire(name1, lease)
	c.Expect(protocol.TypeError, protocol.CodeNotOwner)
}

// (c) kill -9 of the Raft leader: the new leader removes it about T after
// its election (every silence timer starts then).
func TestClusterKillLeaderAutoRemoved(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, failoverArgs...)
	victim, _ := leaderAndFollower(t, nodes)
	live := others(nodes, victim)
	killed := time.Now()
	if err := victim.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-victim.exited
	st := waitStatus(t, live[0], "a new leader", func(st cluster.Status) bool { return st.Leader != "" && st.Leader != victim.id })
	elected := time.Since(killed)
	removedAt := waitRemoved(t, live[0], victim.id)
	removed := removedAt.Sub(killed)
	t.Logf("leader %s killed: %s leads %v later and removed it %v after the kill (T %v)", victim.id, st.Leader,
		elected.Round(time.Millisecond), removed.Round(time.Millisecond), failRemoveAfter)
	if removed < failRemoveAfter {
		t.Errorf("removed %v after the kill, before T %v", removed, failRemoveAfter)
	}
	for _, n := range live {
		waitStatus(t, n, "a ring of 2", func(st cluster.Status) bool { return len(st.Ring) == 2 })
		waitReadyPlain(t, n)
	}
}
