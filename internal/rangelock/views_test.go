package rangelock_test

import (
	"slices"
	"testing"

	"github.com/batonlock/baton/internal/rangelock"
)

// TestViews: an operator's view of a key copies at most the page asked
// for while counting everything; per-session counts, owners and waiting
// requests on a key are what the table holds.
func TestViews(t *testing.T) {
	b := newBench(t)
	P, W, R := rangelock.POSIX, rangelock.Write, rangelock.Read
	for i := uint64(0); i < 5; i++ {
		b.set("f", P, ownA, W, rng(10*i, 10*i), false, rangelock.Granted)
	}
	b.set("f", P, ownB, R, rng(100, 109), false, rangelock.Granted)
	b.set("f", P, ownC, W, rng(0, 0), true, rangelock.Waiting)
	b.set("f", P, ownD, W, rng(100, 100), true, rangelock.Waiting)
	b.set("g", rangelock.Flock, ownC, W, rangelock.Whole, false, rangelock.Granted)

	v, ok := b.table.View("f", P, 2, 1)
	if !ok || v.HeldTotal != 6 || v.WaitingTotal != 2 || len(v.Holders) != 2 || len(v.Waiters) != 1 ||
		v.Holders[1].Range != rng(10, 10) || v.Waiters[0].Owner != ownC {
		t.Fatalf("view of f (2 held, 1 waiting): %+v", v)
	}
	if v, _ := b.table.View("f", P, 0, 0); len(v.Holders)+len(v.Waiters) != 0 || v.HeldTotal != 6 {
		t.Errorf("an empty page: %+v", v)
	}
	if _, ok := b.table.View("f", rangelock.Flock, 10, 10); ok {
		t.Error("f has no flock locks, yet a view")
	}
	keys := b.table.Keys()
	if len(keys) != 2 {
		t.Errorf("keys %v, want f (posix) and g (flock)", keys)
	}
	c := b.table.SessionCounts()
	if c[1] != (rangelock.SessionCount{Held: 6}) || c[2] != (rangelock.SessionCount{Held: 1, Waiting: 1}) || c[3] != (rangelock.SessionCount{Waiting: 1}) {
		t.Errorf("session counts %+v", c)
	}
	on := b.table.CountsOn("f", P)
	if len(on) != 3 || on[0].Session != 1 || on[0].Held != 6 || on[1].Waiting != 1 || on[1].Held != 0 {
		t.Errorf("counts on f %+v", on)
	}
	if s := b.table.SessionsOf("f", P); !slices.Equal(s, []rangelock.SessionID{1, 2, 3}) {
		t.Errorf("sessions on f %v", s)
	}
	if o := b.table.OwnersOn("f", P, 1); !slices.Equal(o, []rangelock.OwnerID{1, 2}) {
		t.Errorf("session 1's owners on f %v", o)
	}
	if w := b.table.WaitingOn("f", P, 2); len(w) != 1 || w[0].Owner != ownC || w[0].Range != rng(0, 0) {
		t.Errorf("session 2's waiting requests on f %+v", w)
	}
	if w := b.table.WaitingOn("g", rangelock.Flock, 2); len(w) != 0 {
		t.Errorf("session 2 waits on g: %+v", w)
	}
}
