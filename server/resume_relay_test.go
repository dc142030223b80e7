package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// Resumable sessions through a relay, and re-assertion on a node that
// took a name over (docs/protocol-v2-resume.md, "v2 resumable sessions and
// re-assertion").

// startRelayTrio starts an owner and two relaying nodes, r1 and r2, that
// forward every name to it.
func startRelayTrio(t *testing.T) (owner, r1, r2 *testServer) {
	t.Helper()
	owner = startServer(t, func(s *server.Server) {
		s.NodeID = "o"
		s.Router = &router{route: func(string, bool) server.Route { return server.Route{Action: server.RouteServe} }}
		s.TrustHop = trustAll
	})
	relay := func(id string) *testServer {
		return startServer(t, func(s *server.Server) {
			s.NodeID = id
			s.Router = &router{route: func(string, bool) server.Route {
				return server.Route{Action: server.RouteForward, Addr: owner.addr}
			}}
		})
	}
	return owner, relay("r1"), relay("r2")
}

// The node a resumable client is connected to dies: the owner keeps the
// claims it relayed (the hop header said resumable), promotes nobody,
// and the client re-asserts through another node and keeps its token.
func TestResumeRelayedOnAnotherNode(t *testing.T) {
	owner, r1, r2 := startRelayTrio(t)
	a, w := r1.dialResumable(t, longLease, "a")
	if w.Node != "r1" {
		t.Fatalf("WELCOME node %q, want r1", w.Node)
	}
	tok := a.mustHold(1, excl2, 0, "x")
	waitRelayed(t, r1, 1, 1)
	b := owner.dialV2(t, longLease, "b")
	b.mustQueue(1, excl2, 0, "x")

	// r1 dies: every connection of it closes at once.
	r1.Close()
	owner.events.wait(t, "relayed session kept", func(e server.Event) bool {
		return e.Kind == server.EventSessionKept && strings.HasPrefix(e.Peer.Via, "r1/")
	})
	b.expectSilenceV2(300 * time.Millisecond)

	a2, _ := r2.dialResumable(t, longLease, "a")
	if f := a2.reassert(1, excl2, "x", tok, w); f.Type != protocol.TypeGranted || f.Token != tok {
		t.Fatalf("re-assertion through r2 answered %v, want GRANTED(%d)", f, tok)
	}
	h := waitHolder(t, owner, "x", func(h2 server.HolderInfo) bool { return strings.HasPrefix(h2.Peer.Via, "r2/") })
	if h.Token != tok {
		t.Errorf("the owner's holder of x has token %d, want %d", h.Token, tok)
	}
	// The claim lives on: released through r2, b is promoted.
	a2.release(1)
	if got := b.expectPromoted(1); got <= tok {
		t.Errorf("b promoted with %d, want above %d", got, tok)
	}
}

// A re-assertion on the relaying node itself, after the client's own
// connection broke, is relayed to the owner, which adopts the claim kept
// when the relaying node closed the old upstream.
func TestResumeRelayedSameNode(t *testing.T) {
	owner, r1, _ := startRelayTrio(t)
	a, w := r1.dialResumable(t, longLease, "a")
	tok := a.mustHold(1, excl2, 0, "x")
	b := owner.dialV2(t, longLease, "b")
	b.mustQueue(1, excl2, 0, "x")
	a.breakConn()
	owner.events.wait(t, "relayed session kept", func(e server.Event) bool {
		return e.Kind == server.EventSessionKept && strings.HasPrefix(e.Peer.Via, "r1/")
	})
	b.expectSilenceV2(200 * time.Millisecond)
	a2, _ := r1.dialResumable(t, longLease, "a")
	if f := a2.reassert(1, excl2, "x", tok, w); f.Type != protocol.TypeGranted || f.Token != tok {
		t.Fatalf("re-assertion answered %v, want GRANTED(%d)", f, tok)
	}
	// A wrong secret through the relay is refused by the owner.
	bad := w
	bad.Secret[3] ^= 0xff
	a3, _ := r1.dialResumable(t, longLease, "a3")
	a3.mustWrite(reassertFrame(1, excl2, "x", tok, bad))
	a3.expectCode(protocol.TypeRefused, 1, protocol.CodeReassertRefused)
}

// A relayed session that is not resumable is kept by the owner when its
// relaying node dies: its client learns of the death only from its own
// connection, and may still believe until its lease has passed. (Before,
// the owner released at once, and the fault suite excused the overlap.)
// When its client hangs up instead, the relaying node releases its
// claims first, and the owner ends them at once.
func TestRelayedNotResumableKeptWhenRelayDies(t *testing.T) {
	const lease = 600 * time.Millisecond
	owner, r1, _ := startRelayTrio(t)
	a := r1.dialV2(t, lease, "a")
	a.mustHold(1, excl2, 0, "x")
	heard := time.Now()
	b := owner.dialV2(t, longLease, "b")
	b.mustQueue(1, excl2, 0, "x")
	r1.Close()
	b.expectPromoted(1)
	if d := time.Since(heard); d < lease-50*time.Millisecond {
		t.Errorf("promoted %v after the relayed holder was last heard, within its lease of %v", d, lease)
	}

	if n := owner.KeptSessions(); n != 0 {
		t.Errorf("KeptSessions = %d after the lease", n)
	}
}

// A plain relayed session whose client hangs up is released at the owner
// at once: the relaying node writes RELEASE for its claims before it
// closes the upstream.
func TestRelayedNotResumableReleasedOnHangUp(t *testing.T) {
	owner, r1, _ := startRelayTrio(t)
	a := r1.dialV2(t, longLease, "a")
	a.mustHold(1, excl2, 0, "x")
	a.mustHold(2, excl2, 0, "y")
	b := owner.dialV2(t, longLease, "b")
	b.mustQueue(1, excl2, 0, "x")
	b.mustQueue(2, excl2, 0, "y")
	a.close()
	start := time.Now()
	b.expectPromoted(1)
	b.expectPromoted(2)
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("promoted %v after the relayed client hung up", d)
	}
}

// On a node that took a name over without its state and is warming up,
// a re-asserted holder is installed with its old token when nothing
// conflicts, the first accepted keeps the name, an older ring is told
// 0x05, and a queued claim queues again.
func TestReassertTakeOver(t *testing.T) {
	r := &router{route: func(name string, _ bool) server.Route {
		switch name {
		case "x", "y":
			return server.Route{Action: server.RouteHold, Gated: true, Since: 5}
		case "busy":
			return server.Route{Action: server.RouteHold} // no epoch yet
		}
		return server.Route{Action: server.RouteServe}
	}}
	ts := startServer(t, func(s *server.Server) { s.NodeID = "b"; s.Router = r })
	gone := protocol.Frame{Session: 17, Node: "a"} // a session of a removed node
	gone.Secret[0] = 1
	reassertRing := func(id uint32, mode protocol.Mode, name string, token, ring uint64) []byte {
		return protocol.AppendFrame(nil, protocol.Frame{Type: protocol.TypeClaim, Claim: id, Flags: protocol.ClaimReassert,
			Mode: mode, Name: name, Token: token, Ring: ring, Session: gone.Session, Secret: gone.Secret, Node: gone.Node})
	}
	c1 := ts.dialV2(t, longLease, "c1")
	c1.mustWrite(reassertRing(1, excl2, "x", 42, 4))
	c1.expectCode(protocol.TypeRefused, 1, protocol.CodeStaleRing)
	c1.mustWrite(reassertRing(1, excl2, "x", 42, 5))
	if f := c1.expect(protocol.TypeGranted, 1); f.Token != 42 {
		t.Fatalf("re-asserted holder answered %v, want GRANTED(42)", f)
	}
	// A second, conflicting re-assertion: the first keeps the name.
	c2 := ts.dialV2(t, longLease, "c2")
	c2.mustWrite(reassertRing(1, excl2, "x", 40, 6))
	c2.expectCode(protocol.TypeRefused, 1, protocol.CodeReassertRefused)
	// Shared holders re-assert side by side.
	c1.mustWrite(reassertRing(2, shrd2, "y", 50, 5))
	c1.expect(protocol.TypeGranted, 2)
	c2.mustWrite(reassertRing(2, shrd2, "y", 51, 5))
	c2.expect(protocol.TypeGranted, 2)
	// A queued claim queues again; a name this node cannot decide on is
	// 0x03 (retry).
	c3 := ts.dialV2(t, longLease, "c3")
	c3.mustWrite(reassertRing(1, excl2, "x", 0, 5))
	c3.expect(protocol.TypeQueued, 1)
	c3.mustWrite(reassertRing(2, excl2, "busy", 9, 5))
	c3.expectCode(protocol.TypeRefused, 2, protocol.CodeNotOwner)
	// The warm-up ends: the queued claim enters the table behind the
	// re-asserted holder and is promoted when it releases, with a token
	// of this node's source.
	r.set(func(string, bool) server.Route { return server.Route{Action: server.RouteServe} })
	c3.expectSilenceV2(300 * time.Millisecond)
	c1.release(1)
	if tok := c3.expectPromoted(1); tok <= 42 {
		t.Errorf("promoted with token %d, want a token of the node's source", tok)
	}
	got := ts.events.count(func(e server.Event) bool {
		return e.Kind == server.EventReasserted && e.Action == server.ReassertInstalled
	})
	if got != 3 {
		t.Errorf("%d installed re-assertions reported, want 3", got)
	}
}

// A resumable session that breaks the protocol ends at once with its
// claims and range locks, on the node that serves them and at the owner
// of those it relayed, with or without the detach flag: its client
// stops believing at the ERROR, so nobody waits a lease behind it. The
// relaying node releases them at each owner before it closes the
// upstream, which the owner would otherwise keep for a resume.
func TestResumableEndsOnSessionErrorRelayed(t *testing.T) {
	w := protocol.LockWrite
	for _, relayed := range []bool{false, true} {
		for _, detach := range []bool{false, true} {
			t.Run(fmt.Sprintf("relayed=%v,detach=%v", relayed, detach), func(t *testing.T) {
				owner, r1, _ := startRelayTrio(t)
				via := owner
				if relayed {
					via = r1
				}
				dial := via.dialResumable
				if detach {
					dial = via.dialDetach
				}
				a, wel := dial(t, longLease, "a")
				tok := a.mustHold(1, excl2, 0, "x")
				a.mustWrite(rangeFrame(2, protocol.RangeSet, 0, w, 7, 0, 99, "f"))
				a.expectRange(2, protocol.RangeGranted)
				b := owner.dialV2(t, longLease, "b")
				b.mustQueue(1, excl2, 0, "x")
				c := owner.dialV2(t, longLease, "c")
				c.mustWrite(rangeFrame(1, protocol.RangeSet, protocol.RangeWait, w, 1, 0, 9, "f"))
				c.expectRange(1, protocol.RangeQueued)

				start := time.Now()
				a.mustWrite([]byte{0, 1, 0x7f}) // unknown frame type
				a.expectSessionError(protocol.CodeUnknownMessage)
				// Within waitLimit, far below the lease.
				if got := b.expectPromoted(1); got <= tok {
					t.Errorf("b promoted with %d, want above %d", got, tok)
				}
				c.expectRange(1, protocol.RangePromoted)
				t.Logf("waiters promoted %v after the session error (lease %v)", time.Since(start), longLease)
				// Nothing is left for a re-assertion.
				a2, _ := via.dialResumable(t, longLease, "a")
				if f := a2.reassert(1, excl2, "x", tok, wel); f.Type != protocol.TypeRefused || f.Code != protocol.CodeReassertRefused {
					t.Errorf("re-assertion after the session error answered %v, want REFUSED 0x04", f)
				}
				if n := owner.KeptSessions(); n != 0 {
					t.Errorf("the owner keeps %d sessions, want 0", n)
				}
			})
		}
	}
}

// A server condition is not the client's fault: a relaying node that
// shuts down (ERROR 0x01) leaves a resumable session's relayed claims
// kept at their owner, even when its client then hangs up, and the
// client re-asserts them through another node with their tokens.
func TestResumeRelayedAfterRelayShutdown(t *testing.T) {
	owner, r1, r2 := startRelayTrio(t)
	a, wel := r1.dialResumable(t, longLease, "a")
	tok := a.mustHold(1, excl2, 0, "x")
	b := owner.dialV2(t, longLease, "b")
	b.mustQueue(1, excl2, 0, "x")
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r1.Shutdown(ctx) }()
	a.expectSessionError(protocol.CodeShuttingDown)
	a.close()
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	owner.events.wait(t, "relayed session kept", func(e server.Event) bool {
		return e.Kind == server.EventSessionKept && strings.HasPrefix(e.Peer.Via, "r1/")
	})
	b.expectSilenceV2(200 * time.Millisecond)
	a2, _ := r2.dialResumable(t, longLease, "a")
	if f := a2.reassert(1, excl2, "x", tok, wel); f.Type != protocol.TypeGranted || f.Token != tok {
		t.Fatalf("re-assertion through r2 after r1's shutdown answered %v, want GRANTED(%d)", f, tok)
	}
}
