package server_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// A version 2 claim whose owner cannot be reached (the upstream session
// cannot be opened) is held as a version 1 connection is: QUEUED, retried
// every 100 ms, relayed once the owner listens.

// holdRetry mirrors the server's retry period of held claims.
const holdRetry = 100 * time.Millisecond

// unreachableOwner returns an address where no owner answers: nothing
// listens there ("refused"), a listener hangs up on every connection
// ("hangup", the hop header and HELLO fail), or one accepts and never
// answers ("silent", HELLO is not answered). stop frees the address.
func unreachableOwner(t *testing.T, how string) (addr string, stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr = ln.Addr().String()
	if how == "refused" {
		ln.Close()
		return addr, func() {}
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if how == "hangup" {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	})
	var once sync.Once
	stop = func() {
		once.Do(func() {
			ln.Close()
			wg.Wait()
			mu.Lock()
			for _, c := range conns {
				c.Close()
			}
			mu.Unlock()
		})
	}
	t.Cleanup(stop)
	return addr, stop
}

// relayCounts counts what a relaying node does for the unreachable owner.
type relayCounts struct {
	dials  atomic.Int64 // dials to the owner
	routes atomic.Int64 // Route calls for names it forwards
}

// startUnreachableRelay starts a relaying node that forwards every name
// but those starting with "local" to addr, counting its dials there.
func startUnreachableRelay(t *testing.T, addr string, n *relayCounts) *testServer {
	t.Helper()
	return startServer(t, func(s *server.Server) {
		s.NodeID = relayNode
		s.Router = &router{route: func(name string, _ bool) server.Route {
			if strings.HasPrefix(name, "local") {
				return server.Route{Action: server.RouteServe}
			}
			n.routes.Add(1)
			return server.Route{Action: server.RouteForward, Addr: addr}
		}}
		s.DialOwner = func(ctx context.Context, a string) (net.Conn, error) {
			n.dials.Add(1)
			var d net.Dialer
			return d.DialContext(ctx, "tcp", a)
		}
	})
}

// startOwnerAt starts an owner serving every name, listening at addr.
func startOwnerAt(t *testing.T, addr string) *testServer {
	t.Helper()
	return startServerWrapped(t, func(ln net.Listener) net.Listener {
		ln.Close()
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("listening at the owner's address %s again: %v", addr, err)
		}
		return l
	}, func(s *server.Server) {
		s.Router = &router{route: func(string, bool) server.Route { return server.Route{Action: server.RouteServe} }}
		s.TrustHop = trustAll
	})
}

// waitDials waits until the relay has dialled the owner n times.
func waitDials(t *testing.T, dials *atomic.Int64, n int64) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for dials.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d dials to the owner within %v, want %d", dials.Load(), waitLimit, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The owner cannot be reached when claimed: the claim is answered QUEUED
// (a no-wait one BUSY), the session and its claim on the relay itself are
// unaffected, the relay dials again about every 100 ms, a held claim
// released meanwhile is answered RELEASED and never reaches the owner;
// once the owner listens at its address, the held claim is relayed and
// its grant pushed as PROMOTED with the owner's token.
func TestRelayV2OwnerUnreachable(t *testing.T) {
	for _, how := range []string{"refused", "hangup"} {
		t.Run(how, func(t *testing.T) {
			addr, stop := unreachableOwner(t, how)
			var n relayCounts
			relay := startUnreachableRelay(t, addr, &n)
			dials := &n.dials
			a := relay.dialV2(t, longLease, "a")
			a.mustQueue(1, protocol.ModeExclusive, 0, "x")
			a.mustWrite(noWaitFrame(2, protocol.ModeExclusive, 0, "x"))
			a.expect(protocol.TypeBusy, 2)
			a.mustQueue(3, protocol.ModeExclusive, 0, "y")
			tokL := a.mustHold(4, protocol.ModeExclusive, 0, "local-1")
			ping(a, 1)
			a.release(3)
			if l, ok := relay.Lock("local-1"); !ok || l.Holders[0].Token != tokL {
				t.Fatalf("local-1 at the relay: %+v, %v", l, ok)
			}
			if snap := relay.Snapshot(nil); len(snap) != 1 {
				t.Fatalf("the relay's table: %+v, want local-1 alone (held claims enter no table)", snap)
			}

			// Retried, at the pace of held claims: one dial per retry.
			const window = time.Second
			n0, start := dials.Load(), time.Now()
			a.expectSilenceV2(window)
			k := dials.Load() - n0
			t.Logf("%d dials to the unreachable owner in %v (retry every %v)", k, time.Since(start), holdRetry)
			if k < 2 || k > int64(window/holdRetry)+2 {
				t.Fatalf("%d dials in %v, want about one per %v", k, window, holdRetry)
			}

			stop()
			owner := startOwnerAt(t, addr)
			up := time.Now()
			tok := a.expectPromoted(1)
			t.Logf("owner listening: held claim promoted after %v", time.Since(up))
			h := waitHolder(t, owner, "x", func(h server.HolderInfo) bool { return h.Peer.Via != "" })
			if h.Token != tok || h.Claim != 1 || h.Peer.Addr != a.addr() {
				t.Fatalf("owner's holder %+v; want claim 1 of %s with token %d", h, a.addr(), tok)
			}
			if _, held := owner.Lock("y"); held {
				t.Fatal("a held claim released meanwhile reached the owner")
			}
			waitRelayed(t, relay, 1, 1)
			ping(a, 2) // nothing came before the PONG (no grant of 2 or 3)
			a.release(1)
			a.release(4)
			waitRelayed(t, relay, 0, 1)
		})
	}
}

// An owner that accepts the upstream connection but never answers HELLO
// is unreachable too, after half the lease: the claim is held.
func TestRelayV2OwnerSilentAtOpen(t *testing.T) {
	const lease = 2 * time.Second
	addr, _ := unreachableOwner(t, "silent")
	var n relayCounts
	relay := startUnreachableRelay(t, addr, &n)
	dials := &n.dials
	a := relay.dialV2(t, lease, "a")
	start := time.Now()
	a.mustQueue(1, protocol.ModeExclusive, 0, "x")
	d := time.Since(start)
	t.Logf("HELLO unanswered: claim answered QUEUED after %v (lease %v)", d, lease)
	if d < lease/2 {
		t.Fatalf("QUEUED after %v, before half the lease %v", d, lease/2)
	}
	waitDials(t, dials, 2) // held and retried
	a.release(1)
	ping(a, 1)
}

// The session ends while its claim is held for an unreachable owner: the
// retries stop and nothing of the session is left running.
func TestRelayV2UnreachableSessionEnds(t *testing.T) {
	addr, _ := unreachableOwner(t, "refused")
	var n relayCounts
	relay := startUnreachableRelay(t, addr, &n)
	dials := &n.dials
	ignore := goleak.IgnoreCurrent()
	a := relay.dialV2(t, longLease, "a")
	a.mustQueue(1, protocol.ModeExclusive, 0, "x")
	waitDials(t, dials, 3)
	a.close()
	deadline := time.Now().Add(waitLimit)
	for _, v2 := relay.ProtocolCounts(); v2.Sessions != 0; _, v2 = relay.ProtocolCounts() {
		if time.Now().After(deadline) {
			t.Fatal("the relay kept the session after the client hung up")
		}
		time.Sleep(time.Millisecond)
	}
	waitRelayed(t, relay, 0, 0)
	d0, r0 := dials.Load(), n.routes.Load()
	time.Sleep(5 * holdRetry) // a retry still scheduled would ask Route and dial within this
	d, r := dials.Load()-d0, n.routes.Load()-r0
	t.Logf("after the session ended: %d Route calls, %d dials", r, d)
	if r > 1 || d > 1 {
		t.Fatalf("%d Route calls and %d dials after the session ended, want at most one already under way", r, d)
	}
	goleak.VerifyNone(t, ignore)
}
