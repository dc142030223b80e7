package rangelock_test

import (
	"reflect"
	"testing"

	"github.com/batonlock/baton/internal/rangelock"
)

// TestReleasedReports checks that every operation that ends held bytes
// reports it once per owner and key, with the span it ended, so that a
// server can audit releases; and that one ending nothing reports none.
func TestReleasedReports(t *testing.T) {
	b := newBench(t)
	P, F := rangelock.POSIX, rangelock.Flock
	R, W := rangelock.Read, rangelock.Write
	b.set("f", P, ownA, W, rng(0, 9), false, rangelock.Granted)
	b.set("f", P, ownA, R, rng(20, 29), false, rangelock.Granted)
	b.set("f", P, ownA, W, rng(40, 49), false, rangelock.Granted)
	b.set("g", P, ownA, R, rng(0, 0), false, rangelock.Granted)
	b.set("f", F, ownC, W, rangelock.Whole, false, rangelock.Granted)

	rel := func(res rangelock.Result) []rangelock.Released {
		t.Helper()
		return res.Released
	}
	want := func(what string, got []rangelock.Released, want ...rangelock.Released) {
		t.Helper()
		if !reflect.DeepEqual(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Fatalf("%s: released %+v, want %+v", what, got, want)
		}
	}

	// An unlock of bytes the owner does not hold ends nothing.
	res, err := b.table.Unlock(b.now, "f", P, ownA, rng(10, 19))
	if err != nil {
		t.Fatal(err)
	}
	want("unlock of a hole", rel(res))
	// One unlock over three ranges is one record: the held span it cut,
	// write since it ended write bytes.
	res, _ = b.table.Unlock(b.now, "f", P, ownA, rng(5, 44))
	want("unlock", rel(res), rangelock.Released{Key: "f", NS: P, Owner: ownA, Type: W, Range: rng(5, 44), Ranges: 3, Cause: rangelock.CauseUnlock})
	res, _ = b.table.Unlock(b.now, "f", P, ownA, rng(0, 0))
	want("unlock of one write byte", rel(res), rangelock.Released{Key: "f", NS: P, Owner: ownA, Type: W, Range: rng(0, 0), Ranges: 1, Cause: rangelock.CauseUnlock})

	// A flock conversion drops the old lock first.
	_, res = b.set("f", F, ownC, R, rangelock.Whole, false, rangelock.Granted)
	want("convert", rel(res), rangelock.Released{Key: "f", NS: F, Owner: ownC, Type: W, Range: rangelock.Whole, Ranges: 1, Cause: rangelock.CauseConvert})
	// The same type again changes nothing.
	_, res = b.set("f", F, ownC, R, rangelock.Whole, false, rangelock.Granted)
	want("flock relock", rel(res))

	// Release-owner: what is left of A on f (1..4 and 45..49).
	res, _ = b.table.ReleaseOwner(b.now, "f", P, ownA)
	want("release", rel(res), rangelock.Released{Key: "f", NS: P, Owner: ownA, Type: W, Range: rng(1, 49), Ranges: 2, Cause: rangelock.CauseRelease})
	res, _ = b.table.ReleaseOwner(b.now, "f", P, ownA)
	want("release of nothing", rel(res))

	// Closing a session reports each owner's lock on each key, owner by
	// owner and each owner's keys in order.
	b.set("f", P, ownB, R, rng(7, 8), false, rangelock.Granted)
	b.set("f", P, ownD, W, rng(0, 99), true, rangelock.Waiting)
	res = b.table.CloseSession(b.now, 1)
	want("close", rel(res),
		rangelock.Released{Key: "g", NS: P, Owner: ownA, Type: R, Range: rng(0, 0), Ranges: 1, Cause: rangelock.CauseSession},
		rangelock.Released{Key: "f", NS: P, Owner: ownB, Type: R, Range: rng(7, 8), Ranges: 1, Cause: rangelock.CauseSession})
	if len(res.Grants) != 1 || res.Grants[0].Owner != ownD {
		t.Fatalf("close: grants %+v, want D's", res.Grants)
	}
	if c := b.table.Counts(); c.Ranges != 2 {
		t.Fatalf("counts after close: %+v, want D's range and C's flock", c)
	}
}
