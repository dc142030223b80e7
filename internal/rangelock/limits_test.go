package rangelock_test

import (
	"errors"
	"testing"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/internal/rangelock"
)

// Each limit refuses the request past it with its own error and changes
// nothing: the session's other requests, and other sessions, go on.
func TestLimits(t *testing.T) {
	table := rangelock.New(&locktable.CounterTokens{})
	table.SetLimits(rangelock.Limits{WaitingPerSession: 3, WaitingPerOwner: 2, OwnersPerSession: 4})
	tag := uint64(0)
	set := func(o rangelock.Owner, b uint64, wait bool) (rangelock.Answer, error) {
		tag++
		ans, _, err := table.Set(epoch, rangelock.Request{Key: "x", NS: px, Owner: o, Type: wr, Range: rng(b, b), Wait: wait, Tag: tag})
		return ans, err
	}
	own := func(id int) rangelock.Owner { return rangelock.Owner{Session: 1, ID: rangelock.OwnerID(id)} }
	if _, err := set(ownD, 0, false); err != nil { // D (session 3) holds byte 0
		t.Fatal(err)
	}
	for _, w := range []struct {
		o    rangelock.Owner
		want error
	}{
		{own(1), nil}, {own(1), nil}, {own(1), rangelock.ErrOwnerWaiting},
		{own(2), nil}, {own(3), rangelock.ErrSessionWaiting},
	} {
		ans, err := set(w.o, 0, true)
		if !errors.Is(err, w.want) || err == nil && ans.State != rangelock.Waiting {
			t.Fatalf("%v waiting: %v, %v; want %v", w.o, ans.State, err, w.want)
		}
	}
	// Owners that hold count too: owners 1 and 2 wait, 3 and 4 may
	// hold, a fifth may not even try.
	for _, o := range []rangelock.Owner{own(3), own(4)} {
		if _, err := set(o, 10+uint64(o.ID), false); err != nil {
			t.Fatalf("%v: %v", o, err)
		}
	}
	if _, err := set(own(5), 20, false); !errors.Is(err, rangelock.ErrOwners) {
		t.Fatalf("a fifth owner: %v, want ErrOwners", err)
	}
	// An owner the session has already is not new.
	if ans, err := set(own(4), 21, false); err != nil || ans.State != rangelock.Granted {
		t.Fatalf("owner 4 again: %v, %v", ans.State, err)
	}
	if n := table.Counts(); n.Waiters != 3 || n.Ranges != 4 {
		t.Fatalf("counts %+v after the refusals, want 3 waiters and 4 ranges", n)
	}
	// Another session is not limited by session 1's count.
	if ans, err := set(ownC, 0, true); err != nil || ans.State != rangelock.Waiting {
		t.Fatalf("C waiting: %v, %v", ans.State, err)
	}
	// Once a waiting request ends, the session may wait again.
	if _, err := table.Cancel(epoch, 1, 1+1); err != nil {
		t.Fatal(err)
	}
	if ans, err := set(own(3), 0, true); err != nil || ans.State != rangelock.Waiting {
		t.Fatalf("after a cancel: %v, %v", ans.State, err)
	}
	checkInvariants(t, table)
}
