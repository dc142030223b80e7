package server_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// contactRouter serves every name and reports the quorum contact a test
// sets (server.QuorumContact).
type contactRouter struct {
	router
	lost atomic.Bool
}

func (r *contactRouter) InContact() bool { return !r.lost.Load() }

func startContactServer(t *testing.T) (*testServer, *contactRouter) {
	t.Helper()
	r := &contactRouter{router: router{route: func(string, bool) server.Route { return server.Route{Action: server.RouteServe} }}}
	return startServer(t, func(s *server.Server) { s.Router = r }), r
}

// A node without quorum contact answers no version 1 heartbeat, holder
// or waiter: the answer would confirm it; it sends ERROR 0x03 instead and
// closes, and the waiter is not told it was promoted.
func TestNoContactConfirmsNoV1Heartbeat(t *testing.T) {
	ts, r := startContactServer(t)
	a := ts.dial(t)
	a.mustOwn("x", longLease)
	b := ts.dial(t)
	b.mustWait("x", longLease)
	r.lost.Store(true)
	a.mustWrite(protocol.AppendHeartbeat(nil))
	a.expectError(protocol.CodeNotOwner)
	// a's end promotes b in the table; the push is not sent.
	b.mustWrite(protocol.AppendHeartbeat(nil))
	b.expectError(protocol.CodeNotOwner)
}

// A node without quorum contact answers no version 2 PING (nor any other
// frame): the session gets ERROR 0x03 instead of the PONG.
func TestNoContactConfirmsNoV2Ping(t *testing.T) {
	ts, r := startContactServer(t)
	c := ts.dialV2(t, longLease, "")
	c.mustHold(1, protocol.ModeExclusive, 0, "x")
	r.lost.Store(true)
	c.mustWrite(protocol.AppendPing(nil, 7))
	f, err := c.readV2(waitLimit)
	if err != nil || f.Type != protocol.TypeSessionError || f.Code != protocol.CodeNotOwner {
		t.Fatalf("PING without quorum contact: %v, %v; want ERROR 0x03, no PONG", f, err)
	}
	c.expectEOFV2()
}

// EndSessions ends every session, idle ones too, with the code given;
// the claims are gone from the table.
func TestEndSessions(t *testing.T) {
	ts, r := startContactServer(t)
	a := ts.dial(t)
	a.mustOwn("x", longLease)
	c := ts.dialV2(t, longLease, "")
	c.mustHold(1, protocol.ModeExclusive, 0, "y")
	r.lost.Store(true)
	if n := ts.EndSessions(protocol.CodeNotOwner); n != 2 {
		t.Errorf("EndSessions ended %d sessions, want 2", n)
	}
	a.expectError(protocol.CodeNotOwner)
	c.expectSessionError(protocol.CodeNotOwner)
	r.lost.Store(false)
	d := ts.dial(t)
	start := time.Now()
	d.mustOwn("x", longLease)
	e := ts.dialV2(t, longLease, "")
	e.mustHold(1, protocol.ModeExclusive, 0, "y")
	t.Logf("names free again after %v", time.Since(start))
}
