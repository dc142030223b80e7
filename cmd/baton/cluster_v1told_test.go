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
// finishes the operation it had in flight (500 ms). The client hangs up
// only when the function has returned, and the name's next holder, a
// DoRetry on another node, is granted only after that, with a newer
// token. Before, the client hung up at the ERROR and the next holder
// could start while the operation was still under way (the cluster fault
// suite saw its write refused by the fence).
func TestClusterV1HolderWorkEndsBeforeMove(t *testing.T) {
	nodes := startCluster(t)
	_, victim := leaderAndFollower(t, nodes)
	live := others(nodes, victim)
	name := nameOwnedBy(t, victim.id, "v1-told")
	const lease, inFlight = 4 * time.Second, 500 * time.Millisecond
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
		c := baton.New(baton.Config{Address: live[0].addr})
		holderDone <- c.Do(ctx, name, lease, func(fctx context.Context, tok uint64) error {
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
		c := baton.New(baton.Config{Address: live[1].addr})
		err := c.DoRetry(ctx, name, lease, func(_ context.Context, tok uint64) error {
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
	if err := <-holderDone; err == nil {
		t.Error("the holder's Do returned nil, want the loss")
	}
	<-victim.exited
}
