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

// A session that a node ends at a write, for want of quorum contact,
// leaves no claim behind: ERROR 0x03 marks it closing, so the
// self-stop's EndSessions passes it over, and its reader ends; the
// claims must end with it, or they stay in the table with nobody to
// expire them. This is the cluster fault suite's 30-second stall: a
// promotion pushed to a resumable session just after the contact lapsed
// was answered ERROR 0x03 instead, and its lock stayed held for good.
func TestNoContactPushEndsClaims(t *testing.T) {
	ts, r := startContactServer(t)
	a := ts.dial(t)
	a.mustOwn("x", longLease)
	c, _ := ts.dialResumable(t, longLease, "c")
	c.mustQueue(1, protocol.ModeExclusive, 0, "x")
	c.mustHold(2, protocol.ModeExclusive, 0, "y")
	r.lost.Store(true)
	a.close() // c is promoted; its push is written by a's goroutine
	c.expectSessionError(protocol.CodeNotOwner)
	ts.EndSessions(protocol.CodeNotOwner) // the self-stop loop's next tick
	r.lost.Store(false)
	deadline := time.Now().Add(waitLimit)
	for {
		locks := ts.Snapshot(nil)
		if len(locks) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after its session ended, the table still holds %+v", locks)
		}
		time.Sleep(10 * time.Millisecond)
	}
	d := ts.dial(t)
	d.mustOwn("x", longLease)
	e := ts.dialV2(t, longLease, "")
	e.mustHold(1, protocol.ModeExclusive, 0, "y")
}
