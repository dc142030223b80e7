package baton

import (
	"errors"
	"github.com/batonlock/baton/internal/rangeapi"
	"github.com/batonlock/baton/protocol"
	"testing"
	"time"
)

// TestSessionRangeNotServedNow: a cluster node that cannot serve a key's
// range locks for now (here its Route refuses the key) answers each
// range operation rangeapi.ErrUnavailable, and a waiting SetRange asks again
// until the key is served, then holds it; the session stays usable.
func TestSessionRangeNotServedNow(t *testing.T) {
	nodes := startRing(t, "n1")
	n1 := nodes["n1"]
	n1.mu.Lock()
	n1.refuse = map[string]bool{"f": true}
	n1.mu.Unlock()
	s := openReal(t, n1.addr, 5*time.Second, "host-a")
	ctx := t.Context()
	l := rangeLock{Key: "f", Owner: 1, Type: protocol.LockWrite, End: protocol.MaxRangeEnd}
	if _, err := s.setRangeWait(ctx, l, false); !errors.Is(err, rangeapi.ErrUnavailable) {
		t.Fatalf("SetRange on a key not served: %v, want rangeapi.ErrUnavailable", err)
	}
	if _, _, err := s.queryRange(ctx, l); !errors.Is(err, rangeapi.ErrUnavailable) {
		t.Fatalf("QueryRange on a key not served: %v, want rangeapi.ErrUnavailable", err)
	}
	if err := s.unlockRange(ctx, l); !errors.Is(err, rangeapi.ErrUnavailable) {
		t.Fatalf("UnlockRange on a key not served: %v, want rangeapi.ErrUnavailable", err)
	}
	const servedAfter = 300 * time.Millisecond
	start := time.Now()
	time.AfterFunc(servedAfter, func() {
		n1.mu.Lock()
		n1.refuse = nil
		n1.mu.Unlock()
	})
	tok, err := s.setRangeWait(ctx, l, true)
	if err != nil || tok == 0 {
		t.Fatalf("waiting SetRange: %d, %v", tok, err)
	}
	if d := time.Since(start); d < servedAfter {
		t.Errorf("granted after %v, before the key was served", d)
	}
	c, err := s.Acquire(ctx, "job", Exclusive)
	if err != nil {
		t.Fatalf("claim after the range requests: %v", err)
	}
	if err := c.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Err(); err != nil {
		t.Fatalf("session ended: %v", err)
	}
}
