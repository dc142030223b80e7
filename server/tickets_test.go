package server_test

import (
	"slices"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// Queue tickets over real TCP (docs/protocol-v2-tickets.md, "v2 queue tickets";
// docs/design/2026-12-01-ha-failover-design.md, rule 5).

// dialTickets opens a resumable session that asks for queue tickets and
// returns it with its WELCOME.
func (ts *testServer) dialTickets(t *testing.T, lease time.Duration, label string) (*v2client, protocol.Frame) {
	t.Helper()
	c := ts.dialV2Raw(t)
	c.mustWrite(protocol.AppendFrame(protocol.AppendPreamble(nil), protocol.Frame{
		Type: protocol.TypeHello, LeaseMS: protocol.LeaseMS(lease), Flags: protocol.HelloResumable | protocol.HelloTickets, Label: label}))
	w := c.mustReadV2()
	if w.Type != protocol.TypeWelcome || w.Flags&protocol.WelcomeTickets == 0 || w.Flags&protocol.WelcomeResumable == 0 {
		t.Fatalf("%s: opening with tickets answered %v, want WELCOME with flags resumable and tickets", c, w)
	}
	c.session = w.Session
	return c, w
}

// queueTicket claims and expects QUEUED with a ticket, which it returns.
func (c *v2client) queueTicket(id uint32, name string) uint64 {
	c.t.Helper()
	f := c.claim(id, excl2, 0, name)
	if f.Type != protocol.TypeQueued || f.Ticket == 0 {
		c.t.Fatalf("%s: CLAIM %d %q answered %v, want QUEUED with a ticket", c, id, name, f)
	}
	return f.Ticket
}

// reassertTicket re-asserts claim 1 on "job" of the session prior
// welcomed, with its token, or its queue ticket when ticket is not 0, and
// ring 5; it returns the answer.
func (c *v2client) reassertTicket(prior protocol.Frame, token, ticket uint64) protocol.Frame {
	c.t.Helper()
	f := protocol.Frame{Type: protocol.TypeClaim, Claim: 1, Flags: protocol.ClaimReassert, Mode: excl2, Name: "job",
		Token: token, Ring: 5, Session: prior.Session, Secret: prior.Secret, Node: prior.Node}
	if ticket != 0 {
		f.Flags |= protocol.ClaimTicket
		f.Token, f.Ticket = 0, ticket
	}
	c.mustWrite(protocol.AppendFrame(nil, f))
	a := c.mustReadV2()
	if a.Claim != 1 {
		c.t.Fatalf("%s: re-assertion answered %v", c, a)
	}
	return a
}

// A session that asks for tickets is told each queued claim's ticket, in
// queue order, and is told it again when it adopts the claim after its
// connection broke; a session that did not ask gets the plain QUEUED and
// WELCOME of the earlier revision.
func TestTicketsInQueued(t *testing.T) {
	ts := startServer(t)
	h := ts.dialV2(t, longLease, "h")
	h.mustHold(1, excl2, 0, "job")
	x, wx := ts.dialTickets(t, longLease, "x")
	tx := x.queueTicket(1, "job")
	plain := ts.dialV2(t, longLease, "plain")
	if f := plain.claim(1, excl2, 0, "job"); f.Type != protocol.TypeQueued || f.Ticket != 0 {
		t.Fatalf("a session that asked for no tickets: %v, want a plain QUEUED", f)
	}
	y, _ := ts.dialTickets(t, longLease, "y")
	if ty := y.queueTicket(1, "job"); ty <= tx {
		t.Fatalf("tickets %d then %d: want increasing in queue order", tx, ty)
	}
	// Resumable without tickets: WELCOME without the tickets bit.
	r, _ := ts.dialResumable(t, longLease, "r") // checks the flags are exactly resumable
	r.mustQueue(1, excl2, 0, "job")

	x.breakConn()
	ts.events.wait(t, "session kept", keptEvent(wx.Session))
	x2, _ := ts.dialTickets(t, longLease, "x2")
	if f := x2.reassert(1, excl2, "job", 0, wx); f.Type != protocol.TypeQueued || f.Ticket != tx {
		t.Fatalf("adopted queued claim answered %v, want QUEUED with its ticket %d", f, tx)
	}
}

// The test of rule 5: two clients queue behind a holder on node a, X then
// Y; a dies. On node b, which took the name over and is warming up, the
// holder re-asserts and keeps the lock, a third client Z claims the name,
// then Y re-asserts its queued claim with its ticket, then X. When the
// warm-up ends the queue is X, Y, Z: X ahead of Y by ticket, both ahead
// of Z, which arrived without one; each is promoted in that order.
func TestReassertTicketsKeepQueueOrder(t *testing.T) {
	a := startServer(t, func(s *server.Server) {
		s.NodeID = "a"
		s.Router = &router{route: func(string, bool) server.Route { return server.Route{Action: server.RouteServe} }}
	})
	h, wh := a.dialTickets(t, longLease, "h")
	tok := h.mustHold(1, excl2, 0, "job")
	x, wx := a.dialTickets(t, longLease, "x")
	tx := x.queueTicket(1, "job")
	y, wy := a.dialTickets(t, longLease, "y")
	ty := y.queueTicket(1, "job")
	if tx >= ty {
		t.Fatalf("tickets x=%d y=%d: want x's below y's", tx, ty)
	}
	// Node a dies: its clients lose their connections, their kept
	// sessions die with it.
	a.Close()

	r := &router{route: func(string, bool) server.Route {
		return server.Route{Action: server.RouteHold, Gated: true, Since: 5}
	}}
	b := startServer(t, func(s *server.Server) { s.NodeID = "b"; s.Router = r })
	reassert := func(c *v2client, prior protocol.Frame, token, ticket uint64) protocol.Frame {
		t.Helper()
		return c.reassertTicket(prior, token, ticket)
	}
	h2, _ := b.dialTickets(t, longLease, "h2")
	if f := reassert(h2, wh, tok, 0); f.Type != protocol.TypeGranted || f.Token != tok {
		t.Fatalf("holder's re-assertion answered %v, want GRANTED(%d)", f, tok)
	}
	z, _ := b.dialTickets(t, longLease, "z")
	z.mustQueue(1, excl2, 0, "job")
	y2, _ := b.dialTickets(t, longLease, "y2")
	if f := reassert(y2, wy, 0, ty); f.Type != protocol.TypeQueued || f.Ticket != ty {
		t.Fatalf("y's re-assertion answered %v, want QUEUED with its ticket %d", f, ty)
	}
	x2, _ := b.dialTickets(t, longLease, "x2")
	if f := reassert(x2, wx, 0, tx); f.Type != protocol.TypeQueued || f.Ticket != tx {
		t.Fatalf("x's re-assertion answered %v, want QUEUED with its ticket %d", f, tx)
	}
	if got := b.events.count(func(e server.Event) bool {
		return e.Kind == server.EventReasserted && e.Action == server.ReassertRequeued
	}); got != 2 {
		t.Errorf("%d requeued re-assertions reported, want 2", got)
	}

	// The warm-up ends: the held claims enter the table, in whatever
	// order their sessions ask again.
	r.set(func(string, bool) server.Route { return server.Route{Action: server.RouteServe} })
	deadline := time.Now().Add(waitLimit)
	for {
		if _, v2 := b.ProtocolCounts(); v2.Queued == 3 {
			break
		}
		if time.Now().After(deadline) {
			_, v2 := b.ProtocolCounts()
			t.Fatalf("the held claims did not enter the table: %+v", v2)
		}
		time.Sleep(10 * time.Millisecond)
	}
	h2.release(1)
	expectPromotionOrder(t, []string{"x", "y", "z"}, x2, y2, z)
}

// expectPromotionOrder checks that cs, which wait for claim 1 of one
// lock, are promoted in the order given: whoever is promoted first must
// be cs[0], which then releases, and so on.
func expectPromotionOrder(t *testing.T, names []string, cs ...*v2client) {
	t.Helper()
	left := slices.Clone(cs)
	for i, want := range cs {
		got := -1
		for deadline := time.Now().Add(waitLimit); got < 0 && time.Now().Before(deadline); {
			for j, c := range left {
				if f, err := c.readV2(20 * time.Millisecond); err == nil {
					if f.Type != protocol.TypePromoted || f.Claim != 1 {
						t.Fatalf("%s: got %v, want PROMOTED(1)", names[slices.Index(cs, c)], f)
					}
					got = j
					break
				}
			}
		}
		switch {
		case got < 0:
			t.Fatalf("nobody promoted; want %s", names[i])
		case left[got] != want:
			t.Fatalf("%s promoted before %s; want the order %v", names[slices.Index(cs, left[got])], names[i], names)
		}
		left = slices.Delete(left, got, got+1)
		want.release(1)
	}
}

// As TestReassertTicketsKeepQueueOrder, but the holder does not come
// back: when the warm-up ends nobody holds the lock, and the first claim
// granted is X's, the oldest, not Z's, whose session was held first and
// asks first; then Y, then Z.
func TestReassertTicketsFirstAfterWarmup(t *testing.T) {
	a := startServer(t, func(s *server.Server) {
		s.NodeID = "a"
		s.Router = &router{route: func(string, bool) server.Route { return server.Route{Action: server.RouteServe} }}
	})
	h := a.dialV2(t, longLease, "h")
	h.mustHold(1, excl2, 0, "job")
	x, wx := a.dialTickets(t, longLease, "x")
	tx := x.queueTicket(1, "job")
	y, wy := a.dialTickets(t, longLease, "y")
	ty := y.queueTicket(1, "job")
	a.Close()

	r := &router{route: func(string, bool) server.Route {
		return server.Route{Action: server.RouteHold, Gated: true, Since: 5}
	}}
	b := startServer(t, func(s *server.Server) { s.NodeID = "b"; s.Router = r })
	z, _ := b.dialTickets(t, longLease, "z")
	z.mustQueue(1, excl2, 0, "job")
	y2, _ := b.dialTickets(t, longLease, "y2")
	if f := y2.reassertTicket(wy, 0, ty); f.Type != protocol.TypeQueued || f.Ticket != ty {
		t.Fatalf("y's re-assertion answered %v", f)
	}
	x2, _ := b.dialTickets(t, longLease, "x2")
	if f := x2.reassertTicket(wx, 0, tx); f.Type != protocol.TypeQueued || f.Ticket != tx {
		t.Fatalf("x's re-assertion answered %v", f)
	}
	r.set(func(string, bool) server.Route { return server.Route{Action: server.RouteServe} })
	expectPromotionOrder(t, []string{"x", "y", "z"}, x2, y2, z)
}
