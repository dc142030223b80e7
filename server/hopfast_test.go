package server_test

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// readCountConn counts, on a hop connection, the reads that returned
// before the owner's first byte, and the read deadlines set on it.
type readCountConn struct {
	net.Conn
	mu        sync.Mutex
	answered  bool
	before    int // reads that returned without the owner's first byte
	deadlines int // SetReadDeadline and SetDeadline calls
}

func (c *readCountConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.mu.Lock()
	if !c.answered {
		if n > 0 {
			c.answered = true
		} else {
			c.before++
		}
	}
	c.mu.Unlock()
	return n, err
}

func (c *readCountConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadlines++
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

func (c *readCountConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadlines++
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

// A relayed acquire on a pooled hop wakes no goroutine to take the
// connection: the read that watched it while idle is the one that returns
// the owner's answer (before, taking it moved its read deadline to the
// past, woke the watcher, waited for it to return and started a new
// reader: one read that returned nothing and two deadlines per relay).
func TestHopPoolTakeWakesNoReader(t *testing.T) {
	var mu sync.Mutex
	var conns []*readCountConn
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		var nd net.Dialer
		c, err := nd.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		rc := &readCountConn{Conn: c}
		mu.Lock()
		conns = append(conns, rc)
		mu.Unlock()
		return rc, nil
	}
	owner := startServer(t, func(s *server.Server) {
		s.Router = &router{route: func(string, bool) server.Route { return server.Route{Action: server.RouteServe} }}
		s.TrustHop = trustAll
	}, withIOTimeout(time.Minute))
	relay := startServer(t, func(s *server.Server) {
		s.Router = &router{route: func(string, bool) server.Route {
			return server.Route{Action: server.RouteForward, Addr: owner.addr}
		}}
		s.DialOwner = dial
		server.SetHopPoolIdle(s, time.Minute)
	}, withIOTimeout(time.Minute))
	fillPool(t, owner, relay, "warm")

	const relays = 8
	for i := range relays {
		c := relay.dial(t)
		c.mustOwn("k"+string(rune('a'+i)), longLease)
		c.close()
	}
	mu.Lock()
	defer mu.Unlock()
	pooled, idleReads, deadlines := 0, 0, 0
	for _, c := range conns {
		c.mu.Lock()
		if c.answered {
			pooled++
			idleReads += c.before
			deadlines += c.deadlines
		}
		c.mu.Unlock()
	}
	t.Logf("%d relays answered (all but perhaps the first on pooled hops): %d reads returned before the answer, %d read deadlines set", pooled, idleReads, deadlines)
	if pooled < relays { // the warm-up relay may have dialed its own
		t.Fatalf("%d hops answered, want at least %d", pooled, relays)
	}
	if idleReads != 0 || deadlines != 0 {
		t.Errorf("pooled hops: %d reads returned before the owner's answer and %d read deadlines set, want 0 and 0 (one read per answer, no hand-off)", idleReads, deadlines)
	}
}

// writeCountConn counts the reads on a connection the owner accepted
// before its first write (the answer to the ACQUIRE).
type writeCountConn struct {
	net.Conn
	mu      sync.Mutex
	written bool
	reads   int
}

func (c *writeCountConn) Read(b []byte) (int, error) {
	c.mu.Lock()
	if !c.written {
		c.reads++
	}
	c.mu.Unlock()
	return c.Conn.Read(b)
}

func (c *writeCountConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	c.written = true
	c.mu.Unlock()
	return c.Conn.Write(b)
}

type writeCountListener struct {
	net.Listener
	mu    sync.Mutex
	conns []*writeCountConn
}

func (l *writeCountListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	wc := &writeCountConn{Conn: c}
	l.mu.Lock()
	l.conns = append(l.conns, wc)
	l.mu.Unlock()
	return wc, nil
}

// TestOpeningReads: the server reads a connection's opening in as few
// reads as it can without reading past it (opening.go): a direct ACQUIRE
// in two (its header, then its name), a relayed one at its owner in
// three without a client identity and four with one, where reading each
// field alone took four and seven.
func TestOpeningReads(t *testing.T) {
	wl := &writeCountListener{}
	owner := startServerWrapped(t, func(ln net.Listener) net.Listener { wl.Listener = ln; return wl }, func(s *server.Server) {
		s.Router = &router{route: func(string, bool) server.Route { return server.Route{Action: server.RouteServe} }}
		s.TrustHop = trustAll
	})
	for i, tc := range []struct {
		name  string
		hop   []byte
		reads int
	}{
		{"direct", nil, 2},
		{"hop without identity", protocol.AppendHop(nil, "192.0.2.7:4000", ""), 3},
		{"hop with identity", protocol.AppendHop(nil, "192.0.2.7:4000", "spiffe://example.test/client"), 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := owner.dial(t)
			cl.mustWrite(append(tc.hop, acquireFrame("h"+strconv.Itoa(i), longLease)...))
			if tok := cl.expectAcquired(); tok == 0 {
				t.Fatal("token 0")
			}
			wl.mu.Lock()
			wc := wl.conns[len(wl.conns)-1]
			wl.mu.Unlock()
			wc.mu.Lock()
			defer wc.mu.Unlock()
			t.Logf("the server read the opening in %d reads", wc.reads)
			if wc.reads > tc.reads {
				t.Errorf("the server read the opening in %d reads, want %d", wc.reads, tc.reads)
			}
		})
	}
}

// TestOpeningReadsNoFurther: the bytes that follow an opening in the same
// write are the session's: a relayed ACQUIRE with the shortest name and
// a heartbeat in one write gets two answers, and a hop header and
// ACQUIRE sent a byte at a time are one opening.
func TestOpeningReadsNoFurther(t *testing.T) {
	t.Parallel()
	owner := startServer(t, func(s *server.Server) {
		s.Router = &router{route: func(string, bool) server.Route { return server.Route{Action: server.RouteServe} }}
		s.TrustHop = trustAll
	})
	for i, id := range []string{"", "spiffe://example.test/client"} {
		c := owner.dial(t)
		b := protocol.AppendHop(nil, "192.0.2.7:4000", id)
		b = append(b, acquireFrame(string(rune('x'+i)), longLease)...)
		c.mustWrite(append(b, heartbeats(1)...))
		token := c.expectAcquired()
		if tok := c.expectAcquired(); tok != token {
			t.Fatalf("identity %q: heartbeat answered ACQUIRED(%d), want ACQUIRED(%d)", id, tok, token)
		}
		c.expectOnlyEOFAfterHalfClose()
	}
	c := owner.dial(t)
	b := protocol.AppendHop(nil, "192.0.2.7:4000", "spiffe://example.test/client")
	for _, x := range append(b, acquireFrame("bytewise", longLease)...) {
		c.mustWrite([]byte{x})
		time.Sleep(time.Millisecond) // let each byte travel alone
	}
	token := c.expectAcquired()
	if info, ok := owner.Lock("bytewise"); !ok || info.Holder.Token != token || info.Holder.Peer.Addr != "192.0.2.7:4000" || info.Holder.Peer.Identity == "" {
		t.Fatalf("Lock(bytewise) = %+v, %v; want held by 192.0.2.7:4000 with its identity and token %d", info.Holder, ok, token)
	}
}
