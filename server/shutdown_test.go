package server_test

// Graceful shutdown tells every session ERROR 0x01 and promotes nobody;
// Close closes everything without a frame.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// shutdownBound is how soon Shutdown must return when every client
// closes its side on EOF, as clients do.
const shutdownBound = 2 * time.Second

// scene is a server with owners and waiters on two locks and a
// connection that has not sent ACQUIRE yet, each with its reply read.
type scene struct {
	ts      *testServer
	clients []*client
	owners  map[*client]bool
}

func newScene(t *testing.T, configure ...func(*server.Server)) *scene {
	t.Helper()
	sc := &scene{ts: startServer(t, configure...), owners: map[*client]bool{}}
	for _, name := range []string{"a", "b"} {
		owner := sc.ts.dial(t)
		owner.mustOwn(name, longLease)
		sc.owners[owner] = true
		sc.clients = append(sc.clients, owner)
		for range 2 {
			w := sc.ts.dial(t)
			w.mustWait(name, longLease)
			sc.clients = append(sc.clients, w)
		}
	}
	idle := sc.ts.dial(t)
	sc.ts.events.wait(t, "connected", peerEvent(server.EventConnected, idle))
	sc.clients = append(sc.clients, idle)
	return sc
}

// readAll has every client read until its connection ends (closing it
// then, as a client does) and returns what each read.
func (sc *scene) readAll() func() map[*client]readResult {
	results := map[*client]readResult{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, c := range sc.clients {
		wg.Go(func() {
			frames, end := c.readUntilClosed()
			mu.Lock()
			results[c] = readResult{frames, end}
			mu.Unlock()
		})
	}
	return func() map[*client]readResult {
		wg.Wait()
		return results
	}
}

type readResult struct {
	frames []protocol.ServerFrame
	end    error // nil for a clean EOF
}

// noGrantAfterShutdown checks that the observer saw no grant once
// shutdown had begun, and that every claim ended for reason shutdown.
func noGrantAfterShutdown(t *testing.T, evs []server.Event) {
	t.Helper()
	began := false
	for _, e := range evs {
		switch e.Kind {
		case server.EventShutdown:
			began = true
		case server.EventGranted:
			if began {
				t.Errorf("granted after shutdown began: %s", formatEvent(e))
			}
		case server.EventReleased, server.EventDequeued:
			if !began || e.Reason != server.ReasonShutdown {
				t.Errorf("%s, want it during shutdown with reason shutdown", formatEvent(e))
			}
		}
	}
	if !began {
		t.Errorf("no shutdown event")
	}
}

// TestShutdown: owners, waiters and a connection without ACQUIRE all
// receive ERROR 0x01 then EOF; nobody is promoted; Shutdown returns nil
// promptly and Serve returns ErrServerClosed; nobody can connect after.
func TestShutdown(t *testing.T) {
	t.Parallel()
	sc := newScene(t)
	ts := sc.ts
	results := sc.readAll()

	start := time.Now()
	err := ts.Shutdown(context.Background())
	elapsed := time.Since(start)
	if err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	t.Logf("Shutdown returned after %v", elapsed)
	if elapsed > shutdownBound {
		t.Errorf("Shutdown took %v, want < %v", elapsed, shutdownBound)
	}
	if err := ts.serveResult(); !errors.Is(err, server.ErrServerClosed) {
		t.Errorf("Serve returned %v, want ErrServerClosed", err)
	}
	for c, r := range results() {
		if len(r.frames) != 1 || r.frames[0].Type != protocol.TypeError ||
			r.frames[0].Code != protocol.CodeShuttingDown || r.end != nil {
			t.Errorf("%s (owner %v) read %v then %v; want ERROR(0x01) then EOF", c, sc.owners[c], r.frames, r.end)
		}
	}
	if n := ts.Sessions(); n != 0 {
		t.Errorf("%d sessions after Shutdown, want 0", n)
	}
	noGrantAfterShutdown(t, ts.events.all())
	if n := ts.events.count(kind(server.EventErrorSent)); n != len(sc.clients) {
		t.Errorf("%d error_sent events, want %d", n, len(sc.clients))
	}
	if c, err := net.DialTimeout("tcp", ts.addr, waitLimit); err == nil {
		c.Close()
		t.Errorf("dial after Shutdown succeeded")
	}
	if err := ts.Serve(newListener(t)); !errors.Is(err, server.ErrServerClosed) {
		t.Errorf("Serve after Shutdown = %v, want ErrServerClosed", err)
	}
	if err := ts.ListenAndServe(); !errors.Is(err, server.ErrServerClosed) {
		t.Errorf("ListenAndServe after Shutdown = %v, want ErrServerClosed", err)
	}
	if !ts.ShuttingDown() {
		t.Errorf("ShuttingDown() = false after Shutdown")
	}
}

func newListener(t *testing.T) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// TestShutdownWhileHeartbeating: clients whose heartbeats are in flight
// when shutdown begins receive their replies, then ERROR 0x01, then EOF;
// a waiter never receives ACQUIRED.
func TestShutdownWhileHeartbeating(t *testing.T) {
	t.Parallel()
	for i := range 20 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			ts := startServer(t)
			owner, waiter := ts.dial(t), ts.dial(t)
			owner.mustOwn("busy", longLease)
			waiter.mustWait("busy", longLease)

			var wg sync.WaitGroup
			stop := make(chan struct{})
			for _, c := range []*client{owner, waiter} {
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						if c.sendHeartbeat() != nil {
							return
						}
					}
				})
			}
			// Shut down once both are heartbeating.
			owner.mustRead()
			waiter.mustRead()
			shutdownErr := make(chan error, 1)
			go func() { shutdownErr <- ts.Shutdown(context.Background()) }()
			var ownerFrames, waiterFrames []protocol.ServerFrame
			var ownerEnd, waiterEnd error
			wg.Go(func() { ownerFrames, ownerEnd = owner.readUntilClosed() })
			wg.Go(func() { waiterFrames, waiterEnd = waiter.readUntilClosed() })
			close(stop)
			wg.Wait()
			if err := <-shutdownErr; err != nil {
				t.Errorf("Shutdown: %v", err)
			}
			if err := endsWith(ownerFrames, ownerEnd, protocol.TypeAcquired, protocol.CodeShuttingDown); err != nil {
				t.Errorf("owner: %v", err)
			}
			if err := endsWith(waiterFrames, waiterEnd, protocol.TypeWaiting, protocol.CodeShuttingDown); err != nil {
				t.Errorf("waiter: %v", err)
			}
			noGrantAfterShutdown(t, ts.events.all())
		})
	}
}

// TestShutdownExpiredContext: with a context that has already ended,
// Shutdown returns its error, yet every connection is closed by the time
// it returns, even of clients that never hang up.
func TestShutdownExpiredContext(t *testing.T) {
	t.Parallel()
	sc := newScene(t)
	ts := sc.ts
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	err := ts.Shutdown(ctx)
	t.Logf("Shutdown returned %v after %v", err, time.Since(start))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Shutdown(expired ctx) = %v, want context.Canceled", err)
	}
	if n := ts.Sessions(); n != 0 {
		t.Errorf("%d sessions when Shutdown returned, want 0", n)
	}
	if err := ts.serveResult(); !errors.Is(err, server.ErrServerClosed) {
		t.Errorf("Serve returned %v, want ErrServerClosed", err)
	}
	// Every connection is closed: a read ends, after at most the
	// ERROR 0x01 frame if it made it out first.
	for _, c := range sc.clients {
		frames, end := c.readUntilClosed()
		if len(frames) > 1 || (len(frames) == 1 && (frames[0].Type != protocol.TypeError || frames[0].Code != protocol.CodeShuttingDown)) {
			t.Errorf("%s read %v then %v; want at most ERROR(0x01), then the close", c, frames, end)
		}
		if errors.Is(end, os.ErrDeadlineExceeded) {
			t.Errorf("%s: connection still open", c)
		}
	}
	noGrantAfterShutdown(t, ts.events.all())
}

// TestClose closes every connection at once, without a frame, and
// promotes nobody.
func TestClose(t *testing.T) {
	t.Parallel()
	sc := newScene(t)
	ts := sc.ts
	results := sc.readAll()
	if err := ts.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := ts.serveResult(); !errors.Is(err, server.ErrServerClosed) {
		t.Errorf("Serve returned %v, want ErrServerClosed", err)
	}
	for c, r := range results() {
		if len(r.frames) != 0 || errors.Is(r.end, os.ErrDeadlineExceeded) {
			t.Errorf("%s read %v then %v; want the connection closed with no frame", c, r.frames, r.end)
		}
	}
	if n := ts.Sessions(); n != 0 {
		t.Errorf("%d sessions after Close, want 0", n)
	}
	noGrantAfterShutdown(t, ts.events.all())
	if n := ts.events.count(kind(server.EventErrorSent)); n != 0 {
		t.Errorf("%d ERROR frames sent by Close, want none", n)
	}
}

// TestShutdownMeetsExpiry shuts down just as silent clients' leases run
// out. Each claim ends one way or the other, and the client must learn
// which: a claim the server ended for shutdown (as the observer reports)
// gets ERROR 0x01, one that expired first gets a plain close.
func TestShutdownMeetsExpiry(t *testing.T) {
	t.Parallel()
	const lease, clients = 50 * time.Millisecond, 30
	for i := range 10 {
		ts := startServer(t)
		cs := make([]*client, clients)
		for j := range cs {
			cs[j] = ts.dial(t)
			cs[j].mustOwn(fmt.Sprint("x", j), lease)
		}
		// Aim the shutdown at the leases' ends; the check below holds
		// wherever it lands.
		time.Sleep(lease - 5*time.Millisecond + time.Duration(i)*time.Millisecond)
		results := (&scene{ts: ts, clients: cs}).readAll()
		if err := ts.Shutdown(context.Background()); err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		got := results()
		for _, c := range cs {
			e := ts.events.wait(t, "released", peerEvent(server.EventReleased, c))
			r := got[c]
			switch e.Reason {
			case server.ReasonShutdown:
				if len(r.frames) != 1 || r.frames[0].Code != protocol.CodeShuttingDown || r.end != nil {
					t.Errorf("run %d: %s released for shutdown read %v then %v, want ERROR(0x01) then EOF", i, c, r.frames, r.end)
				}
			case server.ReasonExpired:
				if len(r.frames) != 0 {
					t.Errorf("run %d: %s released as expired read %v, want a plain close", i, c, r.frames)
				}
			default:
				t.Errorf("run %d: %s released for %v", i, c, e.Reason)
			}
		}
	}
}
