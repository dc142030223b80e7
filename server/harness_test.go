package server_test

// The test harness: a server on 127.0.0.1 port 0 with an event log, and a
// raw protocol client that writes bytes and reads frames under deadlines.
// Tests synchronize on frames and observer events, never on sleeps for
// correctness.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// waitLimit bounds every wait for something that must happen. It is far
// above any expected latency so that a loaded machine does not fail a
// test; tests that assert timing use their own, tighter bounds.
const waitLimit = 10 * time.Second

// longLease is for claims that must not expire during a test.
const longLease = time.Minute

// testServer is a running server with its listener address and events.
type testServer struct {
	*server.Server
	addr     string
	events   *eventLog
	serveErr chan error
}

// startServer starts a server on 127.0.0.1 port 0. configure may set
// fields before Serve. The server is shut down when the test ends, and
// Serve must then have returned ErrServerClosed.
func startServer(t *testing.T, configure ...func(*server.Server)) *testServer {
	t.Helper()
	return startServerWrapped(t, nil, configure...)
}

// startServerWrapped is startServer with the listener wrapped by wrap,
// when wrap is not nil.
func startServerWrapped(t *testing.T, wrap func(net.Listener) net.Listener, configure ...func(*server.Server)) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if wrap != nil {
		ln = wrap(ln)
	}
	ts := &testServer{
		Server:   &server.Server{Logger: slog.New(slog.DiscardHandler)},
		addr:     ln.Addr().String(),
		events:   newEventLog(),
		serveErr: make(chan error, 1),
	}
	ts.Observer = ts.events
	for _, f := range configure {
		f(ts.Server)
	}
	// In the first second of the process the default token source makes
	// ACQUIRE wait for the next second; tests that are not about that
	// start after it (once per test binary).
	time.Sleep(time.Until(server.TokenGate(ts.Server)))
	go func() { ts.serveErr <- ts.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		if err := ts.Shutdown(ctx); err != nil {
			t.Errorf("cleanup: Shutdown: %v", err)
		}
		if err := ts.serveResult(); !errors.Is(err, server.ErrServerClosed) {
			t.Errorf("cleanup: Serve returned %v, want ErrServerClosed", err)
		}
	})
	return ts
}

// withIOTimeout sets Server.IOTimeout.
func withIOTimeout(d time.Duration) func(*server.Server) {
	return func(s *server.Server) { s.IOTimeout = d }
}

// serveResult waits for Serve to return (after Shutdown or Close) and
// returns its error; it may be called more than once.
func (ts *testServer) serveResult() error {
	select {
	case err := <-ts.serveErr:
		ts.serveErr <- err
		return err
	case <-time.After(waitLimit):
		return errors.New("Serve did not return")
	}
}

// ---------------------------------------------------------------------
// Events

// eventLog is an Observer that records every event and lets tests wait
// for one. Observe is called from many goroutines, some holding the
// server's table lock, so it only appends and signals.
type eventLog struct {
	mu      sync.Mutex
	events  []server.Event
	changed chan struct{} // closed and replaced on every event
}

func newEventLog() *eventLog { return &eventLog{changed: make(chan struct{})} }

func (l *eventLog) Observe(e server.Event) {
	l.mu.Lock()
	l.events = append(l.events, e)
	close(l.changed)
	l.changed = make(chan struct{})
	l.mu.Unlock()
}

// all returns a copy of the events so far.
func (l *eventLog) all() []server.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events)
}

// wait returns the first event (from the start of the log) that match
// accepts, waiting for it up to waitLimit.
func (l *eventLog) wait(t *testing.T, what string, match func(server.Event) bool) server.Event {
	t.Helper()
	e, ok := l.waitFor(waitLimit, match)
	if !ok {
		t.Fatalf("no %s event within %v; events: %s", what, waitLimit, formatEvents(l.all()))
	}
	return e
}

func (l *eventLog) waitFor(limit time.Duration, match func(server.Event) bool) (server.Event, bool) {
	timeout := time.After(limit)
	seen := 0
	for {
		l.mu.Lock()
		evs, changed := l.events[seen:], l.changed
		seen = len(l.events)
		l.mu.Unlock()
		for _, e := range evs {
			if match(e) {
				return e, true
			}
		}
		select {
		case <-changed:
		case <-timeout:
			return server.Event{}, false
		}
	}
}

// waitCount waits up to waitLimit until n events match.
func (l *eventLog) waitCount(t *testing.T, n int, match func(server.Event) bool) {
	t.Helper()
	timeout := time.After(waitLimit)
	for {
		l.mu.Lock()
		changed := l.changed
		l.mu.Unlock()
		got := l.count(match)
		if got >= n {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("%d matching events within %v, want %d", got, waitLimit, n)
		}
	}
}

// count returns how many events match.
func (l *eventLog) count(match func(server.Event) bool) int {
	n := 0
	for _, e := range l.all() {
		if match(e) {
			n++
		}
	}
	return n
}

// Event matchers.

func kind(k server.EventKind) func(server.Event) bool {
	return func(e server.Event) bool { return e.Kind == k }
}

func peerEvent(k server.EventKind, c *client) func(server.Event) bool {
	addr := c.addr()
	return func(e server.Event) bool { return e.Kind == k && e.Peer.Addr == addr }
}

func lockEvent(k server.EventKind, lock string) func(server.Event) bool {
	return func(e server.Event) bool { return e.Kind == k && e.Lock == lock }
}

func formatEvents(evs []server.Event) string {
	var b bytes.Buffer
	for _, e := range evs {
		fmt.Fprintf(&b, "\n\t%s", formatEvent(e))
	}
	return b.String()
}

func formatEvent(e server.Event) string {
	s := fmt.Sprintf("%s peer=%s", e.Kind, e.Peer.Addr)
	if e.Lock != "" {
		s += fmt.Sprintf(" lock=%q", e.Lock)
	}
	if e.Token != 0 {
		s += fmt.Sprintf(" token=%d", e.Token)
	}
	if e.Reason != 0 {
		s += " reason=" + e.Reason.String()
	}
	if e.Code != 0 {
		s += fmt.Sprintf(" code=0x%02x", uint8(e.Code))
	}
	return s
}

// ---------------------------------------------------------------------
// Timing

// stallMeter measures how long this process went unscheduled while a
// timing test waited: a goroutine ticks every few milliseconds and keeps
// the largest gap between ticks beyond the period. Upper timing bounds
// add it, so a loaded machine widens them by exactly the stall it caused,
// while a server that is slow by itself still fails them.
type stallMeter struct {
	stop chan struct{}
	done chan time.Duration
}

func startStallMeter() *stallMeter {
	m := &stallMeter{stop: make(chan struct{}), done: make(chan time.Duration, 1)}
	go func() {
		const period = 5 * time.Millisecond
		tick := time.NewTicker(period)
		defer tick.Stop()
		last, worst := time.Now(), time.Duration(0)
		for {
			select {
			case <-tick.C:
				now := time.Now()
				worst = max(worst, now.Sub(last)-period)
				last = now
			case <-m.stop:
				m.done <- max(worst, time.Since(last)-period)
				return
			}
		}
	}()
	return m
}

// worst stops the meter and returns the longest stall it saw.
func (m *stallMeter) worst() time.Duration {
	close(m.stop)
	return <-m.done
}

// timingTries is how often a test that missed only a timing bound runs:
// a loaded machine can delay one run, while a slow server is slow every
// time.
const timingTries = 3

// retryTiming runs attempt until it meets its timing bounds, at most
// timingTries times. attempt reports a missed upper bound through late;
// everything else it checks fails the test at once, as usual.
func retryTiming(t *testing.T, attempt func(late func(format string, args ...any))) {
	t.Helper()
	for try := 1; ; try++ {
		var missed []string
		attempt(func(format string, args ...any) { missed = append(missed, fmt.Sprintf(format, args...)) })
		if len(missed) == 0 {
			return
		}
		if try == timingTries {
			for _, m := range missed {
				t.Error(m)
			}
			return
		}
		t.Logf("try %d of %d missed a timing bound; retrying: %s", try, timingTries, strings.Join(missed, "; "))
	}
}

// ---------------------------------------------------------------------
// Raw client

// client is a raw protocol client: it writes bytes as given and reads
// frames with protocol.ReadServerFrame under read deadlines. Methods that
// return errors are safe in any goroutine; the must* and expect* methods
// call t.Fatal and belong to the test goroutine.
type client struct {
	t    *testing.T
	conn *net.TCPConn
}

// dial connects to ts. The connection is closed when the test ends.
func (ts *testServer) dial(t *testing.T) *client {
	t.Helper()
	c, err := ts.tryDial(t)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// tryDial is dial for any goroutine.
func (ts *testServer) tryDial(t *testing.T) (*client, error) {
	conn, err := net.DialTimeout("tcp", ts.addr, waitLimit)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { conn.Close() })
	return &client{t: t, conn: conn.(*net.TCPConn)}, nil
}

// addr is the client's address as the server sees it (Peer.Addr).
func (c *client) addr() string { return c.conn.LocalAddr().String() }

func (c *client) String() string { return c.addr() }

func (c *client) write(b []byte) error {
	c.conn.SetWriteDeadline(time.Now().Add(waitLimit))
	_, err := c.conn.Write(b)
	return err
}

func (c *client) mustWrite(b []byte) {
	c.t.Helper()
	if err := c.write(b); err != nil {
		c.t.Fatalf("%s: write: %v", c, err)
	}
}

func (c *client) sendAcquire(name string, lease time.Duration) error {
	return c.write(acquireFrame(name, lease))
}

func (c *client) sendHeartbeat() error { return c.write(protocol.AppendHeartbeat(nil)) }

// read reads one frame, waiting at most d.
func (c *client) read(d time.Duration) (protocol.ServerFrame, error) {
	c.conn.SetReadDeadline(time.Now().Add(d))
	return protocol.ReadServerFrame(c.conn)
}

// mustRead reads one frame within waitLimit.
func (c *client) mustRead() protocol.ServerFrame {
	c.t.Helper()
	f, err := c.read(waitLimit)
	if err != nil {
		c.t.Fatalf("%s: read: %v", c, err)
	}
	return f
}

// acquire sends ACQUIRE and returns the reply.
func (c *client) acquire(name string, lease time.Duration) protocol.ServerFrame {
	c.t.Helper()
	c.mustWrite(acquireFrame(name, lease))
	return c.mustRead()
}

// mustOwn sends ACQUIRE and expects ACQUIRED; it returns the token.
func (c *client) mustOwn(name string, lease time.Duration) uint64 {
	c.t.Helper()
	f := c.acquire(name, lease)
	if f.Type != protocol.TypeAcquired {
		c.t.Fatalf("%s: ACQUIRE %q answered %v, want ACQUIRED", c, name, f)
	}
	return f.Token
}

// mustWait sends ACQUIRE and expects WAITING.
func (c *client) mustWait(name string, lease time.Duration) {
	c.t.Helper()
	if f := c.acquire(name, lease); f.Type != protocol.TypeWaiting {
		c.t.Fatalf("%s: ACQUIRE %q answered %v, want WAITING", c, name, f)
	}
}

// expectAcquired reads one frame and expects ACQUIRED; it returns the token.
func (c *client) expectAcquired() uint64 {
	c.t.Helper()
	f := c.mustRead()
	if f.Type != protocol.TypeAcquired {
		c.t.Fatalf("%s: got %v, want ACQUIRED", c, f)
	}
	return f.Token
}

// expectError reads one frame, expects ERROR(code) with the canonical
// reason, then expects EOF.
func (c *client) expectError(code protocol.Code) {
	c.t.Helper()
	f := c.mustRead()
	if f.Type != protocol.TypeError || f.Code != code {
		c.t.Fatalf("%s: got %v, want ERROR(0x%02x)", c, f, uint8(code))
	}
	if f.Reason != code.Reason() {
		c.t.Fatalf("%s: ERROR reason %q, want %q", c, f.Reason, code.Reason())
	}
	c.expectEOF()
}

// expectEOF expects the server to have closed the connection with no
// further frame, then closes the client's side as a client does.
func (c *client) expectEOF() {
	c.t.Helper()
	if err := c.readEOF(waitLimit); err != nil {
		c.t.Fatalf("%s: %v", c, err)
	}
	c.close()
}

// readEOF returns nil if the next read gives io.EOF within d.
func (c *client) readEOF(d time.Duration) error {
	f, err := c.read(d)
	switch {
	case err == nil:
		return fmt.Errorf("got %v, want EOF", f)
	case !errors.Is(err, io.EOF):
		return fmt.Errorf("read: %v, want EOF", err)
	}
	return nil
}

// expectSilence expects no frame and no close for d.
func (c *client) expectSilence(d time.Duration) {
	c.t.Helper()
	f, err := c.read(d)
	if err == nil {
		c.t.Fatalf("%s: got %v, want nothing for %v", c, f, d)
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		c.t.Fatalf("%s: read: %v, want nothing for %v", c, err, d)
	}
}

// reset closes the connection with a TCP reset instead of a FIN.
func (c *client) reset() {
	c.conn.SetLinger(0)
	c.conn.Close()
}

func (c *client) close() { c.conn.Close() }

// ---------------------------------------------------------------------
// Frames

// acquireFrame is a valid ACQUIRE.
func acquireFrame(name string, lease time.Duration) []byte {
	return protocol.AppendAcquire(nil, protocol.Acquire{
		Version: protocol.Version, LeaseMS: protocol.LeaseMS(lease), Name: name,
	})
}

func heartbeats(n int) []byte { return bytes.Repeat([]byte{byte(protocol.TypeHeartbeat)}, n) }
