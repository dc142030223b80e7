package server_test

// Admin actions: force-release of an owner and kick of a waiter send
// ERROR 0x02 and close; the queue moves on at once and keeps its order.

import (
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// TestForceRelease: the owner receives ERROR 0x02 and EOF, and the waiter
// is promoted at once.
func TestForceRelease(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	owner, waiter := ts.dial(t), ts.dial(t)
	token := owner.mustOwn("fr", longLease)
	waiter.mustWait("fr", longLease)

	m := startStallMeter()
	start := time.Now()
	if err := ts.ForceRelease("fr"); err != nil {
		t.Fatalf("ForceRelease: %v", err)
	}
	tok := waiter.expectAcquired()
	elapsed := time.Since(start)
	stall := m.worst()
	t.Logf("waiter promoted %v after ForceRelease (process stalled up to %v)", elapsed, stall)
	if elapsed > promotionBound+stall {
		t.Errorf("promotion took %v, want < %v + stall %v", elapsed, promotionBound, stall)
	}
	if tok <= token {
		t.Errorf("waiter got token %d, want > %d", tok, token)
	}
	owner.expectError(protocol.CodeClosedByAdmin)
	e := ts.events.wait(t, "released", peerEvent(server.EventReleased, owner))
	if e.Reason != server.ReasonForce || e.Token != token {
		t.Errorf("released %s, want reason force token %d", formatEvent(e), token)
	}
	if info, ok := ts.Lock("fr"); !ok || info.Holder.Peer.Addr != waiter.addr() || info.Holder.Token != tok {
		t.Errorf("Lock(fr) = %+v, want held by %s with token %d", info.Holder, waiter, tok)
	}
}

// TestForceReleaseWithoutWaiters frees the lock for the next comer.
func TestForceReleaseWithoutWaiters(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	owner := ts.dial(t)
	owner.mustOwn("alone", longLease)
	if err := ts.ForceRelease("alone"); err != nil {
		t.Fatalf("ForceRelease: %v", err)
	}
	owner.expectError(protocol.CodeClosedByAdmin)
	ts.dial(t).mustOwn("alone", longLease)
}

// TestAdminErrors: admin actions on what does not exist report it.
func TestAdminErrors(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	if err := ts.ForceRelease("nobody"); !errors.Is(err, server.ErrNoLock) {
		t.Errorf("ForceRelease(unknown) = %v, want ErrNoLock", err)
	}
	if err := ts.Kick("nobody", "127.0.0.1:1"); !errors.Is(err, server.ErrNoLock) {
		t.Errorf("Kick(unknown lock) = %v, want ErrNoLock", err)
	}
	owner := ts.dial(t)
	owner.mustOwn("held", longLease)
	if err := ts.Kick("held", "127.0.0.1:1"); !errors.Is(err, server.ErrNoWaiter) {
		t.Errorf("Kick(unknown waiter) = %v, want ErrNoWaiter", err)
	}
	if err := ts.Kick("held", owner.addr()); !errors.Is(err, server.ErrNoWaiter) {
		t.Errorf("Kick(owner) = %v, want ErrNoWaiter: kick is for waiters", err)
	}
	owner.expectSilence(time.Millisecond)
}

// TestKickMiddleWaiter: the kicked waiter receives ERROR 0x02 and EOF;
// the others keep their FIFO order.
func TestKickMiddleWaiter(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	owner := ts.dial(t)
	owner.mustOwn("k", longLease)
	var ws []*client
	for range 4 {
		w := ts.dial(t)
		w.mustWait("k", longLease)
		ws = append(ws, w)
	}
	kicked := ws[1]
	if err := ts.Kick("k", kicked.addr()); err != nil {
		t.Fatalf("Kick: %v", err)
	}
	kicked.expectError(protocol.CodeClosedByAdmin)
	e := ts.events.wait(t, "dequeued", peerEvent(server.EventDequeued, kicked))
	if e.Reason != server.ReasonKick {
		t.Errorf("dequeued for %v, want kick", e.Reason)
	}
	rest := []*client{ws[0], ws[2], ws[3]}
	info, _ := ts.Lock("k")
	var queue []string
	for _, w := range info.Waiters {
		queue = append(queue, w.Peer.Addr)
	}
	if want := fmt.Sprint(rest); fmt.Sprint(queue) != want {
		t.Fatalf("queue after kick %v, want %v", queue, want)
	}
	prev := owner
	for _, w := range rest {
		prev.close()
		w.expectAcquired()
		prev = w
	}
}

// TestAdminWhileHeartbeating: a client whose heartbeats are in flight
// when it is force-released or kicked still receives its ERROR 0x02
// (after any replies) and then EOF, never a bare close.
func TestAdminWhileHeartbeating(t *testing.T) {
	t.Parallel()
	for _, action := range []string{"force-release", "kick"} {
		t.Run(action, func(t *testing.T) {
			t.Parallel()
			ts := startServer(t)
			for i := range 50 {
				name := fmt.Sprintf("busy-%d", i)
				owner, waiter := ts.dial(t), ts.dial(t)
				owner.mustOwn(name, longLease)
				waiter.mustWait(name, longLease)
				target, want := owner, protocol.TypeAcquired
				if action == "kick" {
					target, want = waiter, protocol.TypeWaiting
				}
				stop := make(chan struct{})
				done := make(chan struct{})
				go func() {
					defer close(done)
					for {
						select {
						case <-stop:
							return
						default:
						}
						if target.sendHeartbeat() != nil {
							return
						}
					}
				}()
				// Act once heartbeats are flowing.
				if f := target.mustRead(); f.Type != want {
					t.Fatalf("iteration %d: heartbeat answered %v, want %v", i, f, want)
				}
				var err error
				if action == "kick" {
					err = ts.Kick(name, waiter.addr())
				} else {
					err = ts.ForceRelease(name)
				}
				if err != nil {
					t.Fatalf("iteration %d: %s: %v", i, action, err)
				}
				frames, end := target.readUntilClosed()
				close(stop)
				<-done
				if err := endsWith(frames, end, want, protocol.CodeClosedByAdmin); err != nil {
					t.Fatalf("iteration %d: after %s: %v", i, action, err)
				}
				owner.close()
				waiter.close()
			}
		})
	}
}

// readUntilClosed reads frames until the connection ends, then closes
// it. It returns the frames and nil for a clean EOF, else the error.
func (c *client) readUntilClosed() ([]protocol.ServerFrame, error) {
	defer c.close()
	var frames []protocol.ServerFrame
	for {
		f, err := c.read(waitLimit)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return frames, err
		}
		frames = append(frames, f)
	}
}

// endsWith checks that frames, read until end, are zero or more replies
// of type reply, then ERROR(code), then a clean EOF (end == nil).
func endsWith(frames []protocol.ServerFrame, end error, reply protocol.Type, code protocol.Code) error {
	n := len(frames)
	for i, f := range frames {
		if i < n-1 && f.Type != reply {
			return fmt.Errorf("frame %d of %d is %v, want %v before the ERROR", i, n, f, reply)
		}
	}
	if n == 0 || frames[n-1].Type != protocol.TypeError || frames[n-1].Code != code {
		last := "nothing"
		if n > 0 {
			last = frames[n-1].String()
		}
		return fmt.Errorf("read %d frames ending with %s, then %v; want ERROR(0x%02x) last", n, last, end, uint8(code))
	}
	if end != nil {
		return fmt.Errorf("read %d frames ending with ERROR(0x%02x), then %v; want EOF", n, uint8(code), end)
	}
	return nil
}
