package server_test

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// The upstream between a relaying node and a live owner breaks (a reset,
// a cut that heals): the relaying node re-asserts its claims at the same
// owner, which adopts them from the upstream session it kept, with their
// tokens and queue places (resume.go, adopt; docs/design/2026-12-07-cluster-relay.md, "When the
// owner dies"). The client sees a delay, not a REVOKED.

// cutProxy stands between a relaying node and its owner: each upstream
// the node dials goes through a pair of connections the test can break.
type cutProxy struct {
	owner string
	mu    sync.Mutex
	links []*cutLink
}

// cutLink is one proxied upstream: relay is the proxy's end of the
// relaying node's connection, owner its connection to the owner.
type cutLink struct {
	relay, owner net.Conn
}

// dial is a DialOwner that connects through the proxy.
func (p *cutProxy) dial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	toOwner, err := d.DialContext(ctx, "tcp", p.owner)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		toOwner.Close()
		return nil, err
	}
	defer ln.Close()
	mine, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		toOwner.Close()
		return nil, err
	}
	theirs, err := ln.Accept()
	if err != nil {
		toOwner.Close()
		mine.Close()
		return nil, err
	}
	go io.Copy(toOwner, theirs)
	go io.Copy(theirs, toOwner)
	p.mu.Lock()
	p.links = append(p.links, &cutLink{relay: theirs, owner: toOwner})
	p.mu.Unlock()
	return mine, nil
}

// link returns the i-th upstream dialled.
func (p *cutProxy) link(t *testing.T, i int) *cutLink {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		p.mu.Lock()
		n := len(p.links)
		var l *cutLink
		if i < n {
			l = p.links[i]
		}
		p.mu.Unlock()
		if l != nil {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("upstream %d never dialled (%d were)", i, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// startOwner starts node "o", which serves every name and trusts every
// hop header.
func startOwner(t *testing.T) *testServer {
	t.Helper()
	return startServer(t, func(s *server.Server) {
		s.NodeID = "o"
		s.Router = &router{route: func(string, bool) server.Route { return server.Route{Action: server.RouteServe} }}
		s.TrustHop = trustAll
	})
}

// dialSession opens a version 2 session on ts, resumable or plain.
func (ts *testServer) dialSession(t *testing.T, resumable bool, label string) *v2client {
	t.Helper()
	if resumable {
		c, _ := ts.dialResumable(t, longLease, label)
		return c
	}
	return ts.dialV2(t, longLease, label)
}

// startCutPair starts an owner and a relaying node r1 that forwards
// every name to it through a cutProxy.
func startCutPair(t *testing.T) (owner, r1 *testServer, p *cutProxy) {
	t.Helper()
	owner = startOwner(t)
	p = &cutProxy{owner: owner.addr}
	r1 = startServer(t, func(s *server.Server) {
		s.NodeID = "r1"
		s.Router = &router{route: func(string, bool) server.Route {
			return server.Route{Action: server.RouteForward, Addr: owner.addr}
		}}
		s.DialOwner = p.dial
	})
	return owner, r1, p
}

// cutCases are the sessions and breaks of the relay-cut tests: a plain
// or resumable session; a reset the owner sees, or a cut it does not.
var cutCases = []struct {
	name      string
	resumable bool
	silent    bool // the owner does not see the break
}{
	{"plain/reset", false, false},
	{"plain/silent", false, true},
	{"resumable/reset", true, false},
	{"resumable/silent", true, true},
}

// TestRelayCutLiveOwnerKeepsClaims breaks the upstream of a plain and a
// resumable session two ways: a reset the owner sees, and a cut it does
// not (its end of the connection stays open and silent, as in a
// partition that heals before its lease passes). Each time the held
// claim keeps its token, the queued one its place, and nobody behind
// them is promoted before they are released.
func TestRelayCutLiveOwnerKeepsClaims(t *testing.T) {
	for _, tc := range cutCases {
		t.Run(tc.name, func(t *testing.T) {
			owner, r1, p := startCutPair(t)
			a := r1.dialSession(t, tc.resumable, "a")
			tok := a.mustHold(1, excl2, 0, "x")
			b := owner.dialV2(t, longLease, "b")
			b.mustHold(1, excl2, 0, "y")
			a.mustQueue(2, excl2, 0, "y")
			w := owner.dialV2(t, longLease, "w")
			w.mustQueue(1, excl2, 0, "x") // behind a's x
			w.mustQueue(2, excl2, 0, "y") // behind a's y

			l := p.link(t, 0)
			if tc.silent {
				l.relay.Close() // the owner's end stays open
			} else {
				l.relay.Close()
				l.owner.Close()
			}
			p.link(t, 1) // the relaying node re-asserts on a new upstream
			h := waitHolder(t, owner, "x", func(h server.HolderInfo) bool { return h.Label == "a" && h.Session != 0 })
			if h.Token != tok {
				t.Fatalf("x's holder after the cut has token %d, want the old %d", h.Token, tok)
			}
			ping(a, 1) // answered, no REVOKED before it
			w.expectSilenceV2(200 * time.Millisecond)
			if tc.silent {
				// The owner closed the upstream its relaying node gave up.
				if _, err := l.owner.Read(make([]byte, 1)); err == nil {
					t.Error("the abandoned upstream is still open at the owner")
				}
			}

			b.release(1)
			if got := a.expectPromoted(2); got == 0 {
				t.Error("a promoted on y with token 0")
			}
			w.expectSilenceV2(100 * time.Millisecond) // a's y, in its old place, was first
			a.release(1)
			w.expectPromoted(1)
			a.release(2)
			w.expectPromoted(2)
			if n := owner.KeptSessions(); n != 0 {
				t.Errorf("KeptSessions = %d after the adoption", n)
			}
		})
	}
}

// TestRelayCutTwice breaks the upstream of one session, plain and
// resumable, twice in a row: each new upstream adopts everything the one
// before held.
func TestRelayCutTwice(t *testing.T) {
	for _, resumable := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "resumable"}[resumable], func(t *testing.T) {
			testRelayCutTwice(t, resumable)
		})
	}
}

func testRelayCutTwice(t *testing.T, resumable bool) {
	owner, r1, p := startCutPair(t)
	a := r1.dialSession(t, resumable, "a")
	tx := a.mustHold(1, excl2, 0, "x")
	w := owner.dialV2(t, longLease, "w")
	w.mustQueue(1, excl2, 0, "x")
	p.link(t, 0).relay.Close()
	p.link(t, 1)
	ping(a, 1)
	ty := a.mustHold(2, excl2, 0, "y")
	p.link(t, 1).relay.Close()
	p.link(t, 2)
	ping(a, 2)
	for name, tok := range map[string]uint64{"x": tx, "y": ty} {
		h := waitHolder(t, owner, name, func(h server.HolderInfo) bool { return h.Label == "a" })
		if h.Token != tok {
			t.Errorf("%s's holder has token %d, want %d", name, h.Token, tok)
		}
	}
	w.expectSilenceV2(200 * time.Millisecond)
	a.release(1)
	w.expectPromoted(1)
}

// hopSession opens, as relaying node "r9" would for its client session
// 77, an upstream session on ts and returns it with its WELCOME.
func hopSession(t *testing.T, ts *testServer, hash [32]byte) *v2client {
	t.Helper()
	c := ts.dialV2Raw(t)
	b := protocol.AppendHopV3(nil, "127.0.0.1:1", "", "r9", 77, &hash)
	c.mustWrite(append(b, openingV2(longLease, "a")...))
	if f := c.mustReadV2(); f.Type != protocol.TypeWelcome {
		t.Fatalf("upstream opening answered %v", f)
	}
	return c
}

// The owner sees the upstream of one origin break twice before the
// relaying node re-asserted what the first held: the second takes the
// first's claims over, instead of ending them (which promoted a waiter
// while the client could still believe), and the third adopts them.
func TestRelayKeptTwiceMerges(t *testing.T) {
	owner := startOwner(t)
	var hash [32]byte // of a secret nobody knows, as a plain session's
	hash[0] = 9
	up1 := hopSession(t, owner, hash)
	tok := up1.mustHold(1, excl2, 0, "x")
	w := owner.dialV2(t, longLease, "w")
	w.mustQueue(1, excl2, 0, "x")
	up1.breakConn()
	owner.events.waitCount(t, 1, kind(server.EventSessionKept))
	up2 := hopSession(t, owner, hash)
	ty := up2.mustHold(2, excl2, 0, "y")
	up2.breakConn()
	owner.events.waitCount(t, 2, kind(server.EventSessionKept))
	w.expectSilenceV2(200 * time.Millisecond)
	up3 := hopSession(t, owner, hash)
	prior := protocol.Frame{Session: 77, Node: "r9"}
	if f := up3.reassert(1, excl2, "x", tok, prior); f.Type != protocol.TypeGranted || f.Token != tok {
		t.Fatalf("re-assertion of x on the third upstream answered %v, want GRANTED(%d)", f, tok)
	}
	if f := up3.reassert(2, excl2, "y", ty, prior); f.Type != protocol.TypeGranted || f.Token != ty {
		t.Fatalf("re-assertion of y on the third upstream answered %v, want GRANTED(%d)", f, ty)
	}
	if n := owner.KeptSessions(); n != 0 {
		t.Errorf("KeptSessions = %d after both adoptions", n)
	}
	up3.release(1)
	w.expectPromoted(1)
}

// A second upstream of one origin while the first is open at the owner
// (the relaying node saw a break the owner did not): the owner keeps the
// first, closes it, and the second adopts its claims. A session of
// another origin cannot, without the secret.
func TestRelayAbandonedUpstreamKept(t *testing.T) {
	owner := startOwner(t)
	var hash [32]byte
	hash[0] = 9
	up1 := hopSession(t, owner, hash)
	tok := up1.mustHold(1, excl2, 0, "x")
	other := owner.dialV2(t, longLease, "other")
	other.mustWrite(reassertFrame(1, excl2, "x", tok, protocol.Frame{Session: 77, Node: "r9"}))
	other.expectCode(protocol.TypeRefused, 1, protocol.CodeReassertRefused)

	up2 := hopSession(t, owner, hash)
	up1.expectEOFV2()
	f := up2.reassert(1, excl2, "x", tok, protocol.Frame{Session: 77, Node: "r9"})
	if f.Type != protocol.TypeGranted || f.Token != tok {
		t.Fatalf("re-assertion on the second upstream answered %v, want GRANTED(%d)", f, tok)
	}
	h := waitHolder(t, owner, "x", func(server.HolderInfo) bool { return true })
	if !strings.HasPrefix(h.Peer.Via, "r9/") || h.Token != tok {
		t.Errorf("x held by %+v", h)
	}
}

// TestRelayCutLiveOwnerKeepsRanges: as TestRelayCutLiveOwnerKeepsClaims,
// for range locks. The relaying node re-asserts the session's range
// locks at the same owner, which gives it those it kept for the upstream
// session of the same origin (rangeresume.go): the session goes on,
// nobody waiting is granted meanwhile, and the client's unlock then lets
// the waiter in.
func TestRelayCutLiveOwnerKeepsRanges(t *testing.T) {
	for _, tc := range cutCases {
		t.Run(tc.name, func(t *testing.T) {
			owner, r1, p := startCutPair(t)
			a := r1.dialSession(t, tc.resumable, "a")
			wr := protocol.LockWrite
			a.mustWrite(rangeFrame(1, protocol.RangeSet, 0, wr, 7, 0, 99, "f"))
			a.expectRange(1, protocol.RangeGranted)
			a.mustWrite(rangeFrame(2, protocol.RangeSet, protocol.RangeFlock, wr, 9, 0, 0, "g"))
			a.expectRange(2, protocol.RangeGranted)
			w := owner.dialV2(t, longLease, "w")
			w.mustWrite(rangeFrame(1, protocol.RangeSet, protocol.RangeWait, wr, 3, 50, 50, "f"))
			w.expectRange(1, protocol.RangeQueued)

			l := p.link(t, 0)
			l.relay.Close()
			if !tc.silent {
				l.owner.Close()
			}
			p.link(t, 1) // the relaying node re-asserts on a new upstream
			ping(a, 1)   // answered once the locks are held again; no ERROR
			w.expectSilenceV2(200 * time.Millisecond)
			w.mustWrite(rangeFrame(2, protocol.RangeSet, protocol.RangeFlock, wr, 3, 0, 0, "g"))
			if f := w.expectRange(2, protocol.RangeConflict); f.Label != "a" {
				t.Errorf("the flock conflict names %q, want a's session", f.Label)
			}
			a.mustWrite(rangeFrame(3, protocol.RangeUnlock, 0, 0, 7, 0, 99, "f"))
			a.expectRange(3, protocol.RangeDone)
			w.expectRange(1, protocol.RangePromoted)
		})
	}
}
