package server_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// Relaying version 2 claims (relay2.go): a relaying node R forwards every
// name but those starting with "local" to the owner O, which serves all
// it is relayed but "elsewhere".

const relayNode = "r1"

// startRelayPair starts an owner and a relaying node; gate, when set,
// sits on every upstream connection from the relay to the owner.
func startRelayPair(t *testing.T, gate *writeGate, configure ...func(*server.Server)) (owner, relay *testServer) {
	t.Helper()
	owner = startServer(t, append([]func(*server.Server){func(s *server.Server) {
		s.Router = &router{route: func(name string, forwarded bool) server.Route {
			if name == "elsewhere" && forwarded {
				return server.Route{Action: server.RouteNotOwner}
			}
			return server.Route{Action: server.RouteServe}
		}}
		s.TrustHop = trustAll
	}}, configure...)...)
	relay = startServer(t, func(s *server.Server) {
		s.NodeID = relayNode
		s.Router = &router{route: func(name string, _ bool) server.Route {
			if strings.HasPrefix(name, "local") {
				return server.Route{Action: server.RouteServe}
			}
			return server.Route{Action: server.RouteForward, Addr: owner.addr}
		}}
		if gate != nil {
			s.DialOwner = func(ctx context.Context, addr string) (net.Conn, error) {
				var d net.Dialer
				c, err := d.DialContext(ctx, "tcp", addr)
				if err != nil {
					return nil, err
				}
				return newGatedConn(c, gate), nil
			}
		}
	})
	if gate != nil {
		t.Cleanup(gate.release)
	}
	return owner, relay
}

// writeGate holds the bytes written to the connections it sits on while
// closed, as the kernel buffers what a peer does not read: to the relaying
// node, an owner that has stopped reading.
type writeGate struct {
	mu     sync.Mutex
	closed bool
	open   chan struct{} // closed when the gate opens
}

var openGate = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func newWriteGate() *writeGate { return &writeGate{open: openGate} }

func (g *writeGate) hold() {
	g.mu.Lock()
	if !g.closed {
		g.closed = true
		g.open = make(chan struct{})
	}
	g.mu.Unlock()
}

func (g *writeGate) release() {
	g.mu.Lock()
	if g.closed {
		g.closed = false
		close(g.open)
	}
	g.mu.Unlock()
}

// opened returns a channel closed once the gate is open.
func (g *writeGate) opened() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open
}

// gatedConn passes its writes on, in order, while its gate is open; a
// write returns at once.
type gatedConn struct {
	net.Conn
	g         *writeGate
	mu        sync.Mutex
	q         [][]byte
	wake      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

func newGatedConn(c net.Conn, g *writeGate) *gatedConn {
	gc := &gatedConn{Conn: c, g: g, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go gc.pump()
	return gc
}

func (c *gatedConn) Write(b []byte) (int, error) {
	select {
	case <-c.done:
		return 0, net.ErrClosed
	default:
	}
	c.mu.Lock()
	c.q = append(c.q, bytes.Clone(b))
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return len(b), nil
}

func (c *gatedConn) pump() {
	for {
		select {
		case <-c.wake:
		case <-c.done:
			return
		}
		for {
			select {
			case <-c.g.opened():
			case <-c.done:
				return
			}
			c.mu.Lock()
			if len(c.q) == 0 {
				c.mu.Unlock()
				break
			}
			b := c.q[0]
			c.q = c.q[1:]
			c.mu.Unlock()
			if _, err := c.Conn.Write(b); err != nil {
				return
			}
		}
	}
}

func (c *gatedConn) Close() error {
	c.closeOnce.Do(func() { close(c.done) })
	return c.Conn.Close()
}

// waitRelayed waits until the relay counts claims relayed claims and ups
// upstream sessions.
func waitRelayed(t *testing.T, ts *testServer, claims, ups int64) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		c, u := ts.RelayedClaims()
		if c == claims && u == ups {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("RelayedClaims() = %d, %d; want %d, %d", c, u, claims, ups)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitHolder waits until the owner's lock name is held by a claim whose
// peer satisfies ok, and returns it.
func waitHolder(t *testing.T, ts *testServer, name string, ok func(server.HolderInfo) bool) server.HolderInfo {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		if l, held := ts.Lock(name); held {
			for _, h := range l.Holders {
				if ok(h) {
					return h
				}
			}
		}
		if time.Now().After(deadline) {
			l, _ := ts.Lock(name)
			t.Fatalf("%s: no such holder at the owner within %v: %+v", name, waitLimit, l)
		}
		time.Sleep(time.Millisecond)
	}
}

func ping(c *v2client, seq uint64) {
	c.t.Helper()
	c.mustWrite(protocol.AppendPing(nil, seq))
	if f := c.mustReadV2(); f.Type != protocol.TypePong || f.Seq != seq {
		c.t.Fatalf("%s: PING %d answered %v", c, seq, f)
	}
}

// A claim relayed through an upstream session is granted, queued,
// promoted and released by the owner, in one FIFO with the owner's
// direct clients, with the owner's tokens; the owner shows the client's
// address, label and the relaying node.
func TestRelayV2Claims(t *testing.T) {
	owner, relay := startRelayPair(t, nil)
	a := relay.dialV2(t, longLease, "via-relay")
	tokA := a.mustHold(1, protocol.ModeExclusive, 0, "x")
	h := waitHolder(t, owner, "x", func(server.HolderInfo) bool { return true })
	if h.Peer.Addr != a.addr() || h.Label != "via-relay" || h.Token != tokA || h.Claim != 1 ||
		h.Peer.Via != fmt.Sprintf("%s/%d", relayNode, a.session) {
		t.Fatalf("owner's holder %+v; want the client's address %s, label, token %d, claim 1, via %s/%d",
			h, a.addr(), tokA, relayNode, a.session)
	}
	if sid, ok := owner.RelayedSession(relayNode, a.session); !ok || sid != h.Session {
		t.Fatalf("RelayedSession = %d, %v; want %d", sid, ok, h.Session)
	}
	if len(relay.Snapshot(nil)) != 0 {
		t.Fatalf("the relaying node's table has claims: %+v", relay.Snapshot(nil))
	}
	waitRelayed(t, relay, 1, 1)

	b := owner.dialV2(t, longLease, "direct")
	b.mustQueue(1, protocol.ModeExclusive, 0, "x")
	tokL := a.mustHold(2, protocol.ModeExclusive, 0, "local-1") // served by the relay itself
	if l, ok := relay.Lock("local-1"); !ok || l.Holders[0].Token != tokL {
		t.Fatalf("local-1 at the relay: %+v, %v", l, ok)
	}
	ping(a, 1)
	a.release(1)
	tokB := b.expectPromoted(1)
	if tokB <= tokA {
		t.Fatalf("tokens %d then %d, want increasing", tokA, tokB)
	}
	a.mustQueue(3, protocol.ModeExclusive, 0, "x") // relayed, behind b
	waitRelayed(t, relay, 1, 1)
	b.release(1)
	if tokA2 := a.expectPromoted(3); tokA2 <= tokB {
		t.Fatalf("tokens %d then %d, want increasing", tokB, tokA2)
	}
	a.release(3)
	a.release(2)
	waitRelayed(t, relay, 0, 1)
	a.close()
	waitRelayed(t, relay, 0, 0)
	deadline := time.Now().Add(waitLimit)
	for {
		if _, v2 := owner.ProtocolCounts(); v2.Sessions == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the owner kept the upstream session after the client hung up")
		}
		time.Sleep(time.Millisecond)
	}
}

// The client hangs up: the relay closes its upstream and the owner
// releases the relayed claim at once, promoting its next waiter.
func TestRelayV2ClientClose(t *testing.T) {
	owner, relay := startRelayPair(t, nil)
	a := relay.dialV2(t, longLease, "a")
	a.mustHold(1, protocol.ModeExclusive, 0, "x")
	b := owner.dialV2(t, longLease, "b")
	b.mustQueue(1, protocol.ModeExclusive, 0, "x")
	start := time.Now()
	a.close()
	b.expectPromoted(1)
	d := time.Since(start)
	t.Logf("relayed holder hung up: the owner's next waiter promoted after %v", d)
	if d > 2*time.Second {
		t.Fatalf("promoted %v after the relayed holder hung up, want at once (lease %v)", d, longLease)
	}
	waitRelayed(t, relay, 0, 0)
}

// The client falls silent: the owner ends the relayed claim after the
// client's lease, as it would a direct one, and the relay closes the
// client's connection.
func TestRelayV2ClientSilent(t *testing.T) {
	const lease = 300 * time.Millisecond
	owner, relay := startRelayPair(t, nil)
	a := relay.dialV2(t, lease, "silent")
	start := time.Now() // a's last frame is the CLAIM, sent after this
	a.mustHold(1, protocol.ModeExclusive, 0, "x")
	if infos := owner.SessionInfos(); len(infos) != 1 || infos[0].Lease != lease {
		t.Fatalf("owner's sessions %+v, want the upstream with the client's lease %v", infos, lease)
	}
	b := owner.dialV2(t, longLease, "b")
	b.mustQueue(1, protocol.ModeExclusive, 0, "x")
	b.expectPromoted(1)
	d := time.Since(start)
	t.Logf("silent relayed holder (lease %v) ended at the owner after %v", lease, d)
	if d < lease {
		t.Fatalf("ended after %v, before the client's lease %v", d, lease)
	}
	// The relay's deadline for the silent client and the owner's for the
	// upstream end within a scheduling delay of each other: when the
	// owner's fires first, the relay tells the client REVOKED 0x03 before
	// it closes the connection. Nothing else may come.
	f, err := a.readV2(waitLimit)
	if err == nil && f.Type == protocol.TypeRevoked && f.Claim == 1 && f.Code == protocol.CodeNotOwner {
		f, err = a.readV2(waitLimit)
	}
	if err == nil {
		t.Fatalf("silent client: got %v, want EOF (or REVOKED(1, 0x03) first)", f)
	}
	waitRelayed(t, relay, 0, 0)
}

// The owner goes away (closed without a word, or shut down with ERROR
// 0x01): every claim relayed to it is revoked with 0x03, held and queued
// alike; the session and its claim on the relay itself live on, and a
// new claim for the unreachable owner is held (QUEUED,
// relay2unreach_test.go).
func TestRelayV2OwnerGone(t *testing.T) {
	// The relay re-asserts the claims at the names' next owner; here its
	// router still sends them to the dead one, so they are given up half
	// a lease after the failure (relayreassert_test.go has the rest).
	const lease = time.Second
	for _, how := range []string{"close", "shutdown"} {
		t.Run(how, func(t *testing.T) {
			owner, relay := startRelayPair(t, nil)
			b := owner.dialV2(t, longLease, "b")
			b.mustHold(1, protocol.ModeExclusive, 0, "y")
			a := relay.dialV2(t, lease, "a")
			a.mustHold(1, protocol.ModeExclusive, 0, "x")
			a.mustQueue(2, protocol.ModeExclusive, 0, "y")
			a.mustHold(3, protocol.ModeExclusive, 0, "local-1")
			waitRelayed(t, relay, 2, 1)
			start := time.Now()
			if how == "close" {
				owner.Close()
			} else {
				ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
				defer cancel()
				go owner.Shutdown(ctx)
			}
			a.expectCode(protocol.TypeRevoked, 1, protocol.CodeNotOwner)
			a.expectCode(protocol.TypeRevoked, 2, protocol.CodeNotOwner)
			d := time.Since(start)
			t.Logf("owner %s: relayed claims revoked after %v", how, d)
			if d < lease/2-50*time.Millisecond {
				t.Errorf("revoked after %v, before the re-assertion's half lease %v", d, lease/2)
			}
			waitRelayed(t, relay, 0, 0)
			ping(a, 1)
			a.release(3)
			a.mustHold(4, protocol.ModeExclusive, 0, "local-1")
			a.mustQueue(5, protocol.ModeExclusive, 0, "x") // held: the owner cannot be reached
			ping(a, 2)
			a.release(5)
		})
	}
}

// The pessimism rule through a relay: an answer, even to a PING or a
// claim the relay serves itself, is not written before every upstream of
// the session has answered a request sent after it was read; here the
// owner stops reading, so the PONG and the GRANTED wait for it.
func TestRelayV2AnswersWaitForUpstream(t *testing.T) {
	gate := newWriteGate()
	_, relay := startRelayPair(t, gate)
	a := relay.dialV2(t, longLease, "a")
	a.mustHold(1, protocol.ModeExclusive, 0, "x")
	ping(a, 1)
	gate.hold()
	a.mustWrite(protocol.AppendPing(nil, 2))
	a.mustWrite(claimFrame(2, protocol.ModeExclusive, 0, "local-1"))
	a.expectSilenceV2(300 * time.Millisecond)
	start := time.Now()
	gate.release()
	if f := a.mustReadV2(); f.Type != protocol.TypePong || f.Seq != 2 {
		t.Fatalf("got %v, want PONG(2) once the owner reads again", f)
	}
	a.expect(protocol.TypeGranted, 2)
	t.Logf("answers released %v after the owner read again", time.Since(start))
	// With no claim on the owner left, nothing waits for it.
	a.release(1)
	gate.hold()
	ping(a, 3)
	gate.release()
	// A session with no upstream answers at once meanwhile.
	gate.hold()
	defer gate.release()
	c := relay.dialV2(t, longLease, "c")
	c.mustHold(1, protocol.ModeExclusive, 0, "local-2")
	ping(c, 1)
}

// A push never overtakes the answer it follows: a PROMOTED for a claim
// whose QUEUED waits for the upstream comes after it.
func TestRelayV2PushAfterAnswer(t *testing.T) {
	gate := newWriteGate()
	_, relay := startRelayPair(t, gate)
	a := relay.dialV2(t, longLease, "a")
	a.mustHold(1, protocol.ModeExclusive, 0, "x")
	c := relay.dialV2(t, longLease, "c")
	c.mustHold(1, protocol.ModeExclusive, 0, "local-q")
	gate.hold()
	a.mustWrite(claimFrame(2, protocol.ModeExclusive, 0, "local-q"))
	a.expectSilenceV2(200 * time.Millisecond) // QUEUED waits for the owner
	c.release(1)                              // promotes a's claim 2
	a.expectSilenceV2(200 * time.Millisecond)
	gate.release()
	a.expect(protocol.TypeQueued, 2)
	a.expectPromoted(2)
}

// Version 1 and version 2 clients, direct and relayed, take one name in
// one FIFO at the owner, with strictly increasing tokens.
func TestRelayV2FIFOWithV1(t *testing.T) {
	owner, relay := startRelayPair(t, nil)
	a := relay.dialV2(t, longLease, "a") // v2 relayed
	tok := a.mustHold(1, protocol.ModeExclusive, 0, "x")
	b := relay.dial(t) // v1 relayed
	b.mustWait("x", longLease)
	c := owner.dialV2(t, longLease, "c") // v2 direct
	c.mustQueue(1, protocol.ModeExclusive, 0, "x")
	d := relay.dialV2(t, longLease, "d") // v2 relayed
	d.mustQueue(7, protocol.ModeExclusive, 0, "x")
	e := owner.dial(t) // v1 direct
	e.mustWait("x", longLease)
	next := func(got uint64) {
		t.Helper()
		if got <= tok {
			t.Fatalf("token %d after %d, want increasing", got, tok)
		}
		tok = got
	}
	a.release(1)
	next(b.expectAcquired())
	b.close()
	next(c.expectPromoted(1))
	c.release(1)
	next(d.expectPromoted(7))
	d.close()
	next(e.expectAcquired())
}

// A relayed session's claim on a name the owner does not own is refused
// there with 0x03, passed on unchanged; the session lives on.
func TestRelayV2NotOwner(t *testing.T) {
	_, relay := startRelayPair(t, nil)
	a := relay.dialV2(t, longLease, "a")
	if f := a.claim(1, protocol.ModeExclusive, 0, "elsewhere"); f.Type != protocol.TypeRefused || f.Code != protocol.CodeNotOwner {
		t.Fatalf("got %v, want REFUSED 0x03", f)
	}
	a.mustHold(1, protocol.ModeExclusive, 0, "x")
	waitRelayed(t, relay, 1, 1)
}

// A claim id in use by a relayed claim cannot be claimed again: ERROR
// 0x1f, as on a single server; the relayed claim ends with the session.
func TestRelayV2ClaimInUse(t *testing.T) {
	owner, relay := startRelayPair(t, nil)
	a := relay.dialV2(t, longLease, "a")
	a.mustHold(1, protocol.ModeExclusive, 0, "x")
	a.mustWrite(claimFrame(1, protocol.ModeExclusive, 0, "local-1"))
	a.expectSessionError(protocol.CodeClaimInUse)
	b := owner.dialV2(t, longLease, "b")
	if f := b.claim(1, protocol.ModeExclusive, 0, "x"); f.Type != protocol.TypeGranted && f.Type != protocol.TypeQueued {
		t.Fatalf("got %v", f)
	} else if f.Type == protocol.TypeQueued {
		b.expectPromoted(1)
	}
	waitRelayed(t, relay, 0, 0)
}

// A version 2 hop header from a peer the server does not trust is
// refused, as version 1's is.
func TestRelayV2UntrustedHop(t *testing.T) {
	ts := startServer(t, func(s *server.Server) {
		s.Router = &router{route: func(string, bool) server.Route { return server.Route{Action: server.RouteServe} }}
	})
	a := ts.dial(t)
	b := protocol.AppendHopV2(nil, "10.0.0.1:1", "admin", "n9", 42)
	a.mustWrite(append(b, openingV2(longLease, "x")...))
	a.expectError(protocol.CodeUnknownMessage)
}

// Shutting down the relaying node sends ERROR 0x01 to its client and
// closes the upstream: the owner releases the relayed claim at once.
func TestRelayV2RelayShutdown(t *testing.T) {
	owner, relay := startRelayPair(t, nil)
	a := relay.dialV2(t, longLease, "a")
	a.mustHold(1, protocol.ModeExclusive, 0, "x")
	b := owner.dialV2(t, longLease, "b")
	b.mustQueue(1, protocol.ModeExclusive, 0, "x")
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- relay.Shutdown(ctx) }()
	a.expectSessionError(protocol.CodeShuttingDown)
	b.expectPromoted(1)
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// AttachRelayed makes a claim the session does not hold here one served
// by an owner: its RELEASE goes there, and its upstream's loss revokes it;
// DetachRelayed undoes it without a word.
func TestAttachRelayed(t *testing.T) {
	owner, relay := startRelayPair(t, nil)
	a := relay.dialV2(t, longLease, "a")
	sid := server.SessionID(a.session)
	if err := relay.AttachRelayed(sid+100, 7, owner.addr); err != locktable.ErrNoSession {
		t.Fatalf("unknown session: %v", err)
	}
	a.mustHold(1, protocol.ModeExclusive, 0, "local-1")
	if err := relay.AttachRelayed(sid, 1, owner.addr); err != locktable.ErrClaimExists {
		t.Fatalf("a claim in this node's table: %v", err)
	}
	for _, id := range []uint32{7, 8} {
		if err := relay.AttachRelayed(sid, id, owner.addr); err != nil {
			t.Fatal(err)
		}
	}
	if err := relay.AttachRelayed(sid, 7, owner.addr); err != locktable.ErrClaimExists {
		t.Fatalf("attached twice: %v", err)
	}
	if err := relay.AttachRelayed(sid, 9, owner.addr); err != nil {
		t.Fatal(err)
	}
	waitRelayed(t, relay, 3, 1)
	a.release(7) // answered by the owner
	waitRelayed(t, relay, 2, 1)
	// DetachRelayed: 9 is no longer the owner's, and not revoked with it.
	if addr, err := relay.DetachRelayed(sid, 9); err != nil || addr != owner.addr {
		t.Fatalf("DetachRelayed = %q, %v; want %q", addr, err, owner.addr)
	}
	if _, err := relay.DetachRelayed(sid, 9); err != locktable.ErrNoClaim {
		t.Fatalf("detached twice: %v", err)
	}
	waitRelayed(t, relay, 1, 1)
	owner.Close()
	a.expectCode(protocol.TypeRevoked, 8, protocol.CodeNotOwner)
	waitRelayed(t, relay, 0, 0)
	ping(a, 1) // no REVOKED for 9 before the PONG
	a.release(1)
}

// An answer waits for every upstream of the session: a GRANTED from one
// owner is not written while another owner, holding a claim of the same
// session, does not read.
func TestRelayV2AnswerWaitsForEveryUpstream(t *testing.T) {
	ownerConf := func(s *server.Server) {
		s.Router = &router{route: func(string, bool) server.Route { return server.Route{Action: server.RouteServe} }}
		s.TrustHop = trustAll
	}
	o1, o2 := startServer(t, ownerConf), startServer(t, ownerConf)
	gate := newWriteGate()
	relay := startServer(t, func(s *server.Server) {
		s.NodeID = relayNode
		s.Router = &router{route: func(name string, _ bool) server.Route {
			if strings.HasPrefix(name, "o2") {
				return server.Route{Action: server.RouteForward, Addr: o2.addr}
			}
			return server.Route{Action: server.RouteForward, Addr: o1.addr}
		}}
		s.DialOwner = func(ctx context.Context, addr string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", addr)
			if err != nil || addr != o2.addr {
				return c, err
			}
			return newGatedConn(c, gate), nil
		}
	})
	t.Cleanup(gate.release)
	a := relay.dialV2(t, longLease, "a")
	a.mustHold(1, protocol.ModeExclusive, 0, "o2-x")
	a.mustHold(2, protocol.ModeExclusive, 0, "o1-x")
	gate.hold()
	a.mustWrite(claimFrame(3, protocol.ModeExclusive, 0, "o1-y"))
	a.expectSilenceV2(300 * time.Millisecond)
	if _, held := o1.Lock("o1-y"); !held {
		t.Fatal("o1 has not granted o1-y: the test shows nothing")
	}
	gate.release()
	a.expect(protocol.TypeGranted, 3)
	waitRelayed(t, relay, 3, 2)
}

// An owner that stops answering is given up after half the lease: its
// claims are revoked (before the answers held for it) and the session
// lives on.
func TestRelayV2OwnerStalls(t *testing.T) {
	const lease = 600 * time.Millisecond
	gate := newWriteGate()
	_, relay := startRelayPair(t, gate)
	a := relay.dialV2(t, lease, "a")
	a.mustHold(1, protocol.ModeExclusive, 0, "x")
	a.mustHold(2, protocol.ModeExclusive, 0, "local-1")
	gate.hold()
	start := time.Now()
	// Given up after half the lease, the claim is re-asserted at the
	// owner, which still does not answer: it is revoked half a lease (and
	// the re-assertion's own patience) later. The client keeps speaking
	// meanwhile, unanswered.
	const pings = 4
	for i := range pings {
		a.mustWrite(protocol.AppendPing(nil, uint64(i+1)))
		if i < pings-1 {
			time.Sleep(lease / 3)
		}
	}
	a.expectCode(protocol.TypeRevoked, 1, protocol.CodeNotOwner)
	d := time.Since(start)
	for i := range pings {
		if f := a.mustReadV2(); f.Type != protocol.TypePong || f.Seq != uint64(i+1) {
			t.Fatalf("got %v, want PONG(%d) after the REVOKED", f, i+1)
		}
	}
	t.Logf("stalled owner given up after %v (lease %v)", d, lease)
	if d < lease-50*time.Millisecond {
		t.Fatalf("given up after %v, before half the lease and the re-assertion's half lease %v", d, lease)
	}
	ping(a, pings+1)
	a.release(2)
	waitRelayed(t, relay, 0, 0)
}

// A trusted version 2 hop header gives the session the client's address
// and identity, and names the relaying node and the client's session
// there; the session is forwarded (never relayed again).
func TestRelayV2HopHeader(t *testing.T) {
	ts := startServer(t, func(s *server.Server) {
		s.Router = &router{route: func(name string, forwarded bool) server.Route {
			if forwarded && name != "mine" {
				return server.Route{Action: server.RouteNotOwner}
			}
			return server.Route{Action: server.RouteServe}
		}}
		s.TrustHop = trustAll
	})
	a := ts.dialV2Raw(t)
	a.mustWrite(append(protocol.AppendHopV2(nil, "10.0.0.1:1", "alice", "n9", 42), openingV2(longLease, "lbl")...))
	if f := a.mustReadV2(); f.Type != protocol.TypeWelcome {
		t.Fatalf("got %v, want WELCOME", f)
	}
	a.mustHold(1, protocol.ModeExclusive, 0, "mine")
	if f := a.claim(2, protocol.ModeExclusive, 0, "theirs"); f.Type != protocol.TypeRefused || f.Code != protocol.CodeNotOwner {
		t.Fatalf("a forwarded session's claim for a name not owned here: %v, want REFUSED 0x03", f)
	}
	l, _ := ts.Lock("mine")
	if p := l.Holders[0].Peer; p != (server.Peer{Addr: "10.0.0.1:1", Identity: "alice", Via: "n9/42"}) || l.Holders[0].Label != "lbl" {
		t.Fatalf("holder %+v, want the client's address and identity, via n9/42, label lbl", l.Holders[0])
	}
	if sid, ok := ts.RelayedSession("n9", 42); !ok || sid != l.Holders[0].Session {
		t.Fatalf("RelayedSession = %d, %v; want %d", sid, ok, l.Holders[0].Session)
	}
	if _, ok := ts.RelayedSession("n9", 43); ok {
		t.Fatal("RelayedSession found a session nobody relays")
	}
}

// An administrator's force-release at the owner reaches a relayed claim
// as REVOKED 0x02, unchanged; the session and its other claims live on.
func TestRelayV2AdminRevoke(t *testing.T) {
	owner, relay := startRelayPair(t, nil)
	a := relay.dialV2(t, longLease, "a")
	tok := a.mustHold(1, protocol.ModeExclusive, 0, "x")
	a.mustHold(2, protocol.ModeExclusive, 0, "y")
	if err := owner.ForceReleaseClaimBy("x", server.ClaimRef{Token: tok}, server.Peer{}); err != nil {
		t.Fatal(err)
	}
	a.expectCode(protocol.TypeRevoked, 1, protocol.CodeClosedByAdmin)
	waitRelayed(t, relay, 1, 1)
	a.mustHold(1, protocol.ModeExclusive, 0, "x") // the id is free again
	ping(a, 1)
	a.release(2)
	a.release(1)
	waitRelayed(t, relay, 0, 1)
}

// Sessions on the relay and on the owner contend for a few names in
// every mode: never two conflicting holders at the owner, tokens strictly
// increasing, every claim granted, nothing left relayed.
func TestRelayV2Contention(t *testing.T) {
	check := &holderCheck{}
	owner, relay := startRelayPair(t, nil, func(s *server.Server) { s.Observer = server.Observers{s.Observer, check} })
	const sessions, rounds = 16, 30
	var wg sync.WaitGroup
	errs := make(chan error, sessions)
	for i := range sessions {
		addr := owner.addr
		if i%2 == 0 {
			addr = relay.addr
		}
		wg.Go(func() {
			if err := contend(addr, uint64(i), rounds); err != nil {
				errs <- fmt.Errorf("session %d (via %s): %w", i, addr, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	check.mu.Lock()
	defer check.mu.Unlock()
	if check.err != nil {
		t.Fatal(check.err)
	}
	t.Logf("%d grants", check.grants)
	if check.grants < sessions*rounds {
		t.Errorf("%d grants, want at least %d", check.grants, sessions*rounds)
	}
	waitRelayed(t, relay, 0, 0)
}

// startHoldPair starts an owner and a relay whose routers the test sets.
func startHoldPair(t *testing.T) (owner, relay *testServer, ownerR, relayR *router) {
	t.Helper()
	ownerR = &router{route: func(string, bool) server.Route { return server.Route{Action: server.RouteServe} }}
	owner = startServer(t, func(s *server.Server) { s.Router, s.TrustHop = ownerR, trustAll })
	relayR = &router{route: func(string, bool) server.Route { return server.Route{Action: server.RouteHold} }}
	relay = startServer(t, func(s *server.Server) { s.Router, s.NodeID = relayR, relayNode })
	return owner, relay, ownerR, relayR
}

// A claim on a held name (its owner warming up) is answered QUEUED and
// granted nowhere; a no-wait one is answered BUSY. Once the name can be
// relayed, the held claim goes to the owner, in its FIFO, and its grant
// is pushed as PROMOTED; a held claim released meanwhile is forgotten.
func TestRelayV2HoldThenForward(t *testing.T) {
	owner, relay, _, relayR := startHoldPair(t)
	a := relay.dialV2(t, longLease, "a")
	a.mustQueue(1, protocol.ModeExclusive, 0, "h")
	a.mustWrite(noWaitFrame(2, protocol.ModeExclusive, 0, "h"))
	a.expect(protocol.TypeBusy, 2)
	a.mustQueue(3, protocol.ModeExclusive, 0, "h2")
	a.release(3)
	ping(a, 1)
	a.mustWrite(claimFrame(1, protocol.ModeExclusive, 0, "other"))
	a.expectSessionError(protocol.CodeClaimInUse) // 1 is in use while held

	a = relay.dialV2(t, longLease, "a")
	a.mustQueue(1, protocol.ModeExclusive, 0, "h")
	a.mustQueue(3, protocol.ModeExclusive, 0, "h2")
	a.release(3)
	b := owner.dialV2(t, longLease, "b")
	tokB := b.mustHold(1, protocol.ModeExclusive, 0, "h")
	a.expectSilenceV2(300 * time.Millisecond) // held: granted nowhere
	if len(relay.Snapshot(nil)) != 0 {
		t.Fatalf("a held claim is in the relay's table: %+v", relay.Snapshot(nil))
	}
	relayR.set(func(string, bool) server.Route { return server.Route{Action: server.RouteForward, Addr: owner.addr} })
	deadline := time.Now().Add(waitLimit)
	for l, _ := owner.Lock("h"); len(l.Waiters) == 0; l, _ = owner.Lock("h") {
		if time.Now().After(deadline) {
			t.Fatal("the held claim did not reach the owner's queue")
		}
		time.Sleep(5 * time.Millisecond)
	}
	a.expectSilenceV2(100 * time.Millisecond) // QUEUED there: nothing new
	b.release(1)
	if tok := a.expectPromoted(1); tok <= tokB {
		t.Fatalf("token %d after %d, want increasing", tok, tokB)
	}
	if _, held := owner.Lock("h2"); held {
		t.Fatal("a held claim released meanwhile reached the owner")
	}
	a.release(1)
	waitRelayed(t, relay, 0, 1)
}

// A held claim whose name this node comes to serve enters its table; a
// held claim whose name nobody can serve here any more is revoked with
// 0x03.
func TestRelayV2HoldThenServe(t *testing.T) {
	_, relay, _, relayR := startHoldPair(t)
	a := relay.dialV2(t, longLease, "a")
	a.mustQueue(1, protocol.ModeExclusive, 0, "h")
	a.mustQueue(2, protocol.ModeExclusive, 0, "gone")
	relayR.set(func(name string, _ bool) server.Route {
		if name == "gone" {
			return server.Route{Action: server.RouteNotOwner}
		}
		return server.Route{Action: server.RouteServe}
	})
	var tok uint64
	for range 2 {
		switch f := a.mustReadV2(); {
		case f.Type == protocol.TypePromoted && f.Claim == 1:
			tok = f.Token
		case f.Type == protocol.TypeRevoked && f.Claim == 2 && f.Code == protocol.CodeNotOwner:
		default:
			t.Fatalf("got %v, want PROMOTED(1) and REVOKED(2, 0x03)", f)
		}
	}
	if l, ok := relay.Lock("h"); !ok || l.Holders[0].Token != tok {
		t.Fatalf("relay's lock h: %+v, %v; want held with token %d", l, ok, tok)
	}
	a.release(1)
}

// An owner that holds a relayed session's claim (it is warming up)
// answers QUEUED through the relay, and pushes PROMOTED once it serves.
func TestRelayV2OwnerHolds(t *testing.T) {
	owner, relay, ownerR, relayR := startHoldPair(t)
	relayR.set(func(string, bool) server.Route { return server.Route{Action: server.RouteForward, Addr: owner.addr} })
	ownerR.set(func(string, bool) server.Route { return server.Route{Action: server.RouteHold} })
	a := relay.dialV2(t, longLease, "a")
	a.mustQueue(1, protocol.ModeExclusive, 0, "warm")
	waitRelayed(t, relay, 1, 1)
	a.expectSilenceV2(300 * time.Millisecond)
	ownerR.set(func(string, bool) server.Route { return server.Route{Action: server.RouteServe} })
	a.expectPromoted(1)
	waitHolder(t, owner, "warm", func(h server.HolderInfo) bool { return h.Peer.Via != "" })
	a.release(1)
	waitRelayed(t, relay, 0, 1)
}

// A held claim relayed late that the owner refuses is revoked with the
// owner's code: the client was told QUEUED.
func TestRelayV2HoldThenRefused(t *testing.T) {
	owner, relay, ownerR, relayR := startHoldPair(t)
	ownerR.set(func(string, bool) server.Route { return server.Route{Action: server.RouteNotOwner} })
	a := relay.dialV2(t, longLease, "a")
	a.mustQueue(1, protocol.ModeExclusive, 0, "moved")
	relayR.set(func(string, bool) server.Route { return server.Route{Action: server.RouteForward, Addr: owner.addr} })
	a.expectCode(protocol.TypeRevoked, 1, protocol.CodeNotOwner)
	waitRelayed(t, relay, 0, 1)
	ping(a, 1)
}

// A claim relayed to an owner that holds it (QUEUED), and then revoked
// there with 0x03 because its name moved to another node (a planned
// change committed meanwhile), is held again here and relayed to the
// name's new owner: a queued claim holds nothing, so its client, told
// QUEUED, hears only its grant. While this node's ring still names the
// owner that revoked it, it waits for the ring (bounded), instead of
// asking that owner again. A claim that was granted is not re-routed: its
// REVOKED is passed on.
func TestRelayV2QueuedClaimFollowsItsName(t *testing.T) {
	ownerA, relay, ownerAR, relayR := startHoldPair(t)
	ownerBR := &router{route: func(string, bool) server.Route { return server.Route{Action: server.RouteServe} }}
	ownerB := startServer(t, func(s *server.Server) { s.Router, s.TrustHop = ownerBR, trustAll })
	toA := func(string, bool) server.Route { return server.Route{Action: server.RouteForward, Addr: ownerA.addr} }
	relayR.set(toA)
	ownerAR.set(func(string, bool) server.Route { return server.Route{Action: server.RouteHold} })
	a := relay.dialV2(t, longLease, "a")
	a.mustQueue(1, protocol.ModeExclusive, 0, "m")
	waitRelayed(t, relay, 1, 1)
	// The name moves to B: A (forwarded) is no longer its owner and
	// revokes its held claim; this node learns of the change a little
	// later.
	ownerAR.set(func(string, bool) server.Route { return server.Route{Action: server.RouteNotOwner} })
	a.expectSilenceV2(300 * time.Millisecond)
	relayR.set(func(string, bool) server.Route { return server.Route{Action: server.RouteForward, Addr: ownerB.addr} })
	tok := a.expectPromoted(1)
	if h := waitHolder(t, ownerB, "m", func(h server.HolderInfo) bool { return h.Peer.Via != "" }); h.Token != tok {
		t.Fatalf("B's holder of m: %+v, want token %d", h, tok)
	}
	a.release(1)
	waitRelayed(t, relay, 0, 2)

	// This node's ring never moves on: after the wait, the owner that
	// revoked the claim is asked again, refuses it, and the claim is
	// revoked.
	ownerAR.set(func(string, bool) server.Route { return server.Route{Action: server.RouteHold} })
	relayR.set(toA)
	a.mustQueue(3, protocol.ModeExclusive, 0, "m2")
	ownerAR.set(func(string, bool) server.Route { return server.Route{Action: server.RouteNotOwner} })
	start := time.Now()
	a.expectCode(protocol.TypeRevoked, 3, protocol.CodeNotOwner)
	if d := time.Since(start); d < 900*time.Millisecond {
		t.Errorf("revoked %v after the owner's change, want after the wait for this node's ring (1 s)", d)
	}

	// Granted at A, then revoked there: lost, as before.
	ownerAR.set(func(string, bool) server.Route { return server.Route{Action: server.RouteServe} })
	relayR.set(toA)
	a.mustHold(2, protocol.ModeExclusive, 0, "g")
	ownerA.Evict(func(name string) bool { return name == "g" })
	a.expectCode(protocol.TypeRevoked, 2, protocol.CodeNotOwner)
	ping(a, 1)
}
