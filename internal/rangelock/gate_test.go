package rangelock_test

import (
	"testing"
	"time"

	"github.com/batonlock/baton/internal/rangelock"
)

// TestGate: before the gate nothing is granted. A free request with Wait
// waits in its file's queue, one without is answered Conflict; a later
// request on the same bytes queues behind the earlier one whatever its
// connection, and OpenGate grants the queues in arrival order, file by
// file. A server in its first second keeps its requests' order that way
// (a blocking flock through one mount, then a flock -n through another).
func TestGate(t *testing.T) {
	b := newBench(t)
	gate := b.now.Add(time.Second)
	b.table.SetGate(gate)
	b.set("f", rangelock.Flock, ownA, rangelock.Write, rangelock.Whole, true, rangelock.Waiting)
	ans, _ := b.set("f", rangelock.Flock, ownC, rangelock.Write, rangelock.Whole, false, rangelock.Conflict)
	if !ans.Conflict.Waiting || ans.Conflict.Owner != ownA {
		t.Fatalf("a no-wait request behind a waiting one names %+v, want A's waiting request", ans.Conflict)
	}
	ans, _ = b.set("g", rangelock.POSIX, ownC, rangelock.Read, rng(0, 9), false, rangelock.Conflict)
	if ans.Conflict != (rangelock.Lock{}) {
		t.Fatalf("a free no-wait request before the gate names %+v, want no lock", ans.Conflict)
	}
	b.set("f", rangelock.Flock, ownD, rangelock.Write, rangelock.Whole, true, rangelock.Waiting)
	b.set("e", rangelock.POSIX, ownC, rangelock.Write, rng(0, 0), true, rangelock.Waiting)
	if res := b.table.OpenGate(gate.Add(-time.Nanosecond)); len(res.Grants) != 0 {
		t.Fatalf("grants before the gate: %+v", res.Grants)
	}
	// An unlock before the gate promotes nothing either.
	if res, err := b.table.Unlock(b.now, "f", rangelock.Flock, ownB, rangelock.Whole); err != nil || len(res.Grants) != 0 {
		t.Fatalf("unlock before the gate: %+v, %v", res.Grants, err)
	}
	res := b.table.OpenGate(gate)
	var got []rangelock.Owner
	for _, g := range res.Grants {
		b.token(g.Token)
		got = append(got, g.Owner)
	}
	if want := []rangelock.Owner{ownC, ownA}; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("OpenGate granted %v, want %v (file e, then f's head; D stays behind A)", got, want)
	}
	if res := b.table.OpenGate(gate.Add(time.Second)); len(res.Grants) != 0 {
		t.Fatalf("a second OpenGate granted %+v", res.Grants)
	}
	b.now = gate
	b.set("g", rangelock.POSIX, ownC, rangelock.Read, rng(0, 9), false, rangelock.Granted)
}
