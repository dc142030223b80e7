package server_test

import (
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// TestV2GateHoldsGrantsNotAnswers: in a server's first moments, before
// its token source may issue (the gate), a version 2 session's answers
// are not held back, only its grants: WELCOME and PONG arrive at once, a
// CLAIM the table would grant is QUEUED and PROMOTED once the gate
// opens, a no-wait one is BUSY, and another session's claim on the same
// name keeps its place behind it. A server that held every frame of the
// session until the gate gave a client with a short lease reason to give
// up its claims (docs/protocol-v2-client.md, v2 client obligations).
func TestV2GateHoldsGrantsNotAnswers(t *testing.T) {
	t.Parallel()
	const gateIn = 500 * time.Millisecond
	start := time.Now()
	ts, g := startGatedServer(t, start.Add(gateIn))

	// before checks that an answer came before the gate.
	before := func(what string) {
		t.Helper()
		at := time.Now()
		t.Logf("%s after %v (gate at %v)", what, at.Sub(start), gateIn)
		if !at.Before(g.notBefore) {
			t.Fatalf("%s arrived %v after the gate, want before it", what, at.Sub(g.notBefore))
		}
	}
	a := ts.dialV2(t, longLease, "a")
	before("WELCOME")
	a.mustWrite(protocol.AppendPing(nil, 7))
	if f := a.mustReadV2(); f.Type != protocol.TypePong || f.Seq != 7 {
		t.Fatalf("PING answered %v, want PONG 7", f)
	}
	before("PONG")
	a.mustQueue(1, excl, 0, "g")
	before("QUEUED")
	b := ts.dialV2(t, longLease, "b")
	b.mustQueue(1, excl, 0, "g")
	before("b's QUEUED")
	b.mustWrite(noWaitFrame(2, excl, 0, "free"))
	if f := b.mustReadV2(); f.Type != protocol.TypeBusy || f.Claim != 2 {
		t.Fatalf("a no-wait CLAIM on a free name before the gate answered %v, want BUSY", f)
	}
	before("BUSY")
	// A RELEASE and a PING behind a queued claim are not held back either.
	a.mustQueue(2, shrd, 0, "other")
	a.release(2)
	a.mustWrite(protocol.AppendPing(nil, 8))
	if f := a.mustReadV2(); f.Type != protocol.TypePong || f.Seq != 8 {
		t.Fatalf("PING answered %v, want PONG 8", f)
	}
	before("RELEASED and PONG")

	tokA := a.expectPromoted(1)
	if at := time.Now(); at.Before(g.notBefore) {
		t.Fatalf("PROMOTED %v before the gate", g.notBefore.Sub(at))
	}
	t.Logf("PROMOTED after %v", time.Since(start))
	if g.early.Load() {
		t.Fatal("a token was issued before the gate")
	}
	// First come, first served: b's claim, queued after a's, follows it.
	a.release(1)
	if tokB := b.expectPromoted(1); tokB <= tokA {
		t.Fatalf("b's token %d is not above a's %d", tokB, tokA)
	}
	// After the gate a claim is granted at once again.
	a.mustHold(3, excl, 0, "after")
}

// TestV2GateRange: the range table has the gate the lock table has. A
// range set with wait before the gate is answered QUEUED at once and
// PROMOTED, with a token, once the gate opens, never with a token taken
// early; a request of another session on the same bytes, sent later but
// before the gate, stays behind it (a flock -n through a second mount
// does not overtake a blocking flock through the first: it is answered
// conflict); a free no-wait set before the gate is answered granted
// when the gate opens, in its turn (sqlite3 and flock -n on a server just
// started must not fail for a free file); frames around them are
// answered at once.
func TestV2GateRange(t *testing.T) {
	t.Parallel()
	const gateIn = 500 * time.Millisecond
	start := time.Now()
	ts, g := startGatedServer(t, start.Add(gateIn))
	before := func(what string) {
		t.Helper()
		at := time.Now()
		t.Logf("%s after %v (gate at %v)", what, at.Sub(start), gateIn)
		if !at.Before(g.notBefore) {
			t.Fatalf("%s arrived %v after the gate, want before it", what, at.Sub(g.notBefore))
		}
	}

	a := ts.dialV2(t, longLease, "a")
	a.mustWrite(append(protocol.AppendPing(nil, 1), rangeFrame(1, protocol.RangeSet, protocol.RangeWait|protocol.RangeFlock, protocol.LockWrite, 7, 0, 0, "f")...))
	if f := a.mustReadV2(); f.Type != protocol.TypePong || f.Seq != 1 {
		t.Fatalf("PING answered %v, want PONG 1", f)
	}
	a.expectRange(1, protocol.RangeQueued)
	before("PONG and QUEUED")

	b := ts.dialV2(t, longLease, "b")
	b.mustWrite(rangeFrame(1, protocol.RangeSet, protocol.RangeFlock, protocol.LockWrite, 9, 0, 0, "f"))
	if f := b.expectRange(1, protocol.RangeConflict); f.Owner != 7 || f.Label != "a" {
		t.Fatalf("a later no-wait flock names %v, want a's waiting request (owner 7, label a)", f)
	}
	before("b's conflict")
	b.mustWrite(append(rangeFrame(2, protocol.RangeSet, 0, protocol.LockRead, 9, 0, 99, "free"), protocol.AppendPing(nil, 2)...))
	if f := b.mustReadV2(); f.Type != protocol.TypePong || f.Seq != 2 {
		t.Fatalf("a PING after a free no-wait set before the gate answered %v, want PONG 2 first", f)
	}
	before("b's PONG")

	tok := a.expectRange(1, protocol.RangePromoted).Token
	if at := time.Now(); tok == 0 || at.Before(g.notBefore) {
		t.Fatalf("PROMOTED with token %d, %v after the gate", tok, at.Sub(g.notBefore))
	}
	if f := b.expectRange(2, protocol.RangeGranted); f.Token <= tok {
		t.Fatalf("b's no-wait set granted at the gate with token %d, not above a's %d", f.Token, tok)
	}
	t.Logf("range PROMOTED after %v", time.Since(start))
	if g.early.Load() {
		t.Fatal("a token was issued before the gate")
	}
	b.mustWrite(rangeFrame(3, protocol.RangeSet, protocol.RangeFlock, protocol.LockWrite, 9, 0, 0, "f"))
	b.expectRange(3, protocol.RangeConflict)
	b.mustWrite(rangeFrame(4, protocol.RangeSet, 0, protocol.LockRead, 9, 100, 199, "free"))
	if f := b.expectRange(4, protocol.RangeGranted); f.Token <= tok {
		t.Fatalf("a grant after the gate has token %d, not above %d", f.Token, tok)
	}
}

// startGatedServer starts a server whose token source is a Gate that
// opens at notBefore. Not startServer: it waits for the gate before
// serving.
func startGatedServer(t *testing.T, notBefore time.Time) (*testServer, *gateTokens) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gateTokens{notBefore: notBefore}
	srv := &server.Server{Tokens: g, Logger: slog.New(slog.DiscardHandler)}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return &testServer{Server: srv, addr: ln.Addr().String(), events: newEventLog()}, g
}
