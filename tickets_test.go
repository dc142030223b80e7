package baton

import (
	"context"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
)

// Queue tickets in the client (docs/protocol-v2-tickets.md, "v2 queue tickets";
// docs/design/2026-12-01-ha-failover-design.md, rule 5), against the scripted fake server.

// A resumable session asks for tickets; the ticket of a queued claim's
// QUEUED is kept and sent back when the claim is re-asserted on a server
// that gives tickets, in place of the token, with the ticket flag; the
// ticket of the re-assertion's QUEUED is kept in turn.
func TestTicketReassertedWithQueuedClaim(t *testing.T) {
	fake := newFakeV2(t)
	s, fc := openResumableFlags(t, fake, SessionOptions{Lease: 2 * time.Second}, protocol.WelcomeTickets)
	res := goAcquire(t.Context(), s, "job", Exclusive, false)
	f := fc.expect(protocol.TypeClaim)
	fc.send(protocol.AppendQueuedTicket(nil, f.Claim, 5<<40|77))
	waitAllQueued(t, s, 1)
	fc.c.Close()

	fc2 := resumeConnFlags(t, fake, 8, 0x22, 9, protocol.WelcomeTickets)
	r := fc2.expect(protocol.TypeClaim)
	if !r.Reassert() || !r.HasTicket() || r.Ticket != 5<<40|77 || r.Token != 0 || r.Claim != f.Claim || r.Ring != 9 || r.Session != 7 {
		t.Fatalf("re-assertion %v, want one with the ticket %d", r, uint64(5<<40|77))
	}
	fc2.send(protocol.AppendQueuedTicket(nil, f.Claim, 5<<40|77))
	fc2.c.Close()

	// Again, on a server that answers without the tickets flag: the
	// claim is re-asserted with token 0 and no ticket, as before tickets.
	fc3 := resumeConn(t, fake, 9, 0x33, 10)
	r = expectReassert(t, fc3, f.Claim, "job", 0, 10, 8, 0x22)
	if r.HasTicket() || r.Flags&protocol.ClaimTicket != 0 {
		t.Fatalf("re-assertion to a server without tickets %v", r)
	}
	fc3.send(protocol.AppendQueued(nil, f.Claim))
	fc3.send(protocol.AppendPromoted(nil, f.Claim, 55))
	if cr := wait(t, res); cr.err != nil || cr.cl.Token() != 55 {
		t.Fatalf("Acquire: %v", cr.err)
	}
}

// A claim told QUEUED without a ticket (a node that could not give one)
// is re-asserted without one, even to a server that gives tickets.
func TestTicketNoneWithoutOne(t *testing.T) {
	fake := newFakeV2(t)
	s, fc := openResumableFlags(t, fake, SessionOptions{Lease: 2 * time.Second}, protocol.WelcomeTickets)
	goAcquire(t.Context(), s, "job", Exclusive, false)
	f := fc.expect(protocol.TypeClaim)
	fc.send(protocol.AppendQueued(nil, f.Claim))
	waitAllQueued(t, s, 1)
	fc.c.Close()
	fc2 := resumeConnFlags(t, fake, 8, 0x22, 0, protocol.WelcomeTickets)
	r := expectReassert(t, fc2, f.Claim, "job", 0, 0, 7, 0x11)
	if r.Flags&protocol.ClaimTicket != 0 {
		t.Fatalf("re-assertion %v carries a ticket it was never given", r)
	}
}

// A server of the revision before tickets refuses HELLO's tickets flag
// with ERROR 0x1e: the client opens again without it, and asks no more.
func TestTicketsRefusedByOlderServer(t *testing.T) {
	fake := newFakeV2(t)
	type res struct {
		s   *Session
		err error
	}
	ch := make(chan res, 1)
	c := fake.client()
	go func() {
		s, err := c.OpenSession(context.Background(), SessionOptions{Lease: 2 * time.Second, Resume: ResumeOn})
		ch <- res{s, err}
	}()
	fcv, hello := fake.acceptV2()
	if hello.Flags != protocol.HelloResumable|protocol.HelloTickets|protocol.HelloDetach|protocol.HelloValues {
		t.Fatalf("HELLO flags 0x%02x", hello.Flags)
	}
	// A server before values, DETACH and tickets refuses the newest flag
	// first, then the next.
	fcv.send(protocol.AppendSessionError(nil, protocol.CodeUnsupportedFeature, ""))
	fc, hello := fake.acceptV2()
	if hello.Flags != protocol.HelloResumable|protocol.HelloTickets|protocol.HelloDetach {
		t.Fatalf("HELLO flags 0x%02x, want no values", hello.Flags)
	}
	fc.send(protocol.AppendSessionError(nil, protocol.CodeUnsupportedFeature, ""))
	fc1, hello := fake.acceptV2()
	if hello.Flags != protocol.HelloResumable|protocol.HelloTickets {
		t.Fatalf("second HELLO flags 0x%02x, want no detach", hello.Flags)
	}
	fc1.send(protocol.AppendSessionError(nil, protocol.CodeUnsupportedFeature, ""))
	fc2, hello := fake.acceptV2()
	if hello.Flags != protocol.HelloResumable {
		t.Fatalf("third HELLO flags 0x%02x, want the resumable bit alone", hello.Flags)
	}
	fc2.welcomeResumable(7, 0x11, "n1", 0)
	r := wait(t, ch)
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.s.Close()
	if !r.s.Resumable() {
		t.Fatal("not resumable")
	}
	// A WELCOME with the tickets flag to a HELLO that did not ask for
	// them is a violation.
	ch2 := make(chan res, 1)
	go func() {
		s, err := c.OpenSession(context.Background(), SessionOptions{Lease: 2 * time.Second, Resume: ResumeOn})
		ch2 <- res{s, err}
	}()
	fc3, hello := fake.acceptV2()
	if hello.Flags != protocol.HelloResumable {
		t.Fatalf("later HELLO flags 0x%02x, want no tickets asked", hello.Flags)
	}
	fc3.welcomeFlags(8, 0x11, "n1", 0, protocol.WelcomeTickets)
	if r := wait(t, ch2); r.err == nil {
		r.s.Close()
		t.Fatal("a WELCOME with tickets nobody asked for was accepted")
	}
}

// A re-assertion with a ticket relayed to an owner of the revision
// before tickets is refused 0x1e: the client re-asserts again at once,
// naming the same prior session, without the ticket, and keeps its claim.
func TestTicketRefusedReassertedWithout(t *testing.T) {
	fake := newFakeV2(t)
	s, fc := openResumableFlags(t, fake, SessionOptions{Lease: 2 * time.Second}, protocol.WelcomeTickets)
	res := goAcquire(t.Context(), s, "job", Exclusive, false)
	f := fc.expect(protocol.TypeClaim)
	fc.send(protocol.AppendQueuedTicket(nil, f.Claim, 41))
	waitAllQueued(t, s, 1)
	fc.c.Close()
	fc2 := resumeConnFlags(t, fake, 8, 0x22, 0, protocol.WelcomeTickets)
	if r := fc2.expect(protocol.TypeClaim); !r.HasTicket() || r.Ticket != 41 {
		t.Fatalf("re-assertion %v, want the ticket 41", r)
	}
	fc2.send(protocol.AppendRefused(nil, f.Claim, protocol.CodeUnsupportedFeature, ""))
	r := expectReassert(t, fc2, f.Claim, "job", 0, 0, 7, 0x11)
	if r.Flags&protocol.ClaimTicket != 0 {
		t.Fatalf("second re-assertion %v, want no ticket", r)
	}
	fc2.send(protocol.AppendQueued(nil, f.Claim))
	fc2.send(protocol.AppendPromoted(nil, f.Claim, 56))
	if cr := wait(t, res); cr.err != nil || cr.cl.Token() != 56 {
		t.Fatalf("Acquire: %v", cr.err)
	}
}
