package baton

import (
	"context"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/cluster/ring"
	"github.com/batonlock/baton/internal/serverhook"
	"github.com/batonlock/baton/server"
)

// ringNode is an in-process server that says it is one node of a ring:
// it serves every claim it gets (no relaying) and records the names it
// granted, so a test sees where each claim went.
type ringNode struct {
	id   string
	addr string
	srv  *server.Server
	view func() server.RingView

	mu      sync.Mutex
	granted map[string]int
	refuse  map[string]bool // names answered not-owner

	disconnects int
}

func (n *ringNode) Route(name string, _ time.Duration, _ bool) server.Route {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.refuse[name] {
		return server.Route{Action: server.RouteNotOwner}
	}
	return server.Route{Action: server.RouteServe}
}
func (n *ringNode) RecordLease(time.Duration) bool { return true }
func (n *ringNode) RingView() server.RingView      { return n.view() }
func (n *ringNode) RingVersion() uint64            { return n.view().Version }
func (n *ringNode) Observe(e server.Event) {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch e.Kind {
	case server.EventGranted:
		n.granted[e.Lock]++
	case server.EventDisconnected:
		n.disconnects++
	}
}

func (n *ringNode) grants(name string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.granted[name]
}

// startRing starts ids as in-process nodes of one ring of version 1.
func startRing(t *testing.T, ids ...string) map[string]*ringNode {
	nodes, _ := startRingView(t, ids...)
	return nodes
}

// ringViews is the view every node of startRingView answers, which a
// test may change.
type ringViews struct {
	mu   sync.Mutex
	view server.RingView
}

func (v *ringViews) get() server.RingView {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.view
}

// set makes the view of version the members of ids, in the ring.
func (v *ringViews) set(version uint64, nodes map[string]*ringNode, ids ...string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.view = server.RingView{Version: version}
	for id, n := range nodes {
		v.view.Members = append(v.view.Members, server.RingMember{ID: id, Addr: n.addr, InRing: slices.Contains(ids, id)})
	}
}

// startRingView is startRing, also returning the view, to change.
func startRingView(t *testing.T, ids ...string) (map[string]*ringNode, *ringViews) {
	t.Helper()
	nodes := map[string]*ringNode{}
	views := &ringViews{}
	var view server.RingView
	for _, id := range ids {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		n := &ringNode{id: id, addr: ln.Addr().String(), granted: map[string]int{}}
		n.view = views.get
		n.srv = &server.Server{Logger: slog.New(slog.DiscardHandler), Router: n, Observer: n}
		nodes[id] = n
		view.Members = append(view.Members, server.RingMember{ID: id, Addr: n.addr, InRing: true})
		served := make(chan struct{})
		go func() { defer close(served); n.srv.Serve(ln) }()
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			n.srv.Shutdown(ctx)
			<-served
		})
	}
	view.Version = 1
	views.view = view
	return nodes, views
}

// namesOwnedBy returns count names that the ring over ids gives to id.
func namesOwnedBy(ids []string, id string, count int) []string {
	r := ring.New(1, ids)
	var out []string
	for i := 0; len(out) < count && i < 100000; i++ {
		if name := "job-" + strconv.Itoa(i); r.Owner(name) == id {
			out = append(out, name)
		}
	}
	return out
}

// openTestSession opens a session of c with a 5 s lease, closed at the
// end of the test, and returns it with a context of 10 s for the test.
func openTestSession(t *testing.T, c *Client) (context.Context, *Session) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	s, err := c.OpenSession(ctx, SessionOptions{Lease: 5 * time.Second, Label: "routed"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return ctx, s
}

// TestRouterClaimsGoToOwners: a routed session connected to n1 sends
// each claim to the node the ring gives its name, and keeps one session
// per owner node.
func TestRouterClaimsGoToOwners(t *testing.T) {
	ids := []string{"n1", "n2", "n3"}
	nodes := startRing(t, ids...)
	c := New(Config{Address: nodes["n1"].addr, Routing: RoutingDirect})
	ctx, s := openTestSession(t, c)
	for _, id := range ids {
		for _, name := range namesOwnedBy(ids, id, 3) {
			cl, err := s.Acquire(ctx, name, Exclusive)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			for _, other := range ids {
				want := 0
				if other == id {
					want = 1
				}
				if got := nodes[other].grants(name); got != want {
					t.Errorf("%s (owner %s): %d grants on %s, want %d", name, id, got, other, want)
				}
			}
			if err := cl.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	subs := s.nodeSessions()
	if len(subs) != 2 || subs["n2"] == nil || subs["n3"] == nil {
		t.Errorf("sessions with owner nodes: %v, want n2 and n3 (n1's claims use the session's own connection)", subs)
	}
}

// TestRouterPlainByDefault: with one address and the default Routing the
// client does not ask for a ring: every claim goes to Address.
func TestRouterPlainByDefault(t *testing.T) {
	ids := []string{"n1", "n2"}
	nodes := startRing(t, ids...)
	c := New(DefaultConfig(nodes["n1"].addr))
	ctx, s := openTestSession(t, c)
	name := namesOwnedBy(ids, "n2", 1)[0]
	cl, err := s.Acquire(ctx, name, Exclusive)
	if err != nil {
		t.Fatal(err)
	}
	cl.Release(ctx)
	l, err := c.Acquire(ctx, name, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	l.Release(context.Background())
	if n1, n2 := nodes["n1"].grants(name), nodes["n2"].grants(name); n1 != 2 || n2 != 0 {
		t.Errorf("grants n1 %d, n2 %d; want 2 on n1 (the address given)", n1, n2)
	}
	if s.rt != nil || len(s.nodeSessions()) != 0 {
		t.Error("a plain session routes")
	}
}

// TestRouterAutoWhenServerIsClusterNode: with RoutingAuto and one
// address, a resumable session whose WELCOME says it comes from a
// cluster node (the ring flag) routes: its claims go to their owners.
// (Its WELCOME's flags were dropped once, and it never routed.)
func TestRouterAutoWhenServerIsClusterNode(t *testing.T) {
	ids := []string{"n1", "n2"}
	nodes := startRing(t, ids...)
	c := New(DefaultConfig(nodes["n1"].addr))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := c.OpenSession(ctx, SessionOptions{Lease: 5 * time.Second, Label: "auto", Resume: ResumeOn})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.rt == nil {
		t.Fatal("a resumable session on a cluster node does not route")
	}
	name := namesOwnedBy(ids, "n2", 1)[0]
	cl, err := s.Acquire(ctx, name, Exclusive)
	if err != nil {
		t.Fatal(err)
	}
	cl.Release(ctx)
	if n1, n2 := nodes["n1"].grants(name), nodes["n2"].grants(name); n1 != 0 || n2 != 1 {
		t.Errorf("grants n1 %d, n2 %d; want 1 on n2, the owner", n1, n2)
	}
}

// TestRouterLockDialsOwner: a claim of a routing Client.Acquire is a
// connection to its name's owner; with the owner unreachable it goes to
// any node.
func TestRouterLockDialsOwner(t *testing.T) {
	ids := []string{"n1", "n2"}
	nodes := startRing(t, ids...)
	c := New(Config{Address: nodes["n1"].addr, Nodes: []string{nodes["n2"].addr}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	name := namesOwnedBy(ids, "n2", 1)[0]
	l, err := c.Acquire(ctx, name, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	l.Release(context.Background())
	if n1, n2 := nodes["n1"].grants(name), nodes["n2"].grants(name); n1 != 0 || n2 != 1 {
		t.Fatalf("grants n1 %d, n2 %d; want 1 on n2, the owner", n1, n2)
	}
	// n2 goes away: the next Client.Acquire of its name is made through n1.
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	nodes["n2"].srv.Shutdown(sctx)
	l, err = c.Acquire(ctx, name, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	l.Release(context.Background())
	if n1 := nodes["n1"].grants(name); n1 != 1 {
		t.Errorf("after n2 stopped: %d grants on n1, want 1", n1)
	}
}

// TestRouterFallback: when the owner's session ends and the owner cannot
// be reached, the next claim on its names goes through the front node;
// claims held on the owner's session are lost, never moved.
func TestRouterFallback(t *testing.T) {
	ids := []string{"n1", "n2"}
	nodes := startRing(t, ids...)
	c := New(Config{Address: nodes["n1"].addr, Routing: RoutingDirect})
	ctx, s := openTestSession(t, c)
	names := namesOwnedBy(ids, "n2", 2)
	held, err := s.Acquire(ctx, names[0], Exclusive)
	if err != nil {
		t.Fatal(err)
	}
	if nodes["n2"].grants(names[0]) != 1 {
		t.Fatal("claim did not go to its owner n2")
	}
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	nodes["n2"].srv.Shutdown(sctx)
	select {
	case <-held.Lost():
	case <-ctx.Done():
		t.Fatal("the claim held on n2 was not lost when n2 went away")
	}
	cl, err := s.Acquire(ctx, names[1], Exclusive)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Release(ctx)
	if got := nodes["n1"].grants(names[1]); got != 1 {
		t.Errorf("with n2 gone: %d grants of %s on n1, want 1", got, names[1])
	}
	if s.Err() != nil {
		t.Errorf("the session itself ended: %v", s.Err())
	}
}

// TestRouterNotOwnerAsksAgain: a claim the node it went to refuses with
// 0x03 (the ring moved) is made again at the owner of the ring asked
// again.
func TestRouterNotOwnerAsksAgain(t *testing.T) {
	ids := []string{"n1", "n2"}
	nodes, views := startRingView(t, ids...)
	c := New(Config{Address: nodes["n1"].addr, Routing: RoutingDirect})
	ctx, s := openTestSession(t, c)
	name := namesOwnedBy(ids, "n2", 1)[0]
	// n2 left the ring; the session's view (version 1) does not know yet.
	views.set(2, nodes, "n1")
	nodes["n2"].mu.Lock()
	nodes["n2"].refuse = map[string]bool{name: true}
	nodes["n2"].mu.Unlock()
	cl, err := s.Acquire(ctx, name, Exclusive)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Release(ctx)
	if n1, n2 := nodes["n1"].grants(name), nodes["n2"].grants(name); n1 != 1 || n2 != 0 {
		t.Errorf("grants n1 %d, n2 %d; want the claim refused on n2 made again on n1", n1, n2)
	}
	if v := c.rc.version(); v != 2 {
		t.Errorf("ring version %d after the refusal, want 2", v)
	}
}

// TestRouterWatch: a routed session hears of a new ring from the node
// that pushes it, and sends its next claims by it.
func TestRouterWatch(t *testing.T) {
	ids := []string{"n1", "n2"}
	nodes, views := startRingView(t, ids...)
	c := New(Config{Address: nodes["n1"].addr, Routing: RoutingDirect})
	ctx, s := openTestSession(t, c)
	if v := c.rc.version(); v != 1 {
		t.Fatalf("ring version %d after OpenSession, want 1", v)
	}
	views.set(2, nodes, "n1")
	serverhook.Of(nodes["n1"].srv).RingChanged()
	for i := 0; c.rc.version() != 2; i++ { // the push crosses a socket: poll, bounded
		if i == 1000 {
			t.Fatalf("ring version %d 10 s after the push, want 2", c.rc.version())
		}
		time.Sleep(10 * time.Millisecond)
	}
	name := namesOwnedBy(ids, "n2", 1)[0]
	cl, err := s.Acquire(ctx, name, Exclusive)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Release(ctx)
	if n1, n2 := nodes["n1"].grants(name), nodes["n2"].grants(name); n1 != 1 || n2 != 0 {
		t.Errorf("grants n1 %d, n2 %d; want the claim on n1, the only member of ring 2", n1, n2)
	}
}

// TestRouterWatchKeepsAlive: the session that watches the ring PINGs on
// the schedule of the frames it sends, not of those it receives: pushes
// a quarter lease apart do not let the node expire it.
func TestRouterWatchKeepsAlive(t *testing.T) {
	nodes := startRing(t, "n1", "n2")
	c := New(Config{Address: nodes["n1"].addr, Routing: RoutingDirect})
	const lease = 400 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := c.OpenSession(ctx, SessionOptions{Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	start := time.Now()
	for time.Since(start) < 4*lease { // bounded: 4 leases of pushes
		serverhook.Of(nodes["n1"].srv).RingChanged()
		time.Sleep(lease / 5)
	}
	nodes["n1"].mu.Lock()
	d := nodes["n1"].disconnects
	nodes["n1"].mu.Unlock()
	if d != 0 || s.Err() != nil {
		t.Errorf("%d connections of n1 closed in %v of pushes (session: %v); want none", d, time.Since(start), s.Err())
	}
}
