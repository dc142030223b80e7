package rangelock_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/internal/rangelock"
)

var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// Owners of the scenarios: A and B share session 1, C and D are in
// sessions 2 and 3.
var (
	ownA = rangelock.Owner{Session: 1, ID: 1}
	ownB = rangelock.Owner{Session: 1, ID: 2}
	ownC = rangelock.Owner{Session: 2, ID: 1}
	ownD = rangelock.Owner{Session: 3, ID: 1}
)

type bench struct {
	t     *testing.T
	table *rangelock.Table
	now   time.Time
	tag   uint64
	last  uint64 // the largest token seen
}

func newBench(t *testing.T) *bench {
	return &bench{t: t, table: rangelock.New(&locktable.CounterTokens{}), now: epoch}
}

func rng(start, end uint64) rangelock.Range { return rangelock.Range{Start: start, End: end} }

// set makes a request and checks its answer's state and token order.
func (b *bench) set(key string, ns rangelock.Namespace, o rangelock.Owner, typ rangelock.Type, r rangelock.Range, wait bool, want rangelock.State) (rangelock.Answer, rangelock.Result) {
	b.t.Helper()
	b.now = b.now.Add(time.Millisecond)
	b.tag++
	ans, res, err := b.table.Set(b.now, rangelock.Request{Key: key, NS: ns, Owner: o, Type: typ, Range: r, Wait: wait, Tag: b.tag})
	if err != nil {
		b.t.Fatalf("%v %v %v %v: %v", o, typ, r, key, err)
	}
	if ans.State != want {
		b.t.Fatalf("%v %v %v %v: %v (%v), want %v", o, typ, r, key, ans.State, ans.Conflict, want)
	}
	if ans.State == rangelock.Granted {
		b.token(ans.Token)
	}
	b.grants(res)
	return ans, res
}

func (b *bench) token(tok uint64) {
	b.t.Helper()
	if tok <= b.last {
		b.t.Fatalf("token %d is not above the earlier %d", tok, b.last)
	}
	b.last = tok
}

func (b *bench) grants(res rangelock.Result) {
	b.t.Helper()
	for _, g := range res.Grants {
		b.token(g.Token)
	}
}

func owners(res rangelock.Result) []rangelock.Owner {
	var out []rangelock.Owner
	for _, g := range res.Grants {
		out = append(out, g.Owner)
	}
	return out
}

func sameOwners(t *testing.T, what string, got []rangelock.Owner, want ...rangelock.Owner) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: granted %v, want %v", what, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: granted %v, want %v", what, got, want)
		}
	}
}

const (
	rd = rangelock.Read
	wr = rangelock.Write
	px = rangelock.POSIX
	fl = rangelock.Flock
)

// A reader does not overtake a queued writer, waiters are granted by
// push in FIFO order, and each grant carries a new token.
func TestFIFOAndPush(t *testing.T) {
	b := newBench(t)
	b.set("k", px, ownA, rd, rng(0, 9), false, rangelock.Granted)
	b.set("k", px, ownC, wr, rng(5, 5), true, rangelock.Waiting)
	ans, _ := b.set("k", px, ownD, rd, rng(0, 5), false, rangelock.Conflict)
	if ans.Conflict != (rangelock.Lock{Owner: ownC, Type: wr, Range: rng(5, 5), Waiting: true}) {
		t.Fatalf("the conflict is %v, want C's waiting write", ans.Conflict)
	}
	// A reader that does not overlap the writer goes ahead.
	b.set("k", px, ownD, rd, rng(0, 4), false, rangelock.Granted)
	b.set("k", px, ownD, rd, rng(5, 9), true, rangelock.Waiting)
	res, err := b.table.Unlock(b.now, "k", px, ownA, rng(0, 9))
	if err != nil {
		t.Fatal(err)
	}
	b.grants(res)
	sameOwners(t, "A unlocks", owners(res), ownC)
	if g := res.Grants[0]; g.Tag != 2 || g.Range != rng(5, 5) || g.Type != wr || g.Waited != 3*time.Millisecond {
		t.Fatalf("grant %+v", g)
	}
	res, _ = b.table.Unlock(b.now, "k", px, ownC, rangelock.Whole)
	b.grants(res)
	sameOwners(t, "C unlocks", owners(res), ownD)
	if h := b.table.Holders("k", px); len(h) != 1 || h[0] != (rangelock.Lock{Owner: ownD, Type: rd, Range: rng(0, 9)}) {
		t.Fatalf("holders %v, want D's merged read [0,9]", h)
	}
}

// A downgrade is granted at once even behind a waiting writer, and lets
// readers in, in the same operation.
func TestDowngradeGrants(t *testing.T) {
	b := newBench(t)
	b.set("k", px, ownA, wr, rng(0, 9), false, rangelock.Granted)
	b.set("k", px, ownD, wr, rng(0, 0), true, rangelock.Waiting)
	b.set("k", px, ownC, rd, rng(3, 3), true, rangelock.Waiting)
	_, res := b.set("k", px, ownA, rd, rng(0, 9), false, rangelock.Granted)
	sameOwners(t, "downgrade", owners(res), ownC)
}

// A later waiter's grant can free an earlier one (its own downgrade):
// the table grants both in the same operation.
func TestLaterGrantFreesEarlierWaiter(t *testing.T) {
	b := newBench(t)
	b.set("k", px, ownA, wr, rng(0, 0), false, rangelock.Granted)
	b.set("k", px, ownD, wr, rng(1, 1), false, rangelock.Granted)
	b.set("k", px, ownC, rd, rng(0, 0), true, rangelock.Waiting) // behind A's write
	b.set("k", px, ownA, rd, rng(0, 1), true, rangelock.Waiting) // behind D's write
	res, _ := b.table.Unlock(b.now, "k", px, ownD, rangelock.Whole)
	b.grants(res)
	sameOwners(t, "D unlocks", owners(res), ownA, ownC)
	if n := b.table.Counts(); n.Waiters != 0 {
		t.Fatalf("%d waiters left", n.Waiters)
	}
}

// Two owners each holding what the other wants, on two keys: the second
// waiting request is refused with ErrDeadlock and changes nothing.
func TestDeadlockAcrossKeys(t *testing.T) {
	b := newBench(t)
	b.set("k1", px, ownA, wr, rng(0, 0), false, rangelock.Granted)
	b.set("k2", px, ownC, wr, rng(0, 0), false, rangelock.Granted)
	b.set("k2", px, ownA, wr, rng(0, 0), true, rangelock.Waiting)
	before := b.table.Counts()
	_, _, err := b.table.Set(b.now, rangelock.Request{Key: "k1", NS: px, Owner: ownC, Type: rd, Range: rng(0, 5), Wait: true, Tag: 99})
	if !errors.Is(err, rangelock.ErrDeadlock) {
		t.Fatalf("C waiting for A while A waits for C: %v, want ErrDeadlock", err)
	}
	if after := b.table.Counts(); after != before {
		t.Fatalf("a refused request changed the table: %+v, then %+v", before, after)
	}
	// Not waiting, the same request is a plain conflict.
	b.set("k1", px, ownC, rd, rng(0, 5), false, rangelock.Conflict)
	// A third owner may wait for either: no cycle.
	b.set("k1", px, ownD, rd, rng(0, 0), true, rangelock.Waiting)
	b.set("k2", px, ownD, rd, rng(0, 0), true, rangelock.Waiting)
	// The owner of a waiting request is one node in both namespaces: A
	// holds a flock lock and waits for C; C waiting for A's flock closes
	// the cycle.
	b.set("k3", fl, ownA, wr, rangelock.Whole, false, rangelock.Granted)
	if _, _, err := b.table.Set(b.now, rangelock.Request{Key: "k3", NS: fl, Owner: ownC, Type: rd, Wait: true, Tag: 98}); !errors.Is(err, rangelock.ErrDeadlock) {
		t.Fatalf("C waiting for A's flock: %v, want ErrDeadlock", err)
	}
}

// With FIFO, an owner also waits for earlier conflicting waiters: an
// upgrade behind a writer that waits for the upgrading owner deadlocks.
// Two owners of one session are different nodes.
func TestDeadlockThroughQueue(t *testing.T) {
	b := newBench(t)
	b.set("k", px, ownA, rd, rng(0, 9), false, rangelock.Granted)
	b.set("k", px, ownB, wr, rng(0, 9), true, rangelock.Waiting) // B (A's session) waits for A
	if _, _, err := b.table.Set(b.now, rangelock.Request{Key: "k", NS: px, Owner: ownA, Type: wr, Range: rng(0, 9), Wait: true, Tag: 99}); !errors.Is(err, rangelock.ErrDeadlock) {
		t.Fatalf("A upgrading behind B: %v, want ErrDeadlock", err)
	}
	// A re-lock of what A holds takes nothing B wants: granted at once.
	b.set("k", px, ownA, rd, rng(2, 3), true, rangelock.Granted)
	// No false positive: A waiting for a range B's request does not
	// cover, held by C.
	b.set("k", px, ownC, wr, rng(20, 20), false, rangelock.Granted)
	b.set("k", px, ownA, wr, rng(20, 20), true, rangelock.Waiting)
	// A chain A → C, B → A; C waiting for D closes nothing.
	b.set("k2", px, ownD, wr, rng(0, 0), false, rangelock.Granted)
	b.set("k2", px, ownC, wr, rng(0, 0), true, rangelock.Waiting)
	// D waiting for B closes D → B → A → C → D.
	if _, _, err := b.table.Set(b.now, rangelock.Request{Key: "k", NS: px, Owner: ownD, Type: rd, Range: rng(5, 5), Wait: true, Tag: 98}); !errors.Is(err, rangelock.ErrDeadlock) {
		t.Fatalf("D waiting at the end of a chain back to D: %v, want ErrDeadlock", err)
	}
}

// flock conversion drops the old lock first, as Linux does: a failed
// non-blocking upgrade has lost the shared lock, and a waiting writer
// gets in first.
func TestFlockConversion(t *testing.T) {
	b := newBench(t)
	b.set("k", fl, ownA, rd, rangelock.Whole, false, rangelock.Granted)
	b.set("k", fl, ownC, rd, rangelock.Whole, false, rangelock.Granted)
	b.set("k", fl, ownA, wr, rangelock.Whole, false, rangelock.Conflict)
	if h := b.table.Holders("k", fl); len(h) != 1 || h[0].Owner != ownC {
		t.Fatalf("holders %v, want C alone", h)
	}
	b.set("k", fl, ownA, rd, rangelock.Whole, false, rangelock.Granted)
	b.set("k", fl, ownD, wr, rangelock.Whole, true, rangelock.Waiting)
	b.set("k", fl, ownC, wr, rangelock.Whole, true, rangelock.Waiting) // drops C's shared lock; behind D
	res, _ := b.table.Unlock(b.now, "k", fl, ownA, rangelock.Whole)
	b.grants(res)
	sameOwners(t, "A unlocks", owners(res), ownD)
	// Same type again: granted, nothing changes.
	b.set("k", fl, ownD, wr, rangelock.Whole, false, rangelock.Granted)
}

// Release-owner cancels the owner's waiting requests on the key; Cancel
// and CloseSession let the next waiters through.
func TestReleaseCancelClose(t *testing.T) {
	b := newBench(t)
	b.set("k", px, ownA, wr, rng(0, 0), false, rangelock.Granted)
	b.set("k", px, ownB, wr, rng(9, 9), false, rangelock.Granted)
	b.set("k", px, ownC, wr, rng(0, 0), true, rangelock.Waiting) // tag 3
	b.set("k", px, ownD, wr, rng(0, 9), true, rangelock.Waiting) // tag 4
	res, err := b.table.ReleaseOwner(b.now, "k", px, ownC)
	if err != nil || len(res.Grants) != 0 || len(res.Cancelled) != 1 || res.Cancelled[0].Tag != 3 {
		t.Fatalf("release-owner of waiting C: %+v, %v", res, err)
	}
	if _, err := b.table.Cancel(b.now, 2, 3); !errors.Is(err, rangelock.ErrNoWaiter) {
		t.Fatalf("cancel of a cancelled request: %v", err)
	}
	res = b.table.CloseSession(b.now, 1)
	b.grants(res)
	sameOwners(t, "close of session 1", owners(res), ownD)
	if n := b.table.Counts(); n != (rangelock.Counts{Files: 1, Ranges: 1}) {
		t.Fatalf("counts %+v", n)
	}
	b.set("k", px, ownC, rd, rng(5, 5), true, rangelock.Waiting) // tag 5
	if _, _, err := b.table.Set(b.now, rangelock.Request{Key: "k", NS: px, Owner: ownC, Type: rd, Range: rng(7, 7), Wait: true, Tag: 5}); !errors.Is(err, rangelock.ErrTagExists) {
		t.Fatalf("a second waiting request with tag 5: %v", err)
	}
	if res, err := b.table.Cancel(b.now, 2, 5); err != nil || len(res.Grants) != 0 {
		t.Fatalf("cancel: %+v, %v", res, err)
	}
	res = b.table.CloseSession(b.now, 3)
	if len(res.Grants) != 0 || b.table.Counts() != (rangelock.Counts{}) {
		t.Fatalf("after closing every session: %+v, counts %+v", res, b.table.Counts())
	}
}

func TestInvalid(t *testing.T) {
	table := rangelock.New(&locktable.CounterTokens{})
	for _, tc := range []struct {
		req  rangelock.Request
		want error
	}{
		{rangelock.Request{NS: px, Type: rd}, rangelock.ErrInvalidKey},
		{rangelock.Request{Key: "k", Type: rd}, rangelock.ErrInvalidNamespace},
		{rangelock.Request{Key: "k", NS: px}, rangelock.ErrInvalidType},
		{rangelock.Request{Key: "k", NS: px, Type: rd, Range: rng(5, 4)}, rangelock.ErrInvalidRange},
		{rangelock.Request{Key: "k", NS: px, Type: rd, Range: rng(0, rangelock.MaxOffset+1)}, rangelock.ErrInvalidRange},
	} {
		if _, _, err := table.Set(epoch, tc.req); !errors.Is(err, tc.want) {
			t.Errorf("%+v: %v, want %v", tc.req, err, tc.want)
		}
	}
	for _, tc := range []struct{ start, length uint64 }{{rangelock.MaxOffset, 2}, {rangelock.MaxOffset + 1, 0}, {1, rangelock.MaxOffset + 1}} {
		if _, err := rangelock.Span(tc.start, tc.length); !errors.Is(err, rangelock.ErrInvalidRange) {
			t.Errorf("Span(%d, %d): %v", tc.start, tc.length, err)
		}
	}
	if r, err := rangelock.Span(rangelock.MaxOffset, 1); err != nil || r.Len() != 0 || r.End != rangelock.MaxOffset {
		t.Errorf("Span(MaxOffset, 1) = %v, %v", r, err)
	}
}

func TestSessionsOn(t *testing.T) {
	tb := rangelock.New(&locktable.CounterTokens{})
	now := time.Unix(0, 0)
	set := func(key string, sid rangelock.SessionID, typ rangelock.Type, wait bool) {
		t.Helper()
		if _, _, err := tb.Set(now, rangelock.Request{Key: key, NS: rangelock.POSIX, Owner: rangelock.Owner{Session: sid, ID: 1},
			Type: typ, Range: rangelock.Range{Start: 0, End: 9}, Wait: wait, Tag: uint64(sid)}); err != nil {
			t.Fatal(err)
		}
	}
	set("a", 1, rangelock.Read, false)
	set("a", 2, rangelock.Read, false)
	set("a", 3, rangelock.Write, true) // waits behind 1 and 2
	set("b", 4, rangelock.Write, false)
	on := tb.SessionsOn(func(k string) bool { return k == "a" })
	slices.Sort(on["a"])
	if !slices.Equal(on["a"], []rangelock.SessionID{1, 2, 3}) || len(on) != 1 {
		t.Errorf("SessionsOn(a) = %v, want a: [1 2 3] (holders and the waiter)", on)
	}
	if on := tb.SessionsOn(func(string) bool { return false }); on != nil {
		t.Errorf("SessionsOn(none) = %v", on)
	}
}

// DropWaiting ends a session's waiting requests, keeps its held ranges,
// and grants the waiters its queued request held back.
func TestDropWaiting(t *testing.T) {
	b := newBench(t)
	b.set("k", px, ownC, rd, rng(0, 9), false, rangelock.Granted)
	b.set("j", px, ownA, wr, rng(0, 0), false, rangelock.Granted)
	b.set("k", px, ownB, wr, rng(0, 9), true, rangelock.Waiting)
	b.set("k", px, ownD, rd, rng(0, 9), true, rangelock.Waiting) // a reader does not overtake B
	res := b.table.DropWaiting(b.now, 1)
	b.grants(res)
	if len(res.Cancelled) != 1 || res.Cancelled[0].Owner != ownB || res.Cancelled[0].Tag != 3 {
		t.Fatalf("cancelled %+v, want B's waiting write (tag 3)", res.Cancelled)
	}
	sameOwners(t, "session 1 stops waiting", owners(res), ownD)
	if h := b.table.Holders("j", px); len(h) != 1 || h[0].Owner != ownA {
		t.Fatalf("holders of j %v, want A's write, kept", h)
	}
	if !b.table.HasSession(1) || len(b.table.Waiters("k", px)) != 0 {
		t.Fatalf("session 1 kept: %v, waiters %v; want kept, none", b.table.HasSession(1), b.table.Waiters("k", px))
	}
	if res := b.table.DropWaiting(b.now, 9); len(res.Cancelled)+len(res.Grants) != 0 {
		t.Fatalf("an unknown session: %+v", res)
	}
}
