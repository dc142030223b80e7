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

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

// TestRandomSessions applies random general (version 2) operations, with
// more sessions, claims and holders than the model checker can explore,
// and compares every answer, every Result and the whole Snapshot after
// every step with a naive reference written from the package doc: slices
// for holders and queues, a scan for every grant. Each seed is a subtest:
//
//	go test ./internal/locktable -run 'TestRandomSessions/seed=3$' -v
func TestRandomSessions(t *testing.T) {
	seeds, steps := 100, 600
	if testing.Short() {
		seeds = 10
	}
	stats := map[string]int{}
	for seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			r := &r2run{t: t, rng: rand.New(rand.NewPCG(uint64(seed), 0x7632)), now: epoch, stats: stats,
				table: locktable.New(&locktable.CounterTokens{}),
				ref:   &ref{locks: map[string]*refLock{}, sessions: map[locktable.SessionID]*refSession{}}}
			r.run(steps)
		})
	}
	if t.Failed() {
		return
	}
	for _, k := range []string{"granted/exclusive", "granted/shared", "granted/semaphore", "busy", "multi-grant",
		"err/" + locktable.ErrModeConflict.Error(), "err/" + locktable.ErrLimitMismatch.Error(),
		"released/expired", "dequeued/kick", "released/force", "released/revoked", "dequeued/shutdown"} {
		if stats[k] == 0 {
			t.Errorf("no %q in %d seeds: the random operations miss a state (%v)", k, seeds, stats)
		}
	}
	t.Logf("outcomes: %v", stats)
}

type refClaim struct {
	id        locktable.ClaimID
	sess      *refSession
	lock      *refLock
	mode      locktable.Mode
	holding   bool
	token     uint64
	queuedAt  time.Time
	grantedAt time.Time
}

type refSession struct {
	id       locktable.SessionID
	lease    time.Duration
	lastSeen time.Time
	peer     locktable.Peer
	label    string
	claims   map[locktable.ClaimID]*refClaim
}

type refLock struct {
	name    string
	limit   uint32
	holders []*refClaim
	queue   []*refClaim
}

type ref struct {
	locks    map[string]*refLock
	sessions map[locktable.SessionID]*refSession
	token    uint64
	shutdown bool
}

func (l *refLock) admits(m locktable.Mode) bool {
	switch m {
	case locktable.Exclusive:
		return len(l.holders) == 0
	case locktable.Shared:
		return !slices.ContainsFunc(l.holders, func(h *refClaim) bool { return h.mode == locktable.Exclusive })
	}
	return uint32(len(l.holders)) < l.limit
}

func (m *ref) event(kind locktable.EventKind, c *refClaim) locktable.Event {
	return locktable.Event{Kind: kind, Lock: c.lock.name, Session: c.sess.id, Claim: c.id, Mode: c.mode,
		Label: c.sess.label, Peer: c.sess.peer}
}

func (m *ref) grant(now time.Time, c *refClaim, res *locktable.Result) {
	m.token++
	c.holding, c.token, c.grantedAt = true, m.token, now
	c.lock.holders = append(c.lock.holders, c)
	ev := m.event(locktable.EventGranted, c)
	ev.Token, ev.Waited = c.token, now.Sub(c.queuedAt)
	res.Events = append(res.Events, ev)
}

func (m *ref) promote(now time.Time, l *refLock, res *locktable.Result) {
	for !m.shutdown && len(l.queue) > 0 && l.admits(l.queue[0].mode) {
		c := l.queue[0]
		l.queue = l.queue[1:]
		m.grant(now, c, res)
		res.Sends = append(res.Sends, locktable.Send{Kind: locktable.SendAcquired, Session: c.sess.id, Claim: c.id, Token: c.token})
	}
	if len(l.holders) == 0 && len(l.queue) == 0 && m.locks[l.name] == l {
		delete(m.locks, l.name)
	}
}

func (m *ref) end(now time.Time, c *refClaim, reason locktable.Reason, promote bool, res *locktable.Result) {
	delete(c.sess.claims, c.id)
	l := c.lock
	var ev locktable.Event
	if c.holding {
		l.holders = slices.DeleteFunc(l.holders, func(h *refClaim) bool { return h == c })
		ev = m.event(locktable.EventReleased, c)
		ev.Token, ev.Held = c.token, now.Sub(c.grantedAt)
	} else {
		l.queue = slices.DeleteFunc(l.queue, func(w *refClaim) bool { return w == c })
		ev = m.event(locktable.EventDequeued, c)
	}
	ev.Reason = reason
	res.Events = append(res.Events, ev)
	if promote {
		m.promote(now, l, res)
	}
}

func (m *ref) status(c *refClaim) locktable.Status {
	st := locktable.Status{State: locktable.Waiting, Deadline: c.sess.lastSeen.Add(c.sess.lease)}
	if c.holding {
		st.State, st.Token = locktable.Owner, c.token
	}
	return st
}

func (m *ref) claim(now time.Time, sid locktable.SessionID, cid locktable.ClaimID, req locktable.ClaimRequest) (locktable.Status, locktable.Result, error) {
	var res locktable.Result
	s := m.sessions[sid]
	switch {
	case m.shutdown:
		return locktable.Status{}, res, locktable.ErrShutdown
	case s == nil:
		return locktable.Status{}, res, locktable.ErrNoSession
	}
	if err := protocol.ValidateName(req.Name); err != nil {
		return locktable.Status{}, res, err
	}
	l := m.locks[req.Name]
	switch {
	case req.Mode < locktable.Exclusive || req.Mode > locktable.Semaphore:
		return locktable.Status{}, res, locktable.ErrInvalidMode
	case req.Mode == locktable.Semaphore && req.Limit == 0:
		return locktable.Status{}, res, locktable.ErrInvalidLimit
	case s.claims[cid] != nil:
		return locktable.Status{}, res, locktable.ErrClaimExists
	case l != nil && (req.Mode == locktable.Semaphore) != (l.limit > 0):
		return locktable.Status{}, res, locktable.ErrModeConflict
	case l != nil && req.Mode == locktable.Semaphore && req.Limit != l.limit:
		return locktable.Status{}, res, locktable.ErrLimitMismatch
	}
	s.lastSeen = now
	if l == nil {
		l = &refLock{name: req.Name}
		if req.Mode == locktable.Semaphore {
			l.limit = req.Limit
		}
	}
	c := &refClaim{id: cid, sess: s, lock: l, mode: req.Mode, queuedAt: now}
	switch {
	case len(l.queue) == 0 && l.admits(req.Mode):
		m.locks[req.Name] = l
		m.grant(now, c, &res)
	case req.NoWait:
		return locktable.Status{State: locktable.Busy, Deadline: now.Add(s.lease)}, res, nil
	default:
		l.queue = append(l.queue, c)
	}
	s.claims[cid] = c
	return m.status(c), res, nil
}

func (m *ref) sortedClaims(s *refSession) []*refClaim {
	cs := make([]*refClaim, 0, len(s.claims))
	for _, c := range s.claims {
		cs = append(cs, c)
	}
	slices.SortFunc(cs, func(a, b *refClaim) int { return int(a.id) - int(b.id) })
	return cs
}

func (m *ref) closeSession(now time.Time, s *refSession, reason locktable.Reason) locktable.Result {
	var res locktable.Result
	for _, c := range m.sortedClaims(s) {
		m.end(now, c, reason, true, &res)
	}
	delete(m.sessions, s.id)
	return res
}

func (m *ref) names() []string {
	names := make([]string, 0, len(m.locks))
	for n := range m.locks {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func (m *ref) revoke(now time.Time, deny string, owners bool) locktable.Result {
	var res locktable.Result
	revoke := func(c *refClaim, promote bool) {
		res.Sends = append(res.Sends, locktable.Send{Kind: locktable.SendError, Session: c.sess.id, Claim: c.id, Code: protocol.CodeNotAuthorized})
		m.end(now, c, locktable.ReasonRevoked, promote, &res)
	}
	for _, name := range m.names() {
		l := m.locks[name]
		for _, w := range slices.Clone(l.queue) {
			if w.sess.peer.Identity == deny {
				revoke(w, false)
			}
		}
		m.promote(now, l, &res)
		if owners {
			for _, h := range slices.Clone(l.holders) {
				if h.holding && h.sess.peer.Identity == deny {
					revoke(h, true)
				}
			}
		}
	}
	return res
}

func (m *ref) shutdownAll(now time.Time) locktable.Result {
	var res locktable.Result
	m.shutdown = true
	for _, name := range m.names() {
		l := m.locks[name]
		for _, c := range append(slices.Clone(l.holders), l.queue...) {
			m.end(now, c, locktable.ReasonShutdown, false, &res)
		}
		delete(m.locks, name)
	}
	ids := make([]locktable.SessionID, 0, len(m.sessions))
	for id := range m.sessions {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		res.Sends = append(res.Sends, locktable.Send{Kind: locktable.SendSessionError, Session: id, Code: protocol.CodeShuttingDown})
		delete(m.sessions, id)
	}
	return res
}

func (m *ref) snapshot() []locktable.LockInfo {
	out := []locktable.LockInfo{}
	for _, name := range m.names() {
		l := m.locks[name]
		info := locktable.LockInfo{Name: name, Limit: l.limit, Holders: []locktable.HolderInfo{}, Waiters: []locktable.WaiterInfo{}}
		for _, h := range l.holders {
			s := h.sess
			info.Holders = append(info.Holders, locktable.HolderInfo{Session: s.id, Claim: h.id, Mode: h.mode, Label: s.label,
				Peer: s.peer, Since: h.grantedAt, Lease: s.lease, Token: h.token, LastSeen: s.lastSeen})
		}
		info.Holder = info.Holders[0]
		for _, w := range l.queue {
			s := w.sess
			info.Waiters = append(info.Waiters, locktable.WaiterInfo{Session: s.id, Claim: w.id, Mode: w.mode, Label: s.label,
				Peer: s.peer, QueuedAt: w.queuedAt, Lease: s.lease, LastSeen: s.lastSeen})
		}
		info.WaiterCount = len(info.Waiters)
		out = append(out, info)
	}
	return out
}

type r2run struct {
	t     *testing.T
	rng   *rand.Rand
	table *locktable.Table
	ref   *ref
	now   time.Time
	next  locktable.SessionID
	trace []string
	stats map[string]int
}

func (r *r2run) fatalf(format string, args ...any) {
	r.t.Helper()
	r.t.Fatalf("%s\nlast operations:\n  %s", fmt.Sprintf(format, args...), strings.Join(r.trace[max(0, len(r.trace)-12):], "\n  "))
}

// session picks a live session most of the time, otherwise any id,
// perhaps ended or unknown.
func (r *r2run) session() locktable.SessionID {
	if len(r.ref.sessions) > 0 && r.rng.IntN(10) < 7 {
		ids := make([]locktable.SessionID, 0, len(r.ref.sessions))
		for id := range r.ref.sessions {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		return ids[r.rng.IntN(len(ids))]
	}
	return locktable.SessionID(1 + r.rng.IntN(int(r.next)+1))
}

// key picks a live claim most of the time, otherwise any claim id of
// some session.
func (r *r2run) key() locktable.Key {
	sid := r.session()
	if s := r.ref.sessions[sid]; s != nil && len(s.claims) > 0 && r.rng.IntN(10) < 7 {
		cs := r.ref.sortedClaims(s)
		return locktable.Key{Session: sid, Claim: cs[r.rng.IntN(len(cs))].id}
	}
	return locktable.Key{Session: sid, Claim: locktable.ClaimID(1 + r.rng.IntN(6))}
}

var r2locks = []string{"a", "b", "c", "s2", "s3"}

func (r *r2run) compare(op string, got locktable.Result, err error, want locktable.Result, werr error) {
	r.t.Helper()
	if !errors.Is(err, werr) || (err == nil) != (werr == nil) {
		r.fatalf("%s: err = %v, reference says %v", op, err, werr)
	}
	if len(got.Sends)+len(want.Sends) > 0 && !reflect.DeepEqual(got.Sends, want.Sends) ||
		len(got.Events)+len(want.Events) > 0 && !reflect.DeepEqual(got.Events, want.Events) {
		r.fatalf("%s: result\n  %+v\nreference says\n  %+v", op, got, want)
	}
	grants := 0
	for _, ev := range got.Events {
		key := ev.Kind.String() + "/" + ev.Reason.String()
		if ev.Kind == locktable.EventGranted {
			key = "granted/" + ev.Mode.String()
			grants++
		}
		r.stats[key]++
	}
	if grants > 1 {
		r.stats["multi-grant"]++
	}
}

func (r *r2run) run(steps int) {
	shutdownAt := -1
	if r.rng.IntN(3) == 0 {
		shutdownAt = steps/2 + r.rng.IntN(steps/2)
	}
	for step := range steps {
		r.now = r.now.Add(time.Duration(r.rng.IntN(300)) * time.Millisecond)
		var op string
		switch n := r.rng.IntN(100); {
		case step == shutdownAt:
			op = "shutdown"
			r.compare(op, r.table.Shutdown(r.now), nil, r.ref.shutdownAll(r.now), nil)
		case n < 8:
			r.next++
			p := locktable.SessionParams{Lease: time.Duration(500+r.rng.IntN(3000)) * time.Millisecond,
				Peer:  locktable.Peer{Identity: []string{"alice", "bob", "mallory"}[r.rng.IntN(3)], Addr: fmt.Sprintf("h:%d", r.next)},
				Label: fmt.Sprintf("l%d", r.next)}
			op = fmt.Sprintf("open s=%d %+v", r.next, p)
			err := r.table.Open(r.now, r.next, p)
			var werr error
			if r.ref.shutdown {
				werr = locktable.ErrShutdown
			} else {
				r.ref.sessions[r.next] = &refSession{id: r.next, lease: p.Lease, lastSeen: r.now, peer: p.Peer, label: p.Label,
					claims: map[locktable.ClaimID]*refClaim{}}
			}
			r.compare(op, locktable.Result{}, err, locktable.Result{}, werr)
		case n < 50:
			k := locktable.Key{Session: r.session(), Claim: locktable.ClaimID(1 + r.rng.IntN(8))}
			name := r2locks[r.rng.IntN(len(r2locks))]
			req := locktable.ClaimRequest{Name: name, NoWait: r.rng.IntN(5) == 0}
			if strings.HasPrefix(name, "s") {
				req.Mode, req.Limit = locktable.Semaphore, uint32(name[1]-'0')
			} else {
				req.Mode = []locktable.Mode{locktable.Exclusive, locktable.Shared, locktable.Shared}[r.rng.IntN(3)]
			}
			if r.rng.IntN(15) == 0 {
				req.Mode, req.Limit = locktable.Semaphore, uint32(r.rng.IntN(4))
			}
			op = fmt.Sprintf("claim %v %+v", k, req)
			st, res, err := r.table.Claim(r.now, k.Session, k.Claim, req)
			wst, wres, werr := r.ref.claim(r.now, k.Session, k.Claim, req)
			r.compare(op, res, err, wres, werr)
			if st != wst {
				r.fatalf("%s: status %+v, reference says %+v", op, st, wst)
			}
			if err != nil {
				r.stats["err/"+err.Error()]++
			} else if st.State == locktable.Busy {
				r.stats["busy"]++
			}
		case n < 60:
			sid := r.session()
			op = fmt.Sprintf("touch s=%d", sid)
			d, err := r.table.Touch(r.now, sid)
			var werr error
			if s := r.ref.sessions[sid]; s == nil {
				werr = locktable.ErrNoSession
			} else {
				s.lastSeen = r.now
				if want := r.now.Add(s.lease); !d.Equal(want) {
					r.fatalf("%s: deadline %v, want %v", op, d, want)
				}
			}
			r.compare(op, locktable.Result{}, err, locktable.Result{}, werr)
		case n < 75:
			k := r.key()
			op = fmt.Sprintf("release %v", k)
			res, err := r.table.Release(r.now, k)
			var want locktable.Result
			var werr error
			if s := r.ref.sessions[k.Session]; s == nil || s.claims[k.Claim] == nil {
				werr = locktable.ErrNoClaim
			} else {
				s.lastSeen = r.now
				r.ref.end(r.now, s.claims[k.Claim], locktable.ReasonGraceful, true, &want)
			}
			r.compare(op, res, err, want, werr)
		case n < 79:
			sid := r.session()
			op = fmt.Sprintf("close s=%d", sid)
			var want locktable.Result
			if s := r.ref.sessions[sid]; s != nil {
				want = r.ref.closeSession(r.now, s, locktable.ReasonGraceful)
			}
			r.compare(op, r.table.CloseSession(r.now, sid, locktable.ReasonGraceful), nil, want, nil)
		case n < 88:
			r.now = r.now.Add(time.Duration(r.rng.IntN(2000)) * time.Millisecond)
			sid := r.session()
			op = fmt.Sprintf("expire s=%d", sid)
			res, err := r.table.ExpireSession(r.now, sid)
			var want locktable.Result
			var werr error
			switch s := r.ref.sessions[sid]; {
			case s == nil:
				werr = locktable.ErrNoSession
			case r.now.Sub(s.lastSeen) <= s.lease:
				werr = locktable.ErrNotExpired
			default:
				want = r.ref.closeSession(r.now, s, locktable.ReasonExpired)
			}
			r.compare(op, res, err, want, werr)
		case n < 96:
			k := r.key()
			name := r2locks[r.rng.IntN(len(r2locks))]
			if s := r.ref.sessions[k.Session]; s != nil && s.claims[k.Claim] != nil && r.rng.IntN(10) < 8 {
				name = s.claims[k.Claim].lock.name
			}
			kick := r.rng.IntN(2) == 0
			op = fmt.Sprintf("force/kick(%v) %s %v", kick, name, k)
			var res, want locktable.Result
			var err, werr error
			if kick {
				res, err = r.table.KickClaim(r.now, name, k)
			} else {
				res, err = r.table.ForceReleaseClaim(r.now, name, k)
			}
			var c *refClaim
			if s := r.ref.sessions[k.Session]; s != nil {
				c = s.claims[k.Claim]
			}
			switch {
			case r.ref.locks[name] == nil:
				werr = locktable.ErrNoLock
			case kick && (c == nil || c.lock.name != name || c.holding):
				werr = locktable.ErrNoWaiter
			case !kick && (c == nil || c.lock.name != name || !c.holding):
				werr = locktable.ErrNoHolder
			default:
				reason := locktable.ReasonForce
				if kick {
					reason = locktable.ReasonKick
				}
				want.Sends = append(want.Sends, locktable.Send{Kind: locktable.SendError, Session: c.sess.id, Claim: c.id, Code: protocol.CodeClosedByAdmin})
				r.ref.end(r.now, c, reason, true, &want)
			}
			r.compare(op, res, err, want, werr)
		default:
			deny := []string{"alice", "bob", "mallory"}[r.rng.IntN(3)]
			owners := r.rng.IntN(2) == 0
			op = fmt.Sprintf("revoke %s owners=%v", deny, owners)
			res := r.table.Revoke(r.now, func(p locktable.Peer, _ string) bool { return p.Identity != deny }, owners)
			r.compare(op, res, nil, r.ref.revoke(r.now, deny, owners), nil)
		}
		r.trace = append(r.trace, op)
		if got, want := r.table.Snapshot(nil), r.ref.snapshot(); !reflect.DeepEqual(got, want) {
			r.fatalf("after %s: Snapshot\n  %+v\nreference says\n  %+v", op, got, want)
		}
		held, waiting := 0, 0
		for _, l := range r.ref.locks {
			held += len(l.holders)
			waiting += len(l.queue)
		}
		if c := r.table.Counts(); c.Locks != len(r.ref.locks) || c.Waiters != waiting || r.table.Holders() != held || r.table.Sessions() != len(r.ref.sessions) {
			r.fatalf("after %s: counts %+v, %d holders, %d sessions; reference %d locks, %d waiters, %d holders, %d sessions",
				op, c, r.table.Holders(), r.table.Sessions(), len(r.ref.locks), waiting, held, len(r.ref.sessions))
		}
	}
}
