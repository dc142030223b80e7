package clustercore

import (
	"bytes"
	"slices"
	"testing"

	"github.com/batonlock/baton/internal/rangelock"
	"github.com/batonlock/baton/protocol"
)

func TestRangeOwnerOf(t *testing.T) {
	f := protocol.Frame{Op: protocol.RangeSet, Name: "k", Owner: 7, Flags: protocol.RangeFlock | protocol.RangeWait}
	if got := RangeOwnerOf(f); got != (RangeOwner{Key: "k", Flock: true, Owner: 7}) {
		t.Errorf("flock: %+v", got)
	}
	f.Flags = protocol.RangeWait
	if got := RangeOwnerOf(f); got != (RangeOwner{Key: "k", Owner: 7}) {
		t.Errorf("posix: %+v", got)
	}
}

// The releases go out in key, namespace (POSIX first) and owner order,
// whatever the order they are given in.
func TestAppendRangeReleases(t *testing.T) {
	owners := []RangeOwner{
		{Key: "b", Owner: 1},
		{Key: "a", Flock: true, Owner: 1},
		{Key: "a", Owner: 9},
		{Key: "a", Owner: 2},
	}
	rel := func(key string, flock bool, owner uint64) []byte {
		var flags uint8
		if flock {
			flags = protocol.RangeFlock
		}
		return protocol.AppendRange(nil, protocol.Frame{Op: protocol.RangeRelease, Flags: flags, Owner: owner, Name: key})
	}
	want := slices.Concat([]byte("x"), rel("a", false, 2), rel("a", false, 9), rel("a", true, 1), rel("b", false, 1))
	for _, order := range [][]int{{0, 1, 2, 3}, {3, 2, 1, 0}, {1, 3, 0, 2}} {
		var in []RangeOwner
		for _, i := range order {
			in = append(in, owners[i])
		}
		if got := AppendRangeReleases([]byte("x"), in); !bytes.Equal(got, want) {
			t.Errorf("order %v: % x\nwant % x", order, got, want)
		}
	}
	if got := AppendRangeReleases(nil, nil); len(got) != 0 {
		t.Errorf("no owners: % x", got)
	}
}

func TestRangeWaitsOn(t *testing.T) {
	type up struct{ n int }
	u1, u2 := &up{1}, &up{2}
	waits := map[uint32]*up{9: u1, 3: u2, 5: u1, 1: u1}
	if got := RangeWaitsOn(waits, u1); !slices.Equal(got, []uint32{1, 5, 9}) {
		t.Errorf("RangeWaitsOn(u1) = %v, want [1 5 9]", got)
	}
	if len(waits) != 1 || waits[3] != u2 {
		t.Errorf("left %v, want only 3 on u2", waits)
	}
	if got := RangeWaitsOn(waits, u1); got != nil {
		t.Errorf("again: %v", got)
	}
	want := protocol.AppendRangeAnswer(nil, 4, protocol.RangeUnavailable, 0, protocol.Frame{})
	if got := RangeUnavailable(4); !bytes.Equal(got, want) {
		t.Errorf("RangeUnavailable = % x, want % x", got, want)
	}
}

// The client's request on a key whose locks move: unavailable, except
// an unlock or release after a failover, which drops from what is
// re-asserted and goes on to the owner when re-assertions are in flight.
func TestRangeMoveRequest(t *testing.T) {
	lock := func(owner uint64, start, end uint64) rangelock.KeyLock {
		return rangelock.KeyLock{Key: "k", NS: rangelock.POSIX, Lock: rangelock.Lock{
			Owner: rangelock.Owner{Session: 1, ID: rangelock.OwnerID(owner)}, Type: rangelock.Write, Range: rangelock.Range{Start: start, End: end}}}
	}
	release := func(owner uint64) protocol.Frame {
		return protocol.Frame{Op: protocol.RangeRelease, Name: "k", Owner: owner}
	}
	set := protocol.Frame{Op: protocol.RangeSet, Name: "k", Owner: 1, LockType: uint8(rangelock.Write), End: 10}
	cases := []struct {
		name     string
		failover bool
		f        protocol.Frame
		relaying bool
		step     RangeMoveStep
		forget   bool
		left     int
	}{
		{"planned: set", false, set, false, RangeMoveUnavailable, false, 2},
		{"planned: release", false, release(1), false, RangeMoveUnavailable, false, 2},
		{"failover: set", true, set, false, RangeMoveUnavailable, false, 2},
		{"failover: release one", true, release(1), false, RangeMoveDone, false, 1},
		{"failover: release one, relaying", true, release(1), true, RangeMoveRelay, false, 1},
		{"failover: release of none", true, release(5), false, RangeMoveDone, false, 2},
	}
	for _, c := range cases {
		rm := RangeMove{Failover: c.failover, Locks: []rangelock.KeyLock{lock(1, 0, 10), lock(2, 20, 30)}}
		step, forget := rm.Request(c.f, c.relaying)
		if step != c.step || forget != c.forget || len(rm.Locks) != c.left {
			t.Errorf("%s: step %d forget %v left %d; want %d %v %d", c.name, step, forget, len(rm.Locks), c.step, c.forget, c.left)
		}
	}
	// The last lock let go: nothing left to re-assert, unless the
	// owner has re-assertions in flight.
	rm := RangeMove{Failover: true, Locks: []rangelock.KeyLock{lock(1, 0, 10)}}
	if step, forget := rm.Request(release(1), false); step != RangeMoveDone || !forget {
		t.Errorf("last lock: step %d forget %v, want done and forget", step, forget)
	}
	rm = RangeMove{Failover: true, Locks: []rangelock.KeyLock{lock(1, 0, 10)}}
	if step, forget := rm.Request(release(1), true); step != RangeMoveRelay || forget {
		t.Errorf("last lock, relaying: step %d forget %v, want relay and keep", step, forget)
	}
}
