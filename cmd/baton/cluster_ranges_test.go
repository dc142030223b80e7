package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/cluster"
	"github.com/batonlock/baton/internal/opstest"
)

// TestClusterRangeOwnerKilled: range locks of clients on two live nodes,
// served by a third that is killed (kill -9). Range locks are not
// re-asserted: the relayed holder's session ends (its client stops
// believing), and the key is granted again only at its new owner, after
// the failover and the warm-up (about T + W), never within the holder's
// give-up.
func TestClusterRangeOwnerKilled(t *testing.T) {
	nodes := startCluster(t, failoverArgs...)
	_, victim := leaderAndFollower(t, nodes)
	live := others(nodes, victim)
	const lease = 2 * time.Second
	key := nameOwnedBy(t, victim.id, "range")
	open := func(n *clusterProc, label string) *baton.Session {
		s, err := baton.New(baton.Config{Address: n.addr, Routing: baton.RoutingOff}).OpenSession(t.Context(),
			baton.SessionOptions{Lease: lease, Label: label})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	holder, other := open(live[0], "range-holder"), open(live[1], "range-waiter")
	ctx, cancel := context.WithTimeout(t.Context(), 2*opstest.Timeout)
	defer cancel()
	l := baton.RangeLock{Key: key, Owner: 1, Type: baton.WriteLock, End: baton.ToEnd}
	tok, err := holder.SetRange(ctx, l, true) // waits out a new cluster's warm-up
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.SetRange(ctx, l, false); !errors.Is(err, baton.ErrRangeConflict) {
		t.Fatalf("a second client's set on %s via %s: %v, want a conflict", key, live[1].id, err)
	}

	if err := victim.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-victim.exited
	killed := time.Now()
	granted := make(chan error, 1)
	var newTok uint64
	go func() {
		var err error
		newTok, err = other.SetRange(ctx, l, true)
		granted <- err
	}()
	select {
	case <-holder.Lost():
		t.Logf("the relayed holder's session ended %v after the kill: %v", time.Since(killed), holder.Err())
	case <-time.After(2 * opstest.Timeout):
		t.Fatal("the relayed holder's session lives on after its owner's death")
	}
	if err := <-granted; err != nil {
		t.Fatalf("the waiter's set after the kill: %v", err)
	}
	after := time.Since(killed)
	giveUp := lease * 4 / 5
	if after < giveUp {
		t.Errorf("granted %v after the kill, within the holder's give-up (%v)", after, giveUp)
	}
	if newTok <= tok {
		t.Errorf("new token %d, want above %d", newTok, tok)
	}
	t.Logf("%s killed: its key granted again %v later (T %v, W %v)", victim.id, after, failRemoveAfter,
		cluster.WarmupFor(lease, cluster.DefaultGateSlack))
}
