package server_test

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// Queue tickets through a relaying node (docs/protocol-v2-tickets.md, "v2 queue
// tickets", "Tickets through a relay"; relay2.go): the relaying node
// asks the owner for tickets on an upstream session when the client's
// session asked, and passes the owner's QUEUED on with its ticket.

// A client with tickets on the relaying node is told the owner's ticket
// for a claim the owner queues, PROMOTED as before when it is granted; a
// client without tickets gets the plain QUEUED.
func TestRelayedClaimGetsOwnersTicket(t *testing.T) {
	owner, relay := startRelayPair(t, nil)
	h := owner.dialV2(t, longLease, "h")
	h.mustHold(1, excl2, 0, "job")
	x, _ := relay.dialTickets(t, longLease, "x")
	tx := x.queueTicket(1, "job")
	plain := relay.dialV2(t, longLease, "plain")
	if f := plain.claim(1, excl2, 0, "job"); f.Type != protocol.TypeQueued || f.Ticket != 0 {
		t.Fatalf("relayed for a session that asked for no tickets: %v, want a plain QUEUED", f)
	}
	// The owner's own counter: a ticket it gives next is above x's.
	d, _ := owner.dialTickets(t, longLease, "d")
	if td := d.queueTicket(1, "job"); td <= tx {
		t.Fatalf("relayed ticket %d, then the owner's %d: want the owner's counter", tx, td)
	}
	h.release(1)
	if tok := x.expectPromoted(1); tok == 0 {
		t.Fatalf("PROMOTED with token 0")
	}
	x.release(1)
	plain.expectPromoted(1)
}

// startOlderOwner listens in front of the server at owner as an owner of
// the revision before queue tickets: a HELLO that asks for them is
// refused with ERROR 0x1e, after which the connection ends (as such a
// server refuses any reserved flag); any other connection is passed on
// to owner, bytes both ways. It returns its address and the count of
// HELLOs refused.
func startOlderOwner(t *testing.T, owner string) (string, *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		refused atomic.Int32
		mu      sync.Mutex
		conns   []net.Conn
		wg      sync.WaitGroup
	)
	track := func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	serve := func(c net.Conn) {
		defer wg.Done()
		defer c.Close()
		br := bufio.NewReader(c)
		var head []byte
		read := func(n int) []byte {
			b := make([]byte, n)
			if _, err := io.ReadFull(br, b); err != nil {
				return nil
			}
			head = append(head, b...)
			return b
		}
		// The hop header (relay.go, resume.go): marker, version, the
		// client's address and identity, then (version 2 and up) the
		// origin and its session, then (version 3) the flags and hash.
		fixed := read(3)
		if fixed == nil || read(int(fixed[2])) == nil {
			return
		}
		idLen := read(2)
		if idLen == nil || read(int(binary.BigEndian.Uint16(idLen))) == nil {
			return
		}
		if fixed[1] >= 2 {
			o := read(1)
			if o == nil || read(int(o[0])+8) == nil {
				return
			}
		}
		if fixed[1] >= 3 {
			fl := read(1)
			if fl == nil || fl[0]&1 != 0 && read(32) == nil {
				return
			}
		}
		if read(len(protocol.AppendPreamble(nil))) == nil {
			return
		}
		n := read(protocol.FrameHeaderLen)
		if n == nil {
			return
		}
		body := read(int(binary.BigEndian.Uint16(n)))
		if body == nil {
			return
		}
		hello, _, err := protocol.ParseHello(append(n, body...))
		if err != nil {
			return
		}
		if hello.Tickets() {
			refused.Add(1)
			c.Write(protocol.AppendSessionError(nil, protocol.CodeUnsupportedFeature, ""))
			return
		}
		up, err := net.Dial("tcp", owner)
		if err != nil {
			return
		}
		track(up)
		defer up.Close()
		if _, err := up.Write(head); err != nil {
			return
		}
		done := make(chan struct{})
		go func() {
			io.Copy(up, br)
			up.Close()
			close(done)
		}()
		io.Copy(c, up)
		c.Close()
		<-done
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			track(c)
			wg.Add(1)
			go serve(c)
		}
	}()
	return ln.Addr().String(), &refused
}

// An owner of the revision before queue tickets refuses the upstream
// HELLO that asks for them: the relaying node opens the upstream again
// without asking, once for the session, and relays the claims on it as
// before; the client, which asked for tickets, gets QUEUED without one.
func TestRelayOlderOwnerRefusesTickets(t *testing.T) {
	owner := startServer(t, func(s *server.Server) {
		s.Router = &router{route: func(string, bool) server.Route { return server.Route{Action: server.RouteServe} }}
		s.TrustHop = trustAll
	})
	old, refused := startOlderOwner(t, owner.addr)
	relay := startServer(t, func(s *server.Server) {
		s.NodeID = relayNode
		s.Router = &router{route: func(string, bool) server.Route {
			return server.Route{Action: server.RouteForward, Addr: old}
		}}
	})
	h := owner.dialV2(t, longLease, "h")
	h.mustHold(1, excl2, 0, "job")
	x, _ := relay.dialTickets(t, longLease, "x")
	// Served at once, not held as for an owner out of reach (QUEUED).
	x.mustHold(2, excl2, 0, "other")
	if f := x.claim(1, excl2, 0, "job"); f.Type != protocol.TypeQueued || f.Ticket != 0 {
		t.Fatalf("queued by an owner without tickets: %v, want a plain QUEUED", f)
	}
	if n := refused.Load(); n != 1 {
		t.Fatalf("%d upstream HELLOs refused, want 1 (then opened without asking)", n)
	}
	h.release(1)
	x.expectPromoted(1)
	x.release(1)
	x.release(2)
	waitRelayed(t, relay, 0, 1)
	if n := refused.Load(); n != 1 {
		t.Errorf("%d upstream HELLOs refused, want 1", n)
	}
}

// Rule 5 through a relaying node: X then Y queue on owner a through r1,
// with the tickets a gives; their connections break and a dies. Node b
// takes the name over and warms up; Z claims there, then Y re-asserts
// through r1 with its ticket, then X. When the warm-up ends the first
// granted is X, then Y, then Z: the tickets came through r1 both ways.
// (Before, r1 asked a for no tickets: X and Y had none to re-assert with,
// and queued behind Z.)
func TestRelayedReassertTicketsKeepQueueOrder(t *testing.T) {
	a := startServer(t, func(s *server.Server) {
		s.NodeID = "a"
		s.Router = &router{route: func(string, bool) server.Route { return server.Route{Action: server.RouteServe} }}
		s.TrustHop = trustAll
	})
	rr := &router{route: func(string, bool) server.Route { return server.Route{Action: server.RouteForward, Addr: a.addr} }}
	r1 := startServer(t, func(s *server.Server) { s.NodeID = "r1"; s.Router = rr })
	h := a.dialV2(t, longLease, "h")
	h.mustHold(1, excl2, 0, "job")
	x, wx := r1.dialTickets(t, longLease, "x")
	tx := x.queueTicket(1, "job")
	y, wy := r1.dialTickets(t, longLease, "y")
	ty := y.queueTicket(1, "job")
	if tx >= ty {
		t.Fatalf("tickets x=%d y=%d: want x's below y's", tx, ty)
	}
	x.breakConn()
	y.breakConn()
	a.Close() // the owner dies, and with it every claim it kept

	rb := &router{route: func(string, bool) server.Route {
		return server.Route{Action: server.RouteHold, Gated: true, Since: 5}
	}}
	b := startServer(t, func(s *server.Server) { s.NodeID = "b"; s.Router = rb; s.TrustHop = trustAll })
	rr.set(func(string, bool) server.Route { return server.Route{Action: server.RouteForward, Addr: b.addr} })
	z, _ := b.dialTickets(t, longLease, "z")
	z.mustQueue(1, excl2, 0, "job")
	y2, _ := r1.dialTickets(t, longLease, "y2")
	if f := y2.reassertTicket(wy, 0, ty); f.Type != protocol.TypeQueued || f.Ticket != ty {
		t.Fatalf("y's re-assertion through r1 answered %v, want QUEUED with its ticket %d", f, ty)
	}
	x2, _ := r1.dialTickets(t, longLease, "x2")
	if f := x2.reassertTicket(wx, 0, tx); f.Type != protocol.TypeQueued || f.Ticket != tx {
		t.Fatalf("x's re-assertion through r1 answered %v, want QUEUED with its ticket %d", f, tx)
	}
	rb.set(func(string, bool) server.Route { return server.Route{Action: server.RouteServe} })
	expectPromotionOrder(t, []string{"x", "y", "z"}, x2, y2, z)
}
