package server_test

import (
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
