package baton

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/server"
)

// Leader election against a real in-process server over TCP.

// connDialer records the connections it makes, so a test can cut them.
type connDialer struct {
	net.Dialer
	mu    sync.Mutex
	conns []net.Conn
}

func (d *connDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := d.Dialer.DialContext(ctx, network, addr)
	if err == nil {
		d.mu.Lock()
		d.conns = append(d.conns, c)
		d.mu.Unlock()
	}
	return c, err
}

// cut closes every connection made so far, as a killed process's kernel
// would.
func (d *connDialer) cut() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		c.Close()
	}
}

// electionSession opens a session on addr with label, through d if not
// nil.
func electionSession(t *testing.T, addr, label string, d *connDialer) *Session {
	t.Helper()
	cfg := Config{Address: addr}
	if d != nil {
		cfg.Dialer = d
	}
	s, err := New(cfg).OpenSession(t.Context(), SessionOptions{Lease: 2 * time.Second, Label: label})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// waitWaiters waits until name has n claims queued on srv.
func waitWaiters(t *testing.T, srv *server.Server, name string, n int) {
	t.Helper()
	deadline := time.Now().Add(fakeTimeout)
	for {
		if l, ok := srv.Lock(name); ok && l.WaiterCount == n {
			return
		}
		if time.Now().After(deadline) {
			l, _ := srv.Lock(name)
			t.Fatalf("%q: %d waiters, want %d", name, l.WaiterCount, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// nextLeader returns the next leader an observer delivers.
func nextLeader(t *testing.T, ch <-chan Leader) Leader {
	t.Helper()
	select {
	case l, ok := <-ch:
		if !ok {
			t.Fatal("observer closed")
		}
		return l
	case <-time.After(fakeTimeout):
		t.Fatal("observer: no leader")
	}
	return Leader{}
}

// Three candidates and two observers: the observers see each leader in
// the order they were elected, with its value, each token larger than
// the one before: when the leader's connection dies, when a leader
// resigns, and when one proclaims a new value.
func TestElectionCampaignObserveOrder(t *testing.T) {
	addr, srv := startServerSrv(t)
	ctx := t.Context()
	da := &connDialer{}
	sa := electionSession(t, addr, "a", da)
	sb := electionSession(t, addr, "b", nil)
	sc := electionSession(t, addr, "c", nil)
	ea, eb, ec := NewElection(sa, "db"), NewElection(sb, "db"), NewElection(sc, "db")

	var obs []<-chan Leader
	for _, label := range []string{"o1", "o2"} {
		obs = append(obs, NewElection(electionSession(t, addr, label, nil), "db").Observe(ctx))
	}
	if err := ea.Campaign(ctx, "10.0.0.1"); err != nil {
		t.Fatal(err)
	}
	elected := func(e *Election, value string) chan error {
		ch := make(chan error, 1)
		go func() { ch <- e.Campaign(ctx, value) }()
		return ch
	}
	bDone := elected(eb, "10.0.0.2")
	waitWaiters(t, srv, "db", 1)
	cDone := elected(ec, "10.0.0.3")
	waitWaiters(t, srv, "db", 2)

	want := []Leader{{Value: "10.0.0.1", Token: ea.Token(), Label: "a"}}
	seen := make([][]Leader, len(obs))
	check := func() {
		t.Helper()
		for i, ch := range obs {
			for len(seen[i]) < len(want) {
				seen[i] = append(seen[i], nextLeader(t, ch))
			}
			for j, l := range seen[i] {
				w := want[j]
				if l.Value != w.Value || l.Label != w.Label || (w.Token != 0 && l.Token != w.Token) {
					t.Fatalf("observer %d, leader %d: %+v, want %+v", i+1, j, l, w)
				}
				if j > 0 && l.Token < seen[i][j-1].Token {
					t.Fatalf("observer %d: token %d after %d", i+1, l.Token, seen[i][j-1].Token)
				}
			}
		}
	}
	check()

	// The leader's connection dies: the next candidate leads, with a
	// larger token, and every observer learns it.
	acl := ea.Claim()
	da.cut()
	if err := wait(t, bDone); err != nil {
		t.Fatal(err)
	}
	if eb.Token() <= want[0].Token {
		t.Fatalf("b's token %d, not above a's %d", eb.Token(), want[0].Token)
	}
	select {
	case <-acl.Lost():
	case <-time.After(fakeTimeout):
		t.Fatal("a still believes it leads")
	}
	if err := ea.Proclaim(ctx, "x"); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("Proclaim of a deposed leader: %v", err)
	}
	want = append(want, Leader{Value: "10.0.0.2", Token: eb.Token(), Label: "b"})
	check()

	// b resigns: c leads.
	if err := eb.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := wait(t, cDone); err != nil {
		t.Fatal(err)
	}
	want = append(want, Leader{Value: "10.0.0.3", Token: ec.Token(), Label: "c"})
	check()

	// c proclaims: the observers learn the new value before Proclaim
	// returns, with the same token.
	if err := ec.Proclaim(ctx, "10.0.0.4"); err != nil {
		t.Fatal(err)
	}
	want = append(want, Leader{Value: "10.0.0.4", Token: ec.Token(), Label: "c"})
	check()
	if got := srv.Snapshot(func(n string) bool { return n == "db" }); len(got) != 1 || got[0].Watchers != 2 {
		t.Fatalf("watchers of db: %+v, want the two observers'", got)
	}
	if l, err := NewElection(sb, "db").Leader(ctx); err != nil || l.Value != "10.0.0.4" || l.Token != ec.Token() {
		t.Fatalf("Leader: %+v, %v", l, err)
	}
}

// Leader with nobody holding the name is ErrNoLeader; Resign without
// leading is a no-op; a Campaign whose ctx ends leaves the queue.
func TestElectionNoLeader(t *testing.T) {
	addr, srv := startServerSrv(t)
	ctx := t.Context()
	s := electionSession(t, addr, "", nil)
	e := NewElection(s, "svc")
	if _, err := e.Leader(ctx); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("Leader: %v, want ErrNoLeader", err)
	}
	if err := e.Resign(ctx); err != nil {
		t.Fatalf("Resign without leading: %v", err)
	}
	if err := e.Proclaim(ctx, "v"); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("Proclaim without leading: %v", err)
	}
	if err := e.Campaign(ctx, "one"); err != nil {
		t.Fatal(err)
	}
	other := NewElection(electionSession(t, addr, "", nil), "svc")
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- other.Campaign(cctx, "two") }()
	waitWaiters(t, srv, "svc", 1)
	cancel()
	if err := wait(t, done); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Campaign: %v", err)
	}
	waitWaiters(t, srv, "svc", 0)
	if err := e.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Leader(ctx); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("Leader after Resign: %v, want ErrNoLeader", err)
	}
	if e.Token() != 0 || e.Claim() != nil {
		t.Fatalf("after Resign: token %d", e.Token())
	}
	// Observe delivers nothing while nobody leads, and closes its
	// channel when its ctx ends, ending its watch.
	deadline := time.Now().Add(fakeTimeout)
	for srv.Watches() != 0 && time.Now().Before(deadline) { // Leader's watch, released without a wait
		time.Sleep(5 * time.Millisecond)
	}
	octx, ocancel := context.WithCancel(ctx)
	obs := other.Observe(octx)
	for srv.Watches() != 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	ocancel()
	select {
	case l, ok := <-obs:
		if ok {
			t.Fatalf("Observe delivered %+v with no leader", l)
		}
	case <-time.After(fakeTimeout):
		t.Fatal("Observe's channel open after its ctx ended")
	}
	for srv.Watches() != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := srv.Watches(); n != 0 {
		t.Fatalf("%d watches left after Observe ended", n)
	}
}
