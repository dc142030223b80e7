package locktable_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

// TestRandomOperations applies random operations to a Table and, after
// every step, compares it with a small reference model written from
// docs/protocol.md rather than from the table's code: the exact status, error,
// sends and events of each operation, and the whole Snapshot. It also
// checks the cross-cutting invariants by themselves, so that a failure
// names the rule that broke. Each seed is a subtest:
//
//	go test ./internal/locktable -run 'TestRandomOperations/seed=17$' -v
func TestRandomOperations(t *testing.T) {
	seeds, steps := 200, 500
	if testing.Short() {
		seeds = 20
	}
	stats := map[string]int{}
	for seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			r := newRandomRun(t, uint64(seed))
			r.run(steps)
			for k, v := range r.stats {
				stats[k] += v
			}
		})
	}
	if t.Failed() || len(stats) == 0 {
		return
	}
	// Every outcome must have happened, or the invariants were checked
	// against a table that never reached the interesting states.
	want := []string{"granted", "granted/after-wait", "acquire/owner", "acquire/waiting",
		"acquire/" + locktable.ErrClaimExists.Error(), "acquire/" + locktable.ErrShutdown.Error(),
		"acquire/" + protocol.ErrInvalidLease.Error(), "acquire/" + protocol.ErrEmptyName.Error(),
		"acquire/" + protocol.ErrNameTooLong.Error(), "acquire/" + protocol.ErrInvalidName.Error()}
	for _, reason := range locktable.Reasons {
		want = append(want, "dequeued/"+reason.String())
		if reason != locktable.ReasonKick {
			want = append(want, "released/"+reason.String())
		}
	}
	for _, k := range want {
		if stats[k] == 0 {
			t.Errorf("no %q in %d seeds: the random operations miss a state (%v)", k, seeds, stats)
		}
	}
	t.Logf("outcomes: %v", stats)
}

type mClaim struct {
	id        locktable.SessionID
	lock      string
	peer      locktable.Peer
	lease     time.Duration
	lastSeen  time.Time
	queuedAt  time.Time
	grantedAt time.Time
	token     uint64 // 0 while waiting
}

type mLock struct {
	owner *mClaim
	queue []*mClaim // arrival order
}

// model is the reference: locks by name, live claims by id.
type model struct {
	locks     map[string]*mLock
	claims    map[locktable.SessionID]*mClaim
	shutdown  bool
	lastToken uint64
	clock     bool       // tokens from ClockTokens on wall, else a counter
	wall      *time.Time // shared with the table's ClockTokens
}

func (m *model) nextToken() uint64 {
	tok := m.lastToken + 1
	if m.clock {
		if floor := uint64(m.wall.Unix()) << 20; floor > tok {
			tok = floor
		}
	}
	m.lastToken = tok
	return tok
}

func (m *model) status(c *mClaim) locktable.Status {
	st := locktable.Status{State: locktable.Waiting, Deadline: c.lastSeen.Add(c.lease)}
	if m.locks[c.lock].owner == c {
		st.State, st.Token = locktable.Owner, c.token
	}
	return st
}

func (m *model) grant(now time.Time, c *mClaim, res *locktable.Result) {
	m.locks[c.lock].owner = c
	c.token = m.nextToken()
	c.grantedAt = now
	res.Events = append(res.Events, locktable.Event{Kind: locktable.EventGranted, Lock: c.lock,
		Session: c.id, Mode: locktable.Exclusive, Peer: c.peer, Token: c.token, Waited: now.Sub(c.queuedAt)})
}

func (m *model) acquire(now time.Time, id locktable.SessionID, req locktable.Request) (locktable.Status, locktable.Result, error) {
	var res locktable.Result
	if m.shutdown {
		return locktable.Status{}, res, locktable.ErrShutdown
	}
	// Protocol order: lease before name.
	if req.Lease <= 0 {
		return locktable.Status{}, res, protocol.ErrInvalidLease
	}
	switch {
	case req.Name == "":
		return locktable.Status{}, res, protocol.ErrEmptyName
	case len(req.Name) > 255:
		return locktable.Status{}, res, protocol.ErrNameTooLong
	case !utf8.ValidString(req.Name):
		return locktable.Status{}, res, protocol.ErrInvalidName
	}
	if m.claims[id] != nil {
		return locktable.Status{}, res, locktable.ErrClaimExists
	}
	c := &mClaim{id: id, lock: req.Name, peer: req.Peer, lease: req.Lease, lastSeen: now, queuedAt: now}
	m.claims[id] = c
	l := m.locks[req.Name]
	if l == nil {
		l = &mLock{}
		m.locks[req.Name] = l
		m.grant(now, c, &res)
	} else {
		l.queue = append(l.queue, c)
	}
	return m.status(c), res, nil
}

func (m *model) heartbeat(now time.Time, id locktable.SessionID) (locktable.Status, error) {
	c := m.claims[id]
	if c == nil {
		return locktable.Status{}, locktable.ErrNoClaim
	}
	c.lastSeen = now
	return m.status(c), nil
}

// end removes c: an owner releases and, unless the table is shutting
// down, the head of the queue is granted and pushed ACQUIRED; a waiter
// leaves its queue.
func (m *model) end(now time.Time, c *mClaim, reason locktable.Reason, res *locktable.Result) {
	delete(m.claims, c.id)
	l := m.locks[c.lock]
	if l.owner != c {
		i := slices.Index(l.queue, c)
		l.queue = slices.Delete(l.queue, i, i+1)
		res.Events = append(res.Events, locktable.Event{Kind: locktable.EventDequeued, Lock: c.lock,
			Session: c.id, Mode: locktable.Exclusive, Peer: c.peer, Reason: reason})
		return
	}
	res.Events = append(res.Events, locktable.Event{Kind: locktable.EventReleased, Lock: c.lock,
		Session: c.id, Mode: locktable.Exclusive, Peer: c.peer, Token: c.token, Reason: reason, Held: now.Sub(c.grantedAt)})
	l.owner = nil
	if m.shutdown {
		return
	}
	if len(l.queue) == 0 {
		delete(m.locks, c.lock)
		return
	}
	next := l.queue[0]
	l.queue = l.queue[1:]
	m.grant(now, next, res)
	res.Sends = append(res.Sends, locktable.Send{Kind: locktable.SendAcquired, Session: next.id, Token: next.token})
}

func (m *model) endID(now time.Time, id locktable.SessionID, reason locktable.Reason) locktable.Result {
	var res locktable.Result
	if c := m.claims[id]; c != nil {
		m.end(now, c, reason, &res)
	}
	return res
}

func (m *model) expire(now time.Time, id locktable.SessionID) (locktable.Result, error) {
	var res locktable.Result
	c := m.claims[id]
	if c == nil {
		return res, locktable.ErrNoClaim
	}
	if now.Sub(c.lastSeen) <= c.lease {
		return res, locktable.ErrNotExpired
	}
	m.end(now, c, locktable.ReasonExpired, &res)
	return res, nil
}

func (m *model) forceRelease(now time.Time, name string) (locktable.Result, error) {
	var res locktable.Result
	l := m.locks[name]
	if l == nil {
		return res, locktable.ErrNoLock
	}
	res.Sends = append(res.Sends, locktable.Send{Kind: locktable.SendError, Session: l.owner.id, Code: protocol.CodeClosedByAdmin})
	m.end(now, l.owner, locktable.ReasonForce, &res)
	return res, nil
}

func (m *model) kick(now time.Time, name, addr string) (locktable.Result, error) {
	var res locktable.Result
	l := m.locks[name]
	if l == nil {
		return res, locktable.ErrNoLock
	}
	for _, w := range l.queue {
		if w.peer.Addr == addr {
			res.Sends = append(res.Sends, locktable.Send{Kind: locktable.SendError, Session: w.id, Code: protocol.CodeClosedByAdmin})
			m.end(now, w, locktable.ReasonKick, &res)
			return res, nil
		}
	}
	return res, locktable.ErrNoWaiter
}

func (m *model) shutdownAll(now time.Time) locktable.Result {
	var res locktable.Result
	m.shutdown = true
	names := make([]string, 0, len(m.locks))
	for name := range m.locks {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		l := m.locks[name]
		for _, c := range append([]*mClaim{l.owner}, l.queue...) {
			res.Sends = append(res.Sends, locktable.Send{Kind: locktable.SendError, Session: c.id, Code: protocol.CodeShuttingDown})
			m.end(now, c, locktable.ReasonShutdown, &res)
		}
		delete(m.locks, name)
	}
	return res
}

func (m *model) snapshot() []locktable.LockInfo {
	out := []locktable.LockInfo{}
	for name, l := range m.locks {
		o := l.owner
		info := locktable.LockInfo{Name: name, Holder: locktable.HolderInfo{Session: o.id, Mode: locktable.Exclusive, Peer: o.peer,
			Since: o.grantedAt, Lease: o.lease, Token: o.token, LastSeen: o.lastSeen, V1: true},
			Waiters: []locktable.WaiterInfo{}}
		for _, w := range l.queue {
			info.Waiters = append(info.Waiters, locktable.WaiterInfo{Session: w.id, Mode: locktable.Exclusive, Peer: w.peer,
				QueuedAt: w.queuedAt, Lease: w.lease, LastSeen: w.lastSeen, V1: true})
		}
		info.WaiterCount = len(info.Waiters)
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b locktable.LockInfo) int { return strings.Compare(a.Name, b.Name) })
	return out
}

type randomRun struct {
	t      *testing.T
	seed   uint64
	rng    *rand.Rand
	table  *locktable.Table
	m      *model
	now    time.Time
	wall   time.Time
	nextID locktable.SessionID
	ended  []locktable.SessionID // ids that ended and were not reused
	trace  []traceEntry          // operations so far, formatted only on failure
	step   int
	// shutdownAt is the step at which the table shuts down (half of the
	// seeds), late enough for the queues to have filled; -1 for never.
	shutdownAt int

	grantTokens []uint64       // in grant order
	stats       map[string]int // outcomes seen, so the test cannot pass vacuously
}

var lockNames = []string{"a", "b", "c", "d", "é"}

func newRandomRun(t *testing.T, seed uint64) *randomRun {
	r := &randomRun{t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, 0x6261746f6e)), now: epoch,
		wall: time.Unix(1_700_000_000, 0), nextID: 1, stats: map[string]int{}}
	r.m = &model{locks: map[string]*mLock{}, claims: map[locktable.SessionID]*mClaim{}, wall: &r.wall}
	var src locktable.TokenSource = &locktable.CounterTokens{}
	if seed%2 == 1 {
		r.m.clock = true
		// Started long ago: the model has no first-second wait, and the
		// run stays far below the grant rate cap.
		src = &locktable.ClockTokens{Now: func() time.Time { return r.wall }, Start: time.Unix(0, 0)}
	}
	r.table = locktable.New(src)
	r.shutdownAt = -1
	if r.rng.IntN(2) == 0 {
		r.shutdownAt = 250 + r.rng.IntN(250)
	}
	return r
}

func (r *randomRun) fatalf(format string, args ...any) {
	r.t.Helper()
	var ops []string
	for _, e := range r.trace[max(0, len(r.trace)-15):] {
		ops = append(ops, fmt.Sprintf("t=%v ", e.at)+fmt.Sprintf(e.format, e.args...))
	}
	r.t.Fatalf("seed %d, step %d: %s\nlast operations:\n  %s", r.seed, r.step,
		fmt.Sprintf(format, args...), strings.Join(ops, "\n  "))
}

type traceEntry struct {
	at     time.Duration
	format string
	args   []any
}

func (r *randomRun) log(format string, args ...any) {
	r.trace = append(r.trace, traceEntry{r.now.Sub(epoch), format, args})
}

// someID picks a live claim most of the time, otherwise an ended or an
// unknown id.
func (r *randomRun) someID() locktable.SessionID {
	switch n := r.rng.IntN(10); {
	case n < 7 && len(r.m.claims) > 0:
		ids := make([]locktable.SessionID, 0, len(r.m.claims))
		for id := range r.m.claims {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		return ids[r.rng.IntN(len(ids))]
	case n < 9 && len(r.ended) > 0:
		return r.ended[r.rng.IntN(len(r.ended))]
	}
	return r.nextID + 1000
}

func (r *randomRun) someLock() string {
	if r.rng.IntN(10) == 0 {
		return "absent"
	}
	return lockNames[r.rng.IntN(len(lockNames))]
}

func (r *randomRun) someAddr() string { return fmt.Sprintf("10.0.0.%d:1", r.rng.IntN(4)) }

func (r *randomRun) run(steps int) {
	for r.step = 0; r.step < steps; r.step++ {
		r.now = r.now.Add(time.Duration(r.rng.IntN(200)) * time.Millisecond)
		// The wall clock wanders, sometimes backwards.
		r.wall = r.wall.Add(time.Duration(r.rng.IntN(3000)-1000) * time.Millisecond)
		before := maps(r.m.claims)
		var res locktable.Result
		switch n := r.rng.IntN(100); {
		case r.step == r.shutdownAt:
			r.log("shutdown")
			res = r.table.Shutdown(r.now)
			r.compareResult("Shutdown", res, nil, r.m.shutdownAll(r.now), nil)
		case n < 30:
			res = r.acquire()
		case n < 50:
			id := r.someID()
			r.log("heartbeat c=%d", id)
			got, err := r.table.Heartbeat(r.now, id)
			want, werr := r.m.heartbeat(r.now, id)
			r.compareStatus("Heartbeat", got, err, want, werr)
		case n < 70:
			id := r.someID()
			reason := locktable.Reasons[r.rng.IntN(len(locktable.Reasons))]
			r.log("end c=%d reason=%v", id, reason)
			res = r.table.End(r.now, id, reason)
			r.compareResult("End", res, nil, r.m.endID(r.now, id, reason), nil)
		case n < 88:
			// Expiry comes with a jump in time, so that it succeeds often.
			r.now = r.now.Add(time.Duration(r.rng.IntN(1500)) * time.Millisecond)
			id := r.someID()
			r.log("expire c=%d", id)
			got, err := r.table.Expire(r.now, id)
			want, werr := r.m.expire(r.now, id)
			r.compareResult("Expire", got, err, want, werr)
			res = got
		case n < 94:
			name := r.someLock()
			r.log("force-release lock=%s", name)
			got, err := r.table.ForceRelease(r.now, name)
			want, werr := r.m.forceRelease(r.now, name)
			r.compareResult("ForceRelease", got, err, want, werr)
			res = got
		default:
			name, addr := r.someLock(), r.someAddr()
			r.log("kick lock=%s addr=%s", name, addr)
			got, err := r.table.Kick(r.now, name, addr)
			want, werr := r.m.kick(r.now, name, addr)
			r.compareResult("Kick", got, err, want, werr)
			res = got
		}
		r.checkResult(res, before)
		r.checkInvariants(before)
	}
}

// count records the kinds of outcome of one Result.
func (r *randomRun) count(res locktable.Result) {
	for _, ev := range res.Events {
		key := ev.Kind.String()
		if ev.Kind != locktable.EventGranted {
			key += "/" + ev.Reason.String()
		} else if ev.Waited > 0 {
			key += "/after-wait"
		}
		r.stats[key]++
	}
}

func maps(m map[locktable.SessionID]*mClaim) map[locktable.SessionID]bool {
	out := make(map[locktable.SessionID]bool, len(m))
	for id := range m {
		out[id] = true
	}
	return out
}

func (r *randomRun) acquire() locktable.Result {
	var id locktable.SessionID
	switch n := r.rng.IntN(100); {
	case n < 5:
		id = r.someID() // often live: ErrClaimExists
	case n < 8 && len(r.ended) > 0:
		id = r.ended[r.rng.IntN(len(r.ended))] // an ended id may be reused
	default:
		id = r.nextID
		r.nextID++
	}
	req := locktable.Request{
		Name:  lockNames[r.rng.IntN(len(lockNames))],
		Lease: time.Duration(50+r.rng.IntN(2000)) * time.Millisecond,
		Peer:  locktable.Peer{Addr: r.someAddr(), Identity: []string{"", "svc"}[r.rng.IntN(2)]},
	}
	switch r.rng.IntN(40) {
	case 0:
		req.Name = ""
	case 1:
		req.Name = strings.Repeat("n", 256)
	case 2:
		req.Name = "bad\xff"
	case 3:
		req.Lease = -time.Duration(r.rng.IntN(2)) * time.Second
	}
	r.log("acquire c=%d lock=%.10q lease=%v addr=%s", id, req.Name, req.Lease, req.Peer.Addr)
	st, res, err := r.table.Acquire(r.now, id, req)
	wst, wres, werr := r.m.acquire(r.now, id, req)
	r.compareStatus("Acquire", st, err, wst, werr)
	if err != nil {
		r.stats["acquire/"+err.Error()]++
	} else {
		r.stats["acquire/"+st.State.String()]++
	}
	r.compareResult("Acquire", res, nil, wres, nil)
	if err == nil {
		r.ended = slices.DeleteFunc(r.ended, func(e locktable.SessionID) bool { return e == id })
	}
	return res
}

func (r *randomRun) compareStatus(op string, got locktable.Status, err error, want locktable.Status, werr error) {
	r.t.Helper()
	if !errors.Is(err, werr) || (err == nil) != (werr == nil) {
		r.fatalf("%s: err = %v, model says %v", op, err, werr)
	}
	if got != want {
		r.fatalf("%s: status = %+v, model says %+v", op, got, want)
	}
}

func (r *randomRun) compareResult(op string, got locktable.Result, err error, want locktable.Result, werr error) {
	r.t.Helper()
	if !errors.Is(err, werr) || (err == nil) != (werr == nil) {
		r.fatalf("%s: err = %v, model says %v", op, err, werr)
	}
	if len(got.Sends) != len(want.Sends) || len(got.Events) != len(want.Events) ||
		(len(got.Sends) > 0 && !reflect.DeepEqual(got.Sends, want.Sends)) ||
		(len(got.Events) > 0 && !reflect.DeepEqual(got.Events, want.Events)) {
		r.fatalf("%s: result\n  %+v\nmodel says\n  %+v", op, got, want)
	}
}

// checkResult checks the rules every Result obeys, whatever the model.
func (r *randomRun) checkResult(res locktable.Result, before map[locktable.SessionID]bool) {
	r.t.Helper()
	r.count(res)
	granted := map[locktable.SessionID]uint64{}
	for _, ev := range res.Events {
		switch ev.Kind {
		case locktable.EventGranted:
			if r.table.ShuttingDown() {
				r.fatalf("grant after shutdown: %+v", ev)
			}
			if ev.Token <= r.lastGrantToken() {
				r.fatalf("token %d granted after token %d", ev.Token, r.lastGrantToken())
			}
			r.grantTokens = append(r.grantTokens, ev.Token)
			granted[ev.Session] = ev.Token
		case locktable.EventReleased, locktable.EventDequeued:
			r.ended = append(r.ended, ev.Session)
			// An ended claim holds nothing and answers no heartbeat.
			if _, err := r.table.Heartbeat(r.now, ev.Session); err != locktable.ErrNoClaim {
				r.fatalf("Heartbeat of ended claim %d: err = %v, want ErrNoClaim", ev.Session, err)
			}
		}
	}
	for _, s := range res.Sends {
		if !before[s.Session] {
			r.fatalf("send to claim %d, which did not exist: %+v", s.Session, s)
		}
		switch s.Kind {
		case locktable.SendAcquired:
			if tok, ok := granted[s.Session]; !ok || tok != s.Token {
				r.fatalf("promotion push %+v without a matching granted event (%v)", s, granted)
			}
		case locktable.SendError:
			want := protocol.CodeClosedByAdmin
			if r.table.ShuttingDown() {
				want = protocol.CodeShuttingDown
			}
			if s.Code != want {
				r.fatalf("send %+v, want code %v", s, want)
			}
		default:
			r.fatalf("send of unknown kind: %+v", s)
		}
	}
}

func (r *randomRun) lastGrantToken() uint64 {
	if len(r.grantTokens) == 0 {
		return 0
	}
	return r.grantTokens[len(r.grantTokens)-1]
}

// checkInvariants compares the whole table with the model and checks the
// structural rules directly.
func (r *randomRun) checkInvariants(before map[locktable.SessionID]bool) {
	r.t.Helper()
	snap := r.table.Snapshot(nil)
	if want := r.m.snapshot(); !sameLocks(snap, want) {
		r.fatalf("Snapshot\n  %+v\nmodel says\n  %+v", snap, want)
	}
	seen := map[locktable.SessionID]string{}
	waiters := 0
	for _, info := range snap {
		// One owner per lock, and a claim is in one place only.
		for _, id := range append([]locktable.SessionID{info.Holder.Session}, claimsOf(info.Waiters)...) {
			if where, dup := seen[id]; dup {
				r.fatalf("claim %d is in lock %q and in lock %q", id, where, info.Name)
			}
			seen[id] = info.Name
		}
		// FIFO: queue order is arrival order.
		for i := 1; i < len(info.Waiters); i++ {
			if info.Waiters[i].QueuedAt.Before(info.Waiters[i-1].QueuedAt) {
				r.fatalf("lock %q: queue not in arrival order: %+v", info.Name, info.Waiters)
			}
		}
		if l, ok := r.table.Lock(info.Name); !ok || !sameLocks([]locktable.LockInfo{l}, []locktable.LockInfo{info}) {
			r.fatalf("Lock(%q) = %+v, %v; Snapshot has %+v", info.Name, l, ok, info)
		}
		waiters += len(info.Waiters)
	}
	if c := r.table.Counts(); c.Locks != len(snap) || c.Waiters != waiters {
		r.fatalf("Counts() = %+v, Snapshot has %d locks and %d waiters", c, len(snap), waiters)
	}
	if len(seen) != len(r.m.claims) {
		r.fatalf("Snapshot holds %d claims, model %d", len(seen), len(r.m.claims))
	}
	if r.table.ShuttingDown() != r.m.shutdown {
		r.fatalf("ShuttingDown() = %v", r.table.ShuttingDown())
	}
	if r.m.shutdown && len(snap) != 0 {
		r.fatalf("locks left after shutdown: %+v", snap)
	}
}

// sameLocks compares snapshots field by field: reflect.DeepEqual would
// do, at several times the cost, on every step of every seed.
func sameLocks(a, b []locktable.LockInfo) bool {
	return slices.EqualFunc(a, b, func(x, y locktable.LockInfo) bool {
		return x.Name == y.Name && x.Holder == y.Holder && slices.Equal(x.Waiters, y.Waiters)
	})
}

func claimsOf(ws []locktable.WaiterInfo) []locktable.SessionID {
	ids := make([]locktable.SessionID, len(ws))
	for i, w := range ws {
		ids[i] = w.Session
	}
	return ids
}
