package locktable_test

import (
	"testing"
	"time"

	"github.com/batonlock/baton/internal/locktable"
)

// gateTokens fails a test that takes a token before the gate.
type gateTokens struct {
	t    *testing.T
	now  *time.Time
	gate time.Time
	prev uint64
}

func (g *gateTokens) Next() uint64 {
	if g.now.Before(g.gate) {
		g.t.Fatalf("a token was taken at %v, before the gate %v", *g.now, g.gate)
	}
	g.prev++
	return g.prev
}

// Before the gate nothing is granted: a claim that would be granted waits
// (a no-wait one is Busy), a release promotes nobody, and the answers are
// immediate; at the gate the waiters are granted in queue order, by
// OpenGate or by the first claim after it.
func TestGate(t *testing.T) {
	for _, opener := range []string{"OpenGate", "Claim"} {
		t.Run(opener, func(t *testing.T) {
			t0 := time.Unix(1000, 0)
			now := t0
			gate := t0.Add(500 * time.Millisecond)
			tab := locktable.New(&gateTokens{t: t, now: &now, gate: gate})
			tab.SetGate(gate)
			for s := locktable.SessionID(1); s <= 3; s++ {
				if err := tab.Open(now, s, locktable.SessionParams{Lease: time.Minute}); err != nil {
					t.Fatal(err)
				}
			}
			if !tab.Gated(now) {
				t.Fatal("Gated before the gate = false")
			}
			claim := func(s locktable.SessionID, name string, mode locktable.Mode, noWait bool) (locktable.Status, locktable.Result) {
				t.Helper()
				st, res, err := tab.Claim(now, s, 1, locktable.ClaimRequest{Name: name, Mode: mode, NoWait: noWait})
				if err != nil {
					t.Fatal(err)
				}
				return st, res
			}
			if st, _ := claim(1, "a", locktable.Shared, false); st.State != locktable.Waiting {
				t.Fatalf("first claim before the gate: %v, want waiting", st.State)
			}
			if st, _ := claim(2, "a", locktable.Shared, true); st.State != locktable.Busy {
				t.Fatalf("no-wait claim before the gate: %v, want busy", st.State)
			}
			if st, _ := claim(2, "a", locktable.Exclusive, false); st.State != locktable.Waiting {
				t.Fatalf("second claim before the gate: %v, want waiting", st.State)
			}
			if st, _ := claim(3, "b", locktable.Exclusive, false); st.State != locktable.Waiting {
				t.Fatalf("claim on b before the gate: %v, want waiting", st.State)
			}
			if c := tab.Counts(); c.Locks != 2 || c.Waiters != 3 || tab.Holders() != 0 {
				t.Fatalf("before the gate: %+v, %d holders; want 2 locks, 3 waiters, 0 holders", c, tab.Holders())
			}
			// A waiter that leaves before the gate promotes nobody.
			if res, err := tab.Release(now, locktable.Key{Session: 3, Claim: 1}); err != nil || len(res.Sends) != 0 {
				t.Fatalf("release before the gate: %v, sends %+v", err, res.Sends)
			}
			if res := tab.OpenGate(gate.Add(-time.Nanosecond)); len(res.Sends) != 0 {
				t.Fatalf("OpenGate before the gate sent %+v", res.Sends)
			}

			now = gate
			var res locktable.Result
			switch opener {
			case "OpenGate":
				res = tab.OpenGate(now)
			case "Claim":
				var st locktable.Status
				st, res = claim(3, "a", locktable.Shared, true)
				if st.State != locktable.Busy {
					t.Fatalf("no-wait claim behind an exclusive waiter after the gate: %v, want busy", st.State)
				}
			}
			// Session 1 (shared) is granted; session 2 (exclusive) waits
			// behind it, in queue order.
			if len(res.Sends) != 1 || res.Sends[0].Session != 1 || res.Sends[0].Kind != locktable.SendAcquired || res.Sends[0].Token != 1 {
				t.Fatalf("opening the gate sent %+v, want ACQUIRED to session 1 with token 1", res.Sends)
			}
			if tab.Gated(now) {
				t.Fatal("Gated at the gate = true")
			}
			if res := tab.OpenGate(now); len(res.Sends) != 0 {
				t.Fatalf("a second OpenGate sent %+v", res.Sends)
			}
			res, err := tab.Release(now, locktable.Key{Session: 1, Claim: 1})
			if err != nil || len(res.Sends) != 1 || res.Sends[0].Session != 2 || res.Sends[0].Token != 2 {
				t.Fatalf("release after the gate: %v, sends %+v; want ACQUIRED to session 2 with token 2", err, res.Sends)
			}
		})
	}
}
