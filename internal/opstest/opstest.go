// Package opstest holds test helpers for the operational packages (ops,
// admin, audit, cmd/baton): a raw protocol client, an event recorder to
// synchronize on, and a server on a real loopback port.
package opstest

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// Timeout bounds every wait in these helpers; it only matters when a test
// is about to fail.
const Timeout = 10 * time.Second

// StartServer serves srv on 127.0.0.1 with an OS-chosen port and returns
// the address. The server is closed when the test ends.
func StartServer(t testing.TB, srv *server.Server) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; !errors.Is(err, server.ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	})
	return l.Addr().String()
}

// Conn is a protocol client that speaks raw frames. Its methods fail the
// test on error, so call them from the test goroutine only; concurrent
// clients use Dial's net.Conn and ReadFrame.
type Conn struct {
	net.Conn
	t testing.TB
}

// Dial connects to a baton server. The connection is closed when the test
// ends.
func Dial(t testing.TB, addr string) *Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, Timeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &Conn{Conn: c, t: t}
}

// Addr is the client's own address, as the server sees it.
func (c *Conn) Addr() string { return c.LocalAddr().String() }

// Send writes raw bytes.
func (c *Conn) Send(b []byte) {
	c.t.Helper()
	c.SetWriteDeadline(time.Now().Add(Timeout))
	if _, err := c.Write(b); err != nil {
		c.t.Fatalf("write to server: %v", err)
	}
}

// Acquire sends ACQUIRE for name with lease.
func (c *Conn) Acquire(name string, lease time.Duration) {
	c.t.Helper()
	c.Send(AcquireFrame(name, lease))
}

// Heartbeat sends HEARTBEAT.
func (c *Conn) Heartbeat() {
	c.t.Helper()
	c.Send(protocol.AppendHeartbeat(nil))
}

// Read reads one frame.
func (c *Conn) Read() protocol.ServerFrame {
	c.t.Helper()
	f, err := ReadFrame(c.Conn)
	if err != nil {
		c.t.Fatalf("read from server: %v", err)
	}
	return f
}

// Expect reads one frame and fails unless it has type typ (and, for ERROR,
// code, when code is not 0).
func (c *Conn) Expect(typ protocol.Type, code protocol.Code) protocol.ServerFrame {
	c.t.Helper()
	f := c.Read()
	if f.Type != typ || (typ == protocol.TypeError && code != 0 && f.Code != code) {
		want := typ.String()
		if typ == protocol.TypeError && code != 0 {
			want = fmt.Sprintf("ERROR(0x%02x)", uint8(code))
		}
		c.t.Fatalf("got %v, want %s", f, want)
	}
	return f
}

// AcquireFrame returns a valid ACQUIRE frame.
func AcquireFrame(name string, lease time.Duration) []byte {
	return protocol.AppendAcquire(nil, protocol.Acquire{Version: protocol.Version,
		LeaseMS: uint32(lease / time.Millisecond), Name: name})
}

// ReadFrame reads one server frame within Timeout.
func ReadFrame(c net.Conn) (protocol.ServerFrame, error) {
	c.SetReadDeadline(time.Now().Add(Timeout))
	return protocol.ReadServerFrame(c)
}

// Recorder is a server.Observer that keeps every event, so tests can wait
// for what the server did instead of sleeping.
type Recorder struct {
	mu      sync.Mutex
	events  []server.Event
	changed chan struct{} // closed and replaced on every event
}

// Observe records e.
func (r *Recorder) Observe(e server.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	if r.changed != nil {
		close(r.changed)
		r.changed = nil
	}
}

// Events returns a copy of the events so far.
func (r *Recorder) Events() []server.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]server.Event(nil), r.events...)
}

// Wait blocks until cond holds for the events so far, and fails the test
// after Timeout.
func (r *Recorder) Wait(t testing.TB, what string, cond func([]server.Event) bool) {
	t.Helper()
	deadline := time.NewTimer(Timeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		ok := cond(r.events)
		if r.changed == nil {
			r.changed = make(chan struct{})
		}
		ch := r.changed
		r.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("timed out after %v waiting for %s", Timeout, what)
		}
	}
}

// WaitCount waits until at least n events of kind have been seen.
func (r *Recorder) WaitCount(t testing.TB, kind server.EventKind, n int) {
	t.Helper()
	r.Wait(t, fmt.Sprintf("%d %v events", n, kind), func(es []server.Event) bool {
		return Count(es, kind) >= n
	})
}

// Count returns the number of events of kind in es.
func Count(es []server.Event, kind server.EventKind) int {
	n := 0
	for _, e := range es {
		if e.Kind == kind {
			n++
		}
	}
	return n
}
