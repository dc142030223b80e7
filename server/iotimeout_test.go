package server_test

// The io-timeout bounds the first ACQUIRE (from accept) and every write;
// a client that stops reading is dropped and its lock passes on.

import (
	"net"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/server"
)

const (
	// ioTimeout is the server's io-timeout in these tests.
	ioTimeout = 300 * time.Millisecond
	// ioTimeoutSlack is how late after io-timeout a close may come.
	ioTimeoutSlack = 700 * time.Millisecond
)

// expectTimeoutClose expects c to be closed with no frame between
// ioTimeout and ioTimeout+ioTimeoutSlack after start.
func (c *client) expectTimeoutClose(start time.Time) {
	c.t.Helper()
	err := c.readEOF(waitLimit)
	elapsed := time.Since(start)
	if err != nil {
		c.t.Fatalf("%s: %v (expected a plain close after io-timeout)", c, err)
	}
	c.close()
	c.t.Logf("%s: closed %v after connecting (io-timeout %v)", c, elapsed, ioTimeout)
	if elapsed < ioTimeout || elapsed > ioTimeout+ioTimeoutSlack {
		c.t.Errorf("%s: closed after %v, want between %v and %v", c, elapsed, ioTimeout, ioTimeout+ioTimeoutSlack)
	}
}

// TestIdleConnectionTimesOut: a connection that sends nothing is closed
// io-timeout after accept, without a frame.
func TestIdleConnectionTimesOut(t *testing.T) {
	// Not parallel: see testLease.
	ts := startServer(t, withIOTimeout(ioTimeout))
	start := time.Now() // before the dial, so before the accept
	c := ts.dial(t)
	c.expectTimeoutClose(start)
	ts.events.wait(t, "disconnected", peerEvent(server.EventDisconnected, c))
}

// TestPartialAcquireTimesOut: the whole first ACQUIRE must arrive within
// io-timeout; three bytes of it are not enough.
func TestPartialAcquireTimesOut(t *testing.T) {
	// Not parallel: see testLease.
	ts := startServer(t, withIOTimeout(ioTimeout))
	start := time.Now()
	c := ts.dial(t)
	c.mustWrite(acquireFrame("partial", longLease)[:3])
	c.expectTimeoutClose(start)
	ts.events.wait(t, "disconnected", peerEvent(server.EventDisconnected, c))
	if _, ok := ts.Lock("partial"); ok {
		t.Errorf("a partial ACQUIRE holds the lock")
	}
}

// smallSendBuffers gives every accepted connection a small socket send
// buffer. Linux sizes a loopback send buffer in megabytes, which at nine
// bytes a reply takes the server seconds of heartbeats to fill; a small
// buffer fills in milliseconds and leaves the server's code path as it is.
func smallSendBuffers(ln net.Listener) net.Listener { return smallSendBufListener{ln} }

type smallSendBufListener struct{ net.Listener }

func (l smallSendBufListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetWriteBuffer(4096)
	}
	return c, err
}

// TestStoppedReaderIsDropped: an owner that floods heartbeats but stops
// reading fills its socket buffers; the server's blocked reply write
// times out after io-timeout, the session ends with reason io_timeout,
// and the waiter is promoted.
func TestStoppedReaderIsDropped(t *testing.T) {
	t.Parallel()
	ts := startServerWrapped(t, smallSendBuffers, withIOTimeout(ioTimeout))
	owner := ts.dial(t)
	if err := owner.conn.SetReadBuffer(1024); err != nil {
		t.Fatal(err)
	}
	waiter := ts.dial(t)
	token := owner.mustOwn("stuck", longLease)
	waiter.mustWait("stuck", longLease)

	// Flood from another goroutine: once the server stops reading, this
	// write blocks until the server closes the connection.
	flood := make(chan error, 1)
	go func() {
		chunk := heartbeats(64 << 10)
		for {
			if err := owner.write(chunk); err != nil {
				flood <- err
				return
			}
		}
	}()

	tok := waiter.expectAcquired()
	if tok <= token {
		t.Errorf("waiter got token %d, want > %d", tok, token)
	}
	released := ts.events.wait(t, "released", peerEvent(server.EventReleased, owner))
	if released.Reason != locktable.ReasonIOTimeout {
		t.Errorf("owner released for %v, want io_timeout", released.Reason)
	}
	// The last heartbeat the server handled is the one whose reply
	// blocked: its event comes just before the blocked write.
	var lastBeat server.Event
	beats := 0
	for _, e := range ts.events.all() {
		if e.Kind == server.EventHeartbeat && e.Peer.Addr == owner.addr() {
			lastBeat = e
			beats++
		}
	}
	blocked := released.Time.Sub(lastBeat.Time)
	t.Logf("owner dropped %v after its last handled heartbeat (%d handled; io-timeout %v)", blocked, beats, ioTimeout)
	if blocked < ioTimeout || blocked > ioTimeout+ioTimeoutSlack {
		t.Errorf("dropped %v after the blocked write began, want about io-timeout %v", blocked, ioTimeout)
	}
	<-flood // the write fails once the server has closed the connection
}
