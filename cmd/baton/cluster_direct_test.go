package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/cluster"
	"github.com/batonlock/baton/internal/opstest"
	"github.com/batonlock/baton/protocol"
)

// A client given several nodes learns the ring from the first it reaches
// and sends each claim to its name's owner: version 2 claims on a session
// of their own with each owner, version 1 locks on a connection to the
// owner, none relayed. When an owner is killed its claims are lost, and
// a claim on its names goes through another node, which fails closed.
func TestClusterDirectClients(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t)
	st := waitStatus(t, nodes["n1"], "a leader", func(st cluster.Status) bool { return st.Leader != "" })
	// front is where the client connects first, victim the owner killed
	// at the end; neither is the leader, so the cluster keeps its quorum
	// without an election.
	var front, victim, leader *clusterProc
	for _, id := range []string{"n1", "n2", "n3"} {
		switch n := nodes[id]; {
		case id == st.Leader:
			leader = n
		case front == nil:
			front = n
		default:
			victim = n
		}
	}
	names := map[string]string{}
	for id := range nodes {
		names[id] = nameOwnedBy(t, id, "direct")
	}
	c := baton.New(baton.Config{Address: front.addr, Nodes: []string{leader.addr}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*opstest.Timeout)
	defer cancel()
	const lease = 5 * time.Second
	s, err := c.OpenSession(ctx, baton.SessionOptions{Lease: lease, Label: "direct"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	// A new cluster holds every name for its warm-up: the claims queue,
	// then are granted.
	claims := map[string]*baton.Claim{}
	for id, name := range names {
		cl, err := s.Acquire(ctx, name, baton.Exclusive)
		if err != nil {
			t.Fatalf("%s (owner %s): %v", name, id, err)
		}
		claims[id] = cl
	}
	for id, name := range names {
		l := adminLock(t, nodes[id], name)
		if l.Holder == nil || l.Holder.Label != "direct" || l.Holder.RelayedBy != "" {
			t.Errorf("%s at its owner %s: holder %+v; want the session's claim, not relayed", name, id, l.Holder)
		}
	}
	for id, n := range nodes {
		if m := scrape(t, n.ops); m["baton_cluster_relayed_claims"] != 0 || m["baton_cluster_upstream_sessions"] != 0 {
			t.Errorf("%s relays %v claims on %v upstream sessions; want none", id, m["baton_cluster_relayed_claims"], m["baton_cluster_upstream_sessions"])
		}
	}

	// A version 1 lock of the same client dials its owner.
	v1name := nameOwnedBy(t, victim.id, "direct-v1")
	l, err := c.Acquire(ctx, v1name, lease)
	if err != nil {
		t.Fatal(err)
	}
	if h := adminLock(t, victim, v1name).Holder; h == nil || h.Protocol != 1 || h.RelayedBy != "" {
		t.Errorf("%s at its owner %s: holder %+v; want the version 1 lock, not relayed", v1name, victim.id, h)
	}
	l.Release(context.Background())
	for id, n := range nodes {
		if m := scrape(t, n.ops); m["baton_cluster_relayed_connections_total"] != 0 {
			t.Errorf("%s relayed %v version 1 connections; want none", id, m["baton_cluster_relayed_connections_total"])
		}
	}

	// The victim dies: the claim it held is lost at once, the others live.
	if err := victim.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-victim.exited
	select {
	case <-claims[victim.id].Lost():
	case <-ctx.Done():
		t.Fatalf("the claim held at %s was not lost when %s died", victim.id, victim.id)
	}
	for id, cl := range claims {
		if id != victim.id && cl.Err() != nil {
			t.Errorf("claim at %s lost with %s: %v", id, victim.id, cl.Err())
		}
	}
	// A claim on one of its names goes through another node, which does
	// not grant it: the dead owner's names fail closed. Without waiting,
	// the answer is BUSY from a live node (the dead one answers nothing);
	// waiting, the claim is not granted.
	deadName := nameOwnedBy(t, victim.id, "direct-dead")
	if cl, err := s.TryAcquire(ctx, deadName, baton.Exclusive); !errors.Is(err, baton.ErrBusy) {
		t.Fatalf("no-wait claim on %s owned by the dead %s: %v, %v; want ErrBusy", deadName, victim.id, cl, err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
	defer wcancel()
	if cl, err := s.Acquire(wctx, deadName, baton.Exclusive); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("claim on %s owned by the dead %s: %v, %v; want it to wait (not granted)", deadName, victim.id, cl, err)
	}
	// The live owners' names are still served directly.
	for id, name := range names {
		if id == victim.id {
			continue
		}
		if err := claims[id].Release(ctx); err != nil {
			t.Fatal(err)
		}
		cl, err := s.Acquire(ctx, name, baton.Exclusive)
		if err != nil {
			t.Fatalf("%s owned by the live %s after the kill: %v", name, id, err)
		}
		if h := adminLock(t, nodes[id], name).Holder; h == nil || h.RelayedBy != "" {
			t.Errorf("%s after the kill: holder %+v at %s; want it direct", name, h, id)
		}
		cl.Release(ctx)
	}
	if err := s.Err(); err != nil {
		t.Errorf("the session ended: %v", err)
	}
}

// readRing reads one ring (MEMBER frames and their RINGEND) from s.
func readRing(t *testing.T, s *v2sess) (end protocol.Frame, members []protocol.Frame) {
	t.Helper()
	for range 100 {
		f := s.ReadV2()
		switch f.Type {
		case protocol.TypeRingMember:
			members = append(members, f)
		case protocol.TypeRingEnd:
			if f.RingCount() != len(members) {
				t.Fatalf("via %s: %v after %d members", s.via, f, len(members))
			}
			return f, members
		default:
			t.Fatalf("via %s: %v, want MEMBER or RINGEND", s.via, f)
		}
	}
	t.Fatalf("via %s: no RINGEND", s.via)
	return
}

// A cluster node answers RING with every member's id and lock address
// and the ring it applied, and pushes the next ring to a session that
// watches: here when a fourth node joins.
func TestClusterRingFrames(t *testing.T) {
	t.Parallel()
	nodes := startClusterLib(t)
	st := waitStatus(t, nodes["n2"], "a leader", func(st cluster.Status) bool { return st.Leader != "" })
	s := dialV2Session(t, nodes["n2"], 30*time.Second)
	s.Send(protocol.AppendRing(nil, protocol.RingWatch))
	end, members := readRing(t, s)
	if end.RingVersion() != st.AppliedRingVersion || end.Flags != 0 || len(members) != 3 {
		t.Fatalf("RING answered %v with %d members; status says ring %d", end, len(members), st.AppliedRingVersion)
	}
	for i, m := range members {
		n := nodes[m.MemberID()]
		if n == nil || m.MemberAddr() != n.addr || m.Flags != protocol.MemberInRing || (i > 0 && members[i-1].MemberID() >= m.MemberID()) {
			t.Errorf("member %d: %v; want n1, n2, n3 in order, in the ring, at their lock addresses", i, m)
		}
	}

	n4 := startNodeLib(t, "n4", nodes["n1"].admin)
	for range 10 { // a push per ring the node applies; n4 is in the last
		end, members = readRing(t, s)
		if end.Flags != protocol.RingPushed || end.RingVersion() <= st.AppliedRingVersion {
			t.Fatalf("pushed %v after ring %d", end, st.AppliedRingVersion)
		}
		if len(members) == 4 && members[3].MemberID() == "n4" && members[3].Flags == protocol.MemberInRing {
			if members[3].MemberAddr() != n4.addr {
				t.Errorf("n4 at %q, want %s", members[3].MemberAddr(), n4.addr)
			}
			t.Logf("ring %d with n4 pushed", end.RingVersion())
			return
		}
	}
	t.Fatal("no ring with n4 in it pushed")
}
