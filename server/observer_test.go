package server_test

// The Observer sees every event of a session in order, and per lock the
// ownership events in exactly the order they happened.

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// TestObserverScript drives a scripted sequence and checks each peer's
// events, kinds, reasons, codes and tokens.
func TestObserverScript(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	a, b, c := ts.dial(t), ts.dial(t), ts.dial(t)

	tokA := a.mustOwn("obs", longLease)
	a.mustWrite(heartbeats(1))
	a.expectAcquired()
	b.mustWait("obs", longLease)
	c.mustWait("obs", longLease)

	c.close() // a waiter leaves
	ts.events.wait(t, "disconnected", peerEvent(server.EventDisconnected, c))

	a.mustWrite([]byte{0x7f}) // the owner breaks the protocol
	a.expectError(protocol.CodeUnknownMessage)
	tokB := b.expectAcquired()
	ts.events.wait(t, "disconnected", peerEvent(server.EventDisconnected, a))

	if err := ts.ForceRelease("obs"); err != nil {
		t.Fatal(err)
	}
	b.expectError(protocol.CodeClosedByAdmin)
	ts.events.wait(t, "disconnected", peerEvent(server.EventDisconnected, b))

	evs := ts.events.all()
	want := map[*client][]string{
		a: {"connected", "granted obs " + fmt.Sprint(tokA), "heartbeat",
			"released obs " + fmt.Sprint(tokA) + " protocol_error", "error_sent 0x13", "disconnected"},
		b: {"connected", "granted obs " + fmt.Sprint(tokB), "force_release",
			"released obs " + fmt.Sprint(tokB) + " force", "error_sent 0x02", "disconnected"},
		c: {"connected", "dequeued obs graceful", "disconnected"},
	}
	for cl, w := range want {
		var got []string
		for _, e := range evs {
			if e.Peer.Addr == cl.addr() {
				got = append(got, scriptEvent(e))
			}
		}
		if !slices.Equal(got, w) {
			t.Errorf("events of %s:\n\tgot  %q\n\twant %q", cl, got, w)
		}
	}
	var lockSeq []string
	for _, e := range evs {
		if e.Lock == "obs" {
			lockSeq = append(lockSeq, e.Kind.String()+" "+e.Peer.Addr)
		}
	}
	wantSeq := []string{"granted " + a.addr(), "dequeued " + c.addr(), "released " + a.addr(),
		"granted " + b.addr(), "force_release " + b.addr(), "released " + b.addr()}
	if !slices.Equal(lockSeq, wantSeq) {
		t.Errorf("events of lock obs:\n\tgot  %q\n\twant %q", lockSeq, wantSeq)
	}
	if g := findEvent(evs, peerEvent(server.EventGranted, b)); g.Waited <= 0 {
		t.Errorf("granted to a waiter with Waited %v, want > 0", g.Waited)
	}
	if r := findEvent(evs, peerEvent(server.EventReleased, a)); r.Held <= 0 {
		t.Errorf("released with Held %v, want > 0", r.Held)
	}
}

func scriptEvent(e server.Event) string {
	switch e.Kind {
	case server.EventGranted:
		return fmt.Sprintf("granted %s %d", e.Lock, e.Token)
	case server.EventReleased:
		return fmt.Sprintf("released %s %d %s", e.Lock, e.Token, e.Reason)
	case server.EventDequeued:
		return fmt.Sprintf("dequeued %s %s", e.Lock, e.Reason)
	case server.EventErrorSent:
		return fmt.Sprintf("error_sent 0x%02x", uint8(e.Code))
	}
	return e.Kind.String()
}

func findEvent(evs []server.Event, match func(server.Event) bool) server.Event {
	for _, e := range evs {
		if match(e) {
			return e
		}
	}
	return server.Event{}
}

// TestObserverOrderUnderHandovers: 200 concurrent handovers over four
// locks; per lock, every release comes before the next grant, and each
// release is of the holder just granted.
func TestObserverOrderUnderHandovers(t *testing.T) {
	t.Parallel()
	const locks, perLock = 4, 51 // 4 × 50 handovers
	ts := startServer(t)
	var wg sync.WaitGroup
	errs := make(chan error, locks*perLock)
	for l := range locks {
		name := fmt.Sprintf("hand-%d", l)
		for range perLock {
			wg.Go(func() {
				c, err := ts.tryDial(t)
				if err != nil {
					errs <- err
					return
				}
				defer c.close()
				if err := c.sendAcquire(name, longLease); err != nil {
					errs <- err
					return
				}
				for {
					f, err := c.read(waitLimit)
					if err != nil {
						errs <- err
						return
					}
					if f.Type == protocol.TypeAcquired {
						return // close at once: hand over
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Every client has closed; wait for the server to see every release.
	ts.events.waitCount(t, locks*perLock, kind(server.EventReleased))
	type holder struct {
		peer  string
		token uint64
	}
	current := map[string]*holder{}
	grants := map[string]int{}
	lastToken := map[string]uint64{}
	for _, e := range ts.events.all() {
		switch e.Kind {
		case server.EventGranted:
			if h := current[e.Lock]; h != nil {
				t.Fatalf("lock %s granted to %s (token %d) before %s released it", e.Lock, e.Peer.Addr, e.Token, h.peer)
			}
			if e.Token <= lastToken[e.Lock] {
				t.Fatalf("lock %s: token %d after %d", e.Lock, e.Token, lastToken[e.Lock])
			}
			current[e.Lock] = &holder{e.Peer.Addr, e.Token}
			lastToken[e.Lock] = e.Token
			grants[e.Lock]++
		case server.EventReleased:
			h := current[e.Lock]
			if h == nil || h.peer != e.Peer.Addr || h.token != e.Token {
				t.Fatalf("lock %s released by %s (token %d), but the holder is %+v", e.Lock, e.Peer.Addr, e.Token, h)
			}
			if e.Reason != server.ReasonGraceful {
				t.Errorf("lock %s released for %v, want graceful", e.Lock, e.Reason)
			}
			current[e.Lock] = nil
		}
	}
	for l := range locks {
		if name := fmt.Sprintf("hand-%d", l); grants[name] != perLock {
			t.Errorf("lock %s granted %d times, want %d", name, grants[name], perLock)
		}
	}
}
