package server_test

// Watches through a cluster node that does not own the name
// (relaywatch.go): relayed to the owner, and following the name when it
// moves or its owner goes.

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// serveUnlessWarming returns a route function: forwarded requests for a name are
// held while *warming, and everything else is served here.
func serveUnlessWarming(warming *bool) func(string, bool) server.Route {
	return func(_ string, forwarded bool) server.Route {
		if forwarded && *warming {
			return server.Route{Action: server.RouteHold}
		}
		return server.Route{Action: server.RouteServe}
	}
}

func forwardTo(addr string) func(string, bool) server.Route {
	return func(string, bool) server.Route { return server.Route{Action: server.RouteForward, Addr: addr} }
}

// startWatchOwner starts a node that serves what it is asked, relayed or not.
func startWatchOwner(t *testing.T) (*testServer, *router) {
	r := &router{route: serveUnlessWarming(new(bool))}
	return startServer(t, func(s *server.Server) { s.Router, s.TrustHop = r, trustAll }), r
}

// claimValue claims name with value on c and returns its token.
func (c *v2client) claimValue(id uint32, name, value string) uint64 {
	c.t.Helper()
	c.mustWrite(protocol.AppendClaimValue(nil, id, protocol.ModeExclusive, 0, 0, name, value))
	return c.expectValues(protocol.TypeGranted, id).Token
}

// holdAndWatch claims "db" with value on holderAt, watches it (id 1) on
// watchAt, and reads the watch's state: the holder, then synced.
func holdAndWatch(t *testing.T, holderAt, watchAt *testServer, value string) (holder, watcher *v2client, token uint64) {
	t.Helper()
	holder = holderAt.dialValues(t, "holder")
	token = holder.claimValue(1, "db", value)
	watcher = watchAt.dialValues(t, "w")
	watcher.mustWrite(protocol.AppendWatch(nil, 1, "db"))
	watcher.expectChange(1, protocol.ChangeHeld, token, value)
	watcher.expectChange(1, protocol.ChangeSynced, 0, "")
	return holder, watcher, token
}

func waitCount(t *testing.T, what string, n func() int64, want int64) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for n() != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d, want %d", what, n(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A watch through a node that does not own the name: the owner's state
// is the answer, its changes follow (held with label, value, freed), and
// RELEASE ends the watch at the owner too.
func TestRelayedWatch(t *testing.T) {
	owner, _ := startWatchOwner(t)
	relay := startServer(t, func(s *server.Server) { s.NodeID, s.Router = relayNode, &router{route: forwardTo(owner.addr)} })

	c := owner.dialValues(t, "cand")
	tok := c.claimValue(1, "db", "10.0.0.5")
	w := relay.dialValues(t, "w")
	// The relayed answer keeps its place: the PING after the WATCH is
	// answered after the watch's state.
	w.mustWrite(protocol.AppendPing(protocol.AppendWatch(nil, 7, "db"), 9))
	if f := w.expectChange(7, protocol.ChangeHeld, tok, "10.0.0.5"); f.Label != "cand" {
		t.Fatalf("relayed held: %v, want the holder's label", f)
	}
	w.expectChange(7, protocol.ChangeSynced, 0, "")
	if f := w.mustReadValues(); f.Type != protocol.TypePong || f.Seq != 9 {
		t.Fatalf("after the relayed watch's answer: %v, want PONG 9", f)
	}
	if relay.Watches() != 0 || relay.RelayedWatches() != 1 || owner.Watches() != 1 {
		t.Fatalf("watches: relay table %d, relayed %d, owner %d; want 0, 1, 1", relay.Watches(), relay.RelayedWatches(), owner.Watches())
	}
	c.mustWrite(protocol.AppendProclaim(nil, 1, "10.0.0.6"))
	c.expectValues(protocol.TypeProclaimed, 1)
	w.expectChange(7, protocol.ChangeValue, tok, "10.0.0.6")
	c.mustWrite(releaseFrame(1))
	c.expectValues(protocol.TypeReleased, 1)
	w.expectChange(7, protocol.ChangeFreed, tok, "")

	// The id is in use while the watch is, for a CLAIM as for a WATCH.
	w.mustWrite(releaseFrame(7))
	w.expectValues(protocol.TypeReleased, 7)
	waitCount(t, "the owner's watches", func() int64 { return int64(owner.Watches()) }, 0)
	waitCount(t, "relayed watches", relay.RelayedWatches, 0)
	w.mustWrite(protocol.AppendWatch(nil, 7, "db"))
	w.expectChange(7, protocol.ChangeSynced, 0, "")
	w.mustWrite(claimFrame(7, protocol.ModeShared, 0, "x"))
	w.expectSessionError(protocol.CodeClaimInUse)
	waitCount(t, "relayed watches after the session ended", relay.RelayedWatches, 0)
	waitCount(t, "the owner's watches after the session ended", func() int64 { return int64(owner.Watches()) }, 0)
}

// A relayed watch follows its name: a planned move (the old owner
// revokes it with 0x03) and the owner's end (its sessions end) each send
// the watcher a reset, and the next state it gets is the new owner's,
// only once the new owner serves the name (not while it warms up).
func TestRelayedWatchFollowsName(t *testing.T) {
	a, _ := startWatchOwner(t)
	warming := true
	b := startServer(t, func(s *server.Server) {
		s.Router, s.TrustHop = &router{route: serveUnlessWarming(&warming)}, trustAll
	})
	relayR := &router{route: forwardTo(a.addr)}
	relay := startServer(t, func(s *server.Server) { s.NodeID, s.Router = relayNode, relayR })

	ca, w, _ := holdAndWatch(t, a, relay, "on-a")

	// A planned move to b, which warms the name up first.
	cb := b.dialValues(t, "cb")
	tokB := cb.claimValue(1, "db", "on-b")
	relayR.set(forwardTo(b.addr))
	a.Evict(func(name string) bool { return name == "db" })
	ca.expectCode(protocol.TypeRevoked, 1, protocol.CodeNotOwner)
	w.expectChange(1, protocol.ChangeReset, 0, "")
	w.expectSilenceV2(300 * time.Millisecond) // b refuses it while it warms up
	b.Router.(*router).set(serveUnlessWarming(new(bool)))
	w.expectChange(1, protocol.ChangeHeld, tokB, "on-b")
	w.expectChange(1, protocol.ChangeSynced, 0, "")

	// b goes: the name comes back to a, whose own warm-up holds it.
	a.Router.(*router).set(serveUnlessWarming(&warming))
	relayR.set(forwardTo(a.addr))
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	b.Shutdown(ctx)
	// A shutdown ends b's claims before its sessions: the watcher may be
	// told so before the reset.
	if f := w.mustReadValues(); f.Type != protocol.TypeChange || f.Change != protocol.ChangeReset && f.Change != protocol.ChangeFreed {
		t.Fatalf("after the owner's shutdown: %v", f)
	} else if f.Change == protocol.ChangeFreed {
		w.expectChange(1, protocol.ChangeReset, 0, "")
	}
	w.expectSilenceV2(300 * time.Millisecond)
	a.Router.(*router).set(serveUnlessWarming(new(bool)))
	w.expectChange(1, protocol.ChangeSynced, 0, "") // nobody holds it on a
	tokA2 := ca.claimValue(2, "db", "on-a-again")
	w.expectChange(1, protocol.ChangeHeld, tokA2, "on-a-again")
}

// A watch in a node's own table follows its name too: when the name
// leaves the node (the table ends the watch with 0x03) the watcher gets a
// reset, not a REVOKED, and then the new owner's state; and back.
func TestLocalWatchFollowsName(t *testing.T) {
	a, _ := startWatchOwner(t)
	nodeR := &router{route: serveUnlessWarming(new(bool))}
	node := startServer(t, func(s *server.Server) { s.NodeID, s.Router, s.TrustHop = relayNode, nodeR, trustAll })

	h, w, _ := holdAndWatch(t, node, node, "here")

	nodeR.set(forwardTo(a.addr))
	node.Evict(func(name string) bool { return name == "db" })
	h.expectCode(protocol.TypeRevoked, 1, protocol.CodeNotOwner)
	w.expectChange(1, protocol.ChangeReset, 0, "")
	w.expectChange(1, protocol.ChangeSynced, 0, "")
	waitCount(t, "relayed watches", node.RelayedWatches, 1)
	ca := a.dialValues(t, "ca")
	tokA := ca.claimValue(1, "db", "there")
	w.expectChange(1, protocol.ChangeHeld, tokA, "there")

	// Back to the node, which serves it from its table again.
	nodeR.set(serveUnlessWarming(new(bool)))
	a.Router.(*router).set(func(string, bool) server.Route { return server.Route{Action: server.RouteNotOwner} })
	a.Evict(func(name string) bool { return name == "db" })
	w.expectChange(1, protocol.ChangeReset, 0, "")
	w.expectChange(1, protocol.ChangeSynced, 0, "")
	waitCount(t, "relayed watches", node.RelayedWatches, 0)
	if node.Watches() != 1 {
		t.Fatalf("the node's table has %d watches, want 1", node.Watches())
	}
	tok2 := h.claimValue(2, "db", "here again")
	w.expectChange(1, protocol.ChangeHeld, tok2, "here again")
}

// A claim with a value through a node that does not own the name: the
// owner holds it with its value (the longest value fits beside the
// longest name), PROCLAIM changes it there and is answered by the
// owner's PROCLAIMED, and the owner's watchers see each value.
func TestRelayedValues(t *testing.T) {
	owner, relay := startRelayPair(t, nil)
	w := owner.dialValues(t, "w")
	w.mustWrite(protocol.AppendWatch(nil, 1, "db"))
	w.expectChange(1, protocol.ChangeSynced, 0, "")

	c := relay.dialValues(t, "cand")
	tok := c.claimValue(1, "db", "10.0.0.5")
	if f := w.expectChange(1, protocol.ChangeHeld, tok, "10.0.0.5"); f.Label != "cand" {
		t.Fatalf("held through the relay: %v", f)
	}
	c.mustWrite(protocol.AppendProclaim(nil, 1, "10.0.0.6"))
	if f := c.expectValues(protocol.TypeProclaimed, 1); f.Proclaim != protocol.ProclaimSet {
		t.Fatalf("relayed PROCLAIM: %v", f)
	}
	w.expectChange(1, protocol.ChangeValue, tok, "10.0.0.6")
	if h := waitHolder(t, owner, "db", func(h server.HolderInfo) bool { return h.Value == "10.0.0.6" }); h.Token != tok {
		t.Fatalf("owner's holder %+v", h)
	}
	long := strings.Repeat("v", protocol.MaxValueLen)
	c.claimValue(2, strings.Repeat("n", 255), long)
	if h := waitHolder(t, owner, strings.Repeat("n", 255), func(server.HolderInfo) bool { return true }); h.Value != long {
		t.Fatalf("the longest value through the relay: %d bytes at the owner", len(h.Value))
	}
	c.mustWrite(releaseFrame(1))
	c.expectValues(protocol.TypeReleased, 1)
	w.expectChange(1, protocol.ChangeFreed, tok, "")
	c.mustWrite(protocol.AppendProclaim(nil, 1, "x"))
	if f := c.expectValues(protocol.TypeProclaimed, 1); f.Proclaim != protocol.ProclaimNotInUse {
		t.Fatalf("PROCLAIM of a released relayed claim: %v", f)
	}
}

// A relayed watch whose watcher does not read ends with REVOKED 0x08 at
// the relaying node's backlog bound, and its upstream watch ends at the
// owner; the session's other watches and claims live on.
func TestRelayedSlowWatcherDropped(t *testing.T) {
	owner, _ := startWatchOwner(t)
	relay := startServer(t, func(s *server.Server) {
		s.NodeID, s.Router, s.MaxWatchBacklog = relayNode, &router{route: forwardTo(owner.addr)}, 64<<10
	})
	events := relay.events
	slow := relay.dialValues(t, "slow")
	slow.mustWrite(protocol.AppendWatch(nil, 7, "hot"))
	slow.expectChange(7, protocol.ChangeSynced, 0, "")
	leader := owner.dialValues(t, "leader")
	leader.claimValue(1, "hot", "v")
	value := strings.Repeat("x", protocol.MaxValueLen)
	deadline := time.Now().Add(20 * time.Second)
	dropped := func(e server.Event) bool { return e.Kind == server.EventLimit && e.Action == server.LimitWatchBacklog }
	for i := 0; events.count(dropped) == 0; i++ {
		if i == 100_000 || time.Now().After(deadline) {
			t.Fatalf("no relayed watch dropped after %d PROCLAIMs", i)
		}
		leader.mustWrite(protocol.AppendProclaim(nil, 1, value[:len(value)-i%2]))
		leader.expectValues(protocol.TypeProclaimed, 1)
	}
	waitCount(t, "relayed watches", relay.RelayedWatches, 0)
	waitCount(t, "the owner's watches", func() int64 { return int64(owner.Watches()) }, 0)
	slow.expectDropped(7)
	slow.mustWrite(protocol.AppendWatch(nil, 7, "hot")) // the id is free, and a new watch starts afresh
	if f := slow.mustReadValues(); f.Type != protocol.TypeChange || f.Change != protocol.ChangeHeld {
		t.Fatalf("watching again: %v, want the holder", f)
	}
	slow.expectChange(7, protocol.ChangeSynced, 0, "")
}

// Each relayed watch holds a connection to the owner: a node relays at
// most MaxRelayedWatches, and refuses the next one 0x07 until one ends.
func TestRelayedWatchesBounded(t *testing.T) {
	owner, _ := startWatchOwner(t)
	relay := startServer(t, func(s *server.Server) {
		s.NodeID, s.Router = relayNode, &router{route: forwardTo(owner.addr)}
		s.MaxRelayedWatches = 2
	})
	w := relay.dialValues(t, "w")
	for id := uint32(1); id <= 2; id++ {
		w.mustWrite(protocol.AppendWatch(nil, id, "db"))
		w.expectChange(id, protocol.ChangeSynced, 0, "")
	}
	other := relay.dialValues(t, "other")
	other.mustWrite(protocol.AppendWatch(nil, 1, "db"))
	if f := other.expectValues(protocol.TypeRefused, 1); f.Code != protocol.CodeLimitReached {
		t.Fatalf("a third relayed watch: %v, want REFUSED 0x07", f)
	}
	w.mustWrite(releaseFrame(2))
	w.expectValues(protocol.TypeReleased, 2)
	waitCount(t, "relayed watches", relay.RelayedWatches, 1)
	other.mustWrite(protocol.AppendWatch(nil, 1, "db"))
	other.expectChange(1, protocol.ChangeSynced, 0, "")
}

// A local watch whose name leaves follows it only while the node may
// relay one more watch (-max-relayed-watches): over it, the watch ends
// with REVOKED 0x07 instead of opening one more connection to the owner.
func TestLocalWatchFollowsNameBounded(t *testing.T) {
	a, _ := startWatchOwner(t)
	nodeR := &router{route: serveUnlessWarming(new(bool))}
	node := startServer(t, func(s *server.Server) {
		s.NodeID, s.Router, s.TrustHop = relayNode, nodeR, trustAll
		s.MaxRelayedWatches = 1
	})
	w := node.dialValues(t, "w")
	for id := uint32(1); id <= 2; id++ {
		w.mustWrite(protocol.AppendWatch(nil, id, "db"))
		w.expectChange(id, protocol.ChangeSynced, 0, "")
	}

	nodeR.set(forwardTo(a.addr))
	node.Evict(func(name string) bool { return name == "db" })
	seen := map[uint32][]protocol.Frame{}
	for len(seen[1])+len(seen[2]) < 3 {
		f := w.mustReadValues()
		seen[f.Claim] = append(seen[f.Claim], f)
	}
	followed, revoked := seen[1], seen[2]
	if len(revoked) > 1 {
		followed, revoked = revoked, followed
	}
	if len(revoked) != 1 || revoked[0].Type != protocol.TypeRevoked || revoked[0].Code != protocol.CodeLimitReached {
		t.Fatalf("over the bound: %v, want one REVOKED 0x07 (the other: %v)", revoked, followed)
	}
	if followed[0].Change != protocol.ChangeReset || followed[1].Change != protocol.ChangeSynced {
		t.Fatalf("the watch that follows: %v, want reset then synced", followed)
	}
	waitCount(t, "relayed watches", node.RelayedWatches, 1)
}
