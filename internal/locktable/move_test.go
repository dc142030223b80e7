package locktable_test

import (
	"math/rand/v2"
	"testing"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

// EvictExcept ends, on the matching locks, exactly the claims whose
// session is not kept, each with its frame, and promotes only kept
// claims: what is left is a state with no waiter to promote, which
// another table imports without granting anyone.
func TestEvictExcept(t *testing.T) {
	ended, promoted := 0, 0
	for seed := range 100 {
		r := &hoRun{t: t, rng: rand.New(rand.NewPCG(uint64(seed), 0xe7ce)), now: epoch,
			v1: map[locktable.SessionID]bool{}, cids: map[locktable.SessionID]locktable.ClaimID{}}
		tb := locktable.New(&locktable.CounterTokens{})
		r.build(tb, 100)
		moving := func(name string) bool { return name == "a" || name == "sem-x" || name == "b" }
		keep := func(s locktable.SessionID) bool { return !r.v1[s] && s%2 == 0 }
		before := tb.Export(r.now, moving)
		stay := tb.Export(r.now, func(n string) bool { return !moving(n) })
		kept := map[locktable.Key]bool{}
		for _, l := range before {
			for _, c := range append(l.Holders, l.Waiters...) {
				if keep(c.Session) {
					kept[locktable.Key{Session: c.Session, Claim: c.Claim}] = true
				}
			}
		}
		res := tb.EvictExcept(r.now, moving, keep, protocol.CodeShuttingDown, protocol.CodeNotOwner)
		for _, s := range res.Sends {
			switch {
			case s.Kind == locktable.SendAcquired && keep(s.Session):
				promoted++
			case s.Kind == locktable.SendError && !keep(s.Session):
				want := protocol.CodeNotOwner
				if r.v1[s.Session] {
					want = protocol.CodeShuttingDown
				}
				if s.Code != want {
					t.Fatalf("seed %d: send %+v, want code %v", seed, s, want)
				}
				ended++
			default:
				t.Fatalf("seed %d: send %+v", seed, s)
			}
		}
		after := tb.Export(r.now, moving)
		left := map[locktable.Key]bool{}
		for _, l := range after {
			for _, c := range append(l.Holders, l.Waiters...) {
				left[locktable.Key{Session: c.Session, Claim: c.Claim}] = true
			}
		}
		if len(left) != len(kept) {
			t.Fatalf("seed %d: %d claims left, want the %d kept", seed, len(left), len(kept))
		}
		for k := range kept {
			if !left[k] {
				t.Fatalf("seed %d: kept claim %+v is gone", seed, k)
			}
		}
		if got := tb.Export(r.now, func(n string) bool { return !moving(n) }); len(got) != len(stay) {
			t.Fatalf("seed %d: other locks changed", seed)
		}
		other := locktable.New(&locktable.CounterTokens{})
		ires, err := other.Import(r.now, after)
		if err != nil || len(ires.Sends) != 0 {
			t.Fatalf("seed %d: import of what is left: %v, sends %+v (a waiter left to promote)", seed, err, ires.Sends)
		}
	}
	t.Logf("100 seeds: %d claims ended, %d kept waiters promoted", ended, promoted)
	if ended == 0 || promoted == 0 {
		t.Errorf("the runs ended %d claims and promoted %d: the test misses a case", ended, promoted)
	}
}
