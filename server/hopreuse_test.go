package server_test

import (
	"io"
	"net"
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
	c.mustWrite(append(server.AppendHop(nil, addr, ""), acquireFrame(name, longLease)...))
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
