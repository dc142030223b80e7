package server_test

import (
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// TestV2ACLPerClaim: the access-control list is asked for every CLAIM's
// name; a refused claim is REFUSED 0x18 and the session's other claims
// live on. A reload that refuses a name sends REVOKED 0x18 for each
// claim on it, held (with holders) and queued, and promotes the next
// permitted waiter.
func TestV2ACLPerClaim(t *testing.T) {
	t.Parallel()
	authz := &reloadableAuthz{}
	authz.set("secret/")
	ts := startServer(t, func(s *server.Server) { s.Authorizer = authz })
	c := ts.dialV2(t, longLease, "acl")
	c.mustHold(1, excl, 0, "public/a")
	c.mustWrite(claimFrame(2, excl, 0, "secret/a"))
	c.expectCode(protocol.TypeRefused, 2, protocol.CodeNotAuthorized)
	e := ts.events.wait(t, "denied", kind(server.EventDenied))
	if e.Lock != "secret/a" || e.Protocol != protocol.Version2 || e.Claim != 2 || e.Label != "acl" {
		t.Errorf("denied event %+v", e)
	}
	ts.events.wait(t, "refused", func(e server.Event) bool {
		return e.Kind == server.EventRefused && e.Code == protocol.CodeNotAuthorized && e.Claim == 2
	})

	// Reload: public/ is refused now.
	authz.set("")
	c.mustHold(2, shrd, 0, "secret/a")
	d := ts.dialV2(t, longLease, "d")
	d.mustQueue(1, excl, 0, "public/a")
	d.mustQueue(2, excl, 0, "secret/a")
	authz.set("public/")
	if n := ts.Revoke(true); n != 2 {
		t.Errorf("Revoke ended %d claims, want 2", n)
	}
	c.expectCode(protocol.TypeRevoked, 1, protocol.CodeNotAuthorized)
	d.expectCode(protocol.TypeRevoked, 1, protocol.CodeNotAuthorized)
	// Both sessions live on, with their secret/ claims.
	c.release(2)
	d.expectPromoted(2)
}

// TestV2TokenGate: the first grant of a process waits for the token
// source's gate, for version 2 claims as for version 1; a version 2
// claim waits QUEUED and is PROMOTED (v2gate_test.go has more).
func TestV2TokenGate(t *testing.T) {
	t.Parallel()
	g := &gateTokens{notBefore: time.Now().Add(300 * time.Millisecond)}
	// Not startServer: it waits for the gate before serving.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &server.Server{Tokens: g, Logger: slog.New(slog.DiscardHandler)}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-done })
	ts := &testServer{Server: srv, addr: ln.Addr().String(), events: newEventLog()}
	c := ts.dialV2(t, longLease, "gate")
	start := time.Now()
	c.mustQueue(1, excl, 0, "gated")
	c.expectPromoted(1)
	if at := time.Now(); at.Before(g.notBefore) {
		t.Fatalf("GRANTED %v before the gate", g.notBefore.Sub(at))
	}
	if g.early.Load() {
		t.Fatal("a token was issued before the gate")
	}
	t.Logf("first grant waited %v", time.Since(start))
}

// gateTokens is a Gate whose Next records being called too early.
type gateTokens struct {
	notBefore time.Time
	n         atomic.Uint64
	early     atomic.Bool
}

func (g *gateTokens) NotBefore() time.Time { return g.notBefore }

func (g *gateTokens) Next() uint64 {
	if time.Now().Before(g.notBefore) {
		g.early.Store(true)
	}
	return g.n.Add(1)
}

var _ locktable.Gate = (*gateTokens)(nil)

// TestV2ProtocolCounts: sessions and claims are counted by protocol
// version, held and queued, and go back to zero.
func TestV2ProtocolCounts(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	v1 := ts.dial(t)
	v1.mustOwn("pc", longLease)
	a := ts.dialV2(t, longLease, "a")
	a.mustQueue(1, excl, 0, "pc")
	a.mustHold(2, shrd, 0, "pc2")
	a.mustHold(3, shrd, 0, "pc3")
	v1b := ts.dial(t)
	v1b.mustWait("pc", longLease)
	c1, c2 := ts.ProtocolCounts()
	if want := (server.ProtocolCount{Sessions: 2, Held: 1, Queued: 1}); c1 != want {
		t.Errorf("version 1: %+v, want %+v", c1, want)
	}
	if want := (server.ProtocolCount{Sessions: 1, Held: 2, Queued: 1}); c2 != want {
		t.Errorf("version 2: %+v, want %+v", c2, want)
	}
	v1.close()
	a.expectPromoted(1)
	c1, c2 = ts.ProtocolCounts()
	if c2.Held != 3 || c2.Queued != 0 || c1.Held != 0 || c1.Queued != 1 {
		t.Errorf("after a promotion: v1 %+v, v2 %+v", c1, c2)
	}
	a.close()
	v1b.expectAcquired()
	v1b.close()
	// A session leaves the counts just before its EventDisconnected: wait
	// for that of each of the three, v1's included (a's promotion shows
	// only that v1's claim ended, not that its session has gone).
	ts.events.wait(t, "v1 disconnected", peerEvent(server.EventDisconnected, v1))
	ts.events.wait(t, "a disconnected", peerEvent(server.EventDisconnected, a.client))
	ts.events.wait(t, "v1b disconnected", peerEvent(server.EventDisconnected, v1b))
	if c1, c2 := ts.ProtocolCounts(); c1 != (server.ProtocolCount{}) || c2 != (server.ProtocolCount{}) {
		t.Errorf("after every close: v1 %+v, v2 %+v, want zeros", c1, c2)
	}
}
