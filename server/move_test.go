package server_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// Version 2 claims that continue across a planned change
// (docs/cluster.md, "Continuing version 2 claims across a planned
// change"): prior is the prior owner P, whose clients' sessions are the
// claims' hosts; owner is the new owner N. Routes: P serves until the
// test freezes the names; N answers a relayed request "not yet" (forward,
// on a relayed session: REFUSED 0x03) until the test lets it serve.

const priorNode = "p1"

type movePair struct {
	prior, owner   *testServer
	priorR, ownerR *router
}

func startMovePair(t *testing.T) *movePair {
	t.Helper()
	mp := &movePair{
		ownerR: &router{route: func(string, bool) server.Route { return server.Route{Action: server.RouteForward, Addr: "127.0.0.1:1"} }},
		priorR: &router{route: func(string, bool) server.Route { return server.Route{Action: server.RouteServe} }},
	}
	// N's tokens, as a new owner's fresh epoch, are above P's.
	mp.prior = startServer(t, func(s *server.Server) {
		s.Router, s.NodeID, s.Tokens = mp.priorR, priorNode, &locktable.CounterTokens{}
	})
	mp.owner = startServer(t, func(s *server.Server) {
		s.Router, s.TrustHop, s.NodeID, s.Tokens = mp.ownerR, trustAll, "n1", &epochTokens{next: 1 << 40}
	})
	return mp
}

// move freezes names at P, exports them to N and installs them there.
func (mp *movePair) move(t *testing.T, moving func(string) bool) {
	t.Helper()
	mp.priorR.set(func(name string, _ bool) server.Route {
		if moving(name) {
			return server.Route{Action: server.RouteMoving}
		}
		return server.Route{Action: server.RouteServe}
	})
	states, err := mp.prior.Export(func(name string) string {
		if moving(name) {
			return "n1"
		}
		return ""
	})
	if err != nil {
		t.Fatalf("export: %v", err)
	}
	if err := mp.owner.Install(priorNode, states["n1"]); err != nil {
		t.Fatalf("install: %v", err)
	}
}

// commit lets N serve every name, and P route the moved names to N.
func (mp *movePair) commit(moving func(string) bool) {
	mp.ownerR.set(func(string, bool) server.Route { return server.Route{Action: server.RouteServe} })
	mp.priorR.set(func(name string, _ bool) server.Route {
		if moving(name) {
			return server.Route{Action: server.RouteForward, Addr: mp.owner.addr}
		}
		return server.Route{Action: server.RouteServe}
	})
}

func only(names ...string) func(string) bool {
	return func(name string) bool {
		for _, n := range names {
			if n == name {
				return true
			}
		}
		return false
	}
}

// A held and a queued claim of a session on P continue at N with their
// tokens and places: the host adopts them once N serves the names (asked
// again while N answers "not yet"), a promotion at N reaches the client
// as PROMOTED, and a release goes to N.
func TestMoveDirectClaimsContinue(t *testing.T) {
	mp := startMovePair(t)
	a := mp.prior.dialV2(t, longLease, "a")
	c := mp.prior.dialV2(t, longLease, "c")
	tokA := a.mustHold(1, excl2, 0, "m")
	tokC := c.mustHold(1, excl2, 0, "q")
	a.mustQueue(2, excl2, 0, "q")
	moving := only("m", "q")
	mp.move(t, moving)
	if names := mp.prior.LockNames(); len(names) != 0 {
		t.Fatalf("P still has %v after the export", names)
	}
	if l, ok := mp.owner.Lock("m"); !ok || l.Holder.Token != tokA {
		t.Fatalf("N's m after the install: %+v, want held with token %#x", l, tokA)
	}
	// P routes the names to N, N does not serve them yet: "not yet".
	mp.priorR.set(func(name string, _ bool) server.Route {
		if moving(name) {
			return server.Route{Action: server.RouteForward, Addr: mp.owner.addr}
		}
		return server.Route{Action: server.RouteServe}
	})
	// The pessimism rule: no answer (here a PONG) before the adoption.
	a.mustWrite(protocol.AppendPing(nil, 5))
	a.expectSilenceV2(300 * time.Millisecond)
	mp.commit(moving)
	if f := a.mustReadV2(); f.Type != protocol.TypePong || f.Seq != 5 {
		t.Fatalf("after the adoption: %v, want PONG 5", f)
	}
	waitHolder(t, mp.owner, "m", func(h locktable.HolderInfo) bool { return h.Peer.Via != "" })
	if l, _ := mp.owner.Lock("m"); l.Holder.Token != tokA {
		t.Errorf("m at N: token %#x, want the client's %#x", l.Holder.Token, tokA)
	}
	c.release(1)
	if tok := a.expectPromoted(2); tok <= tokC {
		t.Errorf("promoted at N with token %#x, not above %#x", tok, tokC)
	}
	a.release(1)
	deadline := time.Now().Add(waitLimit)
	for _, ok := mp.owner.Lock("m"); ok; _, ok = mp.owner.Lock("m") {
		if time.Now().After(deadline) {
			t.Fatal("m is still held at N after its release")
		}
		time.Sleep(5 * time.Millisecond)
	}
	ping(a, 9)
}

// Install of an empty state, or of one from a node of the previous
// version, installs nothing; a state of locks without their sessions is
// refused.
func TestMoveInstallFormats(t *testing.T) {
	mp := startMovePair(t)
	for _, s := range []string{`[]`, `null`, `{"locks":[],"sessions":[]}`} {
		if err := mp.owner.Install(priorNode, json.RawMessage(s)); err != nil {
			t.Errorf("install %s: %v", s, err)
		}
	}
	if err := mp.owner.Install(priorNode, json.RawMessage(`[{"name":"x"}]`)); err == nil {
		t.Error("install of locks without sessions succeeded")
	}
}

// epochTokens counts up from next.
type epochTokens struct{ next uint64 }

func (e *epochTokens) Next() uint64 { e.next++; return e.next }

// waitGone waits until N no longer has lock name, and returns how long
// that took.
func waitGone(t *testing.T, ts *testServer, name string, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for _, ok := ts.Lock(name); ok; _, ok = ts.Lock(name) {
		if time.Since(start) > limit {
			t.Fatalf("%s is still in the table after %v", name, limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

// A RELEASE of a moving claim is not answered by the host alone: it is
// queued until the adoption and then sent to N, whose RELEASED answers
// it; N does not keep the claim until its lease runs out.
func TestMoveReleaseQueuedUntilAdopted(t *testing.T) {
	mp := startMovePair(t)
	a := mp.prior.dialV2(t, longLease, "a")
	a.mustHold(1, excl2, 0, "m")
	mp.move(t, only("m"))
	a.mustWrite(releaseFrame(1))
	a.expectSilenceV2(300 * time.Millisecond)
	if _, ok := mp.owner.Lock("m"); !ok {
		t.Fatal("N lost m before the adoption")
	}
	mp.commit(only("m"))
	a.expect(protocol.TypeReleased, 1)
	took := waitGone(t, mp.owner, "m", waitLimit)
	t.Logf("m released at N %v after the client read RELEASED", took)
	// The id is free again, on a name that stays at P.
	a.mustHold(1, excl2, 0, "stay")
}

// A moving claim that N never adopts (N has no such claim: it answers
// the adoption REFUSED 0x04) is revoked: the client is told REVOKED
// 0x03, and its answers flow again.
func TestMoveAdoptionRefusedRevokes(t *testing.T) {
	mp := startMovePair(t)
	a := mp.prior.dialV2(t, longLease, "a")
	a.mustHold(1, excl2, 0, "m")
	mp.priorR.set(func(string, bool) server.Route { return server.Route{Action: server.RouteMoving} })
	if _, err := mp.prior.Export(func(name string) string { return "n1" }); err != nil {
		t.Fatal(err)
	}
	// Not installed at N (its install was lost with a restart).
	mp.commit(only("m"))
	a.expectCode(protocol.TypeRevoked, 1, protocol.CodeNotOwner)
	ping(a, 3)
}

// A moving claim not adopted within half its lease is given up by its
// host (REVOKED 0x03); N's detached claim, never adopted, expires a
// lease after the install and its waiter is promoted.
func TestMoveNotAdoptedGivenUpAndExpires(t *testing.T) {
	mp := startMovePair(t)
	const lease = time.Second
	a := mp.prior.dialV2(t, lease, "a")
	a.mustHold(1, excl2, 0, "m")
	start := time.Now()
	mp.move(t, only("m"))
	installed := time.Now()
	a.expectCode(protocol.TypeRevoked, 1, protocol.CodeNotOwner)
	gaveUp := time.Since(start)
	t.Logf("given up %v after the export (half the lease: %v)", gaveUp, lease/2)
	if gaveUp < lease/2 || gaveUp > lease {
		t.Errorf("given up after %v, want between %v and %v", gaveUp, lease/2, lease)
	}
	b := mp.owner.dialV2(t, longLease, "b")
	mp.ownerR.set(func(string, bool) server.Route { return server.Route{Action: server.RouteServe} })
	b.mustQueue(1, excl2, 0, "m")
	b.expectPromoted(1)
	expired := time.Since(installed)
	t.Logf("N's detached claim expired %v after the install (lease %v)", expired, lease)
	if expired < lease {
		t.Errorf("N granted m %v after the install, before the lease %v ran out", expired, lease)
	}
}

// The claims of a resumable session on P continue at N when P is the
// node that stops: the client, reconnected to N, re-asserts them with
// its own secret, and keeps its tokens.
func TestMoveResumableReassertsAtNewOwner(t *testing.T) {
	mp := startMovePair(t)
	a, w := mp.prior.dialResumable(t, longLease, "a")
	tok := a.mustHold(1, excl2, 0, "m")
	mp.move(t, only("m"))
	a.breakConn() // P stops
	mp.ownerR.set(func(string, bool) server.Route { return server.Route{Action: server.RouteServe} })
	a2 := mp.owner.dialV2(t, longLease, "a")
	if f := a2.reassert(1, excl2, "m", tok, w); f.Type != protocol.TypeGranted || f.Token != tok {
		t.Fatalf("re-assertion at N: %v, want GRANTED with token %#x", f, tok)
	}
}

// When the host of a resumable session stops after N adopted some of its
// moving claims but not all, N keeps the upstream session, and the
// claims still detached join it instead of ending with the older kept
// session of the same origin: the client, reconnected, re-asserts them
// all with their tokens.
func TestMoveKeptUpstreamTakesDetachedClaims(t *testing.T) {
	mp := startMovePair(t)
	a, w := mp.prior.dialResumable(t, longLease, "a")
	tokM := a.mustHold(1, excl2, 0, "m")
	tokQ := a.mustHold(2, excl2, 0, "q")
	moving := only("m", "q")
	mp.move(t, moving)
	mp.commit(moving)
	// N serves m, not q yet: m is adopted, q stays detached.
	mp.ownerR.set(func(name string, _ bool) server.Route {
		if name == "q" {
			return server.Route{Action: server.RouteForward, Addr: "127.0.0.1:1"}
		}
		return server.Route{Action: server.RouteServe}
	})
	waitHolder(t, mp.owner, "m", func(h locktable.HolderInfo) bool { return h.Peer.Via != "" })
	a.breakConn() // P stops: its upstream to N breaks
	mp.owner.events.wait(t, "the upstream kept", func(e server.Event) bool { return e.Kind == server.EventSessionKept })
	mp.ownerR.set(func(string, bool) server.Route { return server.Route{Action: server.RouteServe} })
	a2 := mp.owner.dialV2(t, longLease, "a")
	if f := a2.reassert(1, excl2, "m", tokM, w); f.Type != protocol.TypeGranted || f.Token != tokM {
		t.Errorf("re-assertion of m at N: %v, want GRANTED with token %#x", f, tokM)
	}
	if f := a2.reassert(2, excl2, "q", tokQ, w); f.Type != protocol.TypeGranted || f.Token != tokQ {
		t.Errorf("re-assertion of q at N: %v, want GRANTED with token %#x", f, tokQ)
	}
}
