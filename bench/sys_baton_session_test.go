package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton"
	batonserver "github.com/batonlock/baton/server"
)

// startInProcess serves a real baton server on 127.0.0.1 port 0 for
// the test.
func startInProcess(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &batonserver.Server{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-done
	})
	return ln.Addr().String()
}

// The capacity pool puts up to sessionCapacityClaims claims on each
// session, and every claim it hands out is held exclusively until the
// pool closes its sessions.
func TestSessionCapacityPool(t *testing.T) {
	addr := startInProcess(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := 2*sessionCapacityClaims + 5
	dial, closeAll, sessions, err := batonSessionPool(ctx, addr, n)
	if err != nil {
		t.Fatal(err)
	}
	if sessions != 3 {
		t.Fatalf("%d claims on %d sessions, want 3", n, sessions)
	}
	perSession := map[*baton.Session]int{}
	for i := range n {
		l, err := dial(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.lock(ctx, fmt.Sprintf("cap-%d", i)); err != nil {
			t.Fatalf("claim %d: %v", i, err)
		}
		l.close() // a pooled session stays open
		perSession[l.(*sessionLocker).s]++
	}
	for s, c := range perSession {
		if c > sessionCapacityClaims {
			t.Errorf("session %d carries %d claims, more than %d", s.ID(), c, sessionCapacityClaims)
		}
	}
	other, err := openSession(ctx, addr, clientOpts{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	for _, name := range []string{"cap-0", fmt.Sprintf("cap-%d", n-1)} {
		if _, err := other.TryAcquire(ctx, name, baton.Exclusive); !errors.Is(err, baton.ErrBusy) {
			t.Fatalf("TryAcquire(%s) while the pool holds it: %v, want ErrBusy", name, err)
		}
	}
	closeAll()
	// Closing the sessions released their claims: a waiting claim is
	// granted.
	cl, err := other.Acquire(ctx, "cap-0", baton.Exclusive)
	if err != nil {
		t.Fatalf("Acquire after the pool closed: %v", err)
	}
	cl.Release(ctx)
}

// A baton-session locker takes an exclusive claim: a second worker's
// lock waits until the first releases.
func TestSessionLockerExclusive(t *testing.T) {
	addr := startInProcess(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := batonSessionSystem()
	a, err := s.dial(ctx, addr, clientOpts{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	b, err := s.dial(ctx, addr, clientOpts{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	h, err := a.lock(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		h2, err := b.lock(ctx, "x")
		if err == nil {
			err = h2.unlock()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("second worker got the lock while it was held (err %v)", err)
	case <-time.After(100 * time.Millisecond):
	}
	if err := h.unlock(); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

// The results page compares baton-session with every other system in a
// table of its own, as system ÷ baton-session.
func TestSessionTable(t *testing.T) {
	res := &results{
		Meta:        meta{Plan: newPlan(true)},
		Uncontended: map[string]*latency{"baton": {N: 1, P50us: 200, P99us: 400}, sessionName: {N: 1, P50us: 100, P99us: 200}, "redis": {N: 1, P50us: 150, P99us: 300}},
		Handover:    map[string]*latency{}, Throughput: map[string]*throughputResult{}, ThroughputHot: map[string]*throughputResult{},
		DeadKill: map[string]*deadResult{}, DeadStop: map[string]*deadResult{},
		Capacity: map[string][]*capPoint{sessionName: {{Target: 1000000, Held: 1000000, Sessions: 1000, RSSKiB: 400 << 10, IdleKiB: 10 << 10, PerLockBytes: 409, ClientKiB: 550 << 10, Stop: "target reached"}}},
	}
	md := markdown(res)
	for _, want := range []string{
		"| metric | TCP floor | baton | baton-session | redis |",
		"| uncontended acquire+release, p50 | | 200 µs | 100 µs (0.50×) | 150 µs (0.75×) |",
		"| metric | baton-session | baton | redis |",
		"| uncontended acquire+release, p50 | 100 µs | 200 µs (2.00×) | 150 µs (1.50×) |",
		"| baton-session | 1000000 | 1000000 | 1000 | 400 MiB |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("results.md lacks %q:\n%s", want, md)
		}
	}
}
