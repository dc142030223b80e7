package locktable_test

import (
	"slices"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/locktable"
)

// TestViews: Names lists the held locks, SessionInfos counts each
// session's held and waiting claims (first claim and the others), and
// OldestQueued follows the head of the oldest queue as claims come and go.
func TestViews(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tb := locktable.New(&locktable.CounterTokens{})
	open := func(id locktable.SessionID, label string) {
		if err := tb.Open(t0, id, locktable.SessionParams{Lease: time.Minute, Label: label, Peer: locktable.Peer{Addr: label}}); err != nil {
			t.Fatal(err)
		}
	}
	claim := func(at time.Duration, s locktable.SessionID, c locktable.ClaimID, name string) {
		if _, _, err := tb.Claim(t0.Add(at), s, c, locktable.ClaimRequest{Name: name, Mode: locktable.Exclusive}); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := tb.OldestQueued(); ok || len(tb.Names()) != 0 || len(tb.SessionInfos()) != 0 {
		t.Fatal("an empty table has views")
	}
	open(1, "one")
	open(2, "two")
	open(3, "idle")
	claim(0, 1, 1, "a")
	claim(0, 1, 2, "b")
	claim(1*time.Second, 2, 7, "b") // waits from t0+1s
	claim(2*time.Second, 2, 8, "a") // waits from t0+2s
	claim(3*time.Second, 2, 9, "c")

	names := tb.Names()
	slices.Sort(names)
	if !slices.Equal(names, []string{"a", "b", "c"}) {
		t.Errorf("Names = %v", names)
	}
	infos := tb.SessionInfos()
	slices.SortFunc(infos, func(a, b locktable.SessionInfo) int { return int(a.ID) - int(b.ID) })
	want := []struct {
		label         string
		held, waiting int
	}{{"one", 2, 0}, {"two", 1, 2}, {"idle", 0, 0}}
	if len(infos) != len(want) {
		t.Fatalf("SessionInfos = %+v", infos)
	}
	for i, w := range want {
		x := infos[i]
		if x.Label != w.label || x.Peer.Addr != w.label || x.Held != w.held || x.Waiting != w.waiting || x.Lease != time.Minute || x.V1 {
			t.Errorf("session %d = %+v, want %s holding %d, waiting %d", i+1, x, w.label, w.held, w.waiting)
		}
	}
	if at, ok := tb.OldestQueued(); !ok || !at.Equal(t0.Add(time.Second)) {
		t.Errorf("OldestQueued = %v %v, want t0+1s", at, ok)
	}
	// b is released: its waiter (t0+1s) is granted; the oldest is now t0+2s.
	if _, err := tb.Release(t0.Add(4*time.Second), locktable.Key{Session: 1, Claim: 2}); err != nil {
		t.Fatal(err)
	}
	if at, ok := tb.OldestQueued(); !ok || !at.Equal(t0.Add(2*time.Second)) {
		t.Errorf("OldestQueued after a promotion = %v %v, want t0+2s", at, ok)
	}
	tb.CloseSession(t0.Add(5*time.Second), 1, locktable.ReasonGraceful)
	if _, ok := tb.OldestQueued(); ok {
		t.Error("OldestQueued with nobody waiting")
	}
}
