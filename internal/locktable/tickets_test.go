package locktable_test

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/locktable"
)

// waiterOrder returns the queue of lock name as session ids, head first.
func waiterOrder(tb *locktable.Table, now time.Time, name string) []locktable.SessionID {
	for _, ls := range tb.Export(now, nil) {
		if ls.Name == name {
			var out []locktable.SessionID
			for _, w := range ls.Waiters {
				out = append(out, w.Session)
			}
			return out
		}
	}
	return nil
}

func ticketed(ticket uint64) locktable.ClaimRequest {
	r := excl
	r.Ticket = ticket
	return r
}

// A claim re-asserted with a prior owner's ticket queues ahead of every
// claim that arrived without one, and in ticket order among those that
// have one, whatever order they arrive in; the holder is not affected,
// and promotion follows the new order.
func TestTicketOrderedInsert(t *testing.T) {
	tb := locktable.New(&locktable.CounterTokens{})
	now := epoch
	for sid := locktable.SessionID(1); sid <= 6; sid++ {
		openV2(t, tb, now, sid, time.Minute)
	}
	if st, _ := mustClaim(t, tb, now, 1, 1, excl); st.State != locktable.Owner {
		t.Fatalf("holder: %v", st.State)
	}
	mustClaim(t, tb, now, 2, 1, excl)         // Z: no ticket, at the back
	mustClaim(t, tb, now, 3, 1, ticketed(20)) // Y
	mustClaim(t, tb, now, 4, 1, ticketed(10)) // X
	mustClaim(t, tb, now, 5, 1, ticketed(15)) // W, between X and Y
	mustClaim(t, tb, now, 6, 1, excl)         // another without, behind Z
	want := []locktable.SessionID{4, 5, 3, 2, 6}
	if got := waiterOrder(tb, now, "a"); !slices.Equal(got, want) {
		t.Fatalf("queue %v, want %v", got, want)
	}
	if got := tb.Ticket(locktable.Key{Session: 4, Claim: 1}); got != 10 {
		t.Errorf("X's ticket %d, want the one it came with, 10", got)
	}
	z, six := tb.Ticket(locktable.Key{Session: 2, Claim: 1}), tb.Ticket(locktable.Key{Session: 6, Claim: 1})
	if z == 0 || six <= z || six <= 20 {
		t.Errorf("own tickets %d then %d: want increasing, above the carried 20", z, six)
	}
	if got := tb.Ticket(locktable.Key{Session: 1, Claim: 1}); got != 0 {
		t.Errorf("a holder's ticket %d, want 0", got)
	}
	// Promotion follows the queue.
	for i, next := range want {
		res, err := tb.Release(now, locktable.Key{Session: []locktable.SessionID{1, 4, 5, 3, 2}[i], Claim: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Sends) != 1 || res.Sends[0].Session != next {
			t.Fatalf("release %d promoted %+v, want session %d", i, res.Sends, next)
		}
	}
}

// A claim with a ticket whose place is the head of the queue is granted
// at once when it conflicts with no holder (it was ahead of the claim
// that waits there); elsewhere, or with a conflicting holder, it waits,
// and with NoWait it is Busy. While the gate is closed it waits.
func TestTicketHeadAndNoWait(t *testing.T) {
	tb := locktable.New(&locktable.CounterTokens{})
	now := epoch
	for sid := locktable.SessionID(1); sid <= 5; sid++ {
		openV2(t, tb, now, sid, time.Minute)
	}
	shared := locktable.ClaimRequest{Name: "a", Mode: locktable.Shared}
	mustClaim(t, tb, now, 1, 1, shared)
	if st, _ := mustClaim(t, tb, now, 2, 1, excl); st.State != locktable.Waiting {
		t.Fatalf("writer behind a reader: %v", st.State)
	}
	r := shared
	r.Ticket = 7
	if st, res := mustClaim(t, tb, now, 3, 1, r); st.State != locktable.Owner || len(res.Events) != 1 {
		t.Fatalf("a ticketed reader ahead of the writer: %v %+v, want granted", st.State, res)
	}
	w := ticketed(8)
	w.NoWait = true
	if st, _ := mustClaim(t, tb, now, 4, 1, w); st.State != locktable.Busy {
		t.Fatalf("a no-wait ticketed writer: %v, want busy", st.State)
	}
	if st, _ := mustClaim(t, tb, now, 4, 1, ticketed(8)); st.State != locktable.Waiting {
		t.Fatalf("a ticketed writer with readers holding: %v, want waiting", st.State)
	}
	if got := waiterOrder(tb, now, "a"); !slices.Equal(got, []locktable.SessionID{4, 2}) {
		t.Fatalf("queue %v, want [4 2]", got)
	}

	gated := locktable.New(&locktable.CounterTokens{})
	gated.SetGate(now.Add(time.Second))
	openV2(t, gated, now, 1, time.Minute)
	if st, _ := mustClaim(t, gated, now, 1, 1, ticketed(3)); st.State != locktable.Waiting {
		t.Fatalf("before the gate: %v, want waiting", st.State)
	}
}

// ticketTokens is a token source that also issues tickets, as a cluster
// node's does (its epoch in the high bits).
type ticketTokens struct {
	locktable.CounterTokens
	tickets uint64
}

func (s *ticketTokens) NextTicket() uint64 { s.tickets++; return 9<<40 | s.tickets }

// A token source that issues tickets gives the table its tickets.
func TestTicketSource(t *testing.T) {
	tb := locktable.New(&ticketTokens{})
	now := epoch
	for sid := locktable.SessionID(1); sid <= 3; sid++ {
		openV2(t, tb, now, sid, time.Minute)
	}
	mustClaim(t, tb, now, 1, 1, excl)
	mustClaim(t, tb, now, 2, 1, excl)
	mustClaim(t, tb, now, 3, 1, excl)
	if a, b := tb.Ticket(locktable.Key{Session: 2, Claim: 1}), tb.Ticket(locktable.Key{Session: 3, Claim: 1}); a != 9<<40|1 || b != 9<<40|2 {
		t.Fatalf("tickets %#x %#x, want the source's", a, b)
	}
}

// Property: whatever the order in which claims with and without tickets
// arrive, the queue holds the ticketed ones first, in ticket order, then
// the others in arrival order; and the exported tickets carry that order
// over an Export and Import (a planned move).
func TestTicketOrderRandom(t *testing.T) {
	for seed := range 200 {
		rng := rand.New(rand.NewPCG(uint64(seed), 14))
		tb := locktable.New(&locktable.CounterTokens{})
		now := epoch
		openV2(t, tb, now, 1, time.Minute)
		mustClaim(t, tb, now, 1, 1, excl)
		n := 2 + rng.IntN(12)
		type arrival struct {
			sid    locktable.SessionID
			ticket uint64
		}
		var arrivals []arrival
		for i := range n {
			sid := locktable.SessionID(i + 2)
			openV2(t, tb, now, sid, time.Minute)
			var ticket uint64
			if rng.IntN(2) == 0 {
				ticket = uint64(1+rng.IntN(1000))*100 + uint64(i) // distinct
			}
			arrivals = append(arrivals, arrival{sid, ticket})
			mustClaim(t, tb, now, sid, 1, ticketed(ticket))
		}
		var want []locktable.SessionID
		ticketedFirst := slices.Clone(arrivals)
		slices.SortStableFunc(ticketedFirst, func(a, b arrival) int {
			switch {
			case a.ticket == 0 && b.ticket == 0:
				return 0
			case a.ticket == 0:
				return 1
			case b.ticket == 0:
				return -1
			case a.ticket < b.ticket:
				return -1
			case a.ticket > b.ticket:
				return 1
			}
			return 0
		})
		for _, a := range ticketedFirst {
			want = append(want, a.sid)
		}
		if got := waiterOrder(tb, now, "a"); !slices.Equal(got, want) {
			t.Fatalf("seed %d: arrivals %v: queue %v, want %v", seed, arrivals, got, want)
		}
		// The ticketed ones keep theirs; the others have increasing
		// tickets of this table.
		ex := tb.Export(now, nil)
		var own uint64
		for i, w := range ex[0].Waiters {
			if a := ticketedFirst[i]; a.ticket != 0 && w.Ticket != a.ticket || a.ticket == 0 && w.Ticket <= own {
				t.Fatalf("seed %d: tickets %+v", seed, ex[0].Waiters)
			} else if a.ticket == 0 {
				own = w.Ticket
			}
		}
		// A planned move keeps the order, and a claim re-asserted there
		// later with a ticket still finds its place.
		tb2 := locktable.New(&locktable.CounterTokens{})
		if _, err := tb2.Import(now, ex); err != nil {
			t.Fatal(err)
		}
		sid := locktable.SessionID(100)
		openV2(t, tb2, now, sid, time.Minute)
		mustClaim(t, tb2, now, sid, 1, ticketed(50))
		at := slices.IndexFunc(ex[0].Waiters, func(w locktable.ClaimState) bool { return w.Ticket > 50 })
		if at < 0 {
			at = len(want)
		}
		if got := waiterOrder(tb2, now, "a"); !slices.Equal(got, slices.Insert(slices.Clone(want), at, sid)) {
			t.Fatalf("seed %d: after the move %v, want %d at %d of %v", seed, got, sid, at, want)
		}
	}
}

// Enter puts every claim in its queue before it grants anyone: on a lock
// nobody holds, the claim its ticket puts first is granted, whatever the
// order of the entries; the others wait in ticket order, those without
// a ticket behind. Claim-level errors leave one entry out, not the rest.
func TestTicketEnter(t *testing.T) {
	tb := locktable.New(&locktable.CounterTokens{})
	now := epoch
	for sid := locktable.SessionID(1); sid <= 5; sid++ {
		openV2(t, tb, now, sid, time.Minute)
	}
	sem := locktable.ClaimRequest{Name: "a", Mode: locktable.Semaphore, Limit: 2}
	res, errs := tb.Enter(now, []locktable.Entry{
		{Session: 1, Claim: 1, Req: excl},         // Z: no ticket
		{Session: 2, Claim: 1, Req: ticketed(20)}, // Y
		{Session: 3, Claim: 1, Req: sem},          // another family: refused
		{Session: 4, Claim: 1, Req: ticketed(10)}, // X
		{Session: 9, Claim: 1, Req: excl},         // no such session
	})
	if errs[0] != nil || errs[1] != nil || errs[3] != nil ||
		!errors.Is(errs[2], locktable.ErrModeConflict) || !errors.Is(errs[4], locktable.ErrNoSession) {
		t.Fatalf("errors %v", errs)
	}
	if len(res.Sends) != 1 || res.Sends[0].Session != 4 || res.Sends[0].Kind != locktable.SendAcquired {
		t.Fatalf("granted %+v, want X (session 4) alone", res.Sends)
	}
	if got := waiterOrder(tb, now, "a"); !slices.Equal(got, []locktable.SessionID{2, 1}) {
		t.Fatalf("queue %v, want Y then Z", got)
	}
	// Entering into a lock held already grants nobody.
	res, errs = tb.Enter(now, []locktable.Entry{{Session: 5, Claim: 1, Req: ticketed(15)}})
	if errs[0] != nil || len(res.Sends) != 0 {
		t.Fatalf("%+v %v", res, errs)
	}
	if got := waiterOrder(tb, now, "a"); !slices.Equal(got, []locktable.SessionID{5, 2, 1}) {
		t.Fatalf("queue %v, want [5 2 1]", got)
	}
}
