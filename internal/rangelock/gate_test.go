package rangelock_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/rangelock"
)

// TestGate: before the gate nothing is granted. A free request waits in
// its file's queue, with Wait or without (one without is granted for
// certain when the gate opens, its grant marked NoWait); a later request
// on the same bytes queues behind the earlier one whatever its
// connection, or without Wait is answered Conflict naming it; OpenGate
// grants the queues in arrival order, file by file. A server in its first second keeps its requests' order that way
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
	b.set("g", rangelock.POSIX, ownC, rangelock.Read, rng(0, 9), false, rangelock.Waiting)
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
	var got []string
	for _, g := range res.Grants {
		b.token(g.Token)
		got = append(got, fmt.Sprintf("%s:%v:%v", g.Key, g.Owner, g.NoWait))
	}
	want := []string{fmt.Sprintf("e:%v:false", ownC), fmt.Sprintf("f:%v:false", ownA), fmt.Sprintf("g:%v:true", ownC)}
	if !slices.Equal(got, want) {
		t.Fatalf("OpenGate granted %v, want %v (files in key order; D stays behind A)", got, want)
	}
	if res := b.table.OpenGate(gate.Add(time.Second)); len(res.Grants) != 0 {
		t.Fatalf("a second OpenGate granted %+v", res.Grants)
	}
	b.now = gate
	b.set("h", rangelock.POSIX, ownC, rangelock.Read, rng(0, 9), false, rangelock.Granted)
}
