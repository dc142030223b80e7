package server_test

import (
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// TestV2PartialHelloTimesOut: the preamble and the whole HELLO must
// arrive within io-timeout of accept; the preamble and part of HELLO are
// not enough. The connection is closed with no frame.
func TestV2PartialHelloTimesOut(t *testing.T) {
	// Not parallel: see testLease.
	retryTiming(t, func(late func(string, ...any)) {
		ts := startServer(t, withIOTimeout(ioTimeout))
		m := startStallMeter()
		start := time.Now()
		c := ts.dial(t)
		c.mustWrite(openingV2(longLease, "slow")[:protocol.PreambleLen+4])
		c.expectTimeoutClose(m, start, late)
		ts.events.wait(t, "disconnected", peerEvent(server.EventDisconnected, c))
	})
}

// TestV2PartialFrameTimesOut: on an open session, the rest of a started
// frame must arrive within io-timeout; otherwise the session ends
// (io_timeout) and its claims are released, with no frame.
func TestV2PartialFrameTimesOut(t *testing.T) {
	t.Parallel()
	retryTiming(t, func(late func(string, ...any)) {
		ts := startServer(t, withIOTimeout(ioTimeout))
		c := ts.dialV2(t, longLease, "half")
		c.mustHold(1, excl, 0, "half")
		m := startStallMeter()
		start := time.Now()
		c.mustWrite(claimFrame(2, excl, 0, "other")[:5])
		c.expectEOFV2()
		e := ts.events.wait(t, "released", lockEvent(server.EventReleased, "half"))
		elapsed, stall := time.Since(start), m.worst()
		t.Logf("session ended %v after the partial frame (io-timeout %v, stall %v)", elapsed, ioTimeout, stall)
		if e.Reason != server.ReasonIOTimeout {
			t.Errorf("released for %v, want io_timeout", e.Reason)
		}
		if elapsed < ioTimeout {
			t.Errorf("ended after %v, before io-timeout", elapsed)
		}
		if bound := ioTimeout + ioTimeoutSlack + stall; elapsed > bound {
			late("ended after %v, want within %v", elapsed, bound)
		}
	})
}

// TestV2StoppedReaderIsDropped: a session that sends PINGs but stops
// reading fills its socket buffers; once the server's writes have been
// blocked for io-timeout in total, the session ends (io_timeout) and the
// waiter of its claim is promoted.
func TestV2StoppedReaderIsDropped(t *testing.T) {
	t.Parallel()
	ts := startServerWrapped(t, smallSendBuffers, withIOTimeout(ioTimeout))
	owner := ts.dialV2Raw(t)
	if err := owner.conn.SetReadBuffer(1024); err != nil {
		t.Fatal(err)
	}
	owner.mustWrite(append(openingV2(longLease, "stuck"), claimFrame(1, excl, 0, "stuck")...))
	waiter := ts.dialV2(t, longLease, "waiter")
	ts.events.wait(t, "granted", lockEvent(server.EventGranted, "stuck"))
	waiter.mustQueue(1, excl, 0, "stuck")
	flood := make(chan struct{})
	go func() {
		defer close(flood)
		var chunk []byte
		for i := range 4096 {
			chunk = protocol.AppendPing(chunk, uint64(i))
		}
		for range 10000 {
			if owner.write(chunk) != nil {
				return
			}
		}
	}()
	waiter.expectPromoted(1)
	e := ts.events.wait(t, "released", lockEvent(server.EventReleased, "stuck"))
	if e.Reason != server.ReasonIOTimeout {
		t.Errorf("owner released for %v, want io_timeout", e.Reason)
	}
	owner.close()
	<-flood
}

// TestV2SlowReaderDoesNotStallPushers: a session that stops reading has
// a write to it blocked (up to io-timeout); another session whose RELEASE
// promotes one of its claims leaves the PROMOTED to that blocked writer
// and gets its own RELEASED at once, not after the slow client's
// io-timeout.
func TestV2SlowReaderDoesNotStallPushers(t *testing.T) {
	t.Parallel()
	const slowTimeout = 3 * time.Second
	ts := startServerWrapped(t, smallSendBuffers, withIOTimeout(slowTimeout))
	holder := ts.dialV2(t, longLease, "holder")
	holder.mustHold(1, excl, 0, "x")
	slow := ts.dialV2(t, longLease, "slow")
	if err := slow.conn.SetReadBuffer(1024); err != nil {
		t.Fatal(err)
	}
	slow.mustQueue(1, excl, 0, "x")

	// Flood PINGs without reading, until the server's writes to the slow
	// session block: its reader then stops reading PINGs.
	flood := make(chan struct{})
	go func() {
		defer close(flood)
		var chunk []byte
		for i := range 1024 {
			chunk = protocol.AppendPing(chunk, uint64(i))
		}
		for range 10000 {
			if slow.write(chunk) != nil {
				return
			}
		}
	}()
	pings := func(e server.Event) bool { return e.Kind == server.EventHeartbeat && e.Peer.Addr == slow.addr() }
	deadline := time.Now().Add(waitLimit)
	for n := -1; ; {
		time.Sleep(100 * time.Millisecond)
		m := ts.events.count(pings)
		if m == n && m > 0 {
			break // no PING handled for 100 ms: the reader is stuck in a write
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slow session's reader never blocked (%d PINGs)", m)
		}
		n = m
	}

	start := time.Now()
	holder.release(1)
	took := time.Since(start)
	t.Logf("RELEASED %v after the RELEASE that pushed PROMOTED to a blocked session (its io-timeout %v)", took, slowTimeout)
	if took > slowTimeout/2 {
		t.Errorf("RELEASE answered after %v: the pusher waited for the slow session's write", took)
	}
	slow.close()
	<-flood
}
