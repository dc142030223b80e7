package main

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/opstest"
)

// TestClusterV1HolderWorkEndsBeforeMove: the owner of a name held by a
// version 1 Do is stopped (SIGTERM, a planned leave). The holder is told
// ERROR 0x01 and its function's context is cancelled; the function then
// finishes the operation it had in flight. The client hangs up only when
// the function has returned, and the name's next holder, a DoRetry on
// another node, is granted only after that, with a newer token. Before,
// the client hung up at the ERROR and the next holder could start while
// the operation was still under way (the cluster fault suite saw its
// write refused by the fence).
func TestClusterV1HolderWorkEndsBeforeMove(t *testing.T) {
	t.Parallel()
	testWorkEndsBeforeNextHolder(t, "v1-told", func(victim *clusterProc, live []*clusterProc) (holder, waiter doFunc) {
		do := func(n *clusterProc, retry bool) doFunc {
			c := baton.New(baton.Config{Address: n.addr})
			return func(ctx context.Context, name string, fn func(context.Context, uint64) error) error {
				if retry {
					return c.DoRetry(ctx, name, tellLease, fn)
				}
				return c.Do(ctx, name, tellLease, fn)
			}
		}
		return do(live[0], false), do(live[1], true)
	})
}

// TestClusterV2HolderWorkEndsBeforeStop: the node a plain (not
// resumable) version 2 session is connected to, and which owns the name
// the session holds, is stopped (SIGTERM, a planned leave). The session
// gets ERROR 0x01; the claim's work, cancelled, finishes the operation
// it had in flight after the client has hung up. The name's next holder,
// a session on another node, is granted only after that, with a newer
// token: the name's new owner keeps the claim of a session its stopping
// node ended for the session's lease, since the client may still be
// stopping its work (for version 1 the owner waits for the holder to
// hang up instead).
func TestClusterV2HolderWorkEndsBeforeStop(t *testing.T) {
	t.Parallel()
	testWorkEndsBeforeNextHolder(t, "v2-told", func(victim *clusterProc, live []*clusterProc) (holder, waiter doFunc) {
		do := func(n *clusterProc) doFunc {
			s, err := baton.New(baton.Config{Address: n.addr, Routing: baton.RoutingOff}).OpenSession(t.Context(),
				baton.SessionOptions{Lease: tellLease, Resume: baton.ResumeOff})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return func(ctx context.Context, name string, fn func(context.Context, uint64) error) error {
				return s.Do(ctx, name, baton.Exclusive, fn)
			}
		}
		return do(victim), do(live[1])
	})
}

// doFunc runs fn while holding name, as Client.Do or Session.Do does.
type doFunc func(ctx context.Context, name string, fn func(ctx context.Context, token uint64) error) error

// tellLease is the lease of testWorkEndsBeforeNextHolder's clients: long
// enough that no one gives up or expires during the test.
const tellLease = 4 * time.Second

// testWorkEndsBeforeNextHolder starts a three-node cluster and, on a name
// owned by a follower, a holder (from clients, which also gives a
// waiter) whose work, once cancelled, finishes an operation in flight
// (500 ms); then stops the owner with SIGTERM and requires that the
// waiter is granted only after the holder's work returned, with a newer
// token, and that the holder's Do reports the loss.
func testWorkEndsBeforeNextHolder(t *testing.T, prefix string, clients func(victim *clusterProc, live []*clusterProc) (holder, waiter doFunc)) {
	nodes := startCluster(t)
	_, victim := leaderAndFollower(t, nodes)
	name := nameOwnedBy(t, victim.id, prefix)
	holder, waiter := clients(victim, others(nodes, victim))
	const inFlight = 500 * time.Millisecond
	ctx, cancel := context.WithTimeout(t.Context(), 4*opstest.Timeout)
	defer cancel()

	type held struct {
		tok uint64
		at  time.Time
	}
	holding := make(chan held, 1)
	returned := make(chan time.Time, 1)
	holderDone := make(chan error, 1)
	go func() {
		holderDone <- holder(ctx, name, func(fctx context.Context, tok uint64) error {
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
	waiterDone := make(chan error, 1)
	go func() {
		waiterDone <- waiter(ctx, name, func(_ context.Context, tok uint64) error {
			granted <- held{tok, time.Now()}
			return nil
		})
	}()
	// The waiter queues at the owner before the stop.
	for deadline := time.Now().Add(opstest.Timeout); len(adminLock(t, victim, name).Waiters) == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("the waiter is not queued at the owner %s within %v", victim.id, opstest.Timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}

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
	if err := <-holderDone; err == nil {
		t.Error("the holder's Do returned nil, want the loss")
	}
	// Awaited before the test's cleanup closes the waiter's session: its
	// release, relayed under load, may still be on its way.
	if err := <-waiterDone; err != nil {
		t.Errorf("the waiter: %v", err)
	}
	<-victim.exited
}
