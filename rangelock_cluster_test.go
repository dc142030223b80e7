package baton

import (
	"errors"
	"testing"
	"time"
)

// TestSessionRangeNotServedNow: a cluster node that cannot serve a key's
// range locks for now (here its Route refuses the key) answers each
// range operation ErrRangeUnavailable, and a waiting SetRange asks again
// until the key is served, then holds it; the session stays usable.
func TestSessionRangeNotServedNow(t *testing.T) {
	nodes := startRing(t, "n1")
	n1 := nodes["n1"]
	n1.mu.Lock()
	n1.refuse = map[string]bool{"f": true}
	n1.mu.Unlock()
	s := openReal(t, n1.addr, 5*time.Second, "host-a")
	ctx := t.Context()
	l := RangeLock{Key: "f", Owner: 1, Type: WriteLock, End: ToEnd}
	if _, err := s.SetRange(ctx, l, false); !errors.Is(err, ErrRangeUnavailable) {
		t.Fatalf("SetRange on a key not served: %v, want ErrRangeUnavailable", err)
	}
	if _, _, err := s.QueryRange(ctx, l); !errors.Is(err, ErrRangeUnavailable) {
		t.Fatalf("QueryRange on a key not served: %v, want ErrRangeUnavailable", err)
	}
	if err := s.UnlockRange(ctx, l); !errors.Is(err, ErrRangeUnavailable) {
		t.Fatalf("UnlockRange on a key not served: %v, want ErrRangeUnavailable", err)
	}
	const servedAfter = 300 * time.Millisecond
	start := time.Now()
	time.AfterFunc(servedAfter, func() {
		n1.mu.Lock()
		n1.refuse = nil
		n1.mu.Unlock()
	})
	tok, err := s.SetRange(ctx, l, true)
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
