package server_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// A relaying node re-asserts the claims it relays when their owner dies
// (relay2.go, fail; move.go, failOver): the client of a session on a node
// that is not the owner keeps its claims across the owner's death, as a
// client talking to owners directly does.

// versionedRouter is a router that knows its ring version, as a cluster
// node's does: the relay's re-assertions carry it.
type versionedRouter struct {
	*router
	ring *atomic.Uint64
}

func (r versionedRouter) RingVersion() uint64 { return r.ring.Load() }

// startFailoverTrio starts owner a, relaying node r1 forwarding every
// name to a (ring 5), and node b, which takes every name over from a at
// ring 5 and warms up (gated) until the test says it serves.
func startFailoverTrio(t *testing.T) (a, r1, b *testServer, rr, rb *router) {
	t.Helper()
	a, r1, b, rr, rb, _ = startFailoverTrioRing(t)
	return a, r1, b, rr, rb
}

// startFailoverTrioRing is startFailoverTrio that also returns r1's ring
// version, for the test to set.
func startFailoverTrioRing(t *testing.T) (a, r1, b *testServer, rr, rb *router, ring *atomic.Uint64) {
	t.Helper()
	ring = new(atomic.Uint64)
	ring.Store(5)
	a = startServer(t, func(s *server.Server) {
		s.NodeID = "a"
		s.Router = &router{route: func(string, bool) server.Route { return server.Route{Action: server.RouteServe} }}
		s.TrustHop = trustAll
	})
	rr = &router{route: func(string, bool) server.Route { return server.Route{Action: server.RouteForward, Addr: a.addr} }}
	r1 = startServer(t, func(s *server.Server) { s.NodeID = "r1"; s.Router = versionedRouter{rr, ring} })
	rb = &router{route: func(string, bool) server.Route { return server.Route{Action: server.RouteHold, Gated: true, Since: 5} }}
	b = startServer(t, func(s *server.Server) { s.NodeID = "b"; s.Router = rb; s.TrustHop = trustAll })
	return a, r1, b, rr, rb, ring
}

// toB has r1 forward every name to b, as its ring does once b took a's
// names over.
func toB(rr *router, b *testServer) {
	rr.set(func(string, bool) server.Route { return server.Route{Action: server.RouteForward, Addr: b.addr} })
}

// The owner dies: the relay re-asserts the held claim at the node that
// took the name over, which installs it with its old token; the client
// sees nothing but a delay, and its PING and RELEASE go through b.
func TestRelayReassertAfterOwnerDies(t *testing.T) {
	const lease = 3 * time.Second
	a, r1, b, rr, rb := startFailoverTrio(t)
	c := r1.dialV2(t, lease, "c")
	tok := c.mustHold(1, excl2, 0, "x")
	c.mustHold(2, shrd2, 0, "y")
	waitRelayed(t, r1, 2, 1)
	a.Close()
	time.Sleep(3 * moveRetryTest) // the relay dials the dead owner meanwhile
	toB(rr, b)
	h := waitHolder(t, b, "x", func(h server.HolderInfo) bool { return h.Label == "c" })
	if h.Token != tok {
		t.Fatalf("re-asserted holder at b has token %d, want the old %d", h.Token, tok)
	}
	waitHolder(t, b, "y", func(h server.HolderInfo) bool { return h.Label == "c" })
	ping(c, 1) // no REVOKED before it
	rb.set(func(string, bool) server.Route { return server.Route{Action: server.RouteServe} })
	d := b.dialV2(t, longLease, "d")
	d.mustQueue(1, excl2, 0, "x")
	c.release(1)
	d.expectPromoted(1) // the RELEASE went through b
	c.release(2)
	ping(c, 2)
	waitRelayed(t, r1, 0, 1)
}

// moveRetryTest is the relay's retry period (move.go, moveRetry).
const moveRetryTest = 100 * time.Millisecond

// The node that took the name over installed a conflicting re-assertion
// first: the relay's is refused, and its client is told REVOKED 0x03.
func TestRelayReassertConflictRevokes(t *testing.T) {
	const lease = 3 * time.Second
	a, r1, b, rr, _ := startFailoverTrio(t)
	c := r1.dialV2(t, lease, "c")
	tok := c.mustHold(1, excl2, 0, "x")
	c.mustHold(2, excl2, 0, "local-free")
	waitRelayed(t, r1, 2, 1)
	a.Close()
	// Another holder re-asserts x at b first (first wins).
	o := b.dialV2(t, longLease, "o")
	o.mustWrite(protocol.AppendFrame(nil, protocol.Frame{Type: protocol.TypeClaim, Claim: 1, Flags: protocol.ClaimReassert,
		Mode: excl2, Name: "x", Token: tok + 7, Ring: 5, Session: 99, Node: "a"}))
	o.expect(protocol.TypeGranted, 1)
	toB(rr, b)
	start := time.Now()
	c.expectCode(protocol.TypeRevoked, 1, protocol.CodeNotOwner)
	if d := time.Since(start); d > lease/2 {
		t.Errorf("revoked %v after b could be reached; want the refusal's answer, not the give-up", d)
	}
	ping(c, 1)
	h := waitHolder(t, b, "x", func(server.HolderInfo) bool { return true })
	if h.Label != "o" {
		t.Fatalf("x held at b by %q, want the first re-assertion's", h.Label)
	}
}

// No node takes the name over (the relay routes it to the dead owner):
// the claims are given up half a lease after the failure, REVOKED 0x03;
// the session and its other claims live on.
func TestRelayReassertGivesUpAfterHalfLease(t *testing.T) {
	const lease = time.Second
	a, r1, _, _, _ := startFailoverTrio(t)
	c := r1.dialV2(t, lease, "c")
	c.mustHold(1, excl2, 0, "x")
	c.mustQueue(2, excl2, 0, "x")
	waitRelayed(t, r1, 2, 1)
	start := time.Now()
	a.Close()
	c.expectCode(protocol.TypeRevoked, 1, protocol.CodeNotOwner)
	c.expectCode(protocol.TypeRevoked, 2, protocol.CodeNotOwner)
	d := time.Since(start)
	t.Logf("given up after %v (lease %v)", d, lease)
	if d < lease/2-20*time.Millisecond || d > lease/2+3*moveRetryTest {
		t.Errorf("given up after %v, want about half the lease %v", d, lease/2)
	}
	ping(c, 1)
	waitRelayed(t, r1, 0, 0)
}

// A queued claim of a client that asked for queue tickets is re-asserted
// with its ticket: at the node that took the name over it keeps its
// place ahead of a claim that queued there without one.
func TestRelayReassertQueuedKeepsTicket(t *testing.T) {
	const lease = 3 * time.Second
	a, r1, b, rr, rb := startFailoverTrio(t)
	h := a.dialV2(t, longLease, "h")
	h.mustHold(1, excl2, 0, "job")
	x, _ := r1.dialTickets(t, lease, "x")
	x.queueTicket(1, "job")
	waitRelayed(t, r1, 1, 1)
	a.Close() // h's claim dies with it: h never re-asserts
	z, _ := b.dialTickets(t, longLease, "z")
	z.mustQueue(1, excl2, 0, "job")
	toB(rr, b)
	ping(x, 1) // answered once b has the claim: still queued, no REVOKED
	rb.set(func(string, bool) server.Route { return server.Route{Action: server.RouteServe} })
	expectPromotionOrder(t, []string{"x", "z"}, x, z)
}

// The relaying node itself took the name over: it installs the held
// claim in its own table with the old token, and holds the queued one for
// its warm-up with its ticket, ahead of a claim that queued there
// without one.
func TestRelayReassertAtRelayItself(t *testing.T) {
	const lease = 3 * time.Second
	a, r1, _, rr, _ := startFailoverTrio(t)
	c, _ := r1.dialTickets(t, lease, "c")
	tok := c.mustHold(1, excl2, 0, "x")
	q, _ := r1.dialTickets(t, lease, "q")
	q.queueTicket(1, "x")
	waitRelayed(t, r1, 2, 2)
	a.Close()
	time.Sleep(2 * moveRetryTest)
	rr.set(func(string, bool) server.Route { return server.Route{Action: server.RouteHold, Gated: true, Since: 5} })
	h := waitHolder(t, r1, "x", func(h server.HolderInfo) bool { return h.Label == "c" })
	if h.Token != tok {
		t.Fatalf("re-asserted holder at r1 has token %d, want the old %d", h.Token, tok)
	}
	ping(c, 1)
	ping(q, 1)
	z := r1.dialV2(t, longLease, "z")
	z.mustQueue(1, excl2, 0, "x") // held for the warm-up, without a ticket
	rr.set(func(string, bool) server.Route { return server.Route{Action: server.RouteServe} })
	time.Sleep(3 * moveRetryTest) // the held claims enter, behind c
	c.release(1)
	expectPromotionOrder(t, []string{"q", "z"}, q, z)
	waitRelayed(t, r1, 0, 0)
}

// A re-assertion that reaches the new owner with a ring older than its
// take-over (0x05: the relay read its ring before it routed the name) is
// sent again with the relay's newer ring, not given up.
func TestRelayReassertStaleRingRetried(t *testing.T) {
	const lease = 3 * time.Second
	a, r1, b, rr, _, ring := startFailoverTrioRing(t)
	ring.Store(4)
	c := r1.dialV2(t, lease, "c")
	tok := c.mustHold(1, excl2, 0, "x")
	waitRelayed(t, r1, 1, 1)
	a.Close()
	toB(rr, b)
	deadline := time.Now().Add(waitLimit)
	for b.events.count(func(e server.Event) bool {
		return e.Kind == server.EventReasserted && e.Action == server.ReassertStaleRing
	}) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no re-assertion refused 0x05 at b")
		}
		time.Sleep(5 * time.Millisecond)
	}
	ring.Store(5)
	h := waitHolder(t, b, "x", func(h server.HolderInfo) bool { return h.Label == "c" })
	if h.Token != tok {
		t.Fatalf("re-asserted holder at b has token %d, want the old %d", h.Token, tok)
	}
	ping(c, 1)
}

// A held claim is re-asserted only while its client may still believe
// it holds: within 0.8 × its lease of the send time of the latest
// request its upstream confirmed. After that the dead owner may have
// expired it and granted the name to a client that re-asserts a newer
// token, which must not be refused while it believes (the failover
// model's -relay counterexample). Here the client was silent before the
// owner died: its claim is given up 0.8 × lease after its CLAIM, before
// half a lease after the failure.
func TestRelayReassertOnlyWhileBelieved(t *testing.T) {
	const lease = 2 * time.Second
	const silent = 900 * time.Millisecond
	a, r1, _, _, _ := startFailoverTrio(t)
	c := r1.dialV2(t, lease, "c")
	sent := time.Now()
	c.mustHold(1, excl2, 0, "x")
	waitRelayed(t, r1, 1, 1)
	time.Sleep(silent - time.Since(sent)) // no request: nothing newer is confirmed
	a.Close()
	c.expectCode(protocol.TypeRevoked, 1, protocol.CodeNotOwner)
	d := time.Since(sent)
	t.Logf("given up %v after the CLAIM was sent (lease %v)", d, lease)
	if want := lease * 4 / 5; d < want || d > want+2*moveRetryTest {
		t.Errorf("given up %v after the CLAIM was sent, want about 0.8 × lease = %v (half a lease after the failure is %v)",
			d, want, silent+lease/2)
	}
}
