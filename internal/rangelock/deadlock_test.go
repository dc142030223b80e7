package rangelock_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/internal/rangelock"
)

// With C holding byte 1, A byte 0 and D byte 2, D waiting for byte 1 and
// Q for bytes 0–1, A may wait for byte 2: A would wait for D, D waits
// for C, and C for nobody. Q, the fourth owner, waits for A and D, but
// nobody waits for Q: a search that also followed D's request to the
// later waiter Q would see a cycle that is not there.
func TestDeadlockNoFalseAlarmFourOwners(t *testing.T) {
	b := newBench(t)
	ownQ := rangelock.Owner{Session: 4, ID: 1}
	b.set("k", px, ownC, wr, rng(1, 1), false, rangelock.Granted)
	b.set("k", px, ownA, wr, rng(0, 0), false, rangelock.Granted)
	b.set("k", px, ownD, wr, rng(2, 2), false, rangelock.Granted)
	b.set("k", px, ownD, wr, rng(1, 1), true, rangelock.Waiting)
	b.set("k", px, ownQ, wr, rng(0, 1), true, rangelock.Waiting)
	b.set("k", px, ownA, wr, rng(2, 2), true, rangelock.Waiting)
	// And C waiting for A's byte 0 does close a cycle: C → A → D → C.
	b.now = b.now.Add(time.Millisecond)
	if _, _, err := b.table.Set(b.now, rangelock.Request{Key: "k", NS: px, Owner: ownC, Type: wr, Range: rng(0, 0), Wait: true, Tag: 99}); !errors.Is(err, rangelock.ErrDeadlock) {
		t.Fatalf("C waiting for A: %v, want ErrDeadlock", err)
	}
}

// refGraph is the wait-for graph of docs/design/2026-12-07-range-locks.md built from the
// table's public view, for reference: every waiting request's edges to
// the owners of the conflicting holders and earlier waiters of its file.
type refGraph struct {
	holders map[string][]rangelock.Lock   // by file
	waiters map[string][]rangelock.Waiter // by file, in arrival order
	waiting map[rangelock.Owner][]refReq  // each owner's waiting requests
}

type refReq struct {
	file string
	lock rangelock.Lock
	n    int // the earlier waiters of its file
}

func refFile(key string, ns rangelock.Namespace) string { return key + "/" + ns.String() }

func newRefGraph(table *rangelock.Table, keys []string) *refGraph {
	g := &refGraph{holders: map[string][]rangelock.Lock{}, waiters: map[string][]rangelock.Waiter{}, waiting: map[rangelock.Owner][]refReq{}}
	for _, key := range keys {
		for _, ns := range []rangelock.Namespace{rangelock.POSIX, rangelock.Flock} {
			f := refFile(key, ns)
			g.holders[f] = table.Holders(key, ns)
			g.waiters[f] = table.Waiters(key, ns)
			for i, w := range g.waiters[f] {
				g.waiting[w.Owner] = append(g.waiting[w.Owner], refReq{f, rangelock.Lock{Owner: w.Owner, Type: w.Type, Range: w.Range}, i})
			}
		}
	}
	return g
}

// edges returns the owners request r waits for, and the steps it took
// to find them as the table's search counts them at most: one for the
// request, one for each holder and earlier waiter examined.
func (g *refGraph) edges(r refReq) (out []rangelock.Owner, steps int) {
	steps = 1 // the request itself
	for _, h := range g.holders[r.file] {
		steps++
		if conflicts(r.lock, h) {
			out = append(out, h.Owner)
		}
	}
	for _, w := range g.waiters[r.file][:r.n] {
		steps++
		if conflicts(r.lock, rangelock.Lock{Owner: w.Owner, Type: w.Type, Range: w.Range}) {
			out = append(out, w.Owner)
		}
	}
	return out, steps
}

// closes reports whether request r of owner r.lock.Owner closes a cycle:
// whether an owner it waits for reaches its owner. It explores all it
// reaches, and returns the holders and waiters examined: the most a
// search can need when there is no cycle.
func (g *refGraph) closes(r refReq) (cycle bool, steps int) {
	seen := map[rangelock.Owner]bool{}
	next, steps := g.edges(r)
	for len(next) > 0 {
		p := next[len(next)-1]
		next = next[:len(next)-1]
		if p == r.lock.Owner {
			cycle = true
		}
		if seen[p] {
			continue
		}
		seen[p] = true
		for _, q := range g.waiting[p] {
			out, n := g.edges(q)
			steps += n
			next = append(next, out...)
		}
	}
	return cycle, steps
}

// TestDeadlockAgainstReference runs random histories of five owners in
// three sessions on two keys, and checks every waiting request's answer
// against the reference graph: a request refused as a deadlock closes a
// cycle, and one queued does not. Every tenth history runs with a small
// search bound: a cycle is still never queued, and a request whose full
// search stays under the bound is answered as without one.
func TestDeadlockAgainstReference(t *testing.T) {
	histories := 3000
	if testing.Short() {
		histories = 300
	}
	owners := []rangelock.Owner{{Session: 1, ID: 1}, {Session: 1, ID: 2}, {Session: 2, ID: 1}, {Session: 2, ID: 2}, {Session: 3, ID: 1}}
	keys := []string{"x", "y"}
	refused, queued, bounded := 0, 0, 0
	for seed := range uint64(histories) {
		rnd := rand.New(rand.NewPCG(seed, 33))
		table := rangelock.New(&locktable.CounterTokens{})
		bound := 0
		if seed%10 == 9 {
			bound = 4 + rnd.IntN(12)
			table.SetLimits(rangelock.Limits{SearchBound: bound})
		}
		now := epoch
		var log []string
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("seed %d (bound %d): "+format+"\nhistory:\n%s", append(append([]any{seed, bound}, args...), strings.Join(log, "\n"))...)
		}
		for tag := uint64(1); tag <= 40; tag++ {
			now = now.Add(time.Millisecond)
			o := owners[rnd.IntN(len(owners))]
			key := keys[rnd.IntN(len(keys))]
			ns := rangelock.POSIX
			if rnd.IntN(5) == 0 {
				ns = rangelock.Flock
			}
			start := uint64(rnd.IntN(6))
			r := rng(start, start+uint64(rnd.IntN(3)))
			if ns == rangelock.Flock {
				r = rangelock.Whole
			}
			typ := rangelock.Type(rnd.IntN(2) + 1)
			switch op := rnd.IntN(20); {
			case op < 12:
				req := rangelock.Request{Key: key, NS: ns, Owner: o, Type: typ, Range: r, Wait: op < 10, Tag: tag}
				ans, _, err := table.Set(now, req)
				log = append(log, fmt.Sprintf("set %v %s %v %v %v wait=%v: %v %v", o, key, ns, typ, r, req.Wait, ans.State, err))
				if err != nil && !errors.Is(err, rangelock.ErrDeadlock) {
					fail("%v", err)
				}
				if !req.Wait || err == nil && ans.State != rangelock.Waiting {
					break
				}
				g := newRefGraph(table, keys)
				f := refFile(key, ns)
				// Queued, the request is its file's last waiter; refused,
				// it would have been.
				n := len(g.waiters[f])
				if err == nil {
					n--
				}
				cycle, steps := g.closes(refReq{f, rangelock.Lock{Owner: o, Type: typ, Range: r}, n})
				switch {
				case err == nil && cycle:
					fail("a request that closes a cycle was queued")
				case errors.Is(err, rangelock.ErrSearchBound) && !cycle && (bound == 0 || steps <= bound):
					fail("refused at the search bound %d, but the whole search takes %d steps", bound, steps)
				case err != nil && !errors.Is(err, rangelock.ErrSearchBound) && !cycle:
					fail("refused as a deadlock, but it closes no cycle")
				}
				switch {
				case errors.Is(err, rangelock.ErrSearchBound):
					bounded++
				case err != nil:
					refused++
				default:
					queued++
				}
			case op < 15:
				_, err := table.Unlock(now, key, ns, o, r)
				log = append(log, fmt.Sprintf("unlock %v %s %v %v: %v", o, key, ns, r, err))
			case op < 17:
				_, err := table.ReleaseOwner(now, key, ns, o)
				log = append(log, fmt.Sprintf("release %v %s %v: %v", o, key, ns, err))
			case op < 19:
				c := tag - 1 - uint64(rnd.IntN(int(min(tag-1, 8))+1))
				_, err := table.Cancel(now, o.Session, c)
				log = append(log, fmt.Sprintf("cancel s%d tag %d: %v", o.Session, c, err))
			default:
				table.CloseSession(now, o.Session)
				log = append(log, fmt.Sprintf("close s%d", o.Session))
			}
			checkInvariants(t, table)
		}
	}
	t.Logf("%d histories: %d waiting requests queued, %d refused as deadlocks, %d at the search bound", histories, queued, refused, bounded)
	if refused == 0 || queued == 0 || bounded == 0 {
		t.Fatal("the histories never reached one of the answers")
	}
}

// The deadlock search stops at its bound and then refuses, cycle or
// not: owners 0 to 39 each hold their byte and wait for the next, and
// an outsider waiting for byte 1 reaches all of them, without a cycle,
// in about 160 steps (the queue of 40, and for each owner's request its
// one conflicting holder: the index spares the search the 40 others).
// But only when some other waiting request conflicts with what the
// outsider holds (watched, here a bystander's wait for its byte): else
// nothing can lead back to it, and its request needs no search at all,
// whatever the bound.
func TestDeadlockSearchBound(t *testing.T) {
	for _, bound := range []int{0, 100} {
		for _, watched := range []bool{false, true} {
			table := rangelock.New(&locktable.CounterTokens{})
			table.SetLimits(rangelock.Limits{SearchBound: bound})
			own := func(i int) rangelock.Owner { return rangelock.Owner{Session: rangelock.SessionID(i + 1), ID: 1} }
			set := func(o rangelock.Owner, b uint64, wait bool) (rangelock.Answer, error) {
				ans, _, err := table.Set(epoch, rangelock.Request{Key: "k", NS: px, Owner: o, Type: wr, Range: rng(b, b), Wait: wait, Tag: b + 1})
				return ans, err
			}
			for i := range 41 {
				if _, err := set(own(i), uint64(i), false); err != nil {
					t.Fatal(err)
				}
			}
			// Built from the front, each wait reaches one owner only.
			for i := range 40 {
				if ans, err := set(own(i), uint64(i+1), true); err != nil || ans.State != rangelock.Waiting {
					t.Fatalf("bound %d: owner %d: %v, %v", bound, i, ans.State, err)
				}
			}
			outsider := rangelock.Owner{Session: 100, ID: 1}
			if _, err := set(outsider, 1000, false); err != nil {
				t.Fatal(err)
			}
			if watched {
				if ans, err := set(rangelock.Owner{Session: 200, ID: 1}, 1000, true); err != nil || ans.State != rangelock.Waiting {
					t.Fatalf("bound %d: the bystander's wait: %v, %v", bound, ans.State, err)
				}
			}
			ans, err := set(outsider, 1, true)
			if (bound == 0 || !watched) && (err != nil || ans.State != rangelock.Waiting) {
				t.Fatalf("bound %d, watched %v: the outsider's wait: %v, %v; want waiting, as there is no cycle", bound, watched, ans.State, err)
			}
			if bound != 0 && watched && !errors.Is(err, rangelock.ErrSearchBound) {
				t.Fatalf("bound %d: the watched outsider's wait: %v, %v; want ErrSearchBound", bound, ans.State, err)
			}
			// Owner 40 waiting for byte 0 closes the cycle 40 → 0 → … → 40:
			// refused either way.
			if _, err := set(own(40), 0, true); !errors.Is(err, rangelock.ErrDeadlock) || errors.Is(err, rangelock.ErrSearchBound) != (bound != 0) {
				t.Fatalf("bound %d, watched %v: owner 40 closing the cycle: %v", bound, watched, err)
			}
		}
	}
}
