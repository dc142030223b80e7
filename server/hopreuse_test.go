package server_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// countListener counts the connections a server accepted.
type countListener struct {
	net.Listener
	accepts atomic.Int64
}

func (l *countListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepts.Add(1)
	}
	return c, err
}

// hopClaim writes a hop header for addr and an ACQUIRE of name on c and
// reads the answer.
func hopClaim(t *testing.T, c *client, addr, name string) protocol.ServerFrame {
	t.Helper()
	c.mustWrite(append(protocol.AppendHop(nil, addr, ""), acquireFrame(name, longLease)...))
	return c.mustRead()
}

// readByte reads one byte from c within d.
func readByte(c *client, d time.Duration) (byte, error) {
	c.conn.SetReadDeadline(time.Now().Add(d))
	var b [1]byte
	_, err := io.ReadFull(c.conn, b[:])
	return b[0], err
}

// The owner's side, byte by byte: on a relayed claim's hopClientGone it
// releases the claim at once and answers hopAck, its last byte for that
// claim; the connection then carries the next hop header, checked again
// (TrustHop) and served as a new session under the next client's address.
func TestHopReuseOwnerAcks(t *testing.T) {
	var trusted atomic.Int64
	owner := startServer(t, func(s *server.Server) {
		s.Router = &router{route: func(string, bool) server.Route { return server.Route{Action: server.RouteServe} }}
		s.TrustHop = func(net.Addr) bool { trusted.Add(1); return true }
	})
	hop := owner.dial(t)
	if f := hopClaim(t, hop, "192.0.2.1:1", "x"); f.Type != protocol.TypeAcquired {
		t.Fatalf("first claim: %v, want ACQUIRED", f)
	}
	w := owner.dial(t)
	w.mustWait("x", longLease)
	hop.mustWrite(heartbeats(2))
	for range 2 {
		if f := hop.mustRead(); f.Type != protocol.TypeAcquired {
			t.Fatalf("heartbeat: %v, want ACQUIRED", f)
		}
	}
	hop.mustWrite([]byte{0x7e})
	b, err := readByte(hop, waitLimit)
	if err != nil || b != 0x7e {
		t.Fatalf("after hopClientGone: %#x, %v; want the ack 0x7e", b, err)
	}
	w.expectAcquired() // released at once
	if f := hopClaim(t, hop, "192.0.2.2:2", "y"); f.Type != protocol.TypeAcquired {
		t.Fatalf("second claim on the same hop: %v, want ACQUIRED", f)
	}
	if l, ok := owner.Lock("y"); !ok || l.Holder.Peer.Addr != "192.0.2.2:2" {
		t.Fatalf("owner's lock y: %+v, %v; want held by 192.0.2.2:2", l, ok)
	}
	if n := trusted.Load(); n != 2 {
		t.Fatalf("TrustHop asked %d times, want once per hop header (2)", n)
	}
	// A byte after hopClientGone in the same read is not the protocol:
	// the claim is released, no ack, and the connection closed.
	hop.mustWrite([]byte{0x7e, 0x02})
	if err := hop.readEOF(waitLimit); err != nil {
		t.Fatalf("hopClientGone followed by a byte: %v, want EOF without ack", err)
	}
	if _, ok := owner.Lock("y"); ok {
		t.Fatal("y still held after the relayed client hung up")
	}
}

// A hop waiting for its next header is under the owner's io-timeout, as a
// fresh connection waiting for its first ACQUIRE is.
func TestHopReuseOwnerIOTimeout(t *testing.T) {
	const timeout = 400 * time.Millisecond
	owner := startServer(t, withIOTimeout(timeout), func(s *server.Server) {
		s.Router = &router{route: func(string, bool) server.Route { return server.Route{Action: server.RouteServe} }}
		s.TrustHop = trustAll
	})
	hop := owner.dial(t)
	if f := hopClaim(t, hop, "192.0.2.1:1", "x"); f.Type != protocol.TypeAcquired {
		t.Fatalf("claim: %v, want ACQUIRED", f)
	}
	time.Sleep(timeout) // the claim outlives the first io-timeout
	hop.mustWrite([]byte{0x7e})
	if b, err := readByte(hop, waitLimit); err != nil || b != 0x7e {
		t.Fatalf("after hopClientGone: %#x, %v; want the ack", b, err)
	}
	start := time.Now()
	if err := hop.readEOF(waitLimit); err != nil {
		t.Fatalf("idle reused hop: %v, want EOF", err)
	}
	if d := time.Since(start); d < timeout*3/4 || d > timeout+2*time.Second {
		t.Fatalf("idle reused hop closed after %v, want about the io-timeout %v", d, timeout)
	}
}

// N relayed acquires one after another cost the owner no new connection
// and the relay no dial once its pool is warm: each hop goes back to the
// pool after the owner's ack. Each claim is still released at once when
// its client hangs up, tokens increase, and once both nodes are shut
// down no goroutine is left. (Before hops were reused, each relay closed
// its hop and the pool dialed replacements once down to 4: this test
// saw a dozen accepts.)
func TestHopReuseNoNewConnections(t *testing.T) {
	base := runtime.NumGoroutine()
	cl := &countListener{}
	var d hopDialer
	owner := startServerWrapped(t, func(ln net.Listener) net.Listener { cl.Listener = ln; return cl },
		withIOTimeout(time.Minute), func(s *server.Server) {
			s.Router = &router{route: func(string, bool) server.Route { return server.Route{Action: server.RouteServe} }}
			s.TrustHop = trustAll
		})
	r := &hopRouter{owner: owner.addr, owners: []string{owner.addr}}
	relay := startServer(t, withIOTimeout(time.Minute), func(s *server.Server) {
		s.Router = r
		s.DialOwner = d.dial
		server.SetHopPoolIdle(s, time.Minute)
	})
	fillPool(t, owner, relay, "warm")
	waitUntil(t, waitLimit, "the warm-up claim released", func() bool { _, ok := owner.Lock("warm"); return !ok })
	// A dial returns before the owner's accept does, and the warm-up's
	// hop comes back (or, the pool full, is closed) after its claim is
	// released: every hop accepted and reported, and none out, before
	// the count starts.
	waitUntil(t, waitLimit, "the pool's connections accepted and the warm-up relay done", func() bool {
		now, _ := relay.Relayed()
		return now == 0 && cl.accepts.Load() == d.dials.Load() &&
			int64(owner.events.count(kind(server.EventConnected))) == d.dials.Load()
	})
	accepts, dials, kept := cl.accepts.Load(), d.dials.Load(), server.HopsKept(relay.Server)
	connected := owner.events.count(kind(server.EventConnected))

	const n = 3 * server.HopPoolSize
	var last uint64
	for i := range n {
		c := relay.dial(t)
		tok := c.mustOwn("x", longLease)
		if tok <= last {
			t.Fatalf("acquire %d: token %d after %d", i, tok, last)
		}
		last = tok
		c.sendHeartbeat()
		if f := c.mustRead(); f.Type != protocol.TypeAcquired || f.Token != tok {
			t.Fatalf("acquire %d: heartbeat answered %v, want ACQUIRED(%d)", i, f, tok)
		}
		c.close()
		// Released at once on the hang-up, not at the lease's end.
		waitUntil(t, time.Second, "x released at the owner", func() bool { _, ok := owner.Lock("x"); return !ok })
	}
	t.Logf("%d relayed acquires: %d new connections at the owner, %d dials, %d hops put back", n,
		cl.accepts.Load()-accepts, d.dials.Load()-dials, server.HopsKept(relay.Server)-kept)
	if a := cl.accepts.Load() - accepts; a != 0 {
		t.Errorf("the owner accepted %d connections for %d relayed acquires on a warm pool, want 0", a, n)
	}
	if c := owner.events.count(kind(server.EventConnected)) - connected; c != 0 {
		t.Errorf("the owner reported %d connections accepted (metrics), want 0", c)
	}
	if a := d.dials.Load() - dials; a != 0 {
		t.Errorf("the relay dialed %d times, want 0", a)
	}
	waitUntil(t, waitLimit, "every hop back in the pool", func() bool { return server.HopsKept(relay.Server)-kept == n })
	if l := server.HopPoolLen(relay.Server, owner.addr); l > server.HopPoolSize {
		t.Errorf("pool holds %d, bound %d", l, server.HopPoolSize)
	}

	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := relay.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := owner.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	// The test's own client connections and the two Serve loops end
	// with them; allow the runtime a moment.
	waitUntil(t, waitLimit, "the goroutines back to their baseline", func() bool { return runtime.NumGoroutine() <= base+2 })
}

// fakeOwner is an owner scripted by a test: it accepts hops, reads each
// hop header and ACQUIRE, answers ACQUIRED, and on hopClientGone does
// what then says. It records each connection's fate.
type fakeOwner struct {
	t       *testing.T
	ln      net.Listener
	then    func(c net.Conn)
	armed   atomic.Bool // then applies; before, the owner acknowledges
	accepts atomic.Int64
	closed  chan net.Conn // connections the relay closed after a claim
	wg      sync.WaitGroup
}

func startFakeOwner(t *testing.T, then func(c net.Conn)) *fakeOwner {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &fakeOwner{t: t, ln: ln, then: then, closed: make(chan net.Conn, 64)}
	o.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			o.accepts.Add(1)
			o.wg.Go(func() { o.serve(c) })
		}
	})
	t.Cleanup(func() { ln.Close(); o.wg.Wait() })
	return o
}

var fakeToken atomic.Uint64

// staleToken is what a scripted owner sends where nothing may follow.
const staleToken = 0xdeadbeef

func (o *fakeOwner) serve(c net.Conn) {
	defer c.Close()
	var r io.Reader = c
	for {
		// The relay may keep an idle hop for the test's life: its
		// shutdown closes it.
		var h [3]byte
		if _, err := io.ReadFull(r, h[:]); err != nil {
			return
		}
		rest := make([]byte, int(h[2])+2)
		if _, err := io.ReadFull(r, rest); err != nil {
			return
		}
		id := make([]byte, binary.BigEndian.Uint16(rest[len(rest)-2:]))
		if _, err := io.ReadFull(r, id); err != nil {
			return
		}
		var typ [1]byte
		if _, err := io.ReadFull(r, typ[:]); err != nil {
			return
		}
		if _, err := protocol.ReadAcquireBody(r); err != nil {
			return
		}
		c.Write(protocol.AppendAcquired(nil, fakeToken.Add(1)))
		var b [1]byte
		if _, err := io.ReadFull(r, b[:]); err != nil || b[0] != 0x7e {
			return
		}
		armed := o.armed.Load()
		if armed {
			o.then(c)
		} else {
			c.Write([]byte{0x7e})
		}
		// What the relay does now: close the hop, or send the next
		// header (when the pool hands it to a relay).
		c.SetReadDeadline(time.Now().Add(waitLimit))
		_, err := c.Read(b[:1])
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			if armed {
				o.closed <- c
			}
			return
		}
		if err != nil || b[0] != 0x7e {
			return
		}
		c.SetReadDeadline(time.Time{})
		r = io.MultiReader(bytes.NewReader(b[:1]), c)
	}
}

// A relay puts a hop back in its pool only on the owner's ack, the last
// byte of the owner's stream at a frame boundary. An owner that closes
// the hop (this version before reuse), answers ERROR 0x13 (a version
// before hopClientGone), sends the byte inside a frame (a token), or
// sends anything after its ack, has its hop closed, and no byte of it
// reaches a later client; the next relay dials. The "ack" case shows that
// the test sees a reuse when there is one.
func TestHopReuseOnlyOnAck(t *testing.T) {
	for _, tc := range []struct {
		name string
		then func(c net.Conn)
		kept int  // hops put back: 0, 1, or -1 for either
		shut bool // the relay closes the hop
	}{
		{name: "ack", then: func(c net.Conn) { c.Write([]byte{0x7e}) }, kept: 1},
		{name: "owner-closes", then: func(c net.Conn) { c.Close() }, shut: true},
		{name: "older-owner-error", then: func(c net.Conn) {
			c.Write(protocol.AppendError(nil, protocol.CodeUnknownMessage, ""))
			c.(interface{ CloseWrite() error }).CloseWrite()
		}, shut: true},
		{name: "marker-inside-a-frame", then: func(c net.Conn) {
			c.Write(protocol.AppendAcquired(nil, 0x7e7e7e7e7e7e7e7e))
		}, shut: true},
		// In one write: the relay reads both and closes; if the kernel
		// split them, the pool's watcher reads the rest and closes.
		{name: "stale-after-ack", then: func(c net.Conn) {
			c.Write(append([]byte{0x7e}, protocol.AppendAcquired(nil, staleToken)...))
		}, kept: -1, shut: true},
		{name: "stale-after-ack-later", then: func(c net.Conn) {
			c.Write([]byte{0x7e})
			time.Sleep(50 * time.Millisecond)
			c.Write(protocol.AppendAcquired(nil, staleToken))
		}, kept: 1, shut: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := startFakeOwner(t, tc.then)
			var d hopDialer
			relay := startServer(t, withIOTimeout(time.Minute), func(s *server.Server) {
				s.Router = &router{route: func(string, bool) server.Route {
					return server.Route{Action: server.RouteForward, Addr: o.ln.Addr().String()}
				}}
				s.DialOwner = d.dial
				server.SetHopPoolIdle(s, time.Minute)
			})
			// Warm the pool with an acknowledging owner: the hop under
			// test is then taken from a full pool and comes back to it.
			w := relay.dial(t)
			w.mustOwn("warm", longLease)
			w.close()
			waitUntil(t, waitLimit, "a full pool, no relay running", func() bool {
				now, _ := relay.Relayed()
				return now == 0 && server.HopPoolLen(relay.Server, o.ln.Addr().String()) == server.HopPoolSize
			})
			kept0 := server.HopsKept(relay.Server)
			o.armed.Store(true)
			a := relay.dial(t)
			a.mustOwn("x", longLease)
			a.close()
			waitUntil(t, waitLimit, "the relay done", func() bool { now, _ := relay.Relayed(); return now == 0 })
			if tc.shut {
				select {
				case <-o.closed:
				case <-time.After(waitLimit):
					t.Fatal("the relay kept the hop open")
				}
			}
			switch k := server.HopsKept(relay.Server) - kept0; tc.kept {
			case 0:
				if k != 0 {
					t.Fatalf("%d hops put back, want 0", k)
				}
			case 1:
				if k != 1 {
					t.Fatalf("%d hops put back, want 1", k)
				}
			}
			// Later clients get their own answers only, whichever hop
			// they are given, and nothing else.
			for range 3 {
				b := relay.dial(t)
				tok := b.mustOwn("y", longLease)
				if tok == 0x7e7e7e7e7e7e7e7e || tok == staleToken {
					t.Fatalf("a later client got the stale token %#x", tok)
				}
				b.expectSilence(50 * time.Millisecond)
				b.close()
			}
		})
	}
}

// Hops carry claims whose ends race with promotions: a relayed waiter
// hangs up as the holder releases, so the owner's ACQUIRED for it may be
// in flight when its hopClientGone arrives. Later clients, on whichever
// hop, see exactly their own answers.
func TestHopReuseNoStaleBytes(t *testing.T) {
	owner, relay, _ := startHopPair(t, &hopDialer{}, []func(*server.Server){withIOTimeout(time.Minute)},
		[]func(*server.Server){withIOTimeout(time.Minute), func(s *server.Server) { server.SetHopPoolIdle(s, time.Minute) }})
	fillPool(t, owner, relay, "warm")
	kept := server.HopsKept(relay.Server)
	for i := range 2 * server.HopPoolSize {
		h := owner.dial(t)
		h.mustOwn("x", longLease)
		w := relay.dial(t)
		w.mustWait("x", longLease)
		w.mustWrite(heartbeats(3))
		// Release and hang up at once.
		go h.close()
		w.close()
		c := relay.dial(t)
		name := "c" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		tok := c.mustOwn(name, longLease)
		c.mustWrite(heartbeats(2))
		for range 2 {
			if f := c.mustRead(); f.Type != protocol.TypeAcquired || f.Token != tok {
				t.Fatalf("round %d: heartbeat answered %v, want ACQUIRED(%d)", i, f, tok)
			}
		}
		c.expectSilence(20 * time.Millisecond)
		c.close()
		waitUntil(t, waitLimit, "x free", func() bool { _, ok := owner.Lock("x"); return !ok })
	}
	if k := server.HopsKept(relay.Server) - kept; k == 0 {
		t.Fatal("no hop was put back: the test did not exercise reuse")
	} else {
		t.Logf("%d hops put back", k)
	}
}

// Hops put back after their claims go to an owner that then stops
// without a word (Close: no ERROR 0x01) and restarts on its address:
// the relay's watchers see them close, and every later relay reaches the
// new process, through a fresh dial where needed.
func TestHopReuseOwnerRestart(t *testing.T) {
	var d hopDialer
	owner, relay, _ := startHopPair(t, &d, nil, []func(*server.Server){func(s *server.Server) { server.SetHopPoolIdle(s, time.Minute) }})
	fillPool(t, owner, relay, "warm")
	for i := range server.HopPoolSize {
		c := relay.dial(t)
		c.mustOwn("r"+string(rune('a'+i)), longLease)
		c.close()
	}
	waitUntil(t, waitLimit, "hops put back", func() bool { return server.HopsKept(relay.Server) >= server.HopPoolSize })
	owner.Close()
	again := startOwnerAgain(t, owner.addr)
	for i := range server.HopPoolSize + 2 {
		c := relay.dial(t)
		name := "x" + string(rune('a'+i))
		tok := c.mustOwn(name, longLease)
		if _, ok := again.Lock(name); !ok {
			t.Fatalf("acquire %d: not held at the restarted owner", i)
		}
		c.sendHeartbeat()
		if f := c.mustRead(); f.Type != protocol.TypeAcquired || f.Token != tok {
			t.Fatalf("acquire %d: heartbeat answered %v, want ACQUIRED(%d)", i, f, tok)
		}
		c.close()
	}
}
