package server_test

import (
	"encoding/json"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/opstest"
	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// Export, on a planned change, ends every version 1 claim on the names
// that move and nothing else (ERROR 0x01), and exports the version 2
// claims of its own sessions (they continue at the new owner, move.go);
// an ACQUIRE for a moving name is held, and Evict ends the claims on
// names no longer owned (REVOKED 0x03 to version 2).
func TestExportEndsMovingClaims(t *testing.T) {
	r := &router{route: func(string, bool) server.Route { return server.Route{Action: server.RouteServe} }}
	ts := startServer(t, func(s *server.Server) { s.Router = r })
	moving := func(name string) bool { return name == "m1" || name == "m2" }

	h1 := opstest.Dial(t, ts.addr)
	h1.Acquire("m1", longLease)
	h1.Expect(protocol.TypeAcquired, 0)
	w1 := opstest.Dial(t, ts.addr)
	w1.Acquire("m1", longLease)
	w1.Expect(protocol.TypeWaiting, 0)
	h2 := opstest.Dial(t, ts.addr)
	h2.Acquire("stay", longLease)
	h2.Expect(protocol.TypeAcquired, 0)
	s := opstest.DialV2(t, ts.addr, longLease, "v2")
	s.Claim(1, protocol.ModeExclusive, 0, "m2")
	s.ExpectV2(protocol.TypeGranted, 1, 0)
	s.Claim(2, protocol.ModeExclusive, 0, "stay2")
	s.ExpectV2(protocol.TypeGranted, 2, 0)
	s.Claim(3, protocol.ModeShared, 0, "m1")
	s.ExpectV2(protocol.TypeQueued, 3, 0)

	r.set(func(name string, _ bool) server.Route {
		if moving(name) {
			return server.Route{Action: server.RouteMoving}
		}
		return server.Route{Action: server.RouteServe}
	})
	type exported struct {
		state map[string]json.RawMessage
		err   error
	}
	done := make(chan exported, 1)
	go func() {
		state, err := exportWhenReady(ts.Server, func(name string) string {
			if moving(name) {
				return "elsewhere"
			}
			return ""
		})
		done <- exported{state, err}
	}()
	h1.Expect(protocol.TypeError, protocol.CodeShuttingDown)
	w1.Expect(protocol.TypeError, protocol.CodeShuttingDown)
	// The version 1 holder keeps its claim until it hangs up
	// (move_test.go); then its end promotes the version 2 waiter before
	// the export, and its claims continue: nothing more is sent, and no
	// answer before their adoption.
	h1.Close()
	ex := <-done
	state, err := ex.state, ex.err
	if err != nil || len(state) != 1 || state["elsewhere"] == nil {
		t.Fatalf("export: %v, %v; want a state for elsewhere", state, err)
	}
	if f := s.ReadV2(); f.Type != protocol.TypePromoted || f.Claim != 3 {
		t.Fatalf("v2 session got %v, want PROMOTED 3", f)
	}
	var st struct {
		Locks []struct {
			Name    string
			Holders []struct{ Claim uint32 }
		}
	}
	if err := json.Unmarshal(state["elsewhere"], &st); err != nil || len(st.Locks) != 2 ||
		st.Locks[0].Name != "m1" || len(st.Locks[0].Holders) != 1 || st.Locks[0].Holders[0].Claim != 3 ||
		st.Locks[1].Name != "m2" || len(st.Locks[1].Holders) != 1 || st.Locks[1].Holders[0].Claim != 1 {
		t.Errorf("exported %s (%v), want m1 held by claim 3 and m2 by claim 1", state["elsewhere"], err)
	}
	h2.Heartbeat()
	h2.Expect(protocol.TypeAcquired, 0)
	if names := ts.LockNames(); slices.Contains(names, "m1") || slices.Contains(names, "m2") || len(names) != 2 {
		t.Errorf("locks after the export: %v, want stay and stay2", names)
	}
	moved := ts.events.count(func(e server.Event) bool { return e.Reason.String() == "moved" })
	if moved != 4 {
		t.Errorf("%d claims ended with reason moved, want 4", moved)
	}
	// A moving name is held, not granted.
	c := opstest.Dial(t, ts.addr)
	c.Acquire("m1", longLease)
	c.Expect(protocol.TypeWaiting, 0)
	// Names no longer owned are evicted the same way.
	ts.Evict(func(name string) bool { return name == "stay" })
	h2.Expect(protocol.TypeError, protocol.CodeShuttingDown)
}

// An ACQUIRE that its Router routed to this node just before a planned
// change froze the name is checked again under the table's lock and
// closed with ERROR 0x01, never entered in the table: the export may
// already have run.
func TestMovingCheckedAgainAtEntry(t *testing.T) {
	var calls atomic.Int64
	r := &router{route: func(string, bool) server.Route {
		if calls.Add(1) == 1 {
			return server.Route{Action: server.RouteServe}
		}
		return server.Route{Action: server.RouteMoving}
	}}
	ts := startServer(t, func(s *server.Server) { s.Router = r })
	c := opstest.Dial(t, ts.addr)
	c.Acquire("race", longLease)
	c.Expect(protocol.TypeError, protocol.CodeShuttingDown)
	if n := calls.Load(); n != 2 {
		t.Errorf("the Router was asked %d times, want 2", n)
	}
	deadline := time.Now().Add(waitLimit)
	for len(ts.LockNames()) != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if names := ts.LockNames(); len(names) != 0 {
		t.Errorf("locks %v: the claim entered the table", names)
	}
}

// A version 2 claim on a name that a planned change is moving away is
// held QUEUED and granted nowhere; once the ring has switched, it goes to
// the new owner, whose grant is pushed as PROMOTED.
func TestMovingHoldsV2Claim(t *testing.T) {
	owner, prior, _, priorR := startHoldPair(t)
	priorR.set(func(string, bool) server.Route { return server.Route{Action: server.RouteMoving} })
	a := prior.dialV2(t, longLease, "a")
	a.mustQueue(1, protocol.ModeExclusive, 0, "m")
	a.expectSilenceV2(300 * time.Millisecond)
	if len(prior.Snapshot(nil)) != 0 {
		t.Fatalf("a claim on a moving name is in the table: %+v", prior.Snapshot(nil))
	}
	priorR.set(func(string, bool) server.Route { return server.Route{Action: server.RouteForward, Addr: owner.addr} })
	a.expectPromoted(1)
	a.release(1)
}
