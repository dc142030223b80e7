package server_test

import (
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// Range locks on a cluster node (relayranges.go, rangemove.go): served
// by the key's owner, relayed to it by the other nodes, refused while
// the key cannot be served, handed over at a planned change and
// re-asserted by the relaying node after the owner's failure.

// TestClusterRangeHoldUnavailable: a node whose Route holds a key (a
// warm-up, an owner out of reach) answers every range request on it 0x0c
// (unavailable) and changes nothing; a cancel that finds no waiting
// request is not answered. The session stays usable.
func TestClusterRangeHoldUnavailable(t *testing.T) {
	t.Parallel()
	r := &router{route: func(name string, _ bool) server.Route {
		if name == "f" {
			return server.Route{Action: server.RouteHold, Gated: true, Since: 1}
		}
		return server.Route{Action: server.RouteServe}
	}}
	ts := startServer(t, func(s *server.Server) { s.Router = r })
	a := ts.dialV2(t, longLease, "host-a")
	w := protocol.LockWrite
	a.mustWrite(rangeFrame(1, protocol.RangeSet, 0, w, 7, 0, 99, "f"))
	a.expectRange(1, protocol.RangeUnavailable)
	a.mustWrite(rangeFrame(2, protocol.RangeSet, protocol.RangeWait, w, 7, 0, 99, "f"))
	a.expectRange(2, protocol.RangeUnavailable)
	a.mustWrite(rangeFrame(3, protocol.RangeQuery, 0, w, 7, 0, eof, "f"))
	a.expectRange(3, protocol.RangeUnavailable)
	a.mustWrite(append(rangeFrame(2, protocol.RangeCancel, 0, 0, 0, 0, 0, "f"), protocol.AppendPing(nil, 9)...))
	if f := a.mustReadV2(); f.Type != protocol.TypePong || f.Seq != 9 {
		t.Fatalf("a cancel of nothing answered %v, want no answer (PONG 9 next)", f)
	}
	// A key the node serves: granted as on a single server.
	a.mustWrite(rangeFrame(4, protocol.RangeSet, 0, w, 7, 0, 99, "g"))
	a.expectRange(4, protocol.RangeGranted)
	// The hop-only ops come from other nodes, not from a client.
	a.mustWrite(rangeFrame(6, protocol.RangeAdopt, 0, 0, 0, 0, 0, "g"))
	a.expectRange(6, protocol.RangeInvalid)
	a.mustWrite(rangeFrame(7, protocol.RangeReassert, 0, w, 8, 100, 199, "g"))
	a.expectRange(7, protocol.RangeInvalid)
	r.set(func(string, bool) server.Route { return server.Route{Action: server.RouteServe} })
	a.mustWrite(rangeFrame(5, protocol.RangeSet, 0, w, 7, 0, 99, "f"))
	a.expectRange(5, protocol.RangeGranted)
}

// startRangeRelay starts an owner and a relaying node r1 that forwards
// every key to it.
func startRangeRelay(t *testing.T) (owner, r1 *testServer) {
	t.Helper()
	owner = startOwner(t)
	r1 = startServer(t, func(s *server.Server) {
		s.NodeID = "r1"
		s.Router = &router{route: func(string, bool) server.Route { return server.Route{Action: server.RouteForward, Addr: owner.addr} }}
	})
	return owner, r1
}

// TestClusterRangeRelayed: clients on two nodes contend for one key's
// range locks; the owner serves both (one table), the relaying node
// passes every answer and push on: a conflict names the relayed holder,
// a waiting set is promoted when the holder unlocks, a relayed waiting
// set is cancelled, and another promoted.
func TestClusterRangeRelayed(t *testing.T) {
	t.Parallel()
	owner, r1 := startRangeRelay(t)
	a := r1.dialV2(t, longLease, "host-a") // relayed
	b := owner.dialV2(t, longLease, "host-b")
	w, r := protocol.LockWrite, protocol.LockRead

	a.mustWrite(rangeFrame(1, protocol.RangeSet, 0, w, 7, 0, 99, "f"))
	tok := a.expectRange(1, protocol.RangeGranted).Token
	b.mustWrite(rangeFrame(1, protocol.RangeSet, 0, r, 3, 50, 60, "f"))
	if f := b.expectRange(1, protocol.RangeConflict); f.Label != "host-a" || f.Owner != 7 || f.End != 99 {
		t.Errorf("conflict names %+v, want host-a's owner 7 over 0-99", f)
	}
	b.mustWrite(rangeFrame(2, protocol.RangeSet, protocol.RangeWait, r, 3, 50, 60, "f"))
	b.expectRange(2, protocol.RangeQueued)
	a.mustWrite(rangeFrame(2, protocol.RangeQuery, 0, w, 8, 0, eof, "f")) // another owner of a's
	if f := a.expectRange(2, protocol.RangeLocked); f.Owner != 7 {
		t.Errorf("query names owner %d, want 7", f.Owner)
	}
	a.mustWrite(rangeFrame(3, protocol.RangeUnlock, 0, 0, 7, 0, 99, "f"))
	a.expectRange(3, protocol.RangeDone)
	if f := b.expectRange(2, protocol.RangePromoted); f.Token <= tok {
		t.Errorf("promoted with token %d, want above %d", f.Token, tok)
	}
	// a waits behind b through the relay, cancels, waits again, and is
	// promoted when b releases.
	a.mustWrite(rangeFrame(4, protocol.RangeSet, protocol.RangeWait, w, 7, 0, eof, "f"))
	a.expectRange(4, protocol.RangeQueued)
	a.mustWrite(rangeFrame(4, protocol.RangeCancel, 0, 0, 0, 0, 0, "f"))
	a.expectRange(4, protocol.RangeCancelled)
	a.mustWrite(rangeFrame(5, protocol.RangeSet, protocol.RangeWait, w, 7, 0, eof, "f"))
	a.expectRange(5, protocol.RangeQueued)
	b.mustWrite(rangeFrame(3, protocol.RangeRelease, 0, 0, 3, 0, 0, "f"))
	b.expectRange(3, protocol.RangeDone)
	a.expectRange(5, protocol.RangePromoted)
	a.expectSilenceV2(100 * time.Millisecond)
	b.expectSilenceV2(100 * time.Millisecond)
}

// startRangeFailover starts the owner o of every key, a node n that
// takes the keys over when route says so, and a relaying node r1 whose
// route forwards to o until the test switches it to n.
func startRangeFailover(t *testing.T) (o, n, r1 *testServer, nRoute, r1Route *router) {
	t.Helper()
	o = startOwner(t)
	nRoute = &router{route: func(string, bool) server.Route { return server.Route{Action: server.RouteHold, Gated: true, Since: 2} }}
	n = startServer(t, func(s *server.Server) { s.NodeID, s.Router, s.TrustHop = "n", nRoute, trustAll })
	r1Route = &router{route: func(string, bool) server.Route { return server.Route{Action: server.RouteForward, Addr: o.addr} }}
	r1 = startServer(t, func(s *server.Server) { s.NodeID, s.Router = "r1", r1Route })
	return o, n, r1, nRoute, r1Route
}

// TestClusterRangeReassertedAfterFailover: the owner of a relayed
// session's range locks goes away (here it closes; a death or a cut
// alike). The relaying node holds the session's answers, re-asserts the
// locks it mirrored (after an unlock and a flock conversion) at the
// keys' next owner, which installs them during its warm-up, and the
// session carries on: the locks conflict there as before, and an
// unlock frees them. A set that waited at the lost owner is answered
// unavailable (asked again).
func TestClusterRangeReassertedAfterFailover(t *testing.T) {
	t.Parallel()
	o, n, r1, nRoute, r1Route := startRangeFailover(t)
	a := r1.dialV2(t, 4*time.Second, "host-a")
	a.mustWrite(rangeFrame(1, protocol.RangeSet, 0, protocol.LockWrite, 7, 0, 99, "f"))
	a.expectRange(1, protocol.RangeGranted)
	a.mustWrite(rangeFrame(2, protocol.RangeUnlock, 0, 0, 7, 40, 49, "f"))
	a.expectRange(2, protocol.RangeDone)
	a.mustWrite(rangeFrame(3, protocol.RangeSet, protocol.RangeFlock, protocol.LockRead, 8, 0, 0, "f"))
	a.expectRange(3, protocol.RangeGranted)
	a.mustWrite(rangeFrame(4, protocol.RangeSet, protocol.RangeFlock, protocol.LockWrite, 8, 0, 0, "g"))
	a.expectRange(4, protocol.RangeGranted)
	b := o.dialV2(t, longLease, "host-b")
	b.mustWrite(rangeFrame(1, protocol.RangeSet, protocol.RangeFlock, protocol.LockWrite, 1, 0, 0, "f"))
	b.expectRange(1, protocol.RangeConflict)
	a.mustWrite(rangeFrame(5, protocol.RangeSet, protocol.RangeWait, protocol.LockWrite, 9, 0, 0, "h"))
	a.expectRange(5, protocol.RangeGranted)
	w := r1.dialV2(t, longLease, "host-w")
	w.mustWrite(rangeFrame(1, protocol.RangeSet, protocol.RangeWait, protocol.LockRead, 1, 5, 5, "f"))
	w.expectRange(1, protocol.RangeQueued)

	o.Close()
	w.expectRange(1, protocol.RangeUnavailable)
	// An unlock meanwhile applies to what is re-asserted; its answer
	// waits, as everything else does.
	a.mustWrite(append(rangeFrame(7, protocol.RangeUnlock, 0, 0, 7, 90, 99, "f"), protocol.AppendPing(nil, 1)...))
	if f, err := a.readV2(300 * time.Millisecond); err == nil {
		t.Fatalf("a's unlock or PING answered %v while its range locks are re-asserted", f)
	}
	a.mustWrite(rangeFrame(8, protocol.RangeSet, 0, protocol.LockRead, 7, 0, 0, "f"))
	r1Route.set(func(string, bool) server.Route { return server.Route{Action: server.RouteForward, Addr: n.addr} })
	a.expectRange(7, protocol.RangeDone)
	if f := a.mustReadV2(); f.Type != protocol.TypePong || f.Seq != 1 {
		t.Fatalf("a's PING answered %v after the re-assertion, want PONG 1", f)
	}
	a.expectRange(8, protocol.RangeUnavailable) // a set while the key moved
	d := n.dialV2(t, longLease, "host-d")
	nRoute.set(func(string, bool) server.Route { return server.Route{Action: server.RouteServe} }) // warm-up over
	for _, c := range []struct {
		flags     uint8
		typ       uint8
		start, to uint64
		key       string
		want      protocol.RangeStatus
	}{
		{0, protocol.LockRead, 0, 0, "f", protocol.RangeConflict},
		{0, protocol.LockWrite, 45, 45, "f", protocol.RangeGranted}, // unlocked before the failure
		{0, protocol.LockRead, 89, 89, "f", protocol.RangeConflict},
		{0, protocol.LockWrite, 90, 100, "f", protocol.RangeGranted},               // unlocked while re-asserted
		{protocol.RangeFlock, protocol.LockRead, 0, 0, "f", protocol.RangeGranted}, // a's flock is shared
		{protocol.RangeFlock, protocol.LockRead, 0, 0, "g", protocol.RangeConflict},
		{0, protocol.LockRead, 0, 0, "h", protocol.RangeConflict},
	} {
		d.mustWrite(rangeFrame(1, protocol.RangeSet, c.flags, c.typ, 2, c.start, c.to, c.key))
		if f := d.expectRange(1, c.want); c.want == protocol.RangeConflict && f.Label != "host-a" {
			t.Errorf("%s [%d,%d] conflicts with %q, want host-a", c.key, c.start, c.to, f.Label)
		}
		d.mustWrite(rangeFrame(2, protocol.RangeRelease, c.flags, 0, 2, 0, 0, c.key))
		d.expectRange(2, protocol.RangeDone)
	}
	a.mustWrite(rangeFrame(6, protocol.RangeUnlock, 0, 0, 7, 0, 89, "f"))
	a.expectRange(6, protocol.RangeDone)
	d.mustWrite(rangeFrame(3, protocol.RangeSet, 0, protocol.LockWrite, 2, 0, 99, "f"))
	d.expectRange(3, protocol.RangeGranted)
	ping(a, 2)
	ping(w, 3)
}

// TestClusterRangeReassertRefused: the keys' next owner holds a
// conflicting lock already (it granted one after its warm-up): the
// re-assertion is refused and the session ends, ERROR 0x03.
func TestClusterRangeReassertRefused(t *testing.T) {
	t.Parallel()
	o, n, r1, nRoute, r1Route := startRangeFailover(t)
	nRoute.set(func(string, bool) server.Route { return server.Route{Action: server.RouteServe} })
	a := r1.dialV2(t, 4*time.Second, "host-a")
	a.mustWrite(rangeFrame(1, protocol.RangeSet, 0, protocol.LockWrite, 7, 0, 99, "f"))
	a.expectRange(1, protocol.RangeGranted)
	d := n.dialV2(t, longLease, "host-d")
	d.mustWrite(rangeFrame(1, protocol.RangeSet, 0, protocol.LockRead, 2, 50, 50, "f"))
	d.expectRange(1, protocol.RangeGranted)
	o.Close()
	r1Route.set(func(string, bool) server.Route { return server.Route{Action: server.RouteForward, Addr: n.addr} })
	a.expectSessionError(protocol.CodeNotOwner)
}

// TestClusterRangeRelayOwnerLost: the owner of a relayed session's range
// locks goes away and no node takes its keys over: the relaying node
// gives the re-assertion up within half the lease and ends the session,
// ERROR 0x03, and its client stops believing in them. A session of the
// same node that relayed none lives on.
func TestClusterRangeRelayOwnerLost(t *testing.T) {
	t.Parallel()
	const lease = 1200 * time.Millisecond
	owner, r1 := startRangeRelay(t)
	a := r1.dialV2(t, lease, "host-a")
	c := r1.dialV2(t, longLease, "host-c")
	a.mustWrite(rangeFrame(1, protocol.RangeSet, 0, protocol.LockWrite, 7, 0, 99, "f"))
	a.expectRange(1, protocol.RangeGranted)
	owner.Close()
	lost := time.Now()
	a.expectSessionError(protocol.CodeNotOwner)
	if d := time.Since(lost); d > lease*4/5 {
		t.Errorf("the session ended %v after its owner was lost, past the client's give-up at %v", d, lease*4/5)
	}
	ping(c, 1)
}

// TestClusterRangeReassertUnbelieved: a client silent for longer than
// 0.8 of its lease when its range locks' owner goes away may have been
// expired there (and another client granted): its locks are not
// re-asserted, and its session ends at once.
func TestClusterRangeReassertUnbelieved(t *testing.T) {
	t.Parallel()
	const lease = 1 * time.Second
	o, n, r1, nRoute, r1Route := startRangeFailover(t)
	a := r1.dialV2(t, lease, "host-a")
	a.mustWrite(rangeFrame(1, protocol.RangeSet, 0, protocol.LockWrite, 7, 0, 99, "f"))
	a.expectRange(1, protocol.RangeGranted)
	r1Route.set(func(string, bool) server.Route { return server.Route{Action: server.RouteForward, Addr: n.addr} })
	time.Sleep(lease * 9 / 10)
	o.Close()
	a.expectSessionError(protocol.CodeNotOwner)
	nRoute.set(func(string, bool) server.Route { return server.Route{Action: server.RouteServe} })
	d := n.dialV2(t, longLease, "host-d")
	d.mustWrite(rangeFrame(1, protocol.RangeSet, 0, protocol.LockWrite, 2, 0, 99, "f"))
	d.expectRange(1, protocol.RangeGranted)
}

// TestClusterRangeRelayDies: the relaying node dies under a relayed
// range lock. The owner cannot tell that from a cut client that still
// believes: it keeps the lock for the session's lease after it last
// heard from it, then drops it and promotes the waiter.
func TestClusterRangeRelayDies(t *testing.T) {
	t.Parallel()
	const lease = 600 * time.Millisecond
	owner, r1 := startRangeRelay(t)
	a := r1.dialV2(t, lease, "host-a")
	// The owner hears the set after this, and may answer well before the
	// answer is read here: the lease runs from no earlier than this.
	sent := time.Now()
	a.mustWrite(rangeFrame(1, protocol.RangeSet, 0, protocol.LockWrite, 7, 0, 99, "f"))
	a.expectRange(1, protocol.RangeGranted)
	b := owner.dialV2(t, longLease, "host-b")
	b.mustWrite(rangeFrame(1, protocol.RangeSet, protocol.RangeWait, protocol.LockWrite, 3, 0, eof, "f"))
	b.expectRange(1, protocol.RangeQueued)
	r1.Close()
	b.expectRange(1, protocol.RangePromoted)
	if d := time.Since(sent); d < lease {
		t.Errorf("promoted %v after the relayed holder's set was sent, within its lease of %v", d, lease)
	}
}

// TestClusterRangeMoveHandedOver: at a planned change the range locks of
// a session that continues move to the key's new owner with it
// (rangemove.go). The holder's session lives on: its answers wait until
// its node (the prior owner) has adopted them at the new owner, where
// they conflict with everyone else's; its unlock, relayed there now,
// lets a waiter in. A set that waited at the prior owner is answered
// unavailable (asked again, at the new owner). A key with no range lock
// on it is served at the new owner at once.
func TestClusterRangeMoveHandedOver(t *testing.T) {
	t.Parallel()
	mp := startMovePair(t)
	a := mp.prior.dialV2(t, longLease, "host-a")
	a.mustWrite(rangeFrame(1, protocol.RangeSet, 0, protocol.LockWrite, 7, 0, 99, "f"))
	a.expectRange(1, protocol.RangeGranted)
	a.mustWrite(rangeFrame(2, protocol.RangeSet, 0, protocol.LockRead, 8, 0, 0, "f"))
	b := mp.prior.dialV2(t, longLease, "host-b") // waits
	a.expectRange(2, protocol.RangeConflict)
	b.mustWrite(rangeFrame(1, protocol.RangeSet, protocol.RangeWait, protocol.LockWrite, 3, 0, eof, "f"))
	b.expectRange(1, protocol.RangeQueued)
	a.mustWrite(rangeFrame(3, protocol.RangeSet, protocol.RangeFlock, protocol.LockWrite, 7, 0, 0, "f"))
	a.expectRange(3, protocol.RangeGranted)

	moving := only("f", "g")
	mp.move(t, moving)
	b.expectRange(1, protocol.RangeUnavailable)
	// Held back until the adoption: the prior owner does not route f to
	// the new owner yet.
	a.mustWrite(protocol.AppendPing(nil, 1))
	if f, err := a.readV2(300 * time.Millisecond); err == nil {
		t.Fatalf("a's PING answered %v while its range locks move", f)
	}
	a.mustWrite(rangeFrame(4, protocol.RangeSet, 0, protocol.LockRead, 9, 200, 299, "f"))
	mp.commit(moving)
	if f := a.mustReadV2(); f.Type != protocol.TypePong || f.Seq != 1 {
		t.Fatalf("a's PING answered %v after the adoption, want PONG 1", f)
	}
	a.expectRange(4, protocol.RangeUnavailable) // read while f moved
	ping(a, 2)

	d := mp.owner.dialV2(t, longLease, "host-d")
	d.mustWrite(rangeFrame(1, protocol.RangeSet, 0, protocol.LockWrite, 1, 0, 0, "g"))
	d.expectRange(1, protocol.RangeGranted)
	d.mustWrite(rangeFrame(2, protocol.RangeSet, 0, protocol.LockRead, 1, 50, 50, "f"))
	if f := d.expectRange(2, protocol.RangeConflict); f.Owner != 7 || f.Start != 0 || f.End != 99 {
		t.Errorf("conflict names %v, want a's owner 7 over [0,99]", f)
	}
	d.mustWrite(rangeFrame(3, protocol.RangeSet, protocol.RangeFlock, protocol.LockRead, 1, 0, 0, "f"))
	d.expectRange(3, protocol.RangeConflict)
	d.mustWrite(rangeFrame(4, protocol.RangeSet, protocol.RangeWait, protocol.LockWrite, 1, 40, 60, "f"))
	d.expectRange(4, protocol.RangeQueued)
	// a's own lock is a's: it extends it (through the new owner), then
	// unlocks the bytes d waits for.
	a.mustWrite(rangeFrame(5, protocol.RangeSet, 0, protocol.LockWrite, 7, 100, 120, "f"))
	a.expectRange(5, protocol.RangeGranted)
	a.mustWrite(rangeFrame(6, protocol.RangeUnlock, 0, 0, 7, 30, 70, "f"))
	a.expectRange(6, protocol.RangeDone)
	d.expectRange(4, protocol.RangePromoted)
	// b asks again, at the new owner, and waits for a's flock.
	b.mustWrite(rangeFrame(2, protocol.RangeSet, protocol.RangeWait|protocol.RangeFlock, protocol.LockWrite, 3, 0, 0, "f"))
	b.expectRange(2, protocol.RangeQueued)
	a.close()
	b.expectRange(2, protocol.RangePromoted)
}

// TestClusterRangeMoveRelayedHandedOver: the range locks of a client
// relayed by a third node move too: the prior owner tells the relaying
// node on its upstream session (MOVED), which adopts them at the new
// owner once it routes the key there; its client's session lives on, and
// its lock holds at the new owner until the client hangs up. A relayed
// set that waited there is answered unavailable, and the prior owner's
// end later ends neither session.
func TestClusterRangeMoveRelayedHandedOver(t *testing.T) {
	t.Parallel()
	mp := startMovePair(t)
	rr := &router{route: func(string, bool) server.Route { return server.Route{Action: server.RouteForward, Addr: mp.prior.addr} }}
	r1 := startServer(t, func(s *server.Server) { s.NodeID, s.Router = "r1", rr })
	c := r1.dialV2(t, longLease, "host-c")
	c.mustWrite(rangeFrame(1, protocol.RangeSet, 0, protocol.LockWrite, 5, 10, 19, "f"))
	c.expectRange(1, protocol.RangeGranted)
	w := r1.dialV2(t, longLease, "host-w")
	w.mustWrite(rangeFrame(1, protocol.RangeSet, protocol.RangeWait, protocol.LockWrite, 5, 0, eof, "f"))
	w.expectRange(1, protocol.RangeQueued)

	moving := only("f")
	mp.move(t, moving)
	w.expectRange(1, protocol.RangeUnavailable)
	c.mustWrite(protocol.AppendPing(nil, 1))
	if f, err := c.readV2(300 * time.Millisecond); err == nil {
		t.Fatalf("c's PING answered %v while its range locks move", f)
	}
	mp.commit(moving)
	rr.set(func(string, bool) server.Route { return server.Route{Action: server.RouteForward, Addr: mp.owner.addr} })
	if f := c.mustReadV2(); f.Type != protocol.TypePong || f.Seq != 1 {
		t.Fatalf("c's PING answered %v after the adoption, want PONG 1", f)
	}
	d := mp.owner.dialV2(t, longLease, "host-d")
	d.mustWrite(rangeFrame(1, protocol.RangeSet, protocol.RangeWait, protocol.LockRead, 1, 15, 15, "f"))
	d.expectRange(1, protocol.RangeQueued)
	w.mustWrite(rangeFrame(2, protocol.RangeSet, 0, protocol.LockRead, 5, 15, 15, "f"))
	w.expectRange(2, protocol.RangeConflict)
	c.mustWrite(rangeFrame(2, protocol.RangeUnlock, 0, 0, 5, 12, 13, "f"))
	c.expectRange(2, protocol.RangeDone)
	ping(c, 2)
	// The prior owner holds nothing of either session now: its end
	// ends neither.
	mp.prior.Close()
	time.Sleep(300 * time.Millisecond) // r1 sees both upstreams end
	ping(w, 3)
	ping(c, 4)
	c.close() // the relaying node releases at the new owner at once
	d.expectRange(1, protocol.RangePromoted)
}

// TestClusterRangeMoveRelayGone: the range lock of a relaying node that
// died, which the prior owner keeps for its lease, is not granted to
// anyone at the new owner within that lease: the key is gated there (the
// prior owner saw the hop end: the session does not continue) or the
// lock is handed over and never adopted (it had not).
func TestClusterRangeMoveRelayGone(t *testing.T) {
	t.Parallel()
	const lease = 1200 * time.Millisecond
	mp := startMovePair(t)
	rr := &router{route: func(string, bool) server.Route { return server.Route{Action: server.RouteForward, Addr: mp.prior.addr} }}
	r1 := startServer(t, func(s *server.Server) { s.NodeID, s.Router = "r1", rr })
	a := r1.dialV2(t, lease, "host-a")
	// The owner hears the set after this, and may answer well before the
	// answer is read here: the lease runs from no earlier than this.
	sent := time.Now()
	a.mustWrite(rangeFrame(1, protocol.RangeSet, 0, protocol.LockWrite, 7, 0, 99, "f"))
	a.expectRange(1, protocol.RangeGranted)
	r1.Close()

	moving := only("f")
	mp.move(t, moving)
	mp.commit(moving)
	d := mp.owner.dialV2(t, longLease, "host-d")
	for id := uint32(1); ; id++ {
		d.mustWrite(rangeFrame(id, protocol.RangeSet, 0, protocol.LockWrite, 1, 0, 0, "f"))
		f := d.mustReadV2()
		if f.Type == protocol.TypeRangeAnswer && f.Status == protocol.RangeGranted {
			if since := time.Since(sent); since < lease {
				t.Errorf("f granted at the new owner %v after its relayed holder's set was sent, within its lease %v", since, lease)
			}
			break
		}
		if f.Type != protocol.TypeRangeAnswer || f.Status != protocol.RangeUnavailable && f.Status != protocol.RangeConflict {
			t.Fatalf("set on a moved key answered %v, want unavailable or conflict", f)
		}
		if time.Since(sent) > waitLimit {
			t.Fatal("f still gated after waitLimit")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestClusterRangeRelayedReqInUse: a relayed waiting set whose req is
// used again by a second waiting set keeps its place: the owner refuses
// the second (0x0b), and a cancel still reaches the first.
func TestClusterRangeRelayedReqInUse(t *testing.T) {
	t.Parallel()
	owner, r1 := startRangeRelay(t)
	a := r1.dialV2(t, longLease, "host-a")
	b := owner.dialV2(t, longLease, "host-b")
	w := protocol.LockWrite
	b.mustWrite(rangeFrame(1, protocol.RangeSet, 0, w, 3, 0, eof, "f"))
	b.expectRange(1, protocol.RangeGranted)
	a.mustWrite(rangeFrame(1, protocol.RangeSet, protocol.RangeWait, w, 7, 0, eof, "f"))
	a.expectRange(1, protocol.RangeQueued)
	a.mustWrite(rangeFrame(1, protocol.RangeSet, protocol.RangeWait, w, 8, 0, eof, "f"))
	a.expectRange(1, protocol.RangeReqInUse)
	a.mustWrite(rangeFrame(1, protocol.RangeCancel, 0, 0, 0, 0, 0, "f"))
	a.expectRange(1, protocol.RangeCancelled)
	b.mustWrite(rangeFrame(2, protocol.RangeUnlock, 0, 0, 3, 0, eof, "f"))
	b.expectRange(2, protocol.RangeDone)
	a.expectSilenceV2(100 * time.Millisecond)
}

// TestClusterRangeRelayedHangUp: a relayed client that hangs up (its
// process died, or closed its connection) frees its range locks at the
// owner at once: the relaying node releases them before it closes the
// upstream, as it releases the claims.
func TestClusterRangeRelayedHangUp(t *testing.T) {
	t.Parallel()
	owner, r1 := startRangeRelay(t)
	a := r1.dialV2(t, longLease, "host-a")
	a.mustWrite(rangeFrame(1, protocol.RangeSet, 0, protocol.LockWrite, 7, 0, 99, "f"))
	a.expectRange(1, protocol.RangeGranted)
	a.mustWrite(rangeFrame(2, protocol.RangeSet, protocol.RangeFlock, protocol.LockWrite, 9, 0, 0, "g"))
	a.expectRange(2, protocol.RangeGranted)
	b := owner.dialV2(t, longLease, "host-b")
	b.mustWrite(rangeFrame(1, protocol.RangeSet, protocol.RangeWait, protocol.LockWrite, 3, 0, eof, "f"))
	b.expectRange(1, protocol.RangeQueued)
	b.mustWrite(rangeFrame(2, protocol.RangeSet, protocol.RangeWait|protocol.RangeFlock, protocol.LockWrite, 3, 0, 0, "g"))
	b.expectRange(2, protocol.RangeQueued)
	a.close()
	start := time.Now()
	b.expectRange(1, protocol.RangePromoted) // "f" before "g"
	b.expectRange(2, protocol.RangePromoted)
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("promoted %v after the relayed client hung up", d)
	}
}

// TestClusterRangeMoveToWarmingOwner: the new owner of a moving key is
// still warming up (it restarted, or took keys over from a removed node):
// it grants no new range lock there, but the range locks handed over
// to it are adopted all the same, and the session carries on.
func TestClusterRangeMoveToWarmingOwner(t *testing.T) {
	t.Parallel()
	mp := startMovePair(t)
	a := mp.prior.dialV2(t, longLease, "host-a")
	a.mustWrite(rangeFrame(1, protocol.RangeSet, 0, protocol.LockWrite, 7, 0, 99, "f"))
	a.expectRange(1, protocol.RangeGranted)
	moving := only("f")
	mp.move(t, moving)
	mp.commit(moving)
	mp.ownerR.set(func(string, bool) server.Route { return server.Route{Action: server.RouteHold, Gated: true, Since: 3} })
	ping(a, 1) // adopted
	d := mp.owner.dialV2(t, longLease, "host-d")
	d.mustWrite(rangeFrame(1, protocol.RangeSet, 0, protocol.LockWrite, 1, 0, 0, "f"))
	d.expectRange(1, protocol.RangeUnavailable)
	mp.ownerR.set(func(string, bool) server.Route { return server.Route{Action: server.RouteServe} })
	d.mustWrite(rangeFrame(2, protocol.RangeSet, 0, protocol.LockWrite, 1, 0, 0, "f"))
	d.expectRange(2, protocol.RangeConflict)
	a.mustWrite(rangeFrame(2, protocol.RangeUnlock, 0, 0, 7, 0, 99, "f"))
	a.expectRange(2, protocol.RangeDone)
	d.mustWrite(rangeFrame(3, protocol.RangeSet, 0, protocol.LockWrite, 1, 0, 0, "f"))
	d.expectRange(3, protocol.RangeGranted)
}

// TestClusterRangeHopOnlyAnswers: the answers of the hop-only range ops
// on an upstream session, as docs/protocol.md gives them: an adopt with
// nothing kept for the session is free; a reassert is installed (done)
// when nothing conflicts, refused (conflict) when another session's lock
// does, and both are unavailable for a key the node does not own.
func TestClusterRangeHopOnlyAnswers(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(s *server.Server) {
		s.NodeID = "o"
		s.Router = &router{route: func(name string, _ bool) server.Route {
			if name == "theirs" {
				return server.Route{Action: server.RouteForward, Addr: "127.0.0.1:1"}
			}
			return server.Route{Action: server.RouteServe}
		}}
		s.TrustHop = trustAll
	})
	upstream := func(session uint64) *v2client {
		c := ts.dialV2Raw(t)
		c.mustWrite(append(protocol.AppendHopV2(nil, "10.0.0.1:1", "", "n9", session), openingV2(longLease, "relayed")...))
		if f := c.mustReadV2(); f.Type != protocol.TypeWelcome {
			t.Fatalf("got %v, want WELCOME", f)
		}
		return c
	}
	w := protocol.LockWrite
	u1, u2 := upstream(41), upstream(42)
	u1.mustWrite(rangeFrame(0, protocol.RangeAdopt, 0, 0, 0, 0, 0, "k"))
	u1.expectRange(0, protocol.RangeFree)
	u1.mustWrite(rangeFrame(0, protocol.RangeReassert, 0, w, 3, 0, 9, "k"))
	u1.expectRange(0, protocol.RangeDone)
	u2.mustWrite(rangeFrame(0, protocol.RangeReassert, 0, w, 3, 5, 5, "k"))
	u2.expectRange(0, protocol.RangeConflict)
	u2.mustWrite(rangeFrame(0, protocol.RangeReassert, protocol.RangeFlock, w, 3, 0, 0, "k"))
	u2.expectRange(0, protocol.RangeDone) // the flock namespace is apart
	u1.mustWrite(rangeFrame(0, protocol.RangeReassert, 0, w, 3, 0, 9, "theirs"))
	u1.expectRange(0, protocol.RangeUnavailable)
	u1.mustWrite(rangeFrame(0, protocol.RangeAdopt, 0, 0, 0, 0, 0, "theirs"))
	u1.expectRange(0, protocol.RangeUnavailable)
	// The re-asserted lock is u1's: it holds against a direct client and
	// goes when u1 unlocks it.
	d := ts.dialV2(t, longLease, "d")
	d.mustWrite(rangeFrame(1, protocol.RangeSet, 0, protocol.LockRead, 1, 9, 9, "k"))
	if f := d.expectRange(1, protocol.RangeConflict); f.Label != "relayed" || f.Owner != 3 {
		t.Errorf("conflict names %v, want owner 3 of the relayed session", f)
	}
	u1.mustWrite(rangeFrame(1, protocol.RangeUnlock, 0, 0, 3, 0, 9, "k"))
	u1.expectRange(1, protocol.RangeDone)
	d.mustWrite(rangeFrame(2, protocol.RangeSet, 0, protocol.LockRead, 1, 9, 9, "k"))
	d.expectRange(2, protocol.RangeGranted)
}
