package server_test

// Promotion is a push, in strict FIFO order, with increasing tokens, and
// the lock is never held by two clients at once.

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// promotionBound is how soon a waiter must hear of its promotion after
// the owner's connection ends. Promotion is immediate; the bound only
// absorbs scheduling delays on a loaded machine.
const promotionBound = time.Second

// TestPromotionOnClose: when the owner closes its connection, gracefully
// or with a TCP reset, a waiter that sends nothing receives ACQUIRED at
// once with a larger token.
func TestPromotionOnClose(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"graceful", "reset"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			ts := startServer(t)
			owner, waiter := ts.dial(t), ts.dial(t)
			token := owner.mustOwn("p", longLease)
			waiter.mustWait("p", longLease)

			m := startStallMeter()
			start := time.Now()
			if how == "reset" {
				owner.reset()
			} else {
				owner.close()
			}
			f, err := waiter.read(waitLimit)
			elapsed := time.Since(start)
			stall := m.worst()
			if err != nil || f.Type != protocol.TypeAcquired {
				t.Fatalf("waiter got %v, %v; want ACQUIRED", f, err)
			}
			t.Logf("%s close of the owner: waiter promoted after %v (process stalled up to %v)", how, elapsed, stall)
			if elapsed > promotionBound+stall {
				t.Errorf("promotion took %v, want < %v + stall %v", elapsed, promotionBound, stall)
			}
			if f.Token <= token {
				t.Errorf("promoted token %d, want > %d", f.Token, token)
			}
			e := ts.events.wait(t, "released", peerEvent(server.EventReleased, owner))
			if e.Reason != server.ReasonGraceful || e.Token != token {
				t.Errorf("released %s, want reason graceful token %d", formatEvent(e), token)
			}
			g := ts.events.wait(t, "granted", peerEvent(server.EventGranted, waiter))
			if g.Token != f.Token {
				t.Errorf("granted event token %d, client got %d", g.Token, f.Token)
			}
			// A promoted session is pushed exactly once; its heartbeat
			// is answered with the same token.
			waiter.mustWrite(heartbeats(1))
			if h := waiter.mustRead(); h.Type != protocol.TypeAcquired || h.Token != f.Token {
				t.Fatalf("heartbeat after promotion answered %v, want ACQUIRED(%d)", h, f.Token)
			}
		})
	}
}

// TestFIFOOrder queues 24 waiters one by one and releases the lock
// repeatedly: each release promotes exactly the next waiter in arrival
// order, with strictly increasing tokens.
func TestFIFOOrder(t *testing.T) {
	t.Parallel()
	const waiters = 24
	ts := startServer(t)
	clients := []*client{ts.dial(t)}
	tokens := []uint64{clients[0].mustOwn("fifo", longLease)}
	for range waiters {
		c := ts.dial(t)
		c.mustWait("fifo", longLease) // queued before the next one connects
		clients = append(clients, c)
	}
	if info, ok := ts.Lock("fifo"); !ok || len(info.Waiters) != waiters {
		t.Fatalf("Lock(fifo) = %d waiters, %v; want %d", len(info.Waiters), ok, waiters)
	}
	for i := 1; i < len(clients); i++ {
		clients[i-1].close()
		tok := clients[i].expectAcquired()
		if tok <= tokens[i-1] {
			t.Fatalf("waiter %d got token %d after %d; tokens must increase", i, tok, tokens[i-1])
		}
		tokens = append(tokens, tok)
	}
	clients[len(clients)-1].close()
	ts.events.wait(t, "last release", peerEvent(server.EventReleased, clients[len(clients)-1]))

	// The observer saw the grants in arrival order too, and nobody else
	// was ever granted the lock.
	var granted []string
	for _, e := range ts.events.all() {
		if e.Kind == server.EventGranted && e.Lock == "fifo" {
			granted = append(granted, e.Peer.Addr)
		}
	}
	if len(granted) != len(clients) {
		t.Fatalf("%d grants, want %d", len(granted), len(clients))
	}
	for i, c := range clients {
		if granted[i] != c.addr() {
			t.Fatalf("grant %d went to %s, want %s (arrival order)", i, granted[i], c.addr())
		}
	}
}

// TestNoOverlap runs 100 clients that contend for one lock at once. Each
// marks itself inside a shared critical section when it receives ACQUIRED
// and out again just before it closes its connection; no two may ever be
// inside together, and tokens increase in grant order.
func TestNoOverlap(t *testing.T) {
	t.Parallel()
	const clients = 100
	ts := startServer(t)

	var (
		mu        sync.Mutex
		inside    = -1
		lastToken uint64
		entries   int
	)
	enter := func(id int, token uint64) error {
		mu.Lock()
		defer mu.Unlock()
		if inside != -1 {
			return fmt.Errorf("client %d granted (token %d) while client %d is inside", id, token, inside)
		}
		if token <= lastToken {
			return fmt.Errorf("client %d granted token %d after %d", id, token, lastToken)
		}
		inside, lastToken = id, token
		entries++
		return nil
	}
	exit := func(id int) error {
		mu.Lock()
		defer mu.Unlock()
		if inside != id {
			return fmt.Errorf("client %d leaving, but %d is inside", id, inside)
		}
		inside = -1
		return nil
	}

	run := func(id int) error {
		c, err := ts.tryDial(t)
		if err != nil {
			return err
		}
		defer c.close()
		if err := c.sendAcquire("contended", longLease); err != nil {
			return err
		}
		for {
			f, err := c.read(waitLimit)
			if err != nil {
				return fmt.Errorf("client %d: %v", id, err)
			}
			switch f.Type {
			case protocol.TypeWaiting:
				continue
			case protocol.TypeAcquired:
			default:
				return fmt.Errorf("client %d: got %v", id, f)
			}
			if err := enter(id, f.Token); err != nil {
				return err
			}
			time.Sleep(time.Millisecond) // a short hold; overlap is what is checked
			return exit(id)
		}
	}

	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for id := range clients {
		wg.Go(func() {
			if err := run(id); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if entries != clients {
		t.Errorf("%d clients held the lock, want %d", entries, clients)
	}
}

// TestReplyBeforePush: a waiter promoted between its entry into the table
// and the reply to its own ACQUIRE still sees WAITING first, then the
// push. The hook stalls the reply while the owner leaves; nothing may
// reach the waiter until the hook returns.
func TestReplyBeforePush(t *testing.T) {
	t.Parallel()
	type setup struct {
		ts            *testServer
		owner, waiter *client
	}
	var armed atomic.Pointer[setup]
	hooked := make(chan error, 1)
	ts := startServer(t, func(srv *server.Server) {
		server.SetAfterTableEntry(srv, func(addr string) {
			su := armed.Load()
			if su == nil || addr != su.waiter.addr() {
				return
			}
			su.owner.close()
			if _, ok := su.ts.events.waitFor(waitLimit, peerEvent(server.EventGranted, su.waiter)); !ok {
				hooked <- fmt.Errorf("waiter not granted within %v of the owner's close", waitLimit)
				return
			}
			// The push is computed; give it every chance to overtake.
			if f, err := su.waiter.read(300 * time.Millisecond); err == nil {
				hooked <- fmt.Errorf("waiter received %v before the reply to its ACQUIRE", f)
				return
			}
			hooked <- nil
		})
	})
	owner, waiter := ts.dial(t), ts.dial(t)
	owner.mustOwn("order", longLease)
	armed.Store(&setup{ts, owner, waiter})
	if err := waiter.sendAcquire("order", longLease); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-hooked:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * waitLimit):
		t.Fatal("hook did not run")
	}
	if f, err := waiter.read(waitLimit); err != nil || f.Type != protocol.TypeWaiting {
		t.Fatalf("first frame %v, %v; want WAITING", f, err)
	}
	waiter.expectAcquired()
}
