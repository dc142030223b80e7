package main

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/opstest"
)

// TestClusterV2HolderWorkEndsBeforeStop: the node a plain (not
// resumable) version 2 session is connected to, and which owns the name
// the session holds, is stopped (SIGTERM, a planned leave). The session
// gets ERROR 0x01; the claim's work, cancelled, finishes the operation
// it had in flight (500 ms) after the client has hung up. The name's
// next holder, a session on another node, is granted only after that,
// with a newer token: the name's new owner keeps the claim of a session
// its stopping node ended for the session's lease, since the client may
// still be stopping its work (the version 1 counterpart is
// TestClusterV1HolderWorkEndsBeforeMove, where the owner waits for the
// holder to hang up instead).
func TestClusterV2HolderWorkEndsBeforeStop(t *testing.T) {
	nodes := startCluster(t)
	_, victim := leaderAndFollower(t, nodes)
	live := others(nodes, victim)
	name := nameOwnedBy(t, victim.id, "v2-told")
	const lease, inFlight = 4 * time.Second, 500 * time.Millisecond
	ctx, cancel := context.WithTimeout(t.Context(), 4*opstest.Timeout)
	defer cancel()
	open := func(n *clusterProc) *baton.Session {
		s, err := baton.New(baton.Config{Address: n.addr, Routing: baton.RoutingOff}).OpenSession(ctx,
			baton.SessionOptions{Lease: lease, NoResume: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	holder, waiter := open(victim), open(live[1])

	type held struct {
		tok uint64
		at  time.Time
	}
	holding := make(chan held, 1)
	returned := make(chan time.Time, 1)
	go func() {
		holder.Do(ctx, name, baton.Exclusive, func(fctx context.Context, tok uint64) error {
			holding <- held{tok, time.Now()}
			<-fctx.Done()
			time.Sleep(inFlight) // the operation sent before the loss
			returned <- time.Now()
			return nil
		})
	}()
	var h held
	select {
	case h = <-holding: // after a new cluster's warm-up
	case <-ctx.Done():
		t.Fatal("the holder was not granted")
	}
	granted := make(chan held, 1)
	go func() {
		err := waiter.Do(ctx, name, baton.Exclusive, func(_ context.Context, tok uint64) error {
			granted <- held{tok, time.Now()}
			return nil
		})
		if err != nil {
			t.Errorf("the waiter: %v", err)
		}
	}()
	time.Sleep(200 * time.Millisecond) // the waiter queues at the owner

	stopped := time.Now()
	if err := victim.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var ret time.Time
	select {
	case ret = <-returned:
	case g := <-granted:
		t.Fatalf("the waiter was granted %v after the SIGTERM, while the holder's work runs", g.at.Sub(stopped))
	case <-ctx.Done():
		t.Fatal("the holder's work was not cancelled")
	}
	var g held
	select {
	case g = <-granted:
	case <-ctx.Done():
		t.Fatal("the waiter was not granted")
	}
	if g.at.Before(ret) {
		t.Errorf("the waiter was granted %v before the holder's work returned", ret.Sub(g.at))
	}
	if g.tok <= h.tok {
		t.Errorf("the waiter's token %d, want above the holder's %d", g.tok, h.tok)
	}
	t.Logf("holder's work returned %v after the SIGTERM; the waiter granted %v after that",
		ret.Sub(stopped).Round(time.Millisecond), g.at.Sub(ret).Round(time.Millisecond))
	<-victim.exited
}
