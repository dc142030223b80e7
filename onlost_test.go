package baton

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// lostCalls records Config.OnLost calls, and whether the claim's Lost
// channel was already closed at each: it must not be (the hook comes
// first, before anything can hand the lock on).
type lostCalls struct {
	mu    sync.Mutex
	calls []string
	late  bool
	lost  func() <-chan struct{}
}

func (lc *lostCalls) hook(name string, token uint64, cause error) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	lc.calls = append(lc.calls, name)
	if token == 0 || cause == nil {
		lc.calls = append(lc.calls, "bad call")
	}
	if lc.lost != nil {
		select {
		case <-lc.lost():
			lc.late = true
		default:
		}
	}
}

// Config.OnLost is called once for a held lock that is lost (an ERROR
// from the server), synchronously, before Lost is closed; not for a
// release.
func TestOnLostLock(t *testing.T) {
	addr, srv := startServerSrv(t)
	lc := &lostCalls{}
	c := New(Config{Address: addr, OnLost: lc.hook})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kept, err := c.Acquire(ctx, "kept", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	kept.Release(context.Background())
	l, err := c.Acquire(ctx, "x", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	lc.mu.Lock()
	lc.lost = l.Lost
	lc.mu.Unlock()
	if err := srv.ForceReleaseBy("x", server.Peer{}); err != nil {
		t.Fatal(err)
	}
	<-l.Lost()
	l.Release(context.Background())
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if len(lc.calls) != 1 || lc.calls[0] != "x" || lc.late {
		t.Errorf("OnLost calls %v (after Lost was closed: %v); want one for x, before", lc.calls, lc.late)
	}
}

// The same for a version 2 claim revoked by the server.
func TestOnLostClaim(t *testing.T) {
	addr, srv := startServerSrv(t)
	lc := &lostCalls{}
	c := New(Config{Address: addr, OnLost: lc.hook})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := c.OpenSession(ctx, SessionOptions{Lease: 5 * time.Second, Label: "onlost"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cl, err := s.Acquire(ctx, "a", Exclusive)
	if err != nil {
		t.Fatal(err)
	}
	lc.mu.Lock()
	lc.lost = cl.Lost
	lc.mu.Unlock()
	if err := srv.ForceReleaseClaimBy("a", server.ClaimRef{Token: cl.Token()}, server.Peer{}); err != nil {
		t.Fatal(err)
	}
	<-cl.Lost()
	if !errors.Is(cl.Err(), protocol.ErrClosedByAdmin) {
		t.Fatalf("claim: %v", cl.Err())
	}
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if len(lc.calls) != 1 || lc.calls[0] != "a" || lc.late {
		t.Errorf("OnLost calls %v (after Lost was closed: %v); want one for a, before", lc.calls, lc.late)
	}
}
