package locktable_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/locktable"
)

// dtRun drives a table A (the prior owner, whose claims stay attached to
// their sessions) and a table B where A's state was installed detached,
// through the same history: adoptions (B) with a touch (A), releases of
// adopted claims, expiries of sessions none of whose claims is adopted,
// and time. Session s of A stands for detached session s+dtDetached of B
// and, once it adopts, for session s+dtAdopted of B.
type dtRun struct {
	t       *testing.T
	rng     *rand.Rand
	now     time.Time
	a, b    *locktable.Table
	lease   map[locktable.SessionID]time.Duration
	label   map[locktable.SessionID]string
	adopted map[locktable.Key]bool // keys of A
	opened  map[locktable.SessionID]bool
	claims  []locktable.Key        // every claim handed over, in export order
	waiting map[locktable.Key]bool // the claims handed over queued
	counts  map[string]int
}

const (
	dtDetached = 10000
	dtAdopted  = 20000
)

func dtOrigin(s locktable.SessionID) locktable.Origin {
	return locktable.Origin{Node: "p", Session: uint64(s)}
}

// mapSession is B's session for claim k of A.
func (r *dtRun) mapSession(k locktable.Key) locktable.SessionID {
	if r.adopted[k] {
		return k.Session + dtAdopted
	}
	return k.Session + dtDetached
}

// mapResult is what B must answer when A answered res: the same events
// under B's sessions, and only the frames for adopted claims (a detached
// session is sent nothing).
func (r *dtRun) mapResult(res locktable.Result) locktable.Result {
	var out locktable.Result
	for _, ev := range res.Events {
		ev.Session = r.mapSession(locktable.Key{Session: ev.Session, Claim: ev.Claim})
		out.Events = append(out.Events, ev)
	}
	for _, s := range res.Sends {
		k := locktable.Key{Session: s.Session, Claim: s.Claim}
		if r.adopted[k] {
			s.Session = k.Session + dtAdopted
			out.Sends = append(out.Sends, s)
		}
	}
	return out
}

func (r *dtRun) same(op string, got locktable.Result, gerr error, want locktable.Result, werr error) {
	r.t.Helper()
	if !errors.Is(gerr, werr) || !errors.Is(werr, gerr) {
		r.t.Fatalf("%s: B's error %v, A's %v", op, gerr, werr)
	}
	w := r.mapResult(want)
	if len(got.Events)+len(w.Events) == 0 {
		got.Events, w.Events = nil, nil
	}
	if len(got.Sends)+len(w.Sends) == 0 {
		got.Sends, w.Sends = nil, nil
	}
	if !reflect.DeepEqual(got, w) {
		r.t.Fatalf("%s: B answered\n%+v\nwant (A's answer, mapped)\n%+v", op, got, w)
	}
}

func (r *dtRun) step() {
	r.now = r.now.Add(time.Duration(r.rng.IntN(50)) * time.Millisecond)
	if r.rng.IntN(15) == 0 {
		r.now = r.now.Add(time.Second)
	}
	k := r.claims[r.rng.IntN(len(r.claims))]
	switch op := r.rng.IntN(10); {
	case op < 4 && !r.adopted[k]:
		r.counts["adopt"]++
		want, werr := r.a.ClaimStatus(k)
		u := k.Session + dtAdopted
		if werr == nil {
			// The host's ADOPT counts as hearing from the session.
			r.a.Touch(r.now, k.Session)
			want, _ = r.a.ClaimStatus(k)
			if !r.opened[u] {
				if err := r.b.Open(r.now, u, locktable.SessionParams{Lease: r.lease[k.Session], Label: r.label[k.Session]}); err != nil {
					r.t.Fatal(err)
				}
				r.opened[u] = true
			}
		}
		got, gerr := r.b.Adopt(r.now, dtOrigin(k.Session), k.Claim, u)
		if !errors.Is(gerr, werr) || got != want {
			r.t.Fatalf("adopt %+v: B gives %+v, %v; A has %+v, %v", k, got, gerr, want, werr)
		}
		if werr == nil {
			r.adopted[k] = true
			if want.State == locktable.Owner {
				r.counts["adopted holding"]++
				if r.waiting[k] {
					r.counts["promoted while detached"]++
				}
			}
		}
	case op < 7 && r.adopted[k]:
		r.counts["release"]++
		want, werr := r.a.Release(r.now, k)
		got, gerr := r.b.Release(r.now, locktable.Key{Session: k.Session + dtAdopted, Claim: k.Claim})
		r.same(fmt.Sprintf("release %+v", k), got, gerr, want, werr)
	case op < 9 && !r.opened[k.Session+dtAdopted]:
		// Nothing of this session is adopted: its detached session at B
		// and its session at A were last heard at the same time.
		r.counts["expire"]++
		want, werr := r.a.ExpireSession(r.now, k.Session)
		got, gerr := r.b.ExpireSession(r.now, k.Session+dtDetached)
		if errors.Is(werr, locktable.ErrNotExpired) {
			r.counts["not expired"]++
		} else if werr == nil {
			for _, ev := range want.Events {
				if ev.Kind == locktable.EventGranted {
					r.counts["grant by expiry"]++
				}
			}
		}
		r.same(fmt.Sprintf("expire session %d", k.Session), got, gerr, want, werr)
	}
}

// shape is a table's export without times, labels and peers, with B's
// sessions named as A's, to compare A and B.
func (r *dtRun) shape(ls []locktable.LockState, isB bool) string {
	back := func(s locktable.SessionID) locktable.SessionID {
		switch {
		case !isB:
			return s
		case s >= dtAdopted:
			return s - dtAdopted
		}
		return s - dtDetached
	}
	out := ""
	for _, l := range ls {
		out += fmt.Sprintf("%s/%d:", l.Name, l.Limit)
		for _, c := range l.Holders {
			out += fmt.Sprintf(" H%d.%d.%v.%d", back(c.Session), c.Claim, c.Mode, c.Token)
		}
		for _, c := range l.Waiters {
			out += fmt.Sprintf(" W%d.%d.%v", back(c.Session), c.Claim, c.Mode)
		}
		out += "\n"
	}
	return out
}

// Installing a table's state detached and adopting its claims one by one
// keeps every claim as it would have been had it stayed where it was:
// tokens, grant order, queue order, promotions (a grant made while a claim
// is detached is sent to nobody and reported by Adopt with its token),
// releases and expiries (a detached session's lease runs from when the
// prior owner last heard it, and its expiry promotes the queue).
func TestDetachedAdopt(t *testing.T) {
	seeds := 200
	if testing.Short() {
		seeds = 20
	}
	total := map[string]int{}
	for seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			h := &hoRun{t: t, rng: rand.New(rand.NewPCG(uint64(seed), 0xd7ac)), now: epoch,
				v1: map[locktable.SessionID]bool{}, cids: map[locktable.SessionID]locktable.ClaimID{}}
			tokA := &locktable.CounterTokens{}
			ta := locktable.New(tokA)
			h.build(ta, 40+h.rng.IntN(80))
			for sid := range h.v1 { // version 1 claims never move
				ta.End(h.now, sid, locktable.ReasonGraceful)
			}
			ex := ta.Export(h.now, nil)
			last, tokB := tokA.Next(), &locktable.CounterTokens{}
			for tokB.Next() < last {
			}
			tb := locktable.New(tokB)
			r := &dtRun{t: t, rng: h.rng, now: h.now, a: ta, b: tb, lease: map[locktable.SessionID]time.Duration{},
				label: map[locktable.SessionID]string{}, waiting: map[locktable.Key]bool{},
				adopted: map[locktable.Key]bool{}, opened: map[locktable.SessionID]bool{}, counts: total}
			origins := map[locktable.SessionID]locktable.Origin{}
			var moved []locktable.LockState
			for _, l := range ex {
				m := locktable.LockState{Name: l.Name, Limit: l.Limit}
				for i, c := range append(append([]locktable.ClaimState{}, l.Holders...), l.Waiters...) {
					r.claims = append(r.claims, locktable.Key{Session: c.Session, Claim: c.Claim})
					r.waiting[r.claims[len(r.claims)-1]] = i >= len(l.Holders)
					r.lease[c.Session], r.label[c.Session] = c.Lease, c.Label
					origins[c.Session+dtDetached] = dtOrigin(c.Session)
					c.Session += dtDetached
					if i < len(l.Holders) {
						m.Holders = append(m.Holders, c)
					} else {
						m.Waiters = append(m.Waiters, c)
					}
				}
				moved = append(moved, m)
			}
			res, err := tb.ImportDetached(r.now, moved, origins)
			if err != nil || len(res.Sends) != 0 {
				t.Fatalf("install: %+v, %v", res, err)
			}
			if res, err := tb.ImportDetached(r.now, moved, origins); err != nil || len(res.Sends)+len(res.Events) != 0 {
				t.Fatalf("second install: %+v, %v", res, err)
			}
			for sid, o := range origins {
				if got, ok := tb.Detached(sid); !ok || got != o {
					t.Fatalf("Detached(%d) = %+v, %v; want %+v", sid, got, ok, o)
				}
			}
			if len(r.claims) == 0 {
				return
			}
			for range 80 {
				r.step()
				if a, b := r.shape(ta.Export(r.now, nil), false), r.shape(tb.Export(r.now, nil), true); a != b {
					t.Fatalf("the tables differ:\nA:\n%s\nB:\n%s", a, b)
				}
			}
		})
	}
	for what, least := range map[string]int{"adopt": seeds, "adopted holding": seeds, "release": seeds,
		"expire": seeds, "grant by expiry": seeds / 10, "promoted while detached": seeds / 10} {
		if total[what] < least {
			t.Fatalf("the random runs exercise too little: %v", total)
		}
	}
	t.Logf("%d seeds: %v", seeds, total)
}

// ImportDetached refuses a state it cannot install detached, and changes
// nothing then; Adopt refuses a key it does not have and a session that
// cannot adopt.
func TestDetachedRefuses(t *testing.T) {
	o := locktable.Origin{Node: "p", Session: 7}
	cs := locktable.ClaimState{Session: 1, Claim: 1, Mode: locktable.Exclusive, Token: 5, Lease: time.Second}
	locks := []locktable.LockState{{Name: "a", Holders: []locktable.ClaimState{cs}}}
	tb := locktable.New(&locktable.CounterTokens{})
	if err := tb.Open(epoch, 1, locktable.SessionParams{Lease: time.Second}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what    string
		locks   []locktable.LockState
		origins map[locktable.SessionID]locktable.Origin
	}{
		{"a session without an origin", locks, nil},
		{"a session the table has, attached", locks, map[locktable.SessionID]locktable.Origin{1: o}},
		{"a version 1 claim", []locktable.LockState{{Name: "b", Holders: []locktable.ClaimState{{Session: 2, Claim: locktable.V1Claim,
			Mode: locktable.Exclusive, Token: 5, Lease: time.Second, V1: true}}}}, map[locktable.SessionID]locktable.Origin{2: o}},
	} {
		if _, err := tb.ImportDetached(epoch, tc.locks, tc.origins); !errors.Is(err, locktable.ErrBadState) {
			t.Errorf("%s: %v, want ErrBadState", tc.what, err)
		}
	}
	if n := len(tb.Export(epoch, nil)); n != 0 {
		t.Fatalf("a refused install left %d locks", n)
	}
	cs.Session = 3
	if _, err := tb.ImportDetached(epoch, []locktable.LockState{{Name: "a", Holders: []locktable.ClaimState{cs}}},
		map[locktable.SessionID]locktable.Origin{3: o}); err != nil {
		t.Fatal(err)
	}
	// A second detached session for the same origin is refused.
	cs2 := cs
	cs2.Session, cs2.Claim = 4, 2
	if _, err := tb.ImportDetached(epoch, []locktable.LockState{{Name: "b", Holders: []locktable.ClaimState{cs2}}},
		map[locktable.SessionID]locktable.Origin{4: o}); !errors.Is(err, locktable.ErrBadState) {
		t.Errorf("a second session for one origin: %v, want ErrBadState", err)
	}
	if _, err := tb.Adopt(epoch, o, 2, 1); !errors.Is(err, locktable.ErrNoClaim) {
		t.Errorf("adopting an unknown claim id: %v, want ErrNoClaim", err)
	}
	if _, err := tb.Adopt(epoch, locktable.Origin{Node: "q", Session: 7}, 1, 1); !errors.Is(err, locktable.ErrNoClaim) {
		t.Errorf("adopting from an unknown origin: %v, want ErrNoClaim", err)
	}
	for _, into := range []locktable.SessionID{9, 3} {
		if _, err := tb.Adopt(epoch, o, 1, into); !errors.Is(err, locktable.ErrNoSession) {
			t.Errorf("adopting into session %d: %v, want ErrNoSession", into, err)
		}
	}
	if _, _, err := tb.Claim(epoch, 1, 1, locktable.ClaimRequest{Name: "c", Mode: locktable.Exclusive}); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Adopt(epoch, o, 1, 1); !errors.Is(err, locktable.ErrClaimExists) {
		t.Errorf("adopting into a session that uses the id: %v, want ErrClaimExists", err)
	}
	if err := tb.Open(epoch, 5, locktable.SessionParams{Lease: time.Second}); err != nil {
		t.Fatal(err)
	}
	st, err := tb.Adopt(epoch, o, 1, 5)
	if err != nil || st.State != locktable.Owner || st.Token != 5 {
		t.Fatalf("adopt: %+v, %v; want the holder with token 5", st, err)
	}
	// The detached session, now empty, is gone; the key is used up.
	if _, ok := tb.Detached(3); ok {
		t.Error("the emptied detached session is still there")
	}
	if _, err := tb.Adopt(epoch, o, 1, 5); !errors.Is(err, locktable.ErrNoClaim) {
		t.Errorf("adopting twice: %v, want ErrNoClaim", err)
	}
}
