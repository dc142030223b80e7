package locktable_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

// hoRun builds random tables and checks Export, Import and Evict on them.
type hoRun struct {
	t    *testing.T
	rng  *rand.Rand
	now  time.Time
	next locktable.SessionID
	sids []locktable.SessionID
	v1   map[locktable.SessionID]bool
	cids map[locktable.SessionID]locktable.ClaimID
}

var hoNames = []string{"a", "b", "c", "sem-x", "sem-y"}

func (r *hoRun) tick() { r.now = r.now.Add(time.Duration(r.rng.IntN(50)) * time.Millisecond) }

// build fills t with random sessions, claims, releases and expiries.
func (r *hoRun) build(t *locktable.Table, steps int) {
	for range steps {
		r.tick()
		name := hoNames[r.rng.IntN(len(hoNames))]
		switch k := r.rng.IntN(10); {
		case k < 2 && name[0] != 's':
			r.next++
			lease := time.Duration(1+r.rng.IntN(3)) * time.Second
			if _, _, err := t.Acquire(r.now, r.next, locktable.Request{Name: name, Lease: lease, Peer: locktable.Peer{Addr: fmt.Sprint("v1-", r.next)}}); err != nil {
				r.t.Fatal(err)
			}
			r.sids = append(r.sids, r.next)
			r.v1[r.next] = true
		case k < 3 || len(r.sids) == 0:
			r.next++
			lease := time.Duration(1+r.rng.IntN(3)) * time.Second
			if err := t.Open(r.now, r.next, locktable.SessionParams{Lease: lease, Label: fmt.Sprint("s", r.next)}); err != nil {
				r.t.Fatal(err)
			}
			r.sids = append(r.sids, r.next)
		case k < 7:
			sid := r.sids[r.rng.IntN(len(r.sids))]
			if r.v1[sid] {
				continue
			}
			r.cids[sid]++
			req := locktable.ClaimRequest{Name: name, Mode: locktable.Exclusive}
			if name[0] == 's' {
				req.Mode, req.Limit = locktable.Semaphore, 2
			} else if r.rng.IntN(2) == 0 {
				req.Mode = locktable.Shared
			}
			t.Claim(r.now, sid, r.cids[sid], req) // claim-level errors change nothing
		case k < 9:
			sid := r.sids[r.rng.IntN(len(r.sids))]
			if r.v1[sid] {
				t.End(r.now, sid, locktable.ReasonGraceful)
			} else if c := r.cids[sid]; c > 0 {
				t.Release(r.now, locktable.Key{Session: sid, Claim: locktable.ClaimID(1 + r.rng.IntN(int(c)))})
			}
		default:
			t.Touch(r.now, r.sids[r.rng.IntN(len(r.sids))])
		}
	}
}

// op applies one random operation to both tables and fails unless they
// answer the same.
func (r *hoRun) op(a, b *locktable.Table, sids []locktable.SessionID) {
	r.tick()
	sid := sids[r.rng.IntN(len(sids))]
	type answer struct {
		St  locktable.Status
		Res locktable.Result
		Err error
	}
	var ra, rb answer
	what := ""
	switch k := r.rng.IntN(6); {
	case k == 0:
		what = "close"
		ra.Res, rb.Res = a.CloseSession(r.now, sid, locktable.ReasonGraceful), b.CloseSession(r.now, sid, locktable.ReasonGraceful)
	case k == 1:
		what = "expire"
		ra.Res, ra.Err = a.ExpireSession(r.now, sid)
		rb.Res, rb.Err = b.ExpireSession(r.now, sid)
	case k == 2 && !r.v1[sid]:
		what = "claim"
		r.cids[sid]++
		name := hoNames[r.rng.IntN(len(hoNames))]
		req := locktable.ClaimRequest{Name: name, Mode: locktable.Exclusive}
		if name[0] == 's' {
			req.Mode, req.Limit = locktable.Semaphore, 2
		}
		ra.St, ra.Res, ra.Err = a.Claim(r.now, sid, r.cids[sid], req)
		rb.St, rb.Res, rb.Err = b.Claim(r.now, sid, r.cids[sid], req)
	default:
		what = "release"
		k := locktable.Key{Session: sid, Claim: locktable.V1Claim}
		if !r.v1[sid] && r.cids[sid] > 0 {
			k.Claim = locktable.ClaimID(1 + r.rng.IntN(int(r.cids[sid])))
		}
		ra.Res, ra.Err = a.Release(r.now, k)
		rb.Res, rb.Err = b.Release(r.now, k)
	}
	if !reflect.DeepEqual(ra, rb) {
		r.t.Fatalf("%s on session %d: the exporting table answered %+v, the importing one %+v", what, sid, ra, rb)
	}
}

// Exporting every lock of a random table and importing it into an empty
// one gives a table that exports the same and answers every later
// operation on the exported claims exactly as the original does: holders
// with their tokens and grant order, queues in order, leases and last
// contact, labels and peers.
func TestExportImportRoundTrip(t *testing.T) {
	seeds := 200
	if testing.Short() {
		seeds = 20
	}
	locks, claims := 0, 0
	for seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			r := &hoRun{t: t, rng: rand.New(rand.NewPCG(uint64(seed), 0x4a0d)), now: epoch,
				v1: map[locktable.SessionID]bool{}, cids: map[locktable.SessionID]locktable.ClaimID{}}
			tokA := &locktable.CounterTokens{}
			ta := locktable.New(tokA)
			r.build(ta, 40+r.rng.IntN(80))
			ex := ta.Export(r.now, nil)
			// Both tables issue the same tokens from here, so that their
			// answers compare.
			last, tokB := tokA.Next(), &locktable.CounterTokens{}
			for tokB.Next() < last {
			}
			tb := locktable.New(tokB)
			res, err := tb.Import(r.now, ex)
			if err != nil {
				t.Fatalf("import: %v", err)
			}
			if len(res.Sends) != 0 {
				t.Fatalf("importing a consistent state granted: %+v", res)
			}
			if got := tb.Export(r.now, nil); !reflect.DeepEqual(got, ex) {
				t.Fatalf("export after import:\n%+v\nwant\n%+v", got, ex)
			}
			// Importing again changes nothing.
			if res, err := tb.Import(r.now, ex); err != nil || len(res.Sends)+len(res.Events) != 0 {
				t.Fatalf("second import: %+v, %v", res, err)
			}
			var sids []locktable.SessionID
			seen := map[locktable.SessionID]bool{}
			for _, l := range ex {
				locks++
				for _, c := range append(l.Holders, l.Waiters...) {
					claims++
					if !seen[c.Session] {
						seen[c.Session] = true
						sids = append(sids, c.Session)
					}
				}
			}
			if len(sids) == 0 {
				return
			}
			for range 60 {
				r.op(ta, tb, sids)
			}
			// Each table counts its own queue tickets: the waiters that
			// queued after the import have other numbers, in the same
			// order.
			if a, b := noTickets(ta.Export(r.now, nil)), noTickets(tb.Export(r.now, nil)); !reflect.DeepEqual(a, b) {
				t.Fatalf("after the same operations the tables differ:\n%+v\n%+v", a, b)
			}
		})
	}
	if locks == 0 || claims < seeds {
		t.Fatalf("the random tables are too empty: %d locks, %d claims", locks, claims)
	}
	t.Logf("%d seeds: %d locks with %d claims exported and imported", seeds, locks, claims)
}

// Evict ends every claim on the matching locks without granting anyone:
// version 1 claims get ERROR(v1), version 2 claims ERROR(v2) or, with 0,
// nothing; every event has reason "moved"; the other locks are untouched.
func TestEvict(t *testing.T) {
	for seed := range 100 {
		for _, v2 := range []protocol.Code{protocol.CodeNotOwner, 0} {
			r := &hoRun{t: t, rng: rand.New(rand.NewPCG(uint64(seed), 0xe71c)), now: epoch,
				v1: map[locktable.SessionID]bool{}, cids: map[locktable.SessionID]locktable.ClaimID{}}
			tb := locktable.New(&locktable.CounterTokens{})
			r.build(tb, 100)
			moving := func(name string) bool { return name == "a" || name == "sem-x" }
			before := tb.Export(r.now, moving)
			stay := tb.Export(r.now, func(n string) bool { return !moving(n) })
			want := 0
			for _, l := range before {
				want += len(l.Holders) + len(l.Waiters)
			}
			res := tb.Evict(r.now, moving, protocol.CodeShuttingDown, v2)
			if got := tb.Export(r.now, moving); len(got) != 0 {
				t.Fatalf("seed %d: evicted locks still there: %+v", seed, got)
			}
			if got := tb.Export(r.now, func(n string) bool { return !moving(n) }); !reflect.DeepEqual(got, stay) {
				t.Fatalf("seed %d: other locks changed", seed)
			}
			if len(res.Events) != want {
				t.Fatalf("seed %d: %d events for %d claims", seed, len(res.Events), want)
			}
			for _, e := range res.Events {
				if e.Reason != locktable.ReasonMoved || e.Kind == locktable.EventGranted {
					t.Fatalf("seed %d: event %+v", seed, e)
				}
			}
			for _, s := range res.Sends {
				wantCode := v2
				if r.v1[s.Session] {
					wantCode = protocol.CodeShuttingDown
				}
				if s.Kind != locktable.SendError || s.Code != wantCode || wantCode == 0 {
					t.Fatalf("seed %d: send %+v", seed, s)
				}
			}
		}
	}
}

// Import refuses, changing nothing, a state no table could be in and a
// lock the table already has with other claims; it grants the head of a
// queue that no holder blocks.
func TestImportRefuses(t *testing.T) {
	now := epoch
	hold := func(sid locktable.SessionID, mode locktable.Mode, tok uint64) locktable.ClaimState {
		return locktable.ClaimState{Session: sid, Claim: 1, Mode: mode, Token: tok, Lease: time.Second}
	}
	wait := func(sid locktable.SessionID, mode locktable.Mode) locktable.ClaimState {
		return locktable.ClaimState{Session: sid, Claim: 1, Mode: mode, Lease: time.Second}
	}
	for _, tc := range []struct {
		what  string
		locks []locktable.LockState
		err   error
	}{
		{"two exclusive holders", []locktable.LockState{{Name: "a", Holders: []locktable.ClaimState{hold(1, locktable.Exclusive, 5), hold(2, locktable.Exclusive, 6)}}}, locktable.ErrBadState},
		{"a claim twice", []locktable.LockState{{Name: "a", Holders: []locktable.ClaimState{hold(1, locktable.Shared, 5)}, Waiters: []locktable.ClaimState{wait(1, locktable.Exclusive)}}}, locktable.ErrBadState},
		{"semaphore over its limit", []locktable.LockState{{Name: "s", Limit: 1, Holders: []locktable.ClaimState{hold(1, locktable.Semaphore, 5), hold(2, locktable.Semaphore, 6)}}}, locktable.ErrBadState},
		{"a semaphore claim on a lock", []locktable.LockState{{Name: "a", Holders: []locktable.ClaimState{hold(1, locktable.Semaphore, 5)}}}, locktable.ErrBadState},
		{"no lease", []locktable.LockState{{Name: "a", Holders: []locktable.ClaimState{{Session: 1, Claim: 1, Mode: locktable.Exclusive}}}}, locktable.ErrBadState},
		{"a held name", []locktable.LockState{{Name: "held", Holders: []locktable.ClaimState{hold(7, locktable.Exclusive, 5)}}}, locktable.ErrLockExists},
	} {
		tb := locktable.New(&locktable.CounterTokens{})
		tb.Open(now, 100, locktable.SessionParams{Lease: time.Second})
		tb.Claim(now, 100, 1, locktable.ClaimRequest{Name: "held", Mode: locktable.Exclusive})
		before := tb.Export(now, nil)
		// A valid lock first: all or nothing.
		locks := append([]locktable.LockState{{Name: "ok", Holders: []locktable.ClaimState{hold(50, locktable.Exclusive, 9)}}}, tc.locks...)
		if _, err := tb.Import(now, locks); !errors.Is(err, tc.err) {
			t.Errorf("%s: %v, want %v", tc.what, err, tc.err)
		}
		if got := tb.Export(now, nil); !reflect.DeepEqual(got, before) {
			t.Errorf("%s: the refused import changed the table: %+v", tc.what, got)
		}
	}
	// Waiters whose holder did not come along are granted, in order.
	tb := locktable.New(&locktable.CounterTokens{})
	res, err := tb.Import(now, []locktable.LockState{{Name: "a", Waiters: []locktable.ClaimState{wait(1, locktable.Shared), wait(2, locktable.Shared), wait(3, locktable.Exclusive)}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Sends) != 2 || res.Sends[0].Session != 1 || res.Sends[1].Session != 2 || res.Sends[0].Kind != locktable.SendAcquired {
		t.Fatalf("sends %+v, want ACQUIRED to sessions 1 and 2", res.Sends)
	}
	if l, _ := tb.Lock("a"); len(l.Holders) != 2 || len(l.Waiters) != 1 || l.Waiters[0].Session != 3 {
		t.Fatalf("lock after import: %+v", l)
	}
}

// noTickets clears the waiters' queue tickets of an export.
func noTickets(ls []locktable.LockState) []locktable.LockState {
	for i := range ls {
		for j := range ls[i].Waiters {
			ls[i].Waiters[j].Ticket = 0
		}
	}
	return ls
}
