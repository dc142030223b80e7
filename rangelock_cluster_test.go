package baton

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestSessionRangeUnavailableOnClusterNode: a cluster node serves no
// range locks: every range operation of a Session connected to one
// fails with ErrRangeUnavailable, a waiting set withdrawn by its context
// included, and the session stays usable for claims.
func TestSessionRangeUnavailableOnClusterNode(t *testing.T) {
	nodes := startRing(t, "n1")
	s := openReal(t, nodes["n1"].addr, 5*time.Second, "host-a")
	ctx := t.Context()
	l := RangeLock{Key: "f", Owner: 1, Type: WriteLock, End: ToEnd}
	if _, err := s.SetRange(ctx, l, false); !errors.Is(err, ErrRangeUnavailable) {
		t.Fatalf("SetRange on a cluster node: %v, want ErrRangeUnavailable", err)
	}
	if _, err := s.SetRange(ctx, RangeLock{Key: "f", Flock: true, Owner: 2, Type: ReadLock}, true); !errors.Is(err, ErrRangeUnavailable) {
		t.Fatalf("waiting flock SetRange on a cluster node: %v, want ErrRangeUnavailable", err)
	}
	if _, _, err := s.QueryRange(ctx, l); !errors.Is(err, ErrRangeUnavailable) {
		t.Fatalf("QueryRange on a cluster node: %v, want ErrRangeUnavailable", err)
	}
	if err := s.UnlockRange(ctx, l); !errors.Is(err, ErrRangeUnavailable) {
		t.Fatalf("UnlockRange on a cluster node: %v, want ErrRangeUnavailable", err)
	}
	if err := s.ReleaseOwner(ctx, "f", true, 2); !errors.Is(err, ErrRangeUnavailable) {
		t.Fatalf("ReleaseOwner on a cluster node: %v, want ErrRangeUnavailable", err)
	}
	// A wait whose context has ended sends a cancel, which a cluster
	// node does not answer (an answer would be a second one to the
	// set's req, and end the session); the set's own answer ends it.
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.SetRange(done, l, true); !errors.Is(err, ErrRangeUnavailable) {
		t.Fatalf("cancelled waiting SetRange on a cluster node: %v", err)
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
