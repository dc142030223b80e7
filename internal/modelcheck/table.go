package modelcheck

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"time"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

// Table is the part of *locktable.Table that the checker drives. The
// checker always explores the real table; the interface exists so that
// tests can wrap it with deliberate mutations and prove that the checker
// catches them.
type Table interface {
	Acquire(now time.Time, id locktable.SessionID, req locktable.Request) (locktable.Status, locktable.Result, error)
	Heartbeat(now time.Time, id locktable.SessionID) (locktable.Status, error)
	End(now time.Time, id locktable.SessionID, reason locktable.Reason) locktable.Result
	Expire(now time.Time, id locktable.SessionID) (locktable.Result, error)
	ForceRelease(now time.Time, name string) (locktable.Result, error)
	Kick(now time.Time, name, addr string) (locktable.Result, error)
	Revoke(now time.Time, allow func(p locktable.Peer, lock string) bool, owners bool) locktable.Result
	Shutdown(now time.Time) locktable.Result
	Snapshot(match func(name string) bool) []locktable.LockInfo
	Counts() locktable.Counts
}

var _ Table = (*locktable.Table)(nil)

// TableConfig bounds the lock-table model.
type TableConfig struct {
	Sessions int // clients; each makes its claims one after another
	Locks    int // lock names
	// Lives is how many claims each session makes over a run, one after
	// the other (a new claim is a new connection at the back of the
	// queue); 0 means 2.
	Lives int
	// New returns a fresh table under test. Nil means the real
	// locktable.New with CounterTokens.
	New func() Table
}

// Property names reported by the lock-table model.
const (
	PropOneOwner     = "at most one owner per lock"
	PropFIFO         = "queues in arrival order (FIFO grants)"
	PropTokens       = "tokens strictly increasing in grant order"
	PropOnePlace     = "a session is in at most one place"
	PropEndedNothing = "ended sessions hold nothing"
	PropShutdown     = "nothing granted after shutdown"
	PropConsistent   = "table agrees with its own results"
	PropLease        = "lease bookkeeping"
	PropNoPanic      = "the table does not panic"
	PropDeterminism  = "replay is deterministic"
	PropLiveness     = "a waiter that does not end is eventually granted"
)

func (c TableConfig) withDefaults() TableConfig {
	if c.Lives == 0 {
		c.Lives = 2
	}
	if c.New == nil {
		c.New = func() Table { return locktable.New(&locktable.CounterTokens{}) }
	}
	return c
}

func (c TableConfig) String() string {
	c = c.withDefaults()
	return fmt.Sprintf("%s × %s, %s per session", plural(c.Sessions, "session"), plural(c.Locks, "lock"), plural(c.Lives, "claim"))
}

// Validate reports bounds the checker cannot explore.
func (c TableConfig) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Sessions < 1 || c.Sessions > 8:
		return fmt.Errorf("sessions must be 1..8, not %d", c.Sessions)
	case c.Locks < 1 || c.Locks > 8:
		return fmt.Errorf("locks must be 1..8, not %d", c.Locks)
	case c.Lives < 1 || c.Lives > 8:
		return fmt.Errorf("lives must be 1..8, not %d", c.Lives)
	}
	return nil
}

type opKind uint8

const (
	opAcquire   opKind = iota + 1 // session s sends ACQUIRE for lock l
	opHeartbeat                   // session s sends HEARTBEAT
	opEnd                         // session s closes its connection
	opExpire                      // time passes session s's lease; the server expires it
	opForce                       // an administrator force-releases lock l
	opKick                        // an administrator kicks session s from its queue
	opShutdown                    // the server shuts down
	opRevoke                      // an ACL reload refuses session s: its waiting claim ends
	opRevokeAll                   // the same with holders revoked too: its claim ends either way
)

type tableOp struct {
	kind opKind
	s, l int8
}

// tick is how far time moves at every step; expiry moves it further, to
// just past the expiring claim's deadline. Absolute time is not part of
// the canonical state: the table uses time only for the expiry check, and
// the model can expire any live claim at any step (time passes its lease
// while the others keep sending heartbeats), so the set of futures of a
// state does not depend on the clock.
const tick = time.Millisecond

var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

type place uint8

const (
	waiting place = iota + 1
	owner
	ended
)

type claimRec struct {
	id       locktable.SessionID
	s, life  int
	lock     int
	arrival  int
	where    place
	token    uint64
	lease    time.Duration
	lastSeen time.Time
	addr     string
}

func (c *claimRec) String() string { return fmt.Sprintf("s%d#%d", c.s+1, c.life+1) }

// tableRun is one execution of the model: the real table plus the
// checker's own bookkeeping of what the table's results have said so far.
type tableRun struct {
	cfg      *TableConfig
	t        Table
	now      time.Time
	byID     map[locktable.SessionID]*claimRec
	live     []*claimRec   // per session: its live claim
	lives    []int         // per session: claims made
	owner    []*claimRec   // per lock, from the events
	queue    [][]*claimRec // per lock, in arrival order
	arrivals int
	shutdown bool
	maxToken uint64
	describe bool // format each step for a trace
}

type failure struct{ prop, detail string }

func fail(prop, format string, args ...any) *failure {
	return &failure{prop, fmt.Sprintf(format, args...)}
}

func newTableRun(cfg *TableConfig) *tableRun {
	return &tableRun{
		cfg:   cfg,
		t:     cfg.New(),
		now:   epoch,
		byID:  map[locktable.SessionID]*claimRec{},
		live:  make([]*claimRec, cfg.Sessions),
		lives: make([]int, cfg.Sessions),
		owner: make([]*claimRec, cfg.Locks),
		queue: make([][]*claimRec, cfg.Locks),
	}
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

var lockNames = [...]string{"a", "b", "c", "d", "e", "f", "g", "h"}

func lockName(l int) string { return lockNames[l] }

// peerAddr is the remote address of session s's claim number life: the
// address Kick picks a waiter by.
func peerAddr(s, life int) string { return peerAddrs[s][life] }

var peerAddrs = func() (a [8][8]string) {
	for s := range a {
		for life := range a[s] {
			a[s][life] = fmt.Sprintf("10.0.0.%d:%d", s+1, 40001+life)
		}
	}
	return a
}()

// sessionIdentity is the client identity of session s, which Revoke
// judges by.
func sessionIdentity(s int) string { return fmt.Sprintf("s%d", s+1) }

func claimID(s, life int) locktable.SessionID { return locktable.SessionID((s+1)*1000 + life + 1) }

func (r *tableRun) claimName(id locktable.SessionID) string {
	if c := r.byID[id]; c != nil {
		return c.String()
	}
	return fmt.Sprintf("claim %d", id)
}

// enabled lists the steps possible in the current state, in a fixed order.
func (r *tableRun) enabled() []tableOp {
	var ops []tableOp
	for s := range r.cfg.Sessions {
		if r.live[s] == nil && r.lives[s] < r.cfg.Lives {
			for l := range r.cfg.Locks {
				ops = append(ops, tableOp{kind: opAcquire, s: int8(s), l: int8(l)})
			}
		}
	}
	if r.shutdown {
		return ops // only refused ACQUIREs remain
	}
	for s := range r.cfg.Sessions {
		if r.live[s] != nil {
			for _, k := range []opKind{opHeartbeat, opEnd, opExpire, opKick, opRevoke, opRevokeAll} {
				ops = append(ops, tableOp{kind: k, s: int8(s)})
			}
		}
	}
	for l := range r.cfg.Locks {
		ops = append(ops, tableOp{kind: opForce, l: int8(l)})
	}
	return append(ops, tableOp{kind: opShutdown})
}

// step applies op to the table and checks the result against the
// properties; when full is set it also checks the table's introspection
// of the new state. With describe set, line is the step for a trace.
func (r *tableRun) step(op tableOp, full bool) (line string, f *failure) {
	defer func() {
		if p := recover(); p != nil {
			f = fail(PropNoPanic, "the table panicked: %v", p)
		}
	}()
	r.now = r.now.Add(tick)
	s, l := int(op.s), int(op.l)
	switch op.kind {
	case opAcquire:
		line, f = r.acquire(s, l)
	case opHeartbeat:
		c := r.live[s]
		st, err := r.t.Heartbeat(r.now, c.id)
		if err != nil {
			return "", fail(PropConsistent, "HEARTBEAT of live %s failed: %v", c, err)
		}
		c.lastSeen = r.now
		if r.describe {
			line = fmt.Sprintf("%s sends HEARTBEAT → %s", c, statusString(st))
		}
		if f := r.checkStatus(c, st); f != nil {
			return line, f
		}
	case opEnd:
		c := r.live[s]
		if r.describe {
			line = fmt.Sprintf("%s closes its connection (graceful end)", c)
		}
		res := r.t.End(r.now, c.id, locktable.ReasonGraceful)
		line, f = r.ended(line, res, locktable.ReasonGraceful, 0, c)
	case opExpire:
		c := r.live[s]
		deadline := c.lastSeen.Add(c.lease)
		if !r.now.After(deadline) {
			if full {
				// At the deadline itself the lease has not passed.
				if res, err := r.t.Expire(deadline, c.id); !errors.Is(err, locktable.ErrNotExpired) || len(res.Events)+len(res.Sends) > 0 {
					return "", fail(PropLease, "Expire of %s exactly at its deadline (lease %v after last seen) returned %v, %v; want ErrNotExpired",
						c, c.lease, formatResult(r, res), err)
				}
			}
			r.now = deadline.Add(time.Nanosecond)
		}
		if r.describe {
			line = fmt.Sprintf("time passes %s's lease (%v since last seen); the server expires it",
				c, r.now.Sub(c.lastSeen))
		}
		res, err := r.t.Expire(r.now, c.id)
		if err != nil {
			return line, fail(PropLease, "Expire of %s %v after it was last seen (lease %v) failed: %v",
				c, r.now.Sub(c.lastSeen), c.lease, err)
		}
		line, f = r.ended(line, res, locktable.ReasonExpired, 0, c)
	case opForce:
		o := r.owner[l]
		if r.describe {
			line = fmt.Sprintf("admin force-releases %q", lockName(l))
		}
		res, err := r.t.ForceRelease(r.now, lockName(l))
		if o == nil {
			if !errors.Is(err, locktable.ErrNoLock) || len(res.Events)+len(res.Sends) > 0 {
				return line, fail(PropConsistent, "force-release of unowned %q returned %s, %v; want ErrNoLock",
					lockName(l), formatResult(r, res), err)
			}
			if r.describe {
				line += " → no such lock"
			}
			break
		}
		if err != nil {
			return line, fail(PropConsistent, "force-release of %q owned by %s failed: %v", lockName(l), o, err)
		}
		line, f = r.ended(line, res, locktable.ReasonForce, protocol.CodeClosedByAdmin, o)
	case opKick:
		c := r.live[s]
		if r.describe {
			line = fmt.Sprintf("admin kicks %s (%s) from %q", c, c.addr, lockName(c.lock))
		}
		res, err := r.t.Kick(r.now, lockName(c.lock), c.addr)
		if c.where == owner {
			// Kick removes waiters only; the owner must stay.
			if !errors.Is(err, locktable.ErrNoWaiter) || len(res.Events)+len(res.Sends) > 0 {
				return line, fail(PropConsistent, "kick of %s, the owner of %q, returned %s, %v; want ErrNoWaiter",
					c, lockName(c.lock), formatResult(r, res), err)
			}
			if r.describe {
				line += " → no such waiter (it is the owner)"
			}
			break
		}
		if err != nil {
			return line, fail(PropConsistent, "kick of waiter %s from %q failed: %v", c, lockName(c.lock), err)
		}
		line, f = r.ended(line, res, locktable.ReasonKick, protocol.CodeClosedByAdmin, c)
	case opRevoke, opRevokeAll:
		c := r.live[s]
		all := op.kind == opRevokeAll
		if r.describe {
			line = fmt.Sprintf("an ACL reload refuses %s's identity (holders too: %v)", c, all)
		}
		deny := sessionIdentity(s)
		res := r.t.Revoke(r.now, func(p locktable.Peer, _ string) bool { return p.Identity != deny }, all)
		if c.where == owner && !all {
			// Without holders, an owner keeps its lock.
			if len(res.Events)+len(res.Sends) > 0 {
				return line, fail(PropConsistent, "revoking waiters only ended owner %s: %s", c, formatResult(r, res))
			}
			if r.describe {
				line += " → nothing (it is the owner)"
			}
			break
		}
		line, f = r.ended(line, res, locktable.ReasonRevoked, protocol.CodeNotAuthorized, c)
	case opShutdown:
		if r.describe {
			line = "the server shuts down"
		}
		var all []*claimRec
		for _, c := range r.live {
			if c != nil {
				all = append(all, c)
			}
		}
		r.shutdown = true
		res := r.t.Shutdown(r.now)
		line, f = r.ended(line, res, locktable.ReasonShutdown, protocol.CodeShuttingDown, all...)
	}
	if f == nil && full {
		f = r.verify()
	}
	return line, f
}

func (r *tableRun) acquire(s, l int) (line string, f *failure) {
	lease := time.Duration(s+1) * time.Second
	id := claimID(s, r.lives[s])
	req := locktable.Request{Name: lockName(l), Lease: lease,
		Peer: locktable.Peer{Addr: peerAddr(s, r.lives[s]), Identity: sessionIdentity(s)}}
	if r.shutdown {
		st, res, err := r.t.Acquire(r.now, id, req)
		if r.describe {
			line = fmt.Sprintf("s%d#%d sends ACQUIRE %q → refused (%v)", s+1, r.lives[s]+1, req.Name, err)
		}
		if !errors.Is(err, locktable.ErrShutdown) || st.State != 0 || len(res.Events)+len(res.Sends) > 0 {
			return line, fail(PropShutdown, "ACQUIRE after shutdown returned %s, %s, %v; want ErrShutdown",
				statusString(st), formatResult(r, res), err)
		}
		return line, nil
	}
	c := &claimRec{id: id, s: s, life: r.lives[s], lock: l, arrival: r.arrivals, where: waiting,
		lease: lease, lastSeen: r.now, addr: req.Peer.Addr}
	r.arrivals++
	r.lives[s]++
	r.byID[id] = c
	r.live[s] = c
	r.queue[l] = append(r.queue[l], c)
	st, res, err := r.t.Acquire(r.now, id, req)
	if r.describe {
		line = fmt.Sprintf("%s sends ACQUIRE %q (lease %v) → %s", c, req.Name, lease, statusString(st))
		if len(res.Events)+len(res.Sends) > 0 {
			line += "; " + formatResult(r, res)
		}
	}
	if err != nil {
		return line, fail(PropConsistent, "ACQUIRE of %s for %q failed: %v", c, req.Name, err)
	}
	if f := r.apply(res, c, 0, 0); f != nil {
		return line, f
	}
	return line, r.checkStatus(c, st)
}

// ended applies the result of an operation that must end targets for
// reason, sending each ERROR(code) first when code is not 0.
func (r *tableRun) ended(line string, res locktable.Result, reason locktable.Reason, code protocol.Code, targets ...*claimRec) (string, *failure) {
	if r.describe && len(res.Events)+len(res.Sends) > 0 {
		line += " → " + formatResult(r, res)
	}
	f := r.apply(res, nil, reason, code, targets...)
	if f != nil {
		return line, f
	}
	for _, c := range targets {
		if c.where != ended {
			return line, fail(PropEndedNothing, "%s was ended (%v) but the table reported no release or dequeue for it", c, reason)
		}
		if _, err := r.t.Heartbeat(r.now, c.id); !errors.Is(err, locktable.ErrNoClaim) {
			return line, fail(PropEndedNothing, "HEARTBEAT of %s after it ended (%v) returned %v; want ErrNoClaim", c, reason, err)
		}
	}
	return line, nil
}

// apply checks the events and sends of one result, in order, and updates
// the bookkeeping. answered is the claim whose own reply carries its grant
// (ACQUIRE), so it gets no push; targets are the claims the operation
// ends, for reason, each sent ERROR(code) when code is not 0.
func (r *tableRun) apply(res locktable.Result, answered *claimRec, reason locktable.Reason, code protocol.Code, targets ...*claimRec) *failure {
	var want []locktable.Send
	if code != 0 {
		for _, c := range targets {
			want = append(want, locktable.Send{Kind: locktable.SendError, Session: c.id, Code: code})
		}
	}
	for _, ev := range res.Events {
		c := r.byID[ev.Session]
		if c == nil {
			return fail(PropConsistent, "event %v names unknown claim %d", ev.Kind, ev.Session)
		}
		if ev.Lock != lockName(c.lock) {
			return fail(PropOnePlace, "event %v for %s names lock %q, but it claimed %q", ev.Kind, c, ev.Lock, lockName(c.lock))
		}
		l := c.lock
		switch ev.Kind {
		case locktable.EventGranted:
			switch {
			case r.shutdown:
				return fail(PropShutdown, "%s was granted %q (token %d) after shutdown", c, ev.Lock, ev.Token)
			case c.where != waiting:
				return fail(PropOnePlace, "%s was granted %q but it is not waiting (%v)", c, ev.Lock, c.where)
			case r.owner[l] != nil:
				return fail(PropOneOwner, "%s was granted %q while %s still owns it", c, ev.Lock, r.owner[l])
			case r.queue[l][0] != c:
				return fail(PropFIFO, "%s was granted %q ahead of %s, who arrived first", c, ev.Lock, r.queue[l][0])
			case ev.Token <= r.maxToken:
				return fail(PropTokens, "%s was granted %q with token %d, not above the earlier token %d", c, ev.Lock, ev.Token, r.maxToken)
			}
			r.maxToken = ev.Token
			r.queue[l] = r.queue[l][1:]
			c.where, c.token = owner, ev.Token
			r.owner[l] = c
			if c != answered {
				want = append(want, locktable.Send{Kind: locktable.SendAcquired, Session: c.id, Token: ev.Token})
			}
		case locktable.EventReleased, locktable.EventDequeued:
			if ev.Kind == locktable.EventReleased && (c.where != owner || r.owner[l] != c || ev.Token != c.token) {
				return fail(PropConsistent, "%s released %q with token %d, but it is %v with token %d", c, ev.Lock, ev.Token, c.where, c.token)
			}
			if ev.Kind == locktable.EventDequeued && c.where != waiting {
				return fail(PropConsistent, "%s left the queue of %q, but it is %v", c, ev.Lock, c.where)
			}
			if ev.Reason != reason || !slices.Contains(targets, c) {
				return fail(PropConsistent, "%s ended (%v, reason %v), but the operation ended %v for %v", c, ev.Kind, ev.Reason, targets, reason)
			}
			if c.where == owner {
				r.owner[l] = nil
			} else {
				r.queue[l] = slices.DeleteFunc(r.queue[l], func(w *claimRec) bool { return w == c })
			}
			c.where = ended
			r.live[c.s] = nil
		default:
			return fail(PropConsistent, "unknown event kind %v", ev.Kind)
		}
	}
	return checkSends(res.Sends, want, func(s []locktable.Send) string { return formatSends(r, s) })
}

func (r *tableRun) checkStatus(c *claimRec, st locktable.Status) *failure {
	return checkStatus(c, c.where, c.token, c.lastSeen.Add(c.lease), st)
}

// verify compares the table's own introspection with what its results
// have said: owners, queues in arrival order, tokens, leases, counts.
func (r *tableRun) verify() *failure {
	snap := r.t.Snapshot(nil)
	seen := map[locktable.SessionID]string{}
	where := func(id locktable.SessionID, as string) *failure {
		if prev, ok := seen[id]; ok {
			return fail(PropOnePlace, "%s is %s and also %s", r.claimName(id), prev, as)
		}
		seen[id] = as
		if c := r.byID[id]; c != nil && c.where == ended {
			return fail(PropEndedNothing, "%s ended but is still %s", c, as)
		}
		return nil
	}
	waiters := 0
	for _, li := range snap {
		if f := where(li.Holder.Session, "owner of "+li.Name); f != nil {
			return f
		}
		for _, w := range li.Waiters {
			if f := where(w.Session, "waiting for "+li.Name); f != nil {
				return f
			}
			waiters++
		}
		// Arrival order, judged by the checker's own record of arrivals.
		for i := 1; i < len(li.Waiters); i++ {
			a, b := r.byID[li.Waiters[i-1].Session], r.byID[li.Waiters[i].Session]
			if a != nil && b != nil && a.arrival > b.arrival {
				return fail(PropFIFO, "queue of %q has %s before %s, who arrived earlier", li.Name, a, b)
			}
		}
	}
	if r.shutdown && len(snap) > 0 {
		return fail(PropShutdown, "after shutdown the table still has %d locks", len(snap))
	}
	i := 0
	for l := range r.cfg.Locks {
		o := r.owner[l]
		if o == nil {
			continue
		}
		if i >= len(snap) || snap[i].Name != lockName(l) {
			return fail(PropConsistent, "the table does not list %q, granted to %s", lockName(l), o)
		}
		li := snap[i]
		i++
		h := li.Holder
		if h.Session != o.id || h.Token != o.token {
			return fail(PropOneOwner, "the table lists %s (token %d) as owner of %q, its results said %s (token %d)",
				r.claimName(h.Session), h.Token, li.Name, o, o.token)
		}
		if h.Lease != o.lease || !h.LastSeen.Equal(o.lastSeen) {
			return fail(PropLease, "owner %s of %q: lease %v last seen %v, want %v and %v",
				o, li.Name, h.Lease, h.LastSeen.Sub(epoch), o.lease, o.lastSeen.Sub(epoch))
		}
		if len(li.Waiters) != len(r.queue[l]) {
			return fail(PropFIFO, "queue of %q is %s, want %s in arrival order", li.Name, r.waiterNames(li.Waiters), r.queue[l])
		}
		for j, w := range li.Waiters {
			c := r.queue[l][j]
			if w.Session != c.id {
				return fail(PropFIFO, "queue of %q is %s, want %s in arrival order", li.Name, r.waiterNames(li.Waiters), r.queue[l])
			}
			if w.Lease != c.lease || !w.LastSeen.Equal(c.lastSeen) {
				return fail(PropLease, "waiter %s of %q: lease %v last seen %v, want %v and %v",
					c, li.Name, w.Lease, w.LastSeen.Sub(epoch), c.lease, c.lastSeen.Sub(epoch))
			}
		}
	}
	if i != len(snap) {
		return fail(PropConsistent, "the table lists lock %q, which its results never granted or already released", snap[i].Name)
	}
	wantWaiters := 0
	for _, q := range r.queue {
		wantWaiters += len(q)
	}
	if n := r.t.Counts(); n.Locks != len(snap) || n.Waiters != wantWaiters {
		return fail(PropConsistent, "counts are %d locks and %d waiters, want %d and %d", n.Locks, n.Waiters, len(snap), wantWaiters)
	}
	return nil
}

func (r *tableRun) waiterNames(ws []locktable.WaiterInfo) string {
	names := make([]string, len(ws))
	for i, w := range ws {
		names[i] = r.claimName(w.Session)
	}
	return "[" + strings.Join(names, " ") + "]"
}

// key is the canonical encoding of the state: shutdown, claims made per
// session, and per lock its owner, its queue in order and the rank of the
// owner's token among the owners' tokens. Claim ids, times and token
// values are left out: the table decides nothing by them.
func (r *tableRun) key() string {
	b := make([]byte, 0, 1+r.cfg.Sessions+3*r.cfg.Locks+r.cfg.Sessions)
	if r.shutdown {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	for _, n := range r.lives {
		b = append(b, byte(n))
	}
	for l, o := range r.owner {
		if o == nil {
			b = append(b, 0)
		} else {
			rank := 1
			for _, p := range r.owner {
				if p != nil && p.token < o.token {
					rank++
				}
			}
			b = append(b, byte(o.s+1), byte(rank))
		}
		b = append(b, byte(len(r.queue[l])))
		for _, w := range r.queue[l] {
			b = append(b, byte(w.s+1))
		}
	}
	return string(b)
}

// masks returns, per session bit, who is waiting and who owns a lock.
func (r *tableRun) masks() (wait, own uint64) {
	for s, c := range r.live {
		switch {
		case c == nil:
		case c.where == waiting:
			wait |= 1 << s
		case c.where == owner:
			own |= 1 << s
		}
	}
	return wait, own
}

func statusString(st locktable.Status) string {
	switch st.State {
	case locktable.Owner:
		return fmt.Sprintf("ACQUIRED(%d)", st.Token)
	case locktable.Waiting:
		return "WAITING"
	}
	return "no status"
}

func formatSends(r *tableRun, sends []locktable.Send) string {
	parts := make([]string, len(sends))
	for i, s := range sends {
		switch s.Kind {
		case locktable.SendAcquired:
			parts[i] = fmt.Sprintf("push ACQUIRED(%d) to %s", s.Token, r.claimName(s.Session))
		case locktable.SendError:
			parts[i] = fmt.Sprintf("ERROR 0x%02x to %s", uint8(s.Code), r.claimName(s.Session))
		default:
			parts[i] = fmt.Sprintf("send kind %d to %s", s.Kind, r.claimName(s.Session))
		}
	}
	return "[" + strings.Join(parts, "; ") + "]"
}

func formatResult(r *tableRun, res locktable.Result) string {
	var parts []string
	for _, ev := range res.Events {
		switch ev.Kind {
		case locktable.EventGranted:
			parts = append(parts, fmt.Sprintf("%s granted %q, token %d", r.claimName(ev.Session), ev.Lock, ev.Token))
		case locktable.EventReleased:
			parts = append(parts, fmt.Sprintf("%s released %q (%v)", r.claimName(ev.Session), ev.Lock, ev.Reason))
		case locktable.EventDequeued:
			parts = append(parts, fmt.Sprintf("%s left the queue of %q (%v)", r.claimName(ev.Session), ev.Lock, ev.Reason))
		}
	}
	if len(res.Sends) > 0 {
		s := formatSends(r, res.Sends)
		parts = append(parts, s[1:len(s)-1])
	}
	if len(parts) == 0 {
		return "no effects"
	}
	return strings.Join(parts, "; ")
}

func (op tableOp) String() string {
	switch op.kind {
	case opAcquire:
		return fmt.Sprintf("s%d sends ACQUIRE %q", op.s+1, lockName(int(op.l)))
	case opHeartbeat:
		return fmt.Sprintf("s%d sends HEARTBEAT", op.s+1)
	case opEnd:
		return fmt.Sprintf("s%d closes its connection", op.s+1)
	case opExpire:
		return fmt.Sprintf("s%d's lease passes", op.s+1)
	case opForce:
		return fmt.Sprintf("admin force-releases %q", lockName(int(op.l)))
	case opKick:
		return fmt.Sprintf("admin kicks s%d", op.s+1)
	case opShutdown:
		return "the server shuts down"
	case opRevoke:
		return fmt.Sprintf("an ACL reload refuses s%d", op.s+1)
	case opRevokeAll:
		return fmt.Sprintf("an ACL reload refuses s%d, holders too", op.s+1)
	}
	return "no step"
}

func (p place) String() string {
	switch p {
	case waiting:
		return "waiting"
	case owner:
		return "owner"
	case ended:
		return "ended"
	}
	return "nowhere"
}

// CheckTable explores every interleaving of cfg breadth first on the
// real lock table and checks the safety properties in every state and the
// liveness property on the whole state graph.
func CheckTable(cfg TableConfig) Report {
	start := time.Now()
	cfg = cfg.withDefaults()
	rep := Report{Model: "table", Config: cfg.String()}
	fresh := func() (replayable[tableOp], *failure) { return newTableRun(&cfg), nil }
	g, waitMask, ownMask, steps, f := explore(fresh)
	if f != nil {
		rep.Violation = &Violation{Property: f.prop, Detail: f.detail, Trace: describeTable(&cfg, steps)}
		return finish(&rep, g, start)
	}
	rep.Violation = tableLiveness(&cfg, g, waitMask, ownMask)
	return finish(&rep, g, start)
}

// replayable is one execution of a lock-table model: the real table and
// the checker's record of it, rebuilt for each state by replaying the
// state's path.
type replayable[S any] interface {
	enabled() []S
	step(op S, full bool) (string, *failure)
	verify() *failure
	key() string
	masks() (wait, hold uint64)
}

// explore visits, breadth first, every state reachable from fresh runs,
// checking every transition fully. It returns the graph with each
// state's wait and hold masks, or the first failure with the steps that
// lead to it (the failing step last).
func explore[S any](fresh func() (replayable[S], *failure)) (g *graph[S], wait, hold []uint64, steps []S, f *failure) {
	g = newGraph[S](true)
	replay := func(path []S) (replayable[S], *failure) {
		r, f := fresh()
		if f != nil {
			return r, f
		}
		for _, op := range path {
			if _, f := r.step(op, false); f != nil {
				return r, fail(PropDeterminism, "replaying a checked path failed: %s: %s", f.prop, f.detail)
			}
		}
		return r, nil
	}
	r0, f := fresh()
	if f == nil {
		f = r0.verify()
	}
	if f != nil {
		return g, nil, nil, nil, f
	}
	var zero S
	g.add(r0.key(), -1, zero)
	w, h := r0.masks()
	wait, hold = append(wait, w), append(hold, h)
	for id := int32(0); id < int32(g.states()); id++ {
		path := g.path(id)
		base, f := replay(path)
		if f != nil {
			return g, wait, hold, path, f
		}
		for i, op := range base.enabled() {
			r := base
			if i > 0 {
				r, _ = replay(path)
			}
			if _, f := r.step(op, true); f != nil {
				return g, wait, hold, append(slices.Clone(path), op), f
			}
			if _, isNew := g.add(r.key(), id, op); isNew {
				w, h := r.masks()
				wait, hold = append(wait, w), append(hold, h)
			}
		}
	}
	return g, wait, hold, nil, nil
}

// checkStatus compares an answer with what the record says: WAITING, or
// ACQUIRED with the grant's token, and the session's deadline.
func checkStatus(c fmt.Stringer, where place, token uint64, deadline time.Time, st locktable.Status) *failure {
	want := locktable.Status{State: locktable.Waiting, Deadline: deadline}
	if where == owner {
		want.State, want.Token = locktable.Owner, token
	}
	if st != want {
		return fail(PropConsistent, "%s was answered %s (deadline %v), want %s (deadline %v)",
			c, statusString(st), st.Deadline.Sub(epoch), statusString(want), want.Deadline.Sub(epoch))
	}
	return nil
}

// checkSends compares the frames to send, in any order, with want.
func checkSends(got, want []locktable.Send, format func([]locktable.Send) string) *failure {
	got = slices.Clone(got)
	cmp := func(a, b locktable.Send) int {
		if a.Session != b.Session {
			return int(a.Session) - int(b.Session)
		}
		if a.Claim != b.Claim {
			return int(a.Claim) - int(b.Claim)
		}
		return int(a.Kind) - int(b.Kind)
	}
	slices.SortFunc(got, cmp)
	slices.SortFunc(want, cmp)
	if !slices.Equal(got, want) {
		return fail(PropConsistent, "frames to send %s, want %s", format(got), format(want))
	}
	return nil
}

func finish[S any](rep *Report, g *graph[S], start time.Time) Report {
	rep.Elapsed = time.Since(start)
	rep.States, rep.Transitions = g.states(), g.trans
	for _, d := range g.depth {
		rep.Depth = max(rep.Depth, int(d))
	}
	return *rep
}

// tableLiveness looks for a reachable cycle in which some session waits
// forever and that weak fairness does not rule out. Fairness is "owners
// eventually end": a cycle in which one session owns a lock in every state
// is unfair, because that owner's end stays enabled and is never taken.
// Any other cycle during which a waiter keeps waiting is a violation.
func tableLiveness(cfg *TableConfig, g *graph[tableOp], waitMask, ownMask []uint64) *Violation {
	w, stem, loop, ok := starvation(g, cfg.Sessions, waitMask, ownMask)
	if !ok {
		return nil
	}
	lines := describeTable(cfg, append(slices.Clone(stem), loop...))
	return &Violation{
		Property: PropLiveness,
		Detail: fmt.Sprintf("session s%d waits forever: in the cycle below it never ends and is never granted, "+
			"and no owner holds on throughout, so weak fairness (owners eventually end) does not exclude it", w+1),
		Trace: lines[:len(stem)],
		Loop:  lines[len(stem):],
	}
}

// starvation looks for a reachable cycle in which waiter w (one of n, a
// bit of waitMask) waits in every state and no holder (a bit of holdMask)
// holds in every state: weak fairness ("holders eventually let go") does
// not rule it out. It returns the shallowest such cycle as a stem (the
// shortest path to its entry) and a loop back to the entry that visits,
// for every holder in the cycle, a state where it does not hold, so the
// loop is fair as printed.
func starvation[S any](g *graph[S], n int, waitMask, holdMask []uint64) (w int, stem, loop []S, ok bool) {
	type found struct {
		w     int
		entry int32
		comp  []int32
	}
	var best *found
	for w := range n {
		in := func(v int32) bool { return waitMask[v]&(1<<w) != 0 }
		for _, comp := range g.sccs(in) {
			always := ^uint64(0)
			for _, v := range comp {
				always &= holdMask[v]
			}
			if always != 0 {
				continue // unfair: a holder holds on throughout
			}
			entry := comp[0]
			for _, v := range comp {
				if g.depth[v] < g.depth[entry] {
					entry = v
				}
			}
			if best == nil || g.depth[entry] < g.depth[best.entry] {
				best = &found{w: w, entry: entry, comp: comp}
			}
		}
	}
	if best == nil {
		return 0, nil, nil, false
	}
	members := map[int32]bool{}
	var sometimes uint64
	for _, v := range best.comp {
		members[v] = true
		sometimes |= holdMask[v]
	}
	in := func(v int32) bool { return members[v] }
	waypoints := []int32{}
	for sometimes != 0 {
		o := bits.TrailingZeros64(sometimes)
		sometimes &^= 1 << o
		for _, v := range best.comp {
			if holdMask[v]&(1<<o) == 0 {
				if !slices.Contains(waypoints, v) && v != best.entry {
					waypoints = append(waypoints, v)
				}
				break
			}
		}
	}
	waypoints = append(waypoints, best.entry)
	at := best.entry
	for _, wp := range waypoints {
		steps, ok := g.route(at, wp, in)
		if !ok {
			break // cannot happen inside a strongly connected component
		}
		loop = append(loop, steps...)
		at = wp
	}
	return best.w, g.path(best.entry), loop, true
}

// describeTable replays steps on a fresh table and describes each one;
// the last step also gets the table's state after it.
func describeTable(cfg *TableConfig, steps []tableOp) []string {
	r := newTableRun(cfg)
	r.describe = true
	lines := make([]string, 0, len(steps))
	for i, op := range steps {
		before := r.stateString()
		line, f := r.step(op, i == len(steps)-1)
		if line == "" {
			line = op.String()
		}
		if f != nil {
			line += fmt.Sprintf("\n      ✗ %s: %s\n      state before this step: %s", f.prop, f.detail, before)
			return append(lines, line)
		}
		lines = append(lines, line)
	}
	if len(lines) > 0 {
		lines[len(lines)-1] += "\n      state after: " + r.stateString()
	}
	return lines
}

func (r *tableRun) stateString() string {
	var parts []string
	for l := range r.cfg.Locks {
		o := "free"
		if r.owner[l] != nil {
			o = fmt.Sprintf("owner %s (token %d)", r.owner[l], r.owner[l].token)
		}
		q := make([]string, len(r.queue[l]))
		for i, c := range r.queue[l] {
			q[i] = c.String()
		}
		parts = append(parts, fmt.Sprintf("%q: %s, queue [%s]", lockName(l), o, strings.Join(q, " ")))
	}
	if r.shutdown {
		parts = append(parts, "shut down")
	}
	return strings.Join(parts, "; ")
}
