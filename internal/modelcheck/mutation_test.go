package modelcheck

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/locktable"
)

// The mutants below prove that the checker can fail: each breaks one
// property in a way a real bug could, and the checker must report exactly
// that property with a shortest counterexample.

// reuseTokens is a TokenSource that hands out its second token twice:
// 1, 2, 2, 3, ... The real table is driven with it unchanged.
type reuseTokens struct{ n, prev uint64 }

func (r *reuseTokens) Next() uint64 {
	r.n++
	if r.n != 3 {
		r.prev++
	}
	return r.prev
}

// promoteTail wraps the real table and reports every promotion from a
// queue of two or more as a grant to the tail instead of the head, as a
// table with a reversed queue would.
type promoteTail struct{ *locktable.Table }

func (p promoteTail) rewrite(res locktable.Result, before []locktable.LockInfo) locktable.Result {
	for i, ev := range res.Events {
		if ev.Kind != locktable.EventGranted {
			continue
		}
		for _, li := range before {
			if li.Name != ev.Lock || len(li.Waiters) < 2 || li.Waiters[0].Session != ev.Session {
				continue
			}
			tail := li.Waiters[len(li.Waiters)-1].Session
			res.Events[i].Session = tail
			for j, s := range res.Sends {
				if s.Kind == locktable.SendAcquired && s.Session == ev.Session {
					res.Sends[j].Session = tail
				}
			}
		}
	}
	return res
}

func (p promoteTail) End(now time.Time, id locktable.SessionID, reason locktable.Reason) locktable.Result {
	before := p.Snapshot(nil)
	return p.rewrite(p.Table.End(now, id, reason), before)
}

func (p promoteTail) Expire(now time.Time, id locktable.SessionID) (locktable.Result, error) {
	before := p.Snapshot(nil)
	res, err := p.Table.Expire(now, id)
	return p.rewrite(res, before), err
}

func (p promoteTail) ForceRelease(now time.Time, name string) (locktable.Result, error) {
	before := p.Snapshot(nil)
	res, err := p.Table.ForceRelease(now, name)
	return p.rewrite(res, before), err
}

// lostPromotion wraps the real table so that a graceful end of an owner
// with waiters reports the release but promotes nobody: the old owner
// lingers invisibly ("zombie") and its queue waits for ever. Every view
// it gives is consistent with that, so no safety property notices; only
// the liveness check can.
type lostPromotion struct {
	*locktable.Table
	zombies map[locktable.SessionID]bool
}

func newLostPromotion() Table {
	return &lostPromotion{Table: locktable.New(&locktable.CounterTokens{}), zombies: map[locktable.SessionID]bool{}}
}

func (z *lostPromotion) End(now time.Time, id locktable.SessionID, reason locktable.Reason) locktable.Result {
	if z.zombies[id] {
		return locktable.Result{}
	}
	for _, li := range z.Table.Snapshot(nil) {
		if li.Holder.Session == id && len(li.Waiters) > 0 {
			z.zombies[id] = true
			return locktable.Result{Events: []locktable.Event{{Kind: locktable.EventReleased,
				Lock: li.Name, Session: id, Peer: li.Holder.Peer, Token: li.Holder.Token, Reason: reason}}}
		}
	}
	return z.Table.End(now, id, reason)
}

func (z *lostPromotion) Heartbeat(now time.Time, id locktable.SessionID) (locktable.Status, error) {
	if z.zombies[id] {
		return locktable.Status{}, locktable.ErrNoClaim
	}
	return z.Table.Heartbeat(now, id)
}

func (z *lostPromotion) ForceRelease(now time.Time, name string) (locktable.Result, error) {
	if li, ok := z.Table.Lock(name); ok && z.zombies[li.Holder.Session] {
		return locktable.Result{}, locktable.ErrNoLock
	}
	return z.Table.ForceRelease(now, name)
}

// Revoke leaves zombies alone (they are known by their unique address).
func (z *lostPromotion) Revoke(now time.Time, allow func(locktable.Peer, string) bool, owners bool) locktable.Result {
	zombie := map[string]bool{}
	for _, li := range z.Table.Snapshot(nil) {
		if z.zombies[li.Holder.Session] {
			zombie[li.Holder.Peer.Addr] = true
		}
	}
	return z.Table.Revoke(now, func(p locktable.Peer, lock string) bool { return zombie[p.Addr] || allow(p, lock) }, owners)
}

func (z *lostPromotion) Shutdown(now time.Time) locktable.Result {
	res := z.Table.Shutdown(now)
	res.Events = slices.DeleteFunc(res.Events, func(e locktable.Event) bool { return z.zombies[e.Session] })
	res.Sends = slices.DeleteFunc(res.Sends, func(s locktable.Send) bool { return z.zombies[s.Session] })
	return res
}

func (z *lostPromotion) Snapshot(match func(string) bool) []locktable.LockInfo {
	return slices.DeleteFunc(z.Table.Snapshot(match), func(li locktable.LockInfo) bool { return z.zombies[li.Holder.Session] })
}

func (z *lostPromotion) Counts() locktable.Counts {
	n := z.Table.Counts()
	n.Locks = len(z.Snapshot(nil))
	return n
}

func TestTableMutantsAreCaught(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		cfg      TableConfig
		property string
		steps    int // length of the shortest counterexample, loop included
		mention  string
	}{
		{
			name:     "token reused",
			cfg:      TableConfig{Sessions: 3, Locks: 2, New: func() Table { return locktable.New(&reuseTokens{}) }},
			property: PropTokens,
			steps:    4,
			mention:  "token 2, not above the earlier token 2",
		},
		{
			name:     "tail promoted",
			cfg:      TableConfig{Sessions: 3, Locks: 2, New: func() Table { return promoteTail{locktable.New(&locktable.CounterTokens{})} }},
			property: PropFIFO,
			steps:    4,
			mention:  "s3#1 was granted \"a\" ahead of s2#1, who arrived first",
		},
		{
			name:     "tail promoted, one lock",
			cfg:      TableConfig{Sessions: 4, Locks: 1, New: func() Table { return promoteTail{locktable.New(&locktable.CounterTokens{})} }},
			property: PropFIFO,
			steps:    4,
			mention:  "ahead of s2#1",
		},
		{
			name:     "promotion lost",
			cfg:      TableConfig{Sessions: 3, Locks: 2, New: newLostPromotion},
			property: PropLiveness,
			steps:    4,
			mention:  "waits forever",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := CheckTable(tc.cfg)
			t.Logf("%v", rep)
			v := rep.Violation
			if v == nil {
				t.Fatalf("the checker found no violation in %d states", rep.States)
			}
			if v.Property != tc.property {
				t.Fatalf("violated %q, want %q", v.Property, tc.property)
			}
			if v.Steps() != tc.steps {
				t.Errorf("counterexample has %d steps, want the shortest, %d", v.Steps(), tc.steps)
			}
			if !strings.Contains(v.Error(), tc.mention) {
				t.Errorf("counterexample does not mention %q", tc.mention)
			}
		})
	}
}

// The wrappers must be faithful where they do not mutate, or the tests
// above would prove nothing about the checker: below the size at which
// each mutation can act, the checker must find nothing.
func TestMutantWrappersAreOtherwiseFaithful(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]TableConfig{
		"promoteTail, at most one waiter": {Sessions: 2, Locks: 2, Lives: 3,
			New: func() Table { return promoteTail{locktable.New(&locktable.CounterTokens{})} }},
		"lostPromotion, no waiters": {Sessions: 1, Locks: 2, Lives: 3, New: newLostPromotion},
	} {
		if rep := CheckTable(cfg); rep.Violation != nil {
			t.Errorf("%s: %v", name, rep.Violation)
		} else {
			t.Logf("%s: %v", name, rep)
		}
	}
}
