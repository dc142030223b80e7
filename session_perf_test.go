package baton

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// countConn counts, on a connection, the deadlines set, the reads that
// returned bytes and the writes.
type countConn struct {
	net.Conn
	d *countDialer
}

func (c countConn) SetReadDeadline(t time.Time) error {
	c.d.readDeadlines.Add(1)
	return c.Conn.SetReadDeadline(t)
}

func (c countConn) SetWriteDeadline(t time.Time) error {
	c.d.writeDeadlines.Add(1)
	return c.Conn.SetWriteDeadline(t)
}

func (c countConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.d.reads.Add(1)
	}
	return n, err
}

func (c countConn) Write(b []byte) (int, error) {
	c.d.writes.Add(1)
	return c.Conn.Write(b)
}

// countDialer dials countConns and holds their counts.
type countDialer struct {
	readDeadlines, writeDeadlines, reads, writes atomic.Int64
}

func (d *countDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return countConn{c, d}, nil
}

// An answer costs the reader no deadline update and a request costs the
// writer none: the give-up deadline only moves later, so the deadlines
// in force are renewed only when they fire (see Session.read and
// Session.write), not once per frame.
func TestSessionDeadlinesNotSetPerFrame(t *testing.T) {
	addr := startServer(t)
	d := &countDialer{}
	s, err := New(Config{Address: addr, Dialer: d}).OpenSession(t.Context(), SessionOptions{Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r0, w0 := d.readDeadlines.Load(), d.writeDeadlines.Load() // the opening's
	const cycles = 200
	for range cycles {
		cl, err := s.Acquire(t.Context(), "x", Exclusive)
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	reads, writes := d.readDeadlines.Load()-r0, d.writeDeadlines.Load()-w0
	t.Logf("%d claims and releases: %d read deadlines, %d write deadlines set", cycles, reads, writes)
	if reads > 2 || writes > 2 {
		t.Fatalf("%d read and %d write deadlines set for %d frames each way; want at most 2 each", reads, writes, 2*cycles)
	}
}

// The deadlines in force are earlier than the rule's while answers keep
// arriving; when they fire the session reads and writes on, as long as
// the rule's deadline has not passed: a session busy for several leases
// is never given up.
func TestSessionStaleDeadlineIsRenewed(t *testing.T) {
	addr := startServer(t)
	// Give-up after 400ms without an answer: short enough for the first
	// deadline set to fire several times, long enough for a loaded
	// machine's stalls.
	const lease = 500 * time.Millisecond
	s := openReal(t, addr, lease, "busy")
	ctx := t.Context()
	start := time.Now()
	n := 0
	for time.Since(start) < 3*lease && n < 100000 {
		cl, err := s.Acquire(ctx, "x", Exclusive)
		if err != nil {
			t.Fatalf("after %v and %d cycles: %v", time.Since(start), n, err)
		}
		if err := cl.Release(ctx); err != nil {
			t.Fatalf("after %v and %d cycles: %v", time.Since(start), n, err)
		}
		n++
	}
	// Idle across a stale deadline too: the PINGs keep it alive.
	time.Sleep(2 * lease)
	if err := s.Err(); err != nil {
		t.Fatalf("session lost after %v (%d cycles): %v", time.Since(start), n, err)
	}
	t.Logf("%d cycles in %v on a %v lease, then idle for %v", n, time.Since(start), lease, 2*lease)
}

// A version 1 lock reads each answer to its heartbeats (an ACQUIRED, type
// and token, that arrived whole) in one read, not one for its type and
// one for the token.
func TestLockReadsEachAnswerOnce(t *testing.T) {
	addr := startServer(t)
	d := &countDialer{}
	c := New(Config{Address: addr, Dialer: d, MinHeartbeatInterval: 20 * time.Millisecond})
	// 2s: the grant may wait for the server's first second (its token
	// clock), within the 1.6s give-up; heartbeats at most 500ms apart.
	l, err := c.Acquire(t.Context(), "x", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r0, w0 := d.reads.Load(), d.writes.Load()
	time.Sleep(1600 * time.Millisecond)
	// Each write is a heartbeat, answered by one ACQUIRED; the last may
	// be unanswered yet, and one written before w0 answered after r0.
	reads, heartbeats := d.reads.Load()-r0, d.writes.Load()-w0
	l.Release(context.Background())
	t.Logf("%d heartbeats, %d reads with bytes", heartbeats, reads)
	if heartbeats < 2 {
		t.Fatalf("%d heartbeats in 1.6s on a 2s lease; want at least 2", heartbeats)
	}
	if reads > heartbeats+1 {
		t.Fatalf("%d reads for %d heartbeats' answers; want at most one each", reads, heartbeats)
	}
}
