package rangelock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/internal/rangelock"
)

// FuzzTable decodes its input into operations of every kind, waiting
// requests included, on two keys in both namespaces by four owners in
// two sessions, and after each one checks the invariants that need no
// reference: no conflicting holders, each owner's ranges sorted, disjoint
// and merged, every waiter held back by a holder or an earlier waiter,
// an acyclic wait-for graph, increasing tokens and consistent counts;
// and Query's answers (the table's index) against a scan of Holders.
func FuzzTable(f *testing.F) {
	f.Add([]byte{0x00, 0x13, 0x41, 0x02, 0x92, 0x11, 0x85, 0x03, 0xa1, 0x00})
	f.Add([]byte{0x10, 0x00, 0x23, 0x00, 0x90, 0x00, 0xb0, 0x00, 0x40, 0x01, 0xc3})
	// Owners 0 and 2 each hold a write the other then waits for: the
	// second wait must be refused.
	f.Add([]byte{0x00, 0x28, 0x06, 0x28, 0x84, 0x28, 0x82, 0x28})
	f.Fuzz(func(t *testing.T, data []byte) {
		table := rangelock.New(&locktable.CounterTokens{})
		now := epoch
		var last uint64
		token := func(tok uint64) {
			if tok <= last {
				t.Fatalf("token %d after %d", tok, last)
			}
			last = tok
		}
		var tag uint64
		for len(data) >= 2 && tag < 200 {
			a, b := data[0], data[1]
			data = data[2:]
			tag++
			now = now.Add(time.Millisecond)
			o := rangelock.Owner{Session: rangelock.SessionID(a&3/2 + 1), ID: rangelock.OwnerID(a & 3)}
			key := []string{"x", "y"}[a>>2&1]
			ns := rangelock.POSIX
			if a>>3&1 == 1 {
				ns = rangelock.Flock
			}
			start := uint64(b & 7)
			r, _ := rangelock.Span(start, uint64(b>>3&3)) // length 0..3, 0 to EOF
			typ := rangelock.Type(b>>5&1 + 1)
			var res rangelock.Result
			switch a >> 4 & 7 {
			case 0, 1, 2:
				ans, res2, err := table.Set(now, rangelock.Request{Key: key, NS: ns, Owner: o, Type: typ, Range: r, Wait: a>>7 == 1, Tag: tag})
				if err != nil && !errors.Is(err, rangelock.ErrDeadlock) {
					t.Fatal(err)
				}
				if ans.State == rangelock.Granted {
					if ns == rangelock.POSIX {
						token(ans.Token)
						res = res2
					} else {
						res = res2
						for _, g := range res.Grants {
							token(g.Token)
						}
						token(ans.Token)
						res.Grants = nil
					}
				} else {
					res = res2
				}
			case 3, 4:
				res, _ = table.Unlock(now, key, ns, o, r)
			case 5:
				res, _ = table.ReleaseOwner(now, key, ns, o)
			case 6:
				res, _ = table.Cancel(now, o.Session, uint64(b))
			case 7:
				res = table.CloseSession(now, o.Session)
			}
			for _, g := range res.Grants {
				token(g.Token)
			}
			checkInvariants(t, table)
		}
	})
}

func conflicts(a, b rangelock.Lock) bool {
	return a.Owner != b.Owner && (a.Type == rangelock.Write || b.Type == rangelock.Write) &&
		a.Range.Start <= b.Range.End && b.Range.Start <= a.Range.End
}

func checkInvariants(t *testing.T, table *rangelock.Table) {
	t.Helper()
	ranges, waiters := 0, 0
	waitsFor := map[rangelock.Owner][]rangelock.Owner{}
	for _, key := range []string{"x", "y"} {
		for _, ns := range []rangelock.Namespace{rangelock.POSIX, rangelock.Flock} {
			hs := table.Holders(key, ns)
			ranges += len(hs)
			for i, h := range hs {
				for _, g := range hs[:i] {
					if conflicts(g, h) {
						t.Fatalf("%s %v: conflicting holders %v and %v", key, ns, g, h)
					}
					if g.Owner == h.Owner && (g.Range.End >= h.Range.Start || g.Range.End+1 == h.Range.Start && g.Type == h.Type) {
						t.Fatalf("%s %v: ranges of one owner out of order, overlapping or unmerged: %v, %v", key, ns, g, h)
					}
				}
			}
			checkQuery(t, table, key, ns, hs)
			ws := table.Waiters(key, ns)
			waiters += len(ws)
			for i, w := range ws {
				wl := rangelock.Lock{Owner: w.Owner, Type: w.Type, Range: w.Range}
				blocked := false
				for _, h := range hs {
					if conflicts(wl, h) {
						blocked = true
						waitsFor[w.Owner] = append(waitsFor[w.Owner], h.Owner)
					}
				}
				for _, e := range ws[:i] {
					if conflicts(wl, rangelock.Lock{Owner: e.Owner, Type: e.Type, Range: e.Range}) {
						blocked = true
						waitsFor[w.Owner] = append(waitsFor[w.Owner], e.Owner)
					}
				}
				if !blocked {
					t.Fatalf("%s %v: waiter %+v is held back by nothing", key, ns, w)
				}
			}
		}
	}
	if n := table.Counts(); n.Ranges != ranges || n.Waiters != waiters {
		t.Fatalf("counts %+v, want %d ranges, %d waiters", n, ranges, waiters)
	}
	// The wait-for graph has no cycle.
	state := map[rangelock.Owner]int{} // 1 on the path, 2 done
	var visit func(o rangelock.Owner)
	visit = func(o rangelock.Owner) {
		switch state[o] {
		case 1:
			t.Fatalf("wait-for cycle through %v: %v", o, waitsFor)
		case 2:
			return
		}
		state[o] = 1
		for _, p := range waitsFor[o] {
			visit(p)
		}
		state[o] = 2
	}
	for o := range waitsFor {
		visit(o)
	}
}

// queryProbes are the ranges checkQuery asks about.
var queryProbes = []rangelock.Range{rangelock.Whole, {Start: 0, End: 0}, {Start: 1, End: 2}, {Start: 4, End: 4}, {Start: 3, End: 6}}

// checkQuery compares Query's answers on key in ns, which the table
// finds through its index of held ranges, with the first conflicting
// lock in hs, Holders' list (which is in Query's order): for every
// holder and an outsider, each type and a few ranges.
func checkQuery(t *testing.T, table *rangelock.Table, key string, ns rangelock.Namespace, hs []rangelock.Lock) {
	t.Helper()
	owners := []rangelock.Owner{{Session: 99, ID: 99}}
	for _, h := range hs {
		if h.Owner != owners[len(owners)-1] {
			owners = append(owners, h.Owner)
		}
	}
	for _, o := range owners {
		for _, typ := range []rangelock.Type{rangelock.Read, rangelock.Write} {
			for _, r := range queryProbes {
				if ns == rangelock.Flock {
					r = rangelock.Whole
				}
				q := rangelock.Lock{Owner: o, Type: typ, Range: r}
				var want rangelock.Lock
				found := false
				for _, h := range hs {
					if conflicts(q, h) {
						want, found = h, true
						break
					}
				}
				got, ok, err := table.Query(key, ns, o, typ, r)
				if err != nil || ok != found || got != want {
					t.Fatalf("%s %v: Query %v: %v, %v, %v; want %v, %v", key, ns, q, got, ok, err, want, found)
				}
			}
		}
	}
}
