package server_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// A held claim that is in the table already (entered once; a second copy
// handed back by a failed upstream) is not entered again, and above all
// not revoked: the client, told PROMOTED, would stop believing in a
// claim the table keeps, and the name would stay held for the session's
// life (the cluster fault suite saw it, REVOKED 0x19, for 30 s).
func TestRelayV2HeldTwiceNotRevoked(t *testing.T) {
	_, relay, _, relayR := startHoldPair(t)
	a := relay.dialV2(t, longLease, "twice")
	a.mustQueue(1, protocol.ModeExclusive, 0, "h")
	relayR.set(func(string, bool) server.Route { return server.Route{Action: server.RouteServe} })
	tok := a.expectPromoted(1)
	if !server.HoldAgain(relay.Server, "twice", 1, "h") {
		t.Fatal("no session labelled twice")
	}
	a.expectSilenceV2(500 * time.Millisecond)
	if l, ok := relay.Lock("h"); !ok || len(l.Holders) != 1 || l.Holders[0].Token != tok {
		t.Fatalf("lock h: %+v %v, want held by claim 1, token %d", l, ok, tok)
	}
	a.release(1)
}

// A session's claims on one name keep their order through a hold: a
// claim that comes while an earlier one on its name is held (its owner
// out of reach) is held behind it, not relayed or served ahead of it.
// Before, the retry relayed the held claim behind the newer one, and the
// newer one was granted first.
func TestRelayV2HeldKeepSessionOrder(t *testing.T) {
	var serve atomic.Bool
	r := &router{route: func(string, bool) server.Route {
		if serve.Load() {
			return server.Route{Action: server.RouteServe}
		}
		return server.Route{Action: server.RouteForward, Addr: "192.0.2.1:7070"}
	}}
	// Each dial to the owner waits until the test fails it.
	dialing, fail := make(chan struct{}, 8), make(chan struct{})
	relay := startServer(t, func(s *server.Server) {
		s.Router, s.NodeID = r, relayNode
		s.DialOwner = func(ctx context.Context, addr string) (net.Conn, error) {
			dialing <- struct{}{}
			select {
			case <-fail:
			case <-ctx.Done():
			case <-time.After(waitLimit):
			}
			return nil, fmt.Errorf("dial tcp %s: i/o timeout", addr)
		}
	})
	nextDial := func() {
		t.Helper()
		select {
		case <-dialing:
		case <-time.After(waitLimit):
			t.Fatal("no dial to the owner")
		}
	}
	a := relay.dialV2(t, longLease, "order")
	a.mustQueue(1, protocol.ModeExclusive, 0, "h")
	nextDial()
	fail <- struct{}{} // 1 is held, asked about again in 100 ms
	time.Sleep(20 * time.Millisecond)
	a.mustQueue(2, protocol.ModeExclusive, 0, "h")
	nextDial()                         // the upstream that 1 and 2 go to
	time.Sleep(300 * time.Millisecond) // both are on it
	fail <- struct{}{}
	time.Sleep(50 * time.Millisecond) // both held again
	serve.Store(true)
	a.expectPromoted(1)
	l, ok := relay.Lock("h")
	if !ok || len(l.Holders) != 1 || len(l.Waiters) != 1 || l.Waiters[0].Claim != 2 {
		t.Fatalf("lock h: %+v %v, want claim 1 holding, 2 waiting", l, ok)
	}
}
