package server_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// Relaying version 2 claims (relay2.go): a relaying node R forwards every
// name but those starting with "local" to the owner O, which serves all
// it is relayed but "elsewhere".

const relayNode = "r1"

// startRelayPair starts an owner and a relaying node; gate, when set,
// sits on every upstream connection from the relay to the owner.
func startRelayPair(t *testing.T, gate *writeGate, configure ...func(*server.Server)) (owner, relay *testServer) {
	t.Helper()
	owner = startServer(t, append([]func(*server.Server){func(s *server.Server) {
		s.Router = &router{route: func(name string, forwarded bool) server.Route {
			if name == "elsewhere" && forwarded {
				return server.Route{Action: server.RouteNotOwner}
			}
			return server.Route{Action: server.RouteServe}
		}}
		s.TrustHop = trustAll
	}}, configure...)...)
	relay = startServer(t, func(s *server.Server) {
		s.NodeID = relayNode
		s.Router = &router{route: func(name string, _ bool) server.Route {
			if strings.HasPrefix(name, "local") {
				return server.Route{Action: server.RouteServe}
			}
			return server.Route{Action: server.RouteForward, Addr: owner.addr}
		}}
		if gate != nil {
			s.DialOwner = func(ctx context.Context, addr string) (net.Conn, error) {
				var d net.Dialer
				c, err := d.DialContext(ctx, "tcp", addr)
				if err != nil {
					return nil, err
				}
				return &gatedConn{Conn: c, g: gate}, nil
			}
		}
	})
	return owner, relay
}

// writeGate holds the writes of the connections it sits on while closed:
// to the relaying node, an owner that has stopped reading.
type writeGate struct {
	mu     sync.Mutex
	closed bool
	open   chan struct{}
}

func newWriteGate() *writeGate { return &writeGate{open: make(chan struct{})} }

func (g *writeGate) hold() {
	g.mu.Lock()
	if !g.closed {
		g.closed = true
		g.open = make(chan struct{})
	}
	g.mu.Unlock()
}

func (g *writeGate) release() {
	g.mu.Lock()
	if g.closed {
		g.closed = false
		close(g.open)
	}
	g.mu.Unlock()
}

func (g *writeGate) wait() {
	g.mu.Lock()
	ch, closed := g.open, g.closed
	g.mu.Unlock()
	if closed {
		<-ch
	}
}

type gatedConn struct {
	net.Conn
	g *writeGate
}

func (c *gatedConn) Write(b []byte) (int, error) {
	c.g.wait()
	return c.Conn.Write(b)
}

// waitRelayed waits until the relay counts claims relayed claims and ups
// upstream sessions.
func waitRelayed(t *testing.T, ts *testServer, claims, ups int64) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		c, u := ts.RelayedClaims()
		if c == claims && u == ups {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("RelayedClaims() = %d, %d; want %d, %d", c, u, claims, ups)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitHolder waits until the owner's lock name is held by a claim whose
// peer satisfies ok, and returns it.
func waitHolder(t *testing.T, ts *testServer, name string, ok func(locktable.HolderInfo) bool) locktable.HolderInfo {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		if l, held := ts.Lock(name); held {
			for _, h := range l.Holders {
				if ok(h) {
					return h
				}
			}
		}
		if time.Now().After(deadline) {
			l, _ := ts.Lock(name)
			t.Fatalf("%s: no such holder at the owner within %v: %+v", name, waitLimit, l)
		}
		time.Sleep(time.Millisecond)
	}
}

func ping(c *v2client, seq uint64) {
	c.t.Helper()
	c.mustWrite(protocol.AppendPing(nil, seq))
	if f := c.mustReadV2(); f.Type != protocol.TypePong || f.Seq != seq {
		c.t.Fatalf("%s: PING %d answered %v", c, seq, f)
	}
}

// A claim relayed through an upstream session is granted, queued,
// promoted and released by the owner, in one FIFO with the owner's
// direct clients, with the owner's tokens; the owner shows the client's
// address, label and the relaying node.
func TestRelayV2Claims(t *testing.T) {
	owner, relay := startRelayPair(t, nil)
	a := relay.dialV2(t, longLease, "via-relay")
	tokA := a.mustHold(1, protocol.ModeExclusive, 0, "x")
	h := waitHolder(t, owner, "x", func(locktable.HolderInfo) bool { return true })
	if h.Peer.Addr != a.addr() || h.Label != "via-relay" || h.Token != tokA || h.Claim != 1 ||
		h.Peer.Via != fmt.Sprintf("%s/%d", relayNode, a.session) {
		t.Fatalf("owner's holder %+v; want the client's address %s, label, token %d, claim 1, via %s/%d",
			h, a.addr(), tokA, relayNode, a.session)
	}
	if sid, ok := owner.RelayedSession(relayNode, a.session); !ok || sid != h.Session {
		t.Fatalf("RelayedSession = %d, %v; want %d", sid, ok, h.Session)
	}
	if len(relay.Snapshot(nil)) != 0 {
		t.Fatalf("the relaying node's table has claims: %+v", relay.Snapshot(nil))
	}
	waitRelayed(t, relay, 1, 1)

	b := owner.dialV2(t, longLease, "direct")
	b.mustQueue(1, protocol.ModeExclusive, 0, "x")
	tokL := a.mustHold(2, protocol.ModeExclusive, 0, "local-1") // served by the relay itself
	if l, ok := relay.Lock("local-1"); !ok || l.Holders[0].Token != tokL {
		t.Fatalf("local-1 at the relay: %+v, %v", l, ok)
	}
	ping(a, 1)
	a.release(1)
	tokB := b.expectPromoted(1)
	if tokB <= tokA {
		t.Fatalf("tokens %d then %d, want increasing", tokA, tokB)
	}
	a.mustQueue(3, protocol.ModeExclusive, 0, "x") // relayed, behind b
	waitRelayed(t, relay, 1, 1)
	b.release(1)
	if tokA2 := a.expectPromoted(3); tokA2 <= tokB {
		t.Fatalf("tokens %d then %d, want increasing", tokB, tokA2)
	}
	a.release(3)
	a.release(2)
	waitRelayed(t, relay, 0, 1)
	a.close()
	waitRelayed(t, relay, 0, 0)
	deadline := time.Now().Add(waitLimit)
	for {
		if _, v2 := owner.ProtocolCounts(); v2.Sessions == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the owner kept the upstream session after the client hung up")
		}
		time.Sleep(time.Millisecond)
	}
}
