package server_test

// The lease is a sliding window of silence: a silent owner or waiter is
// dropped after it, not before; heartbeats keep a claim alive forever.

import (
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// The tests that assert an upper timing bound do not call t.Parallel: Go
// runs them one by one before any parallel test starts, so the CPU-heavy
// tests of this package cannot delay the goroutines they measure. They
// also add the process's measured stalls to the bound (stallMeter) and
// retry a run that missed it (retryTiming).
const (
	// testLease is the lease of claims that are meant to expire.
	testLease = 300 * time.Millisecond
	// heartbeatLease is the lease of claims kept alive by heartbeats
	// every heartbeatLease/4; the rest of the lease absorbs late ticks
	// on a loaded machine.
	heartbeatLease = 800 * time.Millisecond
	// expirySlack is how late after its lease a silent claim may be
	// dropped.
	expirySlack = 100 * time.Millisecond
)

// expectExpiry waits for the server to close c because of its lease and
// checks when: not before lease after sent (the server cannot have heard
// from c earlier), and within lease+expirySlack of replied (the server
// heard from c before it replied), plus any stall of this process that m
// measured since before sent. The close carries no ERROR frame.
func (c *client) expectExpiry(m *stallMeter, sent, replied time.Time, lease time.Duration, late func(string, ...any)) {
	c.t.Helper()
	err := c.readEOF(lease + waitLimit)
	closed := time.Now()
	stall := m.worst()
	if err != nil {
		c.t.Fatalf("%s: %v (expected a plain close when the lease expired)", c, err)
	}
	c.close()
	sinceSent, sinceReply := closed.Sub(sent), closed.Sub(replied)
	c.t.Logf("%s: closed %v after its last frame was sent, %v after the reply (lease %v; process stalled up to %v)",
		c, sinceSent, sinceReply, lease, stall)
	if sinceSent < lease {
		c.t.Errorf("%s: closed %v after its last frame, before its lease %v", c, sinceSent, lease)
	}
	if bound := lease + expirySlack + stall; sinceReply > bound {
		late("%s: closed %v after the reply, want within lease+%v+stall %v = %v", c, sinceReply, expirySlack, stall, bound)
	}
}

// TestSilentOwnerExpires: an owner that sends nothing after ACQUIRE is
// closed (no ERROR frame) once its lease has passed, and the waiter is
// promoted.
func TestSilentOwnerExpires(t *testing.T) {
	// Not parallel: see testLease.
	retryTiming(t, func(late func(string, ...any)) {
		ts := startServer(t)
		owner, waiter := ts.dial(t), ts.dial(t)
		m := startStallMeter()
		sent := time.Now()
		token := owner.mustOwn("lease", testLease)
		replied := time.Now()
		waiter.mustWait("lease", longLease)

		owner.expectExpiry(m, sent, replied, testLease, late)
		if tok := waiter.expectAcquired(); tok <= token {
			t.Errorf("waiter got token %d, want > %d", tok, token)
		}
		e := ts.events.wait(t, "released", peerEvent(server.EventReleased, owner))
		if e.Reason != server.ReasonExpired {
			t.Errorf("released for %v, want expired", e.Reason)
		}
		if n := ts.events.count(peerEvent(server.EventErrorSent, owner)); n != 0 {
			t.Errorf("%d ERROR frames sent to the expired owner, want none", n)
		}
	})
}

// TestHeartbeatsKeepClaims: an owner and a waiter that heartbeat every
// lease/4 keep their claims for 4 leases and more; every heartbeat gets
// exactly one reply, the owner's always with its token, the waiter's
// always WAITING; when the owner leaves, the waiter is promoted.
func TestHeartbeatsKeepClaims(t *testing.T) {
	t.Parallel() // mostly idle; the long lease absorbs the others' load
	ts := startServer(t)
	owner, waiter := ts.dial(t), ts.dial(t)
	start := time.Now()
	token := owner.mustOwn("hb", heartbeatLease)
	waiter.mustWait("hb", heartbeatLease)

	tick := time.NewTicker(heartbeatLease / 4)
	defer tick.Stop()
	beats := 0
	for time.Since(start) < 4*heartbeatLease+heartbeatLease/2 {
		<-tick.C
		owner.mustWrite(heartbeats(1))
		waiter.mustWrite(heartbeats(1))
		if f := owner.mustRead(); f.Type != protocol.TypeAcquired || f.Token != token {
			t.Fatalf("owner's heartbeat %d answered %v, want ACQUIRED(%d)", beats, f, token)
		}
		if f := waiter.mustRead(); f.Type != protocol.TypeWaiting {
			t.Fatalf("waiter's heartbeat %d answered %v, want WAITING", beats, f)
		}
		beats++
	}
	held := time.Since(start)
	t.Logf("held for %v with %d heartbeats (lease %v)", held, beats, heartbeatLease)

	// Exactly one reply per heartbeat: after the owner half-closes, the
	// server has nothing more for it than EOF.
	owner.conn.CloseWrite()
	owner.expectEOF()
	if tok := waiter.expectAcquired(); tok <= token {
		t.Errorf("waiter got token %d, want > %d", tok, token)
	}
	e := ts.events.wait(t, "released", peerEvent(server.EventReleased, owner))
	if e.Reason != server.ReasonGraceful || e.Held < 4*heartbeatLease {
		t.Errorf("released %s after %v, want graceful after at least %v", formatEvent(e), e.Held, 4*heartbeatLease)
	}
	if n := ts.events.count(peerEvent(server.EventHeartbeat, owner)); n != beats {
		t.Errorf("%d heartbeat events for the owner, want %d", n, beats)
	}
}

// TestSilentWaiterExpires: a waiter that sends nothing loses its place
// after its lease; when the owner leaves, the waiter behind it is
// promoted.
func TestSilentWaiterExpires(t *testing.T) {
	// Not parallel: see testLease.
	retryTiming(t, func(late func(string, ...any)) {
		ts := startServer(t)
		owner, silent, next := ts.dial(t), ts.dial(t), ts.dial(t)
		owner.mustOwn("queue", longLease)
		m := startStallMeter()
		sent := time.Now()
		silent.mustWait("queue", testLease)
		replied := time.Now()
		next.mustWait("queue", longLease)

		silent.expectExpiry(m, sent, replied, testLease, late)
		e := ts.events.wait(t, "dequeued", peerEvent(server.EventDequeued, silent))
		if e.Reason != server.ReasonExpired {
			t.Errorf("dequeued for %v, want expired", e.Reason)
		}
		if info, _ := ts.Lock("queue"); len(info.Waiters) != 1 || info.Waiters[0].Peer.Addr != next.addr() {
			t.Fatalf("queue is %+v, want only %s", info.Waiters, next)
		}

		owner.close()
		next.expectAcquired()
		ts.events.wait(t, "granted", peerEvent(server.EventGranted, next))
		if n := ts.events.count(peerEvent(server.EventGranted, silent)); n != 0 {
			t.Errorf("the expired waiter was granted the lock")
		}
	})
}

// TestLeaseIsTheClients: the io-timeout does not bound a claim's silence;
// only its own lease does. A waiter with a lease well beyond io-timeout
// stays queued past io-timeout.
func TestLeaseIsTheClients(t *testing.T) {
	t.Parallel()
	const ioTimeout = 200 * time.Millisecond
	ts := startServer(t, withIOTimeout(ioTimeout))
	owner, waiter := ts.dial(t), ts.dial(t)
	owner.mustOwn("l", longLease)
	waiter.mustWait("l", longLease)
	waiter.expectSilence(3 * ioTimeout)
	owner.expectSilence(time.Millisecond)
	waiter.mustWrite(heartbeats(1))
	if f := waiter.mustRead(); f.Type != protocol.TypeWaiting {
		t.Fatalf("heartbeat after %v of silence answered %v, want WAITING", 3*ioTimeout, f)
	}
}
