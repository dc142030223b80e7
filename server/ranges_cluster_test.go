package server_test

import (
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// serveAll is a cluster node's Router that serves every name here.
func serveAll() *router {
	return &router{route: func(string, bool) server.Route { return server.Route{Action: server.RouteServe} }}
}

// TestClusterRangeUnavailable: a cluster node (a server with a Router)
// serves no range locks. Every RANGE is answered 0x0c (unavailable) and
// changes nothing, whatever the op, flags or session: two sessions
// asking for conflicting locks on one key are both refused, none is
// granted by a later unlock or release. A cancel, which can find no
// waiting request there, is not answered (the PING after it is). The
// session stays usable: a CLAIM on it is granted.
func TestClusterRangeUnavailable(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(s *server.Server) { s.Router = serveAll() })
	a := ts.dialV2(t, longLease, "host-a")
	b := ts.dialV2(t, longLease, "host-b")
	w, r := protocol.LockWrite, protocol.LockRead
	const unavailable = protocol.RangeUnavailable

	a.mustWrite(rangeFrame(1, protocol.RangeSet, 0, w, 7, 0, 99, "f"))
	a.expectRange(1, unavailable)
	b.mustWrite(rangeFrame(1, protocol.RangeSet, 0, w, 3, 0, 99, "f"))
	b.expectRange(1, unavailable)
	b.mustWrite(rangeFrame(2, protocol.RangeSet, protocol.RangeWait, r, 3, 50, eof, "f"))
	b.expectRange(2, unavailable)
	a.mustWrite(rangeFrame(2, protocol.RangeSet, protocol.RangeFlock, w, 1, 0, 0, "f"))
	a.expectRange(2, unavailable)
	a.mustWrite(rangeFrame(3, protocol.RangeSet, protocol.RangeFlock|protocol.RangeWait, r, 1, 0, 0, "f"))
	a.expectRange(3, unavailable)
	a.mustWrite(rangeFrame(4, protocol.RangeQuery, 0, w, 7, 0, eof, "f"))
	a.expectRange(4, unavailable)
	a.mustWrite(rangeFrame(5, protocol.RangeUnlock, 0, 0, 7, 0, 99, "f"))
	a.expectRange(5, unavailable)
	a.mustWrite(rangeFrame(6, protocol.RangeRelease, 0, 0, 7, 0, 0, "f"))
	a.expectRange(6, unavailable)
	a.mustWrite(rangeFrame(7, protocol.RangeRelease, protocol.RangeFlock, 0, 1, 0, 0, "f"))
	a.expectRange(7, unavailable)
	// What a single server answers invalid is not served here either.
	a.mustWrite(rangeFrame(8, protocol.RangeOp(0x06), 0, w, 7, 0, 99, "f"))
	a.expectRange(8, unavailable)
	a.mustWrite(rangeFrame(9, protocol.RangeSet, 0, w, 1, 0, 0, ""))
	a.expectRange(9, unavailable)
	// A cancel, even of the req of a set answered just before it, has no
	// answer: that set has had its one final answer.
	b.mustWrite(append(rangeFrame(2, protocol.RangeCancel, 0, 0, 0, 0, 0, "f"), protocol.AppendPing(nil, 9)...))
	if f := b.mustReadV2(); f.Type != protocol.TypePong || f.Seq != 9 {
		t.Fatalf("a cancel on a cluster node answered %v, want no answer (PONG 9 next)", f)
	}
	// Requests and a claim in one write: each range request is answered
	// in order and the claim after them is granted.
	batch := rangeFrame(10, protocol.RangeSet, 0, w, 7, 0, 99, "f")
	batch = append(batch, claimFrame(1, excl, 0, "job")...)
	batch = append(batch, rangeFrame(11, protocol.RangeQuery, 0, w, 7, 0, 99, "f")...)
	a.mustWrite(batch)
	a.expectRange(10, unavailable)
	if f := a.mustReadV2(); f.Type != protocol.TypeGranted || f.Claim != 1 || f.Token == 0 {
		t.Fatalf("CLAIM after RANGE on a cluster node answered %v, want GRANTED", f)
	}
	a.expectRange(11, unavailable)
	b.mustQueue(1, excl, 0, "job")
	a.release(1)
	b.expectPromoted(1)
	// Nothing was pushed to either session meanwhile.
	a.expectSilenceV2(100 * time.Millisecond)
	b.expectSilenceV2(100 * time.Millisecond)
}

// TestClusterRangeGateNotHeld: the token gate holds back a single
// server's range answers (TestV2GateRange), never a cluster node's,
// which take no token: a RANGE before the gate is answered 0x0c at once,
// and so are the frames after it in the same write.
func TestClusterRangeGateNotHeld(t *testing.T) {
	t.Parallel()
	const gateIn = 3 * time.Second
	start := time.Now()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gateTokens{notBefore: start.Add(gateIn)}
	srv := &server.Server{Tokens: g, Router: serveAll(), Logger: slog.New(slog.DiscardHandler)}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-done })
	ts := &testServer{Server: srv, addr: ln.Addr().String(), events: newEventLog()}

	a := ts.dialV2(t, longLease, "a")
	batch := rangeFrame(1, protocol.RangeSet, 0, protocol.LockWrite, 7, 0, 99, "f")
	batch = append(batch, protocol.AppendPing(nil, 1)...)
	batch = append(batch, rangeFrame(2, protocol.RangeQuery, 0, protocol.LockWrite, 7, 0, 99, "f")...)
	a.mustWrite(batch)
	a.expectRange(1, protocol.RangeUnavailable)
	if f := a.mustReadV2(); f.Type != protocol.TypePong || f.Seq != 1 {
		t.Fatalf("PING answered %v, want PONG 1", f)
	}
	a.expectRange(2, protocol.RangeUnavailable)
	if at := time.Now(); !at.Before(g.notBefore) {
		t.Fatalf("answered %v after the gate, want before it", at.Sub(g.notBefore))
	}
	t.Logf("answered after %v (gate at %v)", time.Since(start), gateIn)
	if g.early.Load() {
		t.Fatal("a token was issued before the gate")
	}
}
