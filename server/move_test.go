package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// Version 2 claims that continue across a planned change
// (docs/design/2026-12-02-cluster-handoff.md, "Continuing version 2 claims across a planned
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
		s.Router, s.NodeID, s.Tokens, s.TrustHop = mp.priorR, priorNode, &locktable.CounterTokens{}, trustAll
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
	states, err := exportWhenReady(mp.prior.Server, func(name string) string {
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

// exportWhenReady calls Export until it no longer asks to be called
// again later (holders of moving names are being told), as a cluster
// node's hand-off loop does.
func exportWhenReady(srv *server.Server, newOwner func(string) string) (map[string]json.RawMessage, error) {
	for {
		states, err := srv.Export(newOwner)
		var later interface{ RetryAfter() time.Duration }
		if !errors.As(err, &later) {
			return states, err
		}
		time.Sleep(later.RetryAfter())
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
	waitHolder(t, mp.owner, "m", func(h server.HolderInfo) bool { return h.Peer.Via != "" })
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

// A hand-off state that no prior owner exports (here a session's adopt
// hash of the wrong size) is refused before anything of it is installed:
// neither its range locks nor its range gates.
func TestMoveInstallBadStateChangesNothing(t *testing.T) {
	mp := startMovePair(t)
	const state = `{"locks":[{"name":"x","holders":[{"session":1,"claim":1,"mode":1,"token":5,"lease":60000000000}]}],
		"sessions":[{"session":1,"origin":{"node":"p1","session":1},"adopt":"AAAA"}],
		"range_gates":[{"key":"g","lease_ms":60000}],
		"ranges":[{"key":"f","origin":{"node":"p1","session":1},"owner":7,"type":2,"start":0,"end":9,"lease_ms":60000}]}`
	err := mp.owner.Install(priorNode, json.RawMessage(state))
	if err == nil || !strings.Contains(err.Error(), "bad secret hash") {
		t.Fatalf("install of a bad state: %v, want an error naming the bad secret hash", err)
	}
	if keys := mp.owner.RangeKeys(); len(keys) != 0 {
		t.Errorf("range locks installed from a refused state: %v", keys)
	}
	if _, ok := mp.owner.Lock("x"); ok {
		t.Error("lock x installed from a refused state")
	}
	mp.commit(only("g"))
	d := mp.owner.dialV2(t, longLease, "host-d")
	d.mustWrite(rangeFrame(1, protocol.RangeSet, 0, protocol.LockWrite, 1, 0, 0, "g"))
	d.expectRange(1, protocol.RangeGranted) // not gated
}

// Two sessions of one origin in a hand-off (a kept session and the
// upstream session that replaced it, both with claims at the export)
// become one detached session at the new owner: nobody adopting it, all
// its claims expire a lease after the install, and their names are
// granted again.
func TestMoveInstallOneSessionPerOrigin(t *testing.T) {
	mp := startMovePair(t)
	const state = `{"locks":[{"name":"x","holders":[{"session":1,"claim":1,"mode":1,"token":5,"lease":300000000}]},
		{"name":"y","holders":[{"session":2,"claim":2,"mode":1,"token":6,"lease":300000000}]}],
		"sessions":[{"session":1,"origin":{"node":"r","session":9}},{"session":2,"origin":{"node":"r","session":9}}]}`
	if err := mp.owner.Install(priorNode, json.RawMessage(state)); err != nil {
		t.Fatalf("install: %v", err)
	}
	mp.ownerR.set(func(string, bool) server.Route { return server.Route{Action: server.RouteServe} })
	b := mp.owner.dialV2(t, longLease, "b")
	b.mustQueue(1, excl2, 0, "x")
	b.mustQueue(2, excl2, 0, "y")
	b.expectPromoted(1)
	b.expectPromoted(2)
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
	waitHolder(t, mp.owner, "m", func(h server.HolderInfo) bool { return h.Peer.Via != "" })
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

// moveTriple adds a relaying node R in front of a movePair: R's clients
// claim through upstream sessions, to P before the move and to N after;
// gate sits on R's upstream connections to P.
type moveTriple struct {
	*movePair
	relay  *testServer
	relayR *router
	gate   *writeGate
}

func startMoveTriple(t *testing.T) *moveTriple {
	t.Helper()
	mp := startMovePair(t)
	mt := &moveTriple{movePair: mp, gate: newWriteGate()}
	mt.relayR = &router{route: func(string, bool) server.Route { return server.Route{Action: server.RouteForward, Addr: mp.prior.addr} }}
	mt.relay = startServer(t, func(s *server.Server) {
		s.NodeID, s.Router = relayNode, mt.relayR
		s.DialOwner = func(ctx context.Context, addr string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", addr)
			if err != nil || addr != mp.prior.addr {
				return c, err
			}
			return newGatedConn(c, mt.gate), nil
		}
	})
	t.Cleanup(mt.gate.release)
	return mt
}

// commit also has R route the moved names to N.
func (mt *moveTriple) commit(moving func(string) bool) {
	mt.movePair.commit(moving)
	mt.relayR.set(func(name string, _ bool) server.Route {
		if moving(name) {
			return server.Route{Action: server.RouteForward, Addr: mt.owner.addr}
		}
		return server.Route{Action: server.RouteForward, Addr: mt.prior.addr}
	})
}

// Claims relayed by R to P continue at N: P tells R MOVED on the
// upstream, R holds its answers until it has adopted them at N, with
// their tokens, and a promotion at N reaches the client.
func TestMoveRelayedClaimsContinue(t *testing.T) {
	mt := startMoveTriple(t)
	a := mt.relay.dialV2(t, longLease, "a")
	c := mt.prior.dialV2(t, longLease, "c")
	tokA := a.mustHold(1, excl2, 0, "m")
	c.mustHold(1, excl2, 0, "q")
	a.mustQueue(2, excl2, 0, "q")
	moving := only("m", "q")
	mt.move(t, moving)
	a.mustWrite(protocol.AppendPing(nil, 5))
	a.expectSilenceV2(300 * time.Millisecond)
	mt.commit(moving)
	if f := a.mustReadV2(); f.Type != protocol.TypePong || f.Seq != 5 {
		t.Fatalf("after the adoption: %v, want PONG 5", f)
	}
	h := waitHolder(t, mt.owner, "m", func(h server.HolderInfo) bool { return h.Peer.Via != "" })
	if h.Token != tokA || h.Peer.Via != fmt.Sprintf("%s/%d", relayNode, a.session) {
		t.Errorf("m at N: token %#x via %q, want %#x via R", h.Token, h.Peer.Via, tokA)
	}
	c.release(1)
	a.expectPromoted(2)
	a.release(1)
	a.release(2)
	waitGone(t, mt.owner, "m", waitLimit)
	waitGone(t, mt.owner, "q", waitLimit)
}

// A RELEASE that R sent to P before it read MOVED, and that P read after
// its export, is answered MOVED by P; R then sends it to N after the
// adoption (also when R adopted before that answer came), and N's
// RELEASED answers the client: N does not keep the claim.
func TestMoveRelayedReleaseInFlight(t *testing.T) {
	for _, adoptFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("adopt-first=%v", adoptFirst), func(t *testing.T) {
			mt := startMoveTriple(t)
			a := mt.relay.dialV2(t, longLease, "a")
			a.mustHold(1, excl2, 0, "m")
			mt.gate.hold()
			a.mustWrite(releaseFrame(1)) // held on its way to P
			time.Sleep(50 * time.Millisecond)
			mt.move(t, only("m"))
			if adoptFirst {
				// R adopts at N and sends the RELEASE there, before P's
				// MOVED answer comes.
				mt.commit(only("m"))
				a.expect(protocol.TypeReleased, 1)
				mt.gate.release()
			} else {
				mt.gate.release()
				a.expectSilenceV2(200 * time.Millisecond)
				mt.commit(only("m"))
				a.expect(protocol.TypeReleased, 1)
			}
			took := waitGone(t, mt.owner, "m", waitLimit)
			t.Logf("m gone at N %v after RELEASED", took)
			ping(a, 3)
			// P's MOVED answer fitted: R's upstream to P lives on.
			time.Sleep(100 * time.Millisecond)
			if claims, ups := mt.relay.RelayedClaims(); claims != 0 || ups != 2 {
				t.Errorf("R relays %d claims on %d upstreams, want 0 on 2 (to P and N)", claims, ups)
			}
		})
	}
}

// A claim relayed by R whose name moves to R itself is adopted into R's
// own table: direct from then on, with its token, released there.
func TestMoveRelayedToItsHost(t *testing.T) {
	mt := startMoveTriple(t)
	a := mt.relay.dialV2(t, longLease, "a")
	tokA := a.mustHold(1, excl2, 0, "m")
	a.mustQueue(2, excl2, 0, "m")
	mt.priorR.set(func(string, bool) server.Route { return server.Route{Action: server.RouteMoving} })
	states, err := mt.prior.Export(func(string) string { return relayNode })
	if err != nil {
		t.Fatal(err)
	}
	if err := mt.relay.Install(priorNode, states[relayNode]); err != nil {
		t.Fatal(err)
	}
	a.mustWrite(protocol.AppendPing(nil, 4))
	a.expectSilenceV2(200 * time.Millisecond)
	mt.relayR.set(func(string, bool) server.Route { return server.Route{Action: server.RouteServe} })
	if f := a.mustReadV2(); f.Type != protocol.TypePong || f.Seq != 4 {
		t.Fatalf("after the adoption: %v, want PONG 4", f)
	}
	h := waitHolder(t, mt.relay, "m", func(h server.HolderInfo) bool { return h.Peer.Via == "" })
	if h.Token != tokA || h.Claim != 1 {
		t.Errorf("m at R: claim %d token %#x, want claim 1 with %#x", h.Claim, h.Token, tokA)
	}
	if claims, _ := mt.relay.RelayedClaims(); claims != 0 {
		t.Errorf("R still relays %d claims", claims)
	}
	// The release promotes the session's own waiter: PROMOTED(2) and
	// RELEASED(1), in the order a single server sends them.
	a.mustWrite(releaseFrame(1))
	got := map[protocol.Type]bool{}
	for range 2 {
		got[a.mustReadV2().Type] = true
	}
	if !got[protocol.TypePromoted] || !got[protocol.TypeReleased] {
		t.Fatalf("release of 1: got %v, want PROMOTED and RELEASED", got)
	}
	a.release(2)
	waitGone(t, mt.relay, "m", waitLimit)
}

// A version 1 holder of a moving name is told ERROR 0x01, and nothing is
// granted in its place, here or at the new owner, until it has hung up:
// before, the continuing claim queued behind it was granted in the same
// instant the ERROR was sent, while the holder still believed (found by
// the cluster fault suite).
func TestMoveV1HolderToldBeforeAnyGrant(t *testing.T) {
	mp := startMovePair(t)
	h := mp.prior.dial(t)
	tokH := h.mustOwn("m", longLease)
	a := mp.prior.dialV2(t, longLease, "a")
	a.mustQueue(1, excl2, 0, "m")
	moved := make(chan struct{})
	go func() {
		defer close(moved)
		mp.move(t, only("m"))
	}()
	if f := h.mustRead(); f.Type != protocol.TypeError || f.Code != protocol.CodeShuttingDown {
		t.Fatalf("the holder got %v, want ERROR 0x01", f)
	}
	// The holder has read the ERROR but not hung up: it may still be
	// stopping its work.
	a.expectSilenceV2(300 * time.Millisecond)
	select {
	case <-moved:
		t.Fatal("the export ended before the told holder hung up")
	default:
	}
	hungUp := time.Now()
	h.close()
	select {
	case <-moved:
	case <-time.After(waitLimit):
		t.Fatal("the export did not end after the told holder hung up")
	}
	if d := time.Since(hungUp); d > time.Second {
		t.Errorf("the export took %v after the holder hung up", d)
	}
	mp.commit(only("m"))
	if tok := a.expectPromoted(1); tok <= tokH {
		t.Errorf("promoted with token %#x, not above the holder's %#x", tok, tokH)
	}
}

// A told holder that never hangs up (frozen, or its link cut) keeps the
// claim until its lease runs out.
func TestMoveV1HolderSilentKeepsItsLease(t *testing.T) {
	mp := startMovePair(t)
	const lease = 700 * time.Millisecond
	h := mp.prior.dial(t)
	// The owner counts the lease from when it read the ACQUIRE, which is
	// after this and may be well before the answer is read here.
	sent := time.Now()
	h.mustOwn("m", lease)
	a := mp.prior.dialV2(t, longLease, "a")
	a.mustQueue(1, excl2, 0, "m")
	moved := make(chan struct{})
	go func() {
		defer close(moved)
		mp.move(t, only("m"))
	}()
	select {
	case <-moved:
	case <-time.After(waitLimit):
		t.Fatal("the export did not end after the told holder's lease")
	}
	if d := time.Since(sent); d < lease {
		t.Errorf("the export ended %v after the ACQUIRE was sent, within the silent holder's lease of %v", d, lease)
	}
	mp.commit(only("m"))
	a.expectPromoted(1)
}

// keptHolderAndWaiter has a resumable session "k" of the given lease hold
// "m" at the prior owner and a plain session "a" queue behind it, then
// breaks k's connection; it returns a, once P keeps k's session, and when
// k's connection broke.
func keptHolderAndWaiter(t *testing.T, mp *movePair, lease time.Duration) (*v2client, time.Time) {
	t.Helper()
	k, _ := mp.prior.dialResumable(t, lease, "k")
	k.mustHold(1, excl2, 0, "m")
	a := mp.prior.dialV2(t, longLease, "a")
	a.mustQueue(1, excl2, 0, "m")
	k.close()
	broke := time.Now()
	mp.prior.events.wait(t, "the session kept", func(e server.Event) bool { return e.Kind == server.EventSessionKept })
	return a, broke
}

// A kept session's claim on a moving name does not hold the hand-off up:
// it goes to N still kept, and expires there a lease after its client
// was last heard (not after the install), when the claim queued behind
// it, which continues, is promoted at N.
func TestMoveKeptHolderMovesWithItsLease(t *testing.T) {
	mp := startMovePair(t)
	const lease = 700 * time.Millisecond
	a, broke := keptHolderAndWaiter(t, mp, lease)
	time.Sleep(lease / 2) // the move comes late in the kept session's lease
	start := time.Now()
	mp.move(t, only("m"))
	if d := time.Since(start); d > lease/4 {
		t.Errorf("the export took %v: it waited for the kept session", d)
	}
	if n := mp.prior.KeptSessions(); n != 0 {
		t.Errorf("P still keeps %d sessions, want none: their only claim moved", n)
	}
	mp.commit(only("m"))
	a.expectPromoted(1)
	d := time.Since(broke)
	t.Logf("the queued claim was promoted at N %v after the kept holder's connection broke (lease %v)", d, lease)
	if d < lease-50*time.Millisecond {
		t.Errorf("promoted %v after the kept holder's connection broke, within its lease of %v", d, lease)
	}
	if d > lease+lease/4 {
		t.Errorf("promoted %v after the kept holder's connection broke: its lease of %v restarted at the move", d, lease)
	}
}

// A kept claim that a planned change installed at N, whose lease passes
// before N serves the name (the ring has not switched yet, or N has no
// epoch yet), does not end there before N serves it: its end would grant
// the claim queued behind with a token N may not issue on that name.
// Once N serves the name, it ends and the waiter is promoted.
func TestMoveKeptExpiryWaitsUntilServed(t *testing.T) {
	mp := startMovePair(t)
	const lease = 300 * time.Millisecond
	a, _ := keptHolderAndWaiter(t, mp, lease)
	mp.move(t, only("m")) // N forwards m ("not yet") until the commit
	time.Sleep(3 * lease)
	l, held := mp.owner.Lock("m")
	if !held || len(l.Holders) != 1 || l.Holders[0].Label != "k" {
		t.Fatalf("N's lock m %v after the kept holder's lease, before N serves it: want k's claim still holding", l)
	}
	mp.ownerR.set(func(string, bool) server.Route { return server.Route{Action: server.RouteHold} }) // no epoch yet
	time.Sleep(3 * lease)
	if l, _ := mp.owner.Lock("m"); len(l.Holders) != 1 || l.Holders[0].Label != "k" {
		t.Fatalf("N's lock m %v while N holds the name: want k's claim still holding", l)
	}
	mp.commit(only("m"))
	a.expectPromoted(1)
}

// The client of a kept session whose claim a planned change moved
// re-asserts it at N, with its token, as if it had been kept there.
func TestMoveKeptSessionResumesAtNewOwner(t *testing.T) {
	mp := startMovePair(t)
	k, w := mp.prior.dialResumable(t, longLease, "k")
	tok := k.mustHold(1, excl2, 0, "m")
	k.close()
	mp.prior.events.wait(t, "the session kept", func(e server.Event) bool { return e.Kind == server.EventSessionKept })
	mp.move(t, only("m"))
	mp.commit(only("m"))
	k2 := mp.owner.dialV2(t, longLease, "k")
	if f := k2.reassert(1, excl2, "m", tok, w); f.Type != protocol.TypeGranted || f.Token != tok {
		t.Fatalf("re-assertion at N: %v, want GRANTED with token %#x", f, tok)
	}
	b := mp.owner.dialV2(t, longLease, "b")
	b.mustQueue(1, excl2, 0, "m")
}

// A client that hangs up while its claim moves: its host adopts the
// claim at N and releases it there, as the client's own RELEASE would
// have been, so N ends it once it serves the name, not a lease after the
// install.
func TestMoveHangUpMidMoveReleasesAtNewOwner(t *testing.T) {
	mp := startMovePair(t)
	a := mp.prior.dialV2(t, longLease, "a")
	a.mustHold(1, excl2, 0, "m")
	mp.move(t, only("m"))
	a.close()
	time.Sleep(100 * time.Millisecond) // the host sees the hang-up first
	if _, ok := mp.owner.Lock("m"); !ok {
		t.Fatal("N lost m before the adoption")
	}
	mp.commit(only("m"))
	took := waitGone(t, mp.owner, "m", 5*time.Second)
	t.Logf("m released at N %v after N served it", took)
}

// A shutdown does not wait a told holder's lease for it to hang up: the
// server grants nothing any more, so it lingers as for any session.
func TestMoveV1HolderToldShutdownLingersOnly(t *testing.T) {
	mp := startMovePair(t)
	h := mp.prior.dial(t)
	h.mustOwn("m", longLease)
	mp.priorR.set(func(string, bool) server.Route { return server.Route{Action: server.RouteMoving} })
	if _, err := mp.prior.Export(func(string) string { return "n1" }); err == nil {
		t.Fatal("exported with a told holder still there")
	}
	if f := h.mustRead(); f.Type != protocol.TypeError || f.Code != protocol.CodeShuttingDown {
		t.Fatalf("the holder got %v, want ERROR 0x01", f)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := mp.prior.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Shutdown took %v with a told holder that did not hang up", d)
	}
}
