package locktable_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

// changes returns the SendChange frames of res to watch (sid, wid), as
// short strings.
func changes(res locktable.Result, sid locktable.SessionID, wid locktable.ClaimID) []string {
	var out []string
	for _, s := range res.Sends {
		if s.Kind == locktable.SendChange && s.Session == sid && s.Claim == wid {
			c := s.Change
			out = append(out, fmt.Sprintf("%v %d %q", c.Kind, c.Token, c.Value))
		}
	}
	return out
}

func TestWatchLifecycle(t *testing.T) {
	tb := locktable.New(&locktable.CounterTokens{})
	now := epoch
	for sid := range locktable.SessionID(4) {
		if err := tb.Open(now, sid+1, locktable.SessionParams{Lease: time.Second, Label: fmt.Sprint("s", sid+1),
			Peer: locktable.Peer{Identity: fmt.Sprint("id", sid+1)}}); err != nil {
			t.Fatal(err)
		}
	}
	must := func(res locktable.Result, err error) locktable.Result {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	claim := func(sid locktable.SessionID, cid locktable.ClaimID, value string) locktable.Result {
		t.Helper()
		_, res, err := tb.Claim(now, sid, cid, locktable.ClaimRequest{Name: "db", Mode: locktable.Exclusive, Value: value})
		return must(res, err)
	}
	want := func(got []string, want ...string) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Errorf("changes %q, want %q", got, want)
		}
	}

	// A watch of a free name is answered synced alone.
	want(changes(must(tb.Watch(now, 4, 9, "db")), 4, 9), `synced 0 ""`)
	// A grant with a value reaches the watch in one frame, with the
	// holder's label and identity.
	res := claim(1, 1, "10.0.0.1:5432")
	want(changes(res, 4, 9), `held 1 "10.0.0.1:5432"`)
	if c := res.Sends[0].Change; c.Label != "s1" || c.Identity != "id1" || c.Mode != protocol.ModeExclusive {
		t.Errorf("held change %+v lacks the holder's label, identity or mode", c)
	}
	// A second watch starts with the current holder.
	want(changes(must(tb.Watch(now, 3, 9, "db")), 3, 9), `held 1 "10.0.0.1:5432"`, `synced 0 ""`)
	// A waiter is not reported; its value waits with it.
	want(changes(claim(2, 1, "10.0.0.2:5432"), 4, 9))
	want(changes(must(tb.SetValue(now, locktable.Key{Session: 2, Claim: 1}, "10.0.0.2:6432")), 4, 9))
	// The holder's new value, then its end and the waiter's grant, in
	// the table's order, to both watches.
	want(changes(must(tb.SetValue(now, locktable.Key{Session: 1, Claim: 1}, "moved")), 4, 9), `value 1 "moved"`)
	res = must(tb.Release(now, locktable.Key{Session: 1, Claim: 1}))
	want(changes(res, 4, 9), `freed 1 ""`, `held 2 "10.0.0.2:6432"`)
	want(changes(res, 3, 9), `freed 1 ""`, `held 2 "10.0.0.2:6432"`)
	if info, _ := tb.Lock("db"); info.Watchers != 2 || info.Holder.Value != "10.0.0.2:6432" {
		t.Errorf("Lock: %d watchers, holder value %q", info.Watchers, info.Holder.Value)
	}

	// The watch id is one of the session's claim ids.
	if _, _, err := tb.Claim(now, 4, 9, locktable.ClaimRequest{Name: "x", Mode: locktable.Exclusive}); !errors.Is(err, locktable.ErrClaimExists) {
		t.Errorf("claim with a watch's id: %v", err)
	}
	if _, err := tb.Watch(now, 2, 1, "x"); !errors.Is(err, locktable.ErrClaimExists) {
		t.Errorf("watch with a claim's id: %v", err)
	}
	if _, err := tb.SetValue(now, locktable.Key{Session: 4, Claim: 9}, "v"); !errors.Is(err, locktable.ErrNoClaim) {
		t.Errorf("SetValue of a watch: %v", err)
	}
	if _, err := tb.SetValue(now, locktable.Key{Session: 2, Claim: 1}, strings.Repeat("v", protocol.MaxValueLen+1)); !errors.Is(err, protocol.ErrValueTooLong) {
		t.Errorf("SetValue too long: %v", err)
	}
	if _, err := tb.Watch(now, 4, 10, ""); !errors.Is(err, protocol.ErrEmptyName) {
		t.Errorf("watch of an empty name: %v", err)
	}

	// RELEASE of a watch ends it; so does the end of its session.
	must(tb.Release(now, locktable.Key{Session: 4, Claim: 9}))
	if tb.Watching(4, 9) {
		t.Error("a released watch still watches")
	}
	tb.CloseSession(now, 3, locktable.ReasonGraceful)
	res = tb.CloseSession(now, 2, locktable.ReasonGraceful)
	if n := len(changes(res, 3, 9)) + len(changes(res, 4, 9)); n != 0 || tb.WatchCount() != 0 {
		t.Errorf("ended watches got %d changes; %d watches left", n, tb.WatchCount())
	}
}

func TestWatchLimitsAndRevoke(t *testing.T) {
	tb := locktable.New(&locktable.CounterTokens{})
	now := epoch
	tb.SetLimits(locktable.Limits{Claims: 2})
	for sid, id := range map[locktable.SessionID]string{1: "ok", 2: "bad"} {
		if err := tb.Open(now, sid, locktable.SessionParams{Lease: time.Second, Peer: locktable.Peer{Identity: id}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := tb.Claim(now, 1, 1, locktable.ClaimRequest{Name: "a", Mode: locktable.Shared}); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Watch(now, 1, 2, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Watch(now, 1, 3, "b"); !errors.Is(err, locktable.ErrTooManyClaims) {
		t.Errorf("a watch over the session's claims limit: %v", err)
	}
	if _, _, err := tb.Claim(now, 1, 3, locktable.ClaimRequest{Name: "b", Mode: locktable.Shared}); !errors.Is(err, locktable.ErrTooManyClaims) {
		t.Errorf("a claim over the limit, watches counted: %v", err)
	}
	if _, err := tb.Watch(now, 2, 1, "a"); err != nil {
		t.Fatal(err)
	}
	res := tb.Revoke(now, func(p locktable.Peer, _ string) bool { return p.Identity != "bad" }, false)
	if len(res.Sends) != 1 || res.Sends[0].Kind != locktable.SendError || res.Sends[0].Session != 2 || res.Sends[0].Code != protocol.CodeNotAuthorized {
		t.Errorf("revoke sends %+v, want one ERROR 0x18 to the denied watch", res.Sends)
	}
	if tb.Watching(2, 1) || !tb.Watching(1, 2) {
		t.Error("revoke ended the wrong watches")
	}
	if ids := tb.EndWatches(1); !slices.Equal(ids, []locktable.ClaimID{2}) || tb.WatchCount() != 0 {
		t.Errorf("EndWatches = %v, %d left", ids, tb.WatchCount())
	}
}

// The value goes with the claim through an export and import (a planned
// move) and a re-assertion, and the new holder is reported there.
func TestValueMoves(t *testing.T) {
	src, dst := locktable.New(&locktable.CounterTokens{}), locktable.New(&locktable.CounterTokens{})
	now := epoch
	if err := src.Open(now, 1, locktable.SessionParams{Lease: time.Second}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := src.Claim(now, 1, 1, locktable.ClaimRequest{Name: "db", Mode: locktable.Exclusive, Value: "v1"}); err != nil {
		t.Fatal(err)
	}
	if err := dst.Open(now, 7, locktable.SessionParams{Lease: time.Second}); err != nil {
		t.Fatal(err)
	}
	if _, err := dst.Watch(now, 7, 1, "db"); err != nil {
		t.Fatal(err)
	}
	res, err := dst.Import(now, src.Export(now, nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := changes(res, 7, 1); !slices.Equal(got, []string{`held 1 "v1"`}) {
		t.Errorf("import told the watch %q", got)
	}
	if info, _ := dst.Lock("db"); info.Holder.Value != "v1" {
		t.Errorf("imported holder's value %q", info.Holder.Value)
	}
	re := locktable.New(&locktable.CounterTokens{})
	if err := re.Open(now, 2, locktable.SessionParams{Lease: time.Second}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := re.Reassert(now, 2, 1, locktable.ClaimRequest{Name: "db", Mode: locktable.Exclusive, Value: "v1"}, 5); err != nil {
		t.Fatal(err)
	}
	if info, _ := re.Lock("db"); info.Holder.Value != "v1" || info.Holder.Token != 5 {
		t.Errorf("re-asserted holder %+v", info.Holder)
	}
}

// TestRandomWatches applies random operations to a table with watches
// and checks, after every step, that each watch's picture (built only
// from its CHANGE frames) is the name's holders in grant order with
// their values, and that the tokens a watch of an exclusive lock is told
// strictly increase: a watcher never sees an older holder after a newer
// one.
func TestRandomWatches(t *testing.T) {
	seeds, steps := 200, 400
	if testing.Short() {
		seeds = 20
	}
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(uint64(seed), 0x3a7c))
		runWatchSeed(t, rng, steps, seed)
		if t.Failed() {
			return
		}
	}
}

type watchView struct {
	name    string
	holders []string // "token=value", in the order reported
	synced  bool
	last    uint64 // the last token reported held (exclusive names)
}

func runWatchSeed(t *testing.T, rng *rand.Rand, steps, seed int) {
	tb := locktable.New(&locktable.CounterTokens{})
	now := epoch
	names := []string{"a", "b", "s"} // s is a semaphore of 2
	views := map[locktable.Key]*watchView{}
	nextSID := locktable.SessionID(1)
	open := []locktable.SessionID{}
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d: "+format, append([]any{seed}, args...)...)
	}
	apply := func(res locktable.Result) {
		for _, s := range res.Sends {
			k := locktable.Key{Session: s.Session, Claim: s.Claim}
			v := views[k]
			switch {
			case s.Kind == locktable.SendError && v != nil:
				delete(views, k)
			case s.Kind != locktable.SendChange:
			case v == nil:
				fail("a change %+v to no watch", *s.Change)
			default:
				c := s.Change
				entry := fmt.Sprintf("%d=%s", c.Token, c.Value)
				switch c.Kind {
				case protocol.ChangeHeld:
					if c.Mode == protocol.ModeExclusive && c.Token <= v.last {
						fail("watch %v of %s told holder %d after %d", k, v.name, c.Token, v.last)
					}
					v.last = max(v.last, c.Token)
					v.holders = append(v.holders, entry)
				case protocol.ChangeValue, protocol.ChangeFreed:
					i := slices.IndexFunc(v.holders, func(h string) bool { return strings.HasPrefix(h, fmt.Sprint(c.Token, "=")) })
					if i < 0 {
						fail("watch %v told %v of token %d it never saw held", k, c.Kind, c.Token)
					}
					if c.Kind == protocol.ChangeFreed {
						v.holders = slices.Delete(v.holders, i, i+1)
					} else {
						v.holders[i] = entry
					}
				case protocol.ChangeSynced:
					v.synced = true
				}
			}
		}
	}
	for step := range steps {
		now = now.Add(time.Millisecond)
		var res locktable.Result
		var err error
		switch op := rng.IntN(10); {
		case op == 0 || len(open) == 0:
			if err := tb.Open(now, nextSID, locktable.SessionParams{Lease: time.Hour, Label: fmt.Sprint("s", nextSID)}); err != nil {
				fail("open: %v", err)
			}
			open = append(open, nextSID)
			nextSID++
		case op <= 3:
			sid, name := open[rng.IntN(len(open))], names[rng.IntN(len(names))]
			req := locktable.ClaimRequest{Name: name, Mode: locktable.Exclusive, Value: fmt.Sprint("v", step), NoWait: rng.IntN(3) == 0}
			if name == "s" {
				req.Mode, req.Limit = locktable.Semaphore, 2
			}
			_, res, err = tb.Claim(now, sid, locktable.ClaimID(rng.IntN(4)), req)
		case op == 4:
			sid := open[rng.IntN(len(open))]
			res, err = tb.SetValue(now, locktable.Key{Session: sid, Claim: locktable.ClaimID(rng.IntN(4))}, fmt.Sprint("p", step))
		case op <= 6:
			sid := open[rng.IntN(len(open))]
			k := locktable.Key{Session: sid, Claim: locktable.ClaimID(rng.IntN(6))}
			res, err = tb.Release(now, k)
			delete(views, k)
		case op == 7:
			sid, wid, name := open[rng.IntN(len(open))], locktable.ClaimID(4+rng.IntN(2)), names[rng.IntN(len(names))]
			if res, err = tb.Watch(now, sid, wid, name); err == nil {
				views[locktable.Key{Session: sid, Claim: wid}] = &watchView{name: name}
			}
		case op == 8:
			i := rng.IntN(len(open))
			res = tb.CloseSession(now, open[i], locktable.ReasonGraceful)
			for k := range views {
				if k.Session == open[i] {
					delete(views, k)
				}
			}
			open = slices.Delete(open, i, i+1)
		default:
			deny := fmt.Sprint("s", open[rng.IntN(len(open))])
			res = tb.Revoke(now, func(p locktable.Peer, _ string) bool { return rng.IntN(4) != 0 || deny == "" }, true)
		}
		if err != nil && !errors.Is(err, locktable.ErrNoClaim) && !errors.Is(err, locktable.ErrClaimExists) {
			fail("step %d: %v", step, err)
		}
		apply(res)
		for k, v := range views {
			if !v.synced {
				fail("watch %v not synced after its start", k)
			}
			var want []string
			if info, ok := tb.Lock(v.name); ok {
				for _, h := range info.Holders {
					want = append(want, fmt.Sprintf("%d=%s", h.Token, h.Value))
				}
			}
			if !slices.Equal(v.holders, want) {
				fail("step %d: watch %v of %s sees %v, the table has %v", step, k, v.name, v.holders, want)
			}
		}
	}
}

// A name that leaves the table ends its watches with ERROR 0x03 before
// its claims end: a watcher is never told that a holder that only moved
// was freed.
func TestWatchesMoveFirst(t *testing.T) {
	for _, move := range []struct {
		name string
		f    func(tb *locktable.Table, match func(string) bool) locktable.Result
	}{
		{"Evict", func(tb *locktable.Table, match func(string) bool) locktable.Result {
			return tb.Evict(epoch, match, protocol.CodeNotOwner, 0)
		}},
		{"EvictExcept", func(tb *locktable.Table, match func(string) bool) locktable.Result {
			return tb.EvictExcept(epoch, match, func(locktable.SessionID) bool { return false }, protocol.CodeNotOwner, protocol.CodeNotOwner)
		}},
		{"TellMoving", func(tb *locktable.Table, match func(string) bool) locktable.Result {
			res, _ := tb.TellMoving(epoch, match, func(locktable.SessionID) bool { return false }, protocol.CodeNotOwner, protocol.CodeNotOwner)
			return res
		}},
	} {
		tb := locktable.New(&locktable.CounterTokens{})
		for sid := range locktable.SessionID(2) {
			if err := tb.Open(epoch, sid+1, locktable.SessionParams{Lease: time.Second}); err != nil {
				t.Fatal(err)
			}
		}
		if _, _, err := tb.Claim(epoch, 1, 1, locktable.ClaimRequest{Name: "db", Mode: locktable.Exclusive, Value: "v"}); err != nil {
			t.Fatal(err)
		}
		for i, name := range []string{"db", "empty", "stays"} {
			if _, err := tb.Watch(epoch, 2, locktable.ClaimID(i+1), name); err != nil {
				t.Fatal(err)
			}
		}
		res := move.f(tb, func(name string) bool { return name != "stays" })
		var got []string
		for _, s := range res.Sends {
			if s.Session == 2 {
				got = append(got, fmt.Sprint(s.Kind, " ", s.Claim, " ", s.Code))
			}
		}
		want := []string{
			fmt.Sprint(locktable.SendError, " 1 ", protocol.CodeNotOwner),
			fmt.Sprint(locktable.SendError, " 2 ", protocol.CodeNotOwner),
		}
		if !slices.Equal(got, want) || !tb.Watching(2, 3) || tb.WatchCount() != 1 {
			t.Errorf("%s: the watcher was sent %q, want %q, and the watch of \"stays\" kept", move.name, got, want)
		}
	}
}
