package server_test

// The io-timeout bounds the first ACQUIRE (from accept) and every write;
// a client that stops reading is dropped and its lock passes on.

import (
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

const (
	// ioTimeout is the server's io-timeout in these tests.
	ioTimeout = 300 * time.Millisecond
	// ioTimeoutSlack is how late after io-timeout a close may come,
	// beyond any stall of the process (see stallMeter).
	ioTimeoutSlack = 200 * time.Millisecond
)

// expectTimeoutClose expects c to be closed with no frame between
// ioTimeout and ioTimeout+ioTimeoutSlack after start, plus any stall of
// this process that m measured since before start.
func (c *client) expectTimeoutClose(m *stallMeter, start time.Time, late func(string, ...any)) {
	c.t.Helper()
	err := c.readEOF(waitLimit)
	elapsed := time.Since(start)
	stall := m.worst()
	if err != nil {
		c.t.Fatalf("%s: %v (expected a plain close after io-timeout)", c, err)
	}
	c.close()
	c.t.Logf("%s: closed %v after connecting (io-timeout %v; process stalled up to %v)", c, elapsed, ioTimeout, stall)
	if elapsed < ioTimeout {
		c.t.Errorf("%s: closed after %v, before io-timeout %v", c, elapsed, ioTimeout)
	}
	if bound := ioTimeout + ioTimeoutSlack + stall; elapsed > bound {
		late("%s: closed after %v, want within io-timeout+%v+stall %v = %v", c, elapsed, ioTimeoutSlack, stall, bound)
	}
}

// TestIdleConnectionTimesOut: a connection that sends nothing is closed
// io-timeout after accept, without a frame.
func TestIdleConnectionTimesOut(t *testing.T) {
	// Not parallel: see testLease.
	retryTiming(t, func(late func(string, ...any)) {
		ts := startServer(t, withIOTimeout(ioTimeout))
		m := startStallMeter()
		start := time.Now() // before the dial, so before the accept
		c := ts.dial(t)
		c.expectTimeoutClose(m, start, late)
		ts.events.wait(t, "disconnected", peerEvent(server.EventDisconnected, c))
	})
}

// TestPartialAcquireTimesOut: the whole first ACQUIRE must arrive within
// io-timeout; three bytes of it are not enough.
func TestPartialAcquireTimesOut(t *testing.T) {
	// Not parallel: see testLease.
	retryTiming(t, func(late func(string, ...any)) {
		ts := startServer(t, withIOTimeout(ioTimeout))
		m := startStallMeter()
		start := time.Now()
		c := ts.dial(t)
		c.mustWrite(acquireFrame("partial", longLease)[:3])
		c.expectTimeoutClose(m, start, late)
		ts.events.wait(t, "disconnected", peerEvent(server.EventDisconnected, c))
		if _, ok := ts.Lock("partial"); ok {
			t.Errorf("a partial ACQUIRE holds the lock")
		}
	})
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
// reading fills its socket buffers; once the server's reply writes have
// been blocked for io-timeout in total, the session ends with reason
// io_timeout and the waiter is promoted.
func TestStoppedReaderIsDropped(t *testing.T) {
	t.Parallel()
	retryTiming(t, func(late func(string, ...any)) {
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
		m := startStallMeter()
		floodStart := time.Now()
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
		stall := m.worst()
		if released.Reason != server.ReasonIOTimeout {
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
		blocked, total := released.Time.Sub(lastBeat.Time), released.Time.Sub(floodStart)
		t.Logf("owner dropped %v after its last handled heartbeat, %v after the flood began (%d handled; io-timeout %v; process stalled up to %v)",
			blocked, total, beats, ioTimeout, stall)
		// Earlier replies may have blocked for part of the budget, so the
		// last write can be shorter than io-timeout; all of them together
		// cannot have been.
		if total < ioTimeout {
			t.Errorf("dropped %v after the flood began, before io-timeout %v", total, ioTimeout)
		}
		if bound := ioTimeout + ioTimeoutSlack + stall; blocked > bound {
			late("dropped %v after the blocked write began, want within io-timeout+%v+stall %v = %v", blocked, ioTimeoutSlack, stall, bound)
		}
		<-flood // the write fails once the server has closed the connection
	})
}

// stallListener wraps accepted connections so a test can make the
// server's writes to one client stall as if the client had stopped
// reading with its buffers full: a stalled Write blocks until its write
// deadline, then fails with a timeout, as the kernel would make it.
type stallListener struct {
	net.Listener
	mu    sync.Mutex
	conns map[string]*stallConn // by the client's address
}

func (l *stallListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return c, err
	}
	sc := &stallConn{TCPConn: c.(*net.TCPConn)}
	l.mu.Lock()
	l.conns[c.RemoteAddr().String()] = sc
	l.mu.Unlock()
	return sc, nil
}

// conn returns the server's connection to client c.
func (l *stallListener) conn(t *testing.T, c *client) *stallConn {
	t.Helper()
	l.mu.Lock()
	sc := l.conns[c.addr()]
	l.mu.Unlock()
	if sc == nil {
		t.Fatalf("no server connection for %s", c)
	}
	return sc
}

// stall makes every later write to client c stall.
func (l *stallListener) stall(t *testing.T, c *client) { l.conn(t, c).stalled.Store(true) }

// slow makes every later write to client c wait for d (or until its
// deadline, if sooner, then fail) before it goes through, as if the client
// read a little now and then.
func (l *stallListener) slow(t *testing.T, c *client, d time.Duration) {
	l.conn(t, c).slowFor.Store(int64(d))
}

type stallConn struct {
	*net.TCPConn
	slowFor  atomic.Int64 // a time.Duration
	stalled  atomic.Bool
	mu       sync.Mutex
	deadline time.Time
}

func (c *stallConn) SetWriteDeadline(d time.Time) error {
	c.mu.Lock()
	c.deadline = d
	c.mu.Unlock()
	return c.TCPConn.SetWriteDeadline(d)
}

func (c *stallConn) Write(b []byte) (int, error) {
	slow := time.Duration(c.slowFor.Load())
	if !c.stalled.Load() && slow == 0 {
		return c.TCPConn.Write(b)
	}
	c.mu.Lock()
	d := c.deadline
	c.mu.Unlock()
	if slow > 0 && time.Until(d) > slow {
		time.Sleep(slow) // the client makes room, late
		return c.TCPConn.Write(b)
	}
	time.Sleep(time.Until(d)) // the kernel's send buffer stays full
	return 0, &net.OpError{Op: "write", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.ErrDeadlineExceeded}
}

// TestStalledPushIsIOTimeout: when the promotion push cannot be written
// within io-timeout, the promoted session ends with reason io_timeout and
// the lock passes to the next waiter.
func TestStalledPushIsIOTimeout(t *testing.T) {
	t.Parallel()
	for i := range 5 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			sl := &stallListener{conns: map[string]*stallConn{}}
			ts := startServerWrapped(t, func(ln net.Listener) net.Listener { sl.Listener = ln; return sl }, withIOTimeout(ioTimeout))
			owner, stuck, next := ts.dial(t), ts.dial(t), ts.dial(t)
			owner.mustOwn("push", longLease)
			stuck.mustWait("push", longLease)
			next.mustWait("push", longLease)
			sl.stall(t, stuck)

			owner.close()
			next.expectAcquired()
			granted := ts.events.wait(t, "granted", peerEvent(server.EventGranted, stuck))
			released := ts.events.wait(t, "released", peerEvent(server.EventReleased, stuck))
			t.Logf("push stalled; released after %v", released.Time.Sub(granted.Time))
			if released.Reason != server.ReasonIOTimeout {
				t.Errorf("the session whose push timed out was released for %v, want io_timeout", released.Reason)
			}
			stuck.readUntilClosed()
		})
	}
}

// TestSlowReaderBoundedByIOTimeout: a client that reads just enough for
// each write to get through shortly before its deadline (here every write
// is held for 0.6 × io-timeout, then succeeds) is dropped once its writes
// have been blocked for io-timeout in total, not after many io-timeouts.
// The promotion push and the heartbeat replies that follow count together.
func TestSlowReaderBoundedByIOTimeout(t *testing.T) {
	t.Parallel()
	sl := &stallListener{conns: map[string]*stallConn{}}
	ts := startServerWrapped(t, func(ln net.Listener) net.Listener { sl.Listener = ln; return sl }, withIOTimeout(ioTimeout))
	owner, slow, next := ts.dial(t), ts.dial(t), ts.dial(t)
	owner.mustOwn("slow", longLease)
	slow.mustWait("slow", longLease)
	next.mustWait("slow", longLease)
	sl.slow(t, slow, ioTimeout*6/10)
	// The slow client keeps heartbeating: every reply is one more slow write.
	for range 8 {
		slow.mustWrite(protocol.AppendHeartbeat(nil))
	}

	m := startStallMeter()
	owner.close()
	granted := ts.events.wait(t, "granted", peerEvent(server.EventGranted, slow))
	// Each write gets through, so without a session-wide budget the lock
	// stays for good (the lease is long).
	released, ok := ts.events.waitFor(2*time.Second, peerEvent(server.EventReleased, slow))
	if !ok {
		t.Fatalf("slow reader still holds the lock %v after it was granted (io-timeout %v)", time.Since(granted.Time), ioTimeout)
	}
	held, stall := released.Time.Sub(granted.Time), m.worst()
	t.Logf("slow reader held the lock for %v (io-timeout %v, process stalled up to %v)", held, ioTimeout, stall)
	if released.Reason != server.ReasonIOTimeout {
		t.Errorf("released for %v, want io_timeout", released.Reason)
	}
	if bound := ioTimeout + ioTimeoutSlack + stall; held > bound {
		t.Errorf("slow reader held the lock %v, want within io-timeout+%v+stall = %v", held, ioTimeoutSlack, bound)
	}
	next.expectAcquired()
}

// TestPromptWriteRefillsBudget: the budget bounds writes blocked one after
// another, not over a session's life. A holder whose writes now and then
// block for part of io-timeout, with prompt ones in between, keeps its
// lock however much blocked time adds up.
func TestPromptWriteRefillsBudget(t *testing.T) {
	t.Parallel()
	sl := &stallListener{conns: map[string]*stallConn{}}
	ts := startServerWrapped(t, func(ln net.Listener) net.Listener { sl.Listener = ln; return sl }, withIOTimeout(ioTimeout))
	owner := ts.dial(t)
	token := owner.mustOwn("refill", longLease)
	for i := range 4 { // 4 × 0.3 × io-timeout blocked in all
		sl.slow(t, owner, ioTimeout*3/10)
		owner.mustWrite(protocol.AppendHeartbeat(nil))
		if f := owner.mustRead(); f.Type != protocol.TypeAcquired || f.Token != token {
			t.Fatalf("slow heartbeat %d answered with %+v, want ACQUIRED(%d)", i, f, token)
		}
		sl.slow(t, owner, 0)
		owner.mustWrite(protocol.AppendHeartbeat(nil))
		if f := owner.mustRead(); f.Type != protocol.TypeAcquired || f.Token != token {
			t.Fatalf("prompt heartbeat %d answered with %+v, want ACQUIRED(%d)", i, f, token)
		}
	}
	if l, ok := ts.Lock("refill"); !ok || l.Holder.Token != token {
		t.Fatalf("holder lost the lock after 1.2 × io-timeout of blocked writes spread between prompt ones: %+v", l)
	}
}
