package rangelock_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/batonlock/baton/internal/rangelock"
)

// TestHandOver takes a key's state out of one table, installs its held
// ranges in another under a stand-in session, and gives them to the
// session that continues there: the ranges are exactly the ones held,
// the waiters are answered by the caller, other keys stay, and the
// moved ranges conflict as before at every step.
func TestHandOver(t *testing.T) {
	old := newBench(t)
	old.set("k", rangelock.POSIX, ownA, rangelock.Write, rng(0, 9), false, rangelock.Granted)
	old.set("k", rangelock.POSIX, ownB, rangelock.Read, rng(20, 29), false, rangelock.Granted)
	old.set("k", rangelock.Flock, ownC, rangelock.Read, rangelock.Whole, false, rangelock.Granted)
	old.set("k", rangelock.POSIX, ownD, rangelock.Write, rng(5, 6), true, rangelock.Waiting)
	old.set("other", rangelock.POSIX, ownD, rangelock.Write, rng(0, 0), false, rangelock.Granted)

	held, waiting := old.table.TakeKeys(func(key string) bool { return key == "k" })
	if len(held) != 3 {
		t.Fatalf("held = %v, want 3 ranges", held)
	}
	if len(waiting) != 1 || waiting[0].Owner != ownD || waiting[0].Key != "k" {
		t.Fatalf("waiting = %v, want ownD's request on k", waiting)
	}
	if got := old.table.Holders("k", rangelock.POSIX); got != nil {
		t.Fatalf("old table still holds %v", got)
	}
	if c := old.table.Counts(); c.Ranges != 1 || c.Waiters != 0 || c.Files != 1 {
		t.Fatalf("old table counts %+v, want only other's range", c)
	}

	// One stand-in per session that held them.
	standIn := func(sid rangelock.SessionID) rangelock.SessionID { return 1<<63 | sid }
	next := newBench(t)
	for _, kl := range held {
		kl.Lock.Owner.Session = standIn(kl.Lock.Owner.Session)
		if err := next.table.Install(kl); err != nil {
			t.Fatalf("install %v: %v", kl, err)
		}
	}
	// While the stand-in holds them, they conflict with everyone.
	next.set("k", rangelock.POSIX, ownD, rangelock.Read, rng(9, 9), false, rangelock.Conflict)
	next.set("k", rangelock.Flock, ownD, rangelock.Write, rangelock.Whole, false, rangelock.Conflict)
	if err := next.table.Install(rangelock.KeyLock{Key: "k", NS: rangelock.POSIX,
		Lock: rangelock.Lock{Owner: ownD, Type: rangelock.Write, Range: rng(0, 0)}}); !errors.Is(err, rangelock.ErrConflict) {
		t.Fatalf("a conflicting install: %v, want ErrConflict", err)
	}

	if n := next.table.MoveSession(standIn(1), 1, "k"); n != 2 {
		t.Fatalf("moved %d ranges to session 1, want 2", n)
	}
	if n := next.table.MoveSession(standIn(2), 2, "k"); n != 1 {
		t.Fatalf("moved %d ranges to session 2, want 1", n)
	}
	if n := next.table.MoveSession(standIn(2), 2, "k"); n != 0 {
		t.Fatalf("moved %d ranges a second time", n)
	}
	want := []rangelock.Lock{{Owner: ownA, Type: rangelock.Write, Range: rng(0, 9)}, {Owner: ownB, Type: rangelock.Read, Range: rng(20, 29)}}
	if got := next.table.Holders("k", rangelock.POSIX); !slices.Equal(got, want) {
		t.Fatalf("holders after the move: %v, want %v", got, want)
	}
	// The owners hold them as their own: A extends its lock, C converts,
	// D still conflicts, and A's unlock lets D in.
	next.set("k", rangelock.POSIX, ownA, rangelock.Write, rng(0, 12), false, rangelock.Granted)
	next.set("k", rangelock.POSIX, ownD, rangelock.Write, rng(10, 10), false, rangelock.Conflict)
	next.set("k", rangelock.Flock, ownC, rangelock.Read, rangelock.Whole, false, rangelock.Granted)
	if _, err := next.table.Unlock(next.now, "k", rangelock.POSIX, ownA, rangelock.Whole); err != nil {
		t.Fatal(err)
	}
	next.set("k", rangelock.POSIX, ownD, rangelock.Write, rng(10, 10), false, rangelock.Granted)
	if c := next.table.Counts(); c.Ranges != 3 {
		t.Fatalf("counts %+v, want B's, C's and D's ranges", c)
	}
	res := next.table.CloseSession(next.now, 1)
	if len(res.Grants) != 0 || next.table.Counts().Ranges != 2 {
		t.Fatalf("closing session 1: %+v, counts %+v", res, next.table.Counts())
	}
}
