package server_test

// Heartbeat replies and the promotion push share one connection: a
// WAITING must never follow an ACQUIRED, and every reply is counted.

import (
	"fmt"
	"testing"

	"github.com/batonlock/baton/protocol"
)

// TestHeartbeatRepliesAroundPromotion: a waiter sends heartbeats as fast
// as it can while the owner leaves. It must read WAITING zero or more
// times, then ACQUIRED for the rest, all with one token: exactly one
// reply per heartbeat plus the one push, and nothing else. The owner
// leaves at a different point in each of 200 runs.
func TestHeartbeatRepliesAroundPromotion(t *testing.T) {
	t.Parallel()
	const runs, beats = 200, 16
	ts := startServer(t)
	for i := range runs {
		name := fmt.Sprintf("order-%d", i)
		owner, waiter := ts.dial(t), ts.dial(t)
		ownerToken := owner.mustOwn(name, longLease)
		waiter.mustWait(name, longLease)

		sent := make(chan error, 1)
		go func() {
			for range beats {
				if err := waiter.sendHeartbeat(); err != nil {
					sent <- err
					return
				}
			}
			sent <- nil
		}()
		leaveAfter := i % (beats + 1) // replies read before the owner leaves
		if leaveAfter == 0 {
			owner.close()
		}
		var frames []protocol.ServerFrame
		for len(frames) < beats+1 {
			frames = append(frames, waiter.mustRead())
			if len(frames) == leaveAfter {
				owner.close()
			}
		}
		if err := <-sent; err != nil {
			t.Fatalf("run %d: heartbeat: %v", i, err)
		}
		promoted := -1
		for j, f := range frames {
			switch {
			case f.Type == protocol.TypeWaiting && promoted < 0:
			case f.Type == protocol.TypeAcquired && f.Token > ownerToken && (promoted < 0 || f.Token == frames[promoted].Token):
				if promoted < 0 {
					promoted = j
				}
			default:
				t.Fatalf("run %d: frame %d is %v in %v; want WAITING…, then ACQUIRED with one token > %d",
					i, j, f, frames, ownerToken)
			}
		}
		if promoted < 0 {
			t.Fatalf("run %d: no ACQUIRED among %v", i, frames)
		}
		// One reply per heartbeat plus the push: nothing is left but EOF.
		waiter.expectOnlyEOFAfterHalfClose()
	}
}
