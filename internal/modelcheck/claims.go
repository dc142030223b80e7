package modelcheck

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

// ClaimsTable is the part of *locktable.Table that the claims model
// drives: sessions with several claims, in exclusive, shared and
// semaphore modes. As with Table, the checker explores the real table;
// the interface lets tests wrap it with mutations.
type ClaimsTable interface {
	Open(now time.Time, id locktable.SessionID, p locktable.SessionParams) error
	Claim(now time.Time, sid locktable.SessionID, cid locktable.ClaimID, req locktable.ClaimRequest) (locktable.Status, locktable.Result, error)
	Touch(now time.Time, sid locktable.SessionID) (time.Time, error)
	ClaimStatus(k locktable.Key) (locktable.Status, error)
	Release(now time.Time, k locktable.Key) (locktable.Result, error)
	CloseSession(now time.Time, sid locktable.SessionID, reason locktable.Reason) locktable.Result
	ExpireSession(now time.Time, sid locktable.SessionID) (locktable.Result, error)
	ForceReleaseClaim(now time.Time, name string, k locktable.Key) (locktable.Result, error)
	KickClaim(now time.Time, name string, k locktable.Key) (locktable.Result, error)
	Revoke(now time.Time, allow func(p locktable.Peer, lock string) bool, owners bool) locktable.Result
	Shutdown(now time.Time) locktable.Result
	Snapshot(match func(name string) bool) []locktable.LockInfo
	Counts() locktable.Counts
	// Values and watches (claimswatch.go).
	Watch(now time.Time, sid locktable.SessionID, wid locktable.ClaimID, name string) (locktable.Result, error)
	SetValue(now time.Time, k locktable.Key, value string) (locktable.Result, error)
	EndWatches(sid locktable.SessionID) []locktable.ClaimID
	Watchers(name string) int
}

var _ ClaimsTable = (*locktable.Table)(nil)

// ClaimsConfig bounds the claims model.
type ClaimsConfig struct {
	Sessions int // sessions, all open from the start
	// Claims is how many claims each session makes over a run (claim ids
	// 1..Claims, any number of them live at once); 0 means 2.
	Claims int
	RW     int // exclusive/shared locks
	Sems   int // semaphore locks
	Limit  int // the semaphores' limit; 0 means 2
	// NoWait also explores claims that answer busy instead of queueing.
	NoWait bool
	// Watches is how many watches each session starts over a run (watch
	// ids 11, 12, ..., on any lock); 0 means none (claimswatch.go).
	Watches int
	// Values makes every claim carry a value, which its session may
	// change once while the claim is live.
	Values bool
	// New returns a fresh table under test; nil means the real
	// locktable.New with CounterTokens.
	New func() ClaimsTable
}

// Property names reported by the claims model, beside the table model's
// (PropTokens, PropEndedNothing, PropShutdown, PropConsistent, PropLease,
// PropNoPanic, PropDeterminism, PropLiveness).
const (
	PropNoConflict = "no conflicting holders (one exclusive, or shared only, or at most the semaphore limit)"
	PropFairFIFO   = "strict FIFO: a claim is granted only when it conflicts with no holder and no earlier waiter"
	PropNoWithhold = "the head of a queue conflicts with a holder (grants are not withheld)"
)

func (c ClaimsConfig) withDefaults() ClaimsConfig {
	if c.Claims == 0 {
		c.Claims = 2
	}
	if c.Limit == 0 {
		c.Limit = 2
	}
	if c.New == nil {
		c.New = func() ClaimsTable { return locktable.New(&locktable.CounterTokens{}) }
	}
	return c
}

func (c ClaimsConfig) String() string {
	c = c.withDefaults()
	s := fmt.Sprintf("%s × %s per session", plural(c.Sessions, "session"), plural(c.Claims, "claim"))
	if c.RW > 0 {
		s += ", " + plural(c.RW, "exclusive/shared lock")
	}
	if c.Sems > 0 {
		s += fmt.Sprintf(", %s (limit %d)", plural(c.Sems, "semaphore"), c.Limit)
	}
	if c.NoWait {
		s += ", no-wait claims"
	}
	if c.Watches > 0 {
		s += fmt.Sprintf(", %d watch", c.Watches)
		if c.Watches > 1 {
			s += "es"
		}
		s += " per session"
	}
	if c.Values {
		s += ", values"
	}
	return s
}

// Validate reports bounds the checker cannot explore.
func (c ClaimsConfig) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Sessions < 1 || c.Sessions > 6:
		return fmt.Errorf("sessions must be 1..6, not %d", c.Sessions)
	case c.Claims < 1 || c.Claims > 6:
		return fmt.Errorf("claims must be 1..6, not %d", c.Claims)
	case c.RW < 0 || c.Sems < 0 || c.RW+c.Sems < 1 || c.RW+c.Sems > 4:
		return fmt.Errorf("locks (exclusive/shared plus semaphores) must be 1..4, not %d", c.RW+c.Sems)
	case c.Limit < 1 || c.Limit > 4:
		return fmt.Errorf("limit must be 1..4, not %d", c.Limit)
	case c.Watches < 0 || c.Watches > 3:
		return fmt.Errorf("watches must be 0..3, not %d", c.Watches)
	}
	return nil
}

type cOpKind uint8

const (
	cClaim      cOpKind = iota + 1 // session s claims lock l in mode m (no-wait when nowait)
	cBadClaim                      // session s makes a claim on l that the name's kind or limit refuses
	cTouch                         // session s sends a session heartbeat
	cRelease                       // session s releases its claim c
	cClose                         // session s closes its connection
	cExpire                        // time passes s's lease; the server expires the session
	cForce                         // an administrator force-releases held claim (s, c)
	cKick                          // an administrator kicks waiting claim (s, c)
	cRevoke                        // an ACL reload refuses session s: its waiting claims end
	cRevokeAll                     // the same with holders revoked too
	cShutdown                      // the server shuts down
	cWatch                         // session s starts a watch of lock l
	cUnwatch                       // session s ends its watch c (Release of the watch id)
	cEndWatches                    // the server ends every watch of session s (a slow watcher)
	cSetValue                      // session s changes the value of its claim c
)

type claimsOp struct {
	kind   cOpKind
	s, c   int8
	l      int8
	mode   locktable.Mode
	nowait bool
	value  bool // a claim with a value
}

type cRec struct {
	s, c    int // session, claim id (1-based)
	lock    int
	mode    locktable.Mode
	where   place
	token   uint64
	arrival int
	value   string
}

func (c *cRec) String() string { return fmt.Sprintf("s%d/c%d(%s)", c.s+1, c.c, c.mode) }

func (c *cRec) key() locktable.Key {
	return locktable.Key{Session: claimsSession(c.s), Claim: locktable.ClaimID(c.c)}
}

type sRec struct {
	open     bool
	made     int // claims made (ids 1..made used)
	watched  int // watches started (ids watchBase+1..watchBase+watched)
	lastSeen time.Time
	live     []*cRec // in claim id order
}

type claimsRun struct {
	cfg      *ClaimsConfig
	t        ClaimsTable
	now      time.Time
	sess     []*sRec
	holders  [][]*cRec // per lock, in grant order
	queue    [][]*cRec // per lock, in arrival order
	arrivals int
	shutdown bool
	maxToken uint64
	describe bool
	watches  []*wRec // every watch started, in order, ended ones too
	revoking []*wRec // the watches the current revoke must end
}

func claimsSession(s int) locktable.SessionID { return locktable.SessionID(s + 1) }

func claimsLease(s int) time.Duration { return time.Duration(s+1) * time.Second }

func (r *claimsRun) sem(l int) bool { return l >= r.cfg.RW }

func (r *claimsRun) lockName(l int) string {
	if r.sem(l) {
		return "sem" + lockNames[l-r.cfg.RW]
	}
	return lockNames[l]
}

func newClaimsRun(cfg *ClaimsConfig) (*claimsRun, *failure) {
	n := cfg.RW + cfg.Sems
	r := &claimsRun{cfg: cfg, t: cfg.New(), now: epoch, sess: make([]*sRec, cfg.Sessions),
		holders: make([][]*cRec, n), queue: make([][]*cRec, n)}
	for s := range r.sess {
		r.sess[s] = &sRec{open: true, lastSeen: epoch}
		err := r.t.Open(epoch, claimsSession(s), locktable.SessionParams{Lease: claimsLease(s),
			Peer: locktable.Peer{Identity: sessionIdentity(s), Addr: peerAddr(s, 0)}, Label: fmt.Sprintf("session %d", s+1)})
		if err != nil {
			return r, fail(PropConsistent, "opening session s%d failed: %v", s+1, err)
		}
	}
	return r, nil
}

func (r *claimsRun) find(k locktable.Key) *cRec {
	s := int(k.Session) - 1
	if s < 0 || s >= len(r.sess) {
		return nil
	}
	for _, c := range r.sess[s].live {
		if c.c == int(k.Claim) {
			return c
		}
	}
	return nil
}

func (r *claimsRun) name(k locktable.Key) string {
	if c := r.find(k); c != nil {
		return c.String()
	}
	if w := r.watchOf(k); w != nil {
		return w.String()
	}
	return fmt.Sprintf("s%d/c%d", k.Session, k.Claim)
}

// enabled lists the steps possible in the current state, in a fixed order.
func (r *claimsRun) enabled() []claimsOp {
	var ops []claimsOp
	for s, ss := range r.sess {
		if ss.made >= r.cfg.Claims {
			continue
		}
		if r.shutdown {
			ops = append(ops, claimsOp{kind: cClaim, s: int8(s), mode: locktable.Exclusive})
			continue
		}
		if !ss.open {
			continue
		}
		for l := range r.cfg.RW + r.cfg.Sems {
			modes := []locktable.Mode{locktable.Exclusive, locktable.Shared}
			if r.sem(l) {
				modes = []locktable.Mode{locktable.Semaphore}
			}
			for _, m := range modes {
				ops = append(ops, claimsOp{kind: cClaim, s: int8(s), l: int8(l), mode: m, value: r.cfg.Values})
				if r.cfg.NoWait {
					ops = append(ops, claimsOp{kind: cClaim, s: int8(s), l: int8(l), mode: m, nowait: true})
				}
			}
			if len(r.holders[l]) > 0 {
				ops = append(ops, claimsOp{kind: cBadClaim, s: int8(s), l: int8(l)})
			}
		}
	}
	if r.shutdown {
		return ops
	}
	for s, ss := range r.sess {
		if !ss.open {
			continue
		}
		ops = append(ops, claimsOp{kind: cTouch, s: int8(s)}, claimsOp{kind: cClose, s: int8(s)},
			claimsOp{kind: cExpire, s: int8(s)}, claimsOp{kind: cRevoke, s: int8(s)}, claimsOp{kind: cRevokeAll, s: int8(s)})
		for _, c := range ss.live {
			ops = append(ops, claimsOp{kind: cRelease, s: int8(s), c: int8(c.c)})
			if c.where == owner {
				ops = append(ops, claimsOp{kind: cForce, s: int8(s), c: int8(c.c)})
			} else {
				ops = append(ops, claimsOp{kind: cKick, s: int8(s), c: int8(c.c)})
			}
			if r.cfg.Values && c.value == claimValues[0] {
				ops = append(ops, claimsOp{kind: cSetValue, s: int8(s), c: int8(c.c)})
			}
		}
		ops = r.watchOps(ops, s)
	}
	return append(ops, claimsOp{kind: cShutdown})
}

// step applies op and checks the result; with full it also checks the
// table's introspection of the new state.
func (r *claimsRun) step(op claimsOp, full bool) (line string, f *failure) {
	defer func() {
		if p := recover(); p != nil {
			f = fail(PropNoPanic, "the table panicked: %v", p)
		}
	}()
	r.now = r.now.Add(tick)
	s := int(op.s)
	ss := r.sess[s]
	sid := claimsSession(s)
	var c *cRec
	if op.c > 0 {
		c = r.find(locktable.Key{Session: sid, Claim: locktable.ClaimID(op.c)})
	}
	switch op.kind {
	case cClaim:
		line, f = r.claim(op)
	case cBadClaim:
		line, f = r.badClaim(op)
	case cTouch:
		d, err := r.t.Touch(r.now, sid)
		if r.describe {
			line = fmt.Sprintf("s%d sends a session heartbeat", s+1)
		}
		if err != nil || !d.Equal(r.now.Add(claimsLease(s))) {
			return line, fail(PropLease, "heartbeat of s%d returned deadline %v, %v; want %v", s+1, d.Sub(epoch), err, r.now.Add(claimsLease(s)).Sub(epoch))
		}
		ss.lastSeen = r.now
	case cRelease:
		if r.describe {
			line = fmt.Sprintf("s%d releases %s", s+1, c)
		}
		res, err := r.t.Release(r.now, c.key())
		if err != nil {
			return line, fail(PropConsistent, "release of live %s failed: %v", c, err)
		}
		ss.lastSeen = r.now
		line, f = r.ended(line, res, locktable.ReasonGraceful, 0, false, c)
	case cClose:
		if r.describe {
			line = fmt.Sprintf("s%d closes its connection", s+1)
		}
		res := r.t.CloseSession(r.now, sid, locktable.ReasonGraceful)
		ss.open = false
		r.endWatches(s) // a session that ends is told nothing
		line, f = r.ended(line, res, locktable.ReasonGraceful, 0, false, slices.Clone(ss.live)...)
	case cExpire:
		deadline := ss.lastSeen.Add(claimsLease(s))
		if !r.now.After(deadline) {
			if full {
				if res, err := r.t.ExpireSession(deadline, sid); !errors.Is(err, locktable.ErrNotExpired) || len(res.Events)+len(res.Sends) > 0 {
					return "", fail(PropLease, "expiry of s%d exactly at its deadline returned %s, %v; want ErrNotExpired",
						s+1, r.formatResult(res), err)
				}
			}
			r.now = deadline.Add(time.Nanosecond)
		}
		if r.describe {
			line = fmt.Sprintf("time passes s%d's lease; the server expires the session", s+1)
		}
		res, err := r.t.ExpireSession(r.now, sid)
		if err != nil {
			return line, fail(PropLease, "expiry of s%d %v after it was last seen (lease %v) failed: %v",
				s+1, r.now.Sub(ss.lastSeen), claimsLease(s), err)
		}
		ss.open = false
		r.endWatches(s)
		line, f = r.ended(line, res, locktable.ReasonExpired, 0, false, slices.Clone(ss.live)...)
	case cForce:
		if r.describe {
			line = fmt.Sprintf("admin force-releases %s from %q", c, r.lockName(c.lock))
		}
		res, err := r.t.ForceReleaseClaim(r.now, r.lockName(c.lock), c.key())
		if err != nil {
			return line, fail(PropConsistent, "force-release of holder %s failed: %v", c, err)
		}
		line, f = r.ended(line, res, locktable.ReasonForce, protocol.CodeClosedByAdmin, false, c)
	case cKick:
		if r.describe {
			line = fmt.Sprintf("admin kicks %s from %q", c, r.lockName(c.lock))
		}
		res, err := r.t.KickClaim(r.now, r.lockName(c.lock), c.key())
		if err != nil {
			return line, fail(PropConsistent, "kick of waiter %s failed: %v", c, err)
		}
		line, f = r.ended(line, res, locktable.ReasonKick, protocol.CodeClosedByAdmin, false, c)
	case cRevoke, cRevokeAll:
		all := op.kind == cRevokeAll
		if r.describe {
			line = fmt.Sprintf("an ACL reload refuses s%d (holders too: %v)", s+1, all)
		}
		var targets []*cRec
		for _, c := range ss.live {
			if all || c.where == waiting {
				targets = append(targets, c)
			}
		}
		deny := sessionIdentity(s)
		r.revoking = r.liveWatches(s) // each is sent ERROR(0x18) and ends
		res := r.t.Revoke(r.now, func(p locktable.Peer, _ string) bool { return p.Identity != deny }, all)
		line, f = r.ended(line, res, locktable.ReasonRevoked, protocol.CodeNotAuthorized, false, targets...)
		if f == nil {
			f = r.allEnded(r.revoking, "the revoke")
		}
		r.revoking = nil
	case cShutdown:
		if r.describe {
			line = "the server shuts down"
		}
		var all []*cRec
		for _, ss := range r.sess {
			all = append(all, ss.live...)
		}
		r.shutdown = true
		res := r.t.Shutdown(r.now)
		live := r.liveWatches(-1)
		line, f = r.ended(line, res, locktable.ReasonShutdown, protocol.CodeShuttingDown, true, all...)
		for _, ss := range r.sess {
			ss.open = false
		}
		if f == nil {
			f = r.allEnded(live, "the shutdown")
		}
	case cWatch, cUnwatch, cEndWatches, cSetValue:
		line, f = r.watchStep(op)
	}
	if f == nil {
		f = r.withheld()
	}
	if f == nil {
		f = r.checkWatches()
	}
	if f == nil && full {
		f = r.verify()
	}
	return line, f
}

func (r *claimsRun) request(op claimsOp) locktable.ClaimRequest {
	req := locktable.ClaimRequest{Name: r.lockName(int(op.l)), Mode: op.mode, NoWait: op.nowait}
	if op.value {
		req.Value = claimValues[0]
	}
	if op.mode == locktable.Semaphore {
		req.Limit = uint32(r.cfg.Limit)
	}
	return req
}

func (r *claimsRun) claim(op claimsOp) (line string, f *failure) {
	s, l := int(op.s), int(op.l)
	ss := r.sess[s]
	ss.made++
	cid := ss.made
	req := r.request(op)
	if r.shutdown {
		st, res, err := r.t.Claim(r.now, claimsSession(s), locktable.ClaimID(cid), req)
		if r.describe {
			line = fmt.Sprintf("s%d claims %q → refused (%v)", s+1, req.Name, err)
		}
		if !errors.Is(err, locktable.ErrShutdown) || st.State != 0 || len(res.Events)+len(res.Sends) > 0 {
			return line, fail(PropShutdown, "a claim after shutdown returned %s, %s, %v; want ErrShutdown",
				statusString(st), r.formatResult(res), err)
		}
		return line, nil
	}
	c := &cRec{s: s, c: cid, lock: l, mode: op.mode, where: waiting, arrival: r.arrivals, value: req.Value}
	r.arrivals++
	grantable := len(r.queue[l]) == 0 && r.admits(l, op.mode)
	ss.lastSeen = r.now
	ss.live = append(ss.live, c)
	r.queue[l] = append(r.queue[l], c)
	st, res, err := r.t.Claim(r.now, claimsSession(s), locktable.ClaimID(cid), req)
	if r.describe {
		nw := ""
		if op.nowait {
			nw = ", no-wait"
		}
		if req.Value != "" {
			nw += fmt.Sprintf(", value %q", req.Value)
		}
		line = fmt.Sprintf("%s claims %q%s → %s", c, req.Name, nw, statusString(st))
		if st.State == locktable.Busy {
			line = fmt.Sprintf("%s claims %q%s → busy", c, req.Name, nw)
		}
		if len(res.Events)+len(res.Sends) > 0 {
			line += "; " + r.formatResult(res)
		}
	}
	if err != nil {
		return line, fail(PropConsistent, "claim %s on %q failed: %v", c, req.Name, err)
	}
	if st.State == locktable.Busy {
		r.queue[l] = r.queue[l][:len(r.queue[l])-1]
		ss.live = ss.live[:len(ss.live)-1]
		switch {
		case !op.nowait:
			return line, fail(PropConsistent, "%s, a waiting claim, was answered busy", c)
		case grantable:
			return line, fail(PropConsistent, "%s was answered busy, but it conflicts with no holder and nobody waits", c)
		case len(res.Events)+len(res.Sends) > 0:
			return line, fail(PropConsistent, "a busy answer came with effects: %s", r.formatResult(res))
		}
		return line, nil
	}
	if f := r.apply(res, c, 0, 0, false); f != nil {
		return line, f
	}
	if op.nowait && c.where == waiting {
		return line, fail(PropConsistent, "%s, a no-wait claim, was queued", c)
	}
	return line, r.checkStatus(c, st)
}

// badClaim makes a claim the name refuses: a semaphore claim on an
// exclusive/shared lock, or one with another limit on a semaphore.
func (r *claimsRun) badClaim(op claimsOp) (line string, f *failure) {
	s, l := int(op.s), int(op.l)
	req := locktable.ClaimRequest{Name: r.lockName(l), Mode: locktable.Semaphore, Limit: uint32(r.cfg.Limit)}
	want := locktable.ErrModeConflict
	if r.sem(l) {
		req.Limit++
		want = locktable.ErrLimitMismatch
	}
	cid := locktable.ClaimID(r.cfg.Claims + 1) // never a live id
	st, res, err := r.t.Claim(r.now, claimsSession(s), cid, req)
	if r.describe {
		line = fmt.Sprintf("s%d claims %q as a semaphore of limit %d → refused (%v)", s+1, req.Name, req.Limit, err)
	}
	if !errors.Is(err, want) || st.State != 0 || len(res.Events)+len(res.Sends) > 0 {
		return line, fail(PropConsistent, "a claim the name refuses returned %s, %s, %v; want %v",
			statusString(st), r.formatResult(res), err, want)
	}
	return line, nil
}

// admits reports whether a claim of mode m conflicts with no holder of l,
// judged by the checker's own record.
func (r *claimsRun) admits(l int, m locktable.Mode) bool {
	hs := r.holders[l]
	switch m {
	case locktable.Exclusive:
		return len(hs) == 0
	case locktable.Shared:
		return !slices.ContainsFunc(hs, func(h *cRec) bool { return h.mode == locktable.Exclusive })
	}
	return len(hs) < r.cfg.Limit
}

// ended applies the result of an operation that must end targets for
// reason. With code, each target is sent ERROR(code) first: claim-level
// frames, or, with perSession, one session-level frame per open session.
func (r *claimsRun) ended(line string, res locktable.Result, reason locktable.Reason, code protocol.Code, perSession bool, targets ...*cRec) (string, *failure) {
	if r.describe && len(res.Events)+len(res.Sends) > 0 {
		line += " → " + r.formatResult(res)
	}
	if f := r.apply(res, nil, reason, code, perSession, targets...); f != nil {
		return line, f
	}
	for _, c := range targets {
		if c.where != ended {
			return line, fail(PropEndedNothing, "%s was ended (%v) but the table reported no release or dequeue for it", c, reason)
		}
		if _, err := r.t.ClaimStatus(c.key()); !errors.Is(err, locktable.ErrNoClaim) {
			return line, fail(PropEndedNothing, "status of %s after it ended (%v) returned %v; want ErrNoClaim", c, reason, err)
		}
	}
	return line, nil
}

// apply checks the events and sends of one result, in order, against the
// rules, and updates the record. answered is the claim whose own answer
// carries its grant (so it gets no push).
func (r *claimsRun) apply(res locktable.Result, answered *cRec, reason locktable.Reason, code protocol.Code, perSession bool, targets ...*cRec) *failure {
	var want []locktable.Send
	if code != 0 && perSession {
		for s, ss := range r.sess {
			if ss.open {
				want = append(want, locktable.Send{Kind: locktable.SendSessionError, Session: claimsSession(s), Code: code})
			}
		}
	} else if code != 0 {
		for _, c := range targets {
			want = append(want, locktable.Send{Kind: locktable.SendError, Session: claimsSession(c.s), Claim: locktable.ClaimID(c.c), Code: code})
		}
	}
	for _, ev := range res.Events {
		k := locktable.Key{Session: ev.Session, Claim: ev.Claim}
		c := r.find(k)
		if c == nil {
			return fail(PropConsistent, "event %v for %s, which is not a live claim", ev.Kind, r.name(k))
		}
		l := c.lock
		if ev.Lock != r.lockName(l) || ev.Mode != c.mode {
			return fail(PropConsistent, "event %v for %s names lock %q mode %v, want %q", ev.Kind, c, ev.Lock, ev.Mode, r.lockName(l))
		}
		switch ev.Kind {
		case locktable.EventGranted:
			switch {
			case r.shutdown:
				return fail(PropShutdown, "%s was granted %q after shutdown", c, ev.Lock)
			case c.where != waiting:
				return fail(PropConsistent, "%s was granted %q but it is %v", c, ev.Lock, c.where)
			case !r.admits(l, c.mode):
				return fail(PropNoConflict, "%s was granted %q while %s hold it", c, ev.Lock, r.names(r.holders[l]))
			case r.queue[l][0] != c:
				return fail(PropFairFIFO, "%s was granted %q ahead of %s, who waits since earlier", c, ev.Lock, r.queue[l][0])
			case ev.Token <= r.maxToken:
				return fail(PropTokens, "%s was granted %q with token %d, not above the earlier token %d", c, ev.Lock, ev.Token, r.maxToken)
			}
			r.maxToken = ev.Token
			r.queue[l] = r.queue[l][1:]
			r.holders[l] = append(r.holders[l], c)
			c.where, c.token = owner, ev.Token
			if c != answered {
				want = append(want, locktable.Send{Kind: locktable.SendAcquired, Session: ev.Session, Claim: ev.Claim, Token: ev.Token})
			}
		case locktable.EventReleased, locktable.EventDequeued:
			if ev.Kind == locktable.EventReleased && (c.where != owner || ev.Token != c.token) {
				return fail(PropConsistent, "%s released %q with token %d, but it is %v with token %d", c, ev.Lock, ev.Token, c.where, c.token)
			}
			if ev.Kind == locktable.EventDequeued && c.where != waiting {
				return fail(PropConsistent, "%s left the queue of %q, but it is %v", c, ev.Lock, c.where)
			}
			if ev.Reason != reason || !slices.Contains(targets, c) {
				return fail(PropConsistent, "%s ended (%v, reason %v), but the operation ended %s for %v", c, ev.Kind, ev.Reason, r.names(targets), reason)
			}
			if c.where == owner {
				r.holders[l] = slices.DeleteFunc(r.holders[l], func(h *cRec) bool { return h == c })
			} else {
				r.queue[l] = slices.DeleteFunc(r.queue[l], func(w *cRec) bool { return w == c })
			}
			c.where = ended
			ss := r.sess[c.s]
			ss.live = slices.DeleteFunc(ss.live, func(x *cRec) bool { return x == c })
		default:
			return fail(PropConsistent, "unknown event kind %v", ev.Kind)
		}
	}
	for _, w := range r.revoking {
		want = append(want, locktable.Send{Kind: locktable.SendError, Session: claimsSession(w.s), Claim: w.id, Code: protocol.CodeNotAuthorized})
	}
	rest, f := r.watchSends(res.Sends)
	if f != nil {
		return f
	}
	return checkSends(rest, want, r.formatSends)
}

// withheld checks that no queue head could be granted: the table grants
// every waiter it can at once.
func (r *claimsRun) withheld() *failure {
	if r.shutdown {
		return nil
	}
	for l, q := range r.queue {
		if len(q) > 0 && r.admits(l, q[0].mode) {
			return fail(PropNoWithhold, "%s waits at the head of %q, but it conflicts with no holder (%s)",
				q[0], r.lockName(l), r.names(r.holders[l]))
		}
	}
	return nil
}

func (r *claimsRun) checkStatus(c *cRec, st locktable.Status) *failure {
	return checkStatus(c, c.where, c.token, r.sess[c.s].lastSeen.Add(claimsLease(c.s)), st)
}

// verify compares the table's introspection with the record: holders in
// grant order, queues in arrival order, modes, tokens, leases, counts.
func (r *claimsRun) verify() *failure {
	snap := r.t.Snapshot(nil)
	byName := map[string]locktable.LockInfo{}
	for _, li := range snap {
		byName[li.Name] = li
	}
	waiters := 0
	for l := range r.holders {
		name := r.lockName(l)
		li, ok := byName[name]
		delete(byName, name)
		waiters += len(r.queue[l])
		if len(r.holders[l]) == 0 {
			if ok {
				return fail(PropConsistent, "the table lists %q, which has no holder", name)
			}
			continue
		}
		if !ok {
			return fail(PropConsistent, "the table does not list %q, held by %s", name, r.names(r.holders[l]))
		}
		if len(li.Holders) != len(r.holders[l]) || len(li.Waiters) != len(r.queue[l]) {
			return fail(PropConsistent, "%q: the table lists %d holders and %d waiters, want %s and %s",
				name, len(li.Holders), len(li.Waiters), r.names(r.holders[l]), r.names(r.queue[l]))
		}
		wantLimit := uint32(0)
		if r.sem(l) {
			wantLimit = uint32(r.cfg.Limit)
		}
		if li.Limit != wantLimit {
			return fail(PropConsistent, "%q: limit %d, want %d", name, li.Limit, wantLimit)
		}
		for i, h := range li.Holders {
			c := r.holders[l][i]
			if h.Session != claimsSession(c.s) || h.Claim != locktable.ClaimID(c.c) || h.Token != c.token || h.Mode != c.mode {
				return fail(PropConsistent, "%q: holder %d is %s (token %d), want %s (token %d)",
					name, i, r.name(locktable.Key{Session: h.Session, Claim: h.Claim}), h.Token, c, c.token)
			}
			if h.Lease != claimsLease(c.s) || !h.LastSeen.Equal(r.sess[c.s].lastSeen) {
				return fail(PropLease, "holder %s: lease %v last seen %v", c, h.Lease, h.LastSeen.Sub(epoch))
			}
			if h.Value != c.value {
				return fail(PropConsistent, "%q: holder %s has value %q, want %q", name, c, h.Value, c.value)
			}
		}
		for i, w := range li.Waiters {
			c := r.queue[l][i]
			if w.Session != claimsSession(c.s) || w.Claim != locktable.ClaimID(c.c) || w.Mode != c.mode {
				return fail(PropFairFIFO, "queue of %q is not %s in arrival order", name, r.names(r.queue[l]))
			}
			if w.Lease != claimsLease(c.s) || !w.LastSeen.Equal(r.sess[c.s].lastSeen) {
				return fail(PropLease, "waiter %s: lease %v last seen %v", c, w.Lease, w.LastSeen.Sub(epoch))
			}
		}
	}
	for name := range byName {
		return fail(PropConsistent, "the table lists lock %q, which the model does not have", name)
	}
	if f := r.verifyWatchers(snap); f != nil {
		return f
	}
	if n := r.t.Counts(); n.Locks != len(snap) || n.Waiters != waiters {
		return fail(PropConsistent, "counts are %d locks and %d waiters, want %d and %d", n.Locks, n.Waiters, len(snap), waiters)
	}
	for _, ss := range r.sess {
		for _, c := range ss.live {
			st, err := r.t.ClaimStatus(c.key())
			if err != nil {
				return fail(PropConsistent, "status of live %s: %v", c, err)
			}
			if f := r.checkStatus(c, st); f != nil {
				return f
			}
		}
	}
	return nil
}

// key is the canonical state: shutdown; per session open and claims
// made; per lock its holders in grant order (with mode and the rank of
// the token) and its queue (with mode). Claim ids, times and token values
// are left out.
func (r *claimsRun) key() string {
	var b strings.Builder
	if r.shutdown {
		b.WriteByte(1)
	} else {
		b.WriteByte(0)
	}
	for _, ss := range r.sess {
		o := byte(0)
		if ss.open {
			o = 1
		}
		b.WriteByte(o)
		b.WriteByte(byte(ss.made))
		b.WriteByte(byte(ss.watched))
	}
	var tokens []uint64
	for _, hs := range r.holders {
		for _, h := range hs {
			tokens = append(tokens, h.token)
		}
	}
	slices.Sort(tokens)
	for l := range r.holders {
		b.WriteByte(0xff)
		for _, h := range r.holders[l] {
			rank, _ := slices.BinarySearch(tokens, h.token)
			b.Write([]byte{byte(h.s), byte(h.c), byte(h.mode), byte(rank), valueCode(h.value)})
		}
		b.WriteByte(0xfe)
		for _, w := range r.queue[l] {
			b.Write([]byte{byte(w.s), byte(w.c), byte(w.mode), valueCode(w.value)})
		}
	}
	// A live watch's picture is not part of the state: every step checks
	// that it equals its lock's holders.
	for _, w := range r.watches {
		if !w.ended {
			b.Write([]byte{0xfd, byte(w.s), byte(w.id), byte(w.lock)})
		}
	}
	return b.String()
}

// masks returns, per claim slot (session × claim id), who waits and who
// holds.
func (r *claimsRun) masks() (wait, hold uint64) {
	for _, ss := range r.sess {
		for _, c := range ss.live {
			bit := uint64(1) << (c.s*r.cfg.Claims + c.c - 1)
			if c.where == waiting {
				wait |= bit
			} else {
				hold |= bit
			}
		}
	}
	return wait, hold
}

func (r *claimsRun) names(cs []*cRec) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = c.String()
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func (r *claimsRun) formatSends(sends []locktable.Send) string {
	parts := make([]string, len(sends))
	for i, s := range sends {
		k := locktable.Key{Session: s.Session, Claim: s.Claim}
		switch s.Kind {
		case locktable.SendAcquired:
			parts[i] = fmt.Sprintf("push granted(%d) to %s", s.Token, r.name(k))
		case locktable.SendError:
			parts[i] = fmt.Sprintf("claim ERROR 0x%02x to %s", uint8(s.Code), r.name(k))
		case locktable.SendSessionError:
			parts[i] = fmt.Sprintf("session ERROR 0x%02x to s%d", uint8(s.Code), s.Session)
		case locktable.SendChange:
			parts[i] = fmt.Sprintf("CHANGE %s to %s", changeString(s.Change), r.name(k))
		default:
			parts[i] = fmt.Sprintf("send kind %d to %s", s.Kind, r.name(k))
		}
	}
	return "[" + strings.Join(parts, "; ") + "]"
}

func (r *claimsRun) formatResult(res locktable.Result) string {
	var parts []string
	for _, ev := range res.Events {
		k := r.name(locktable.Key{Session: ev.Session, Claim: ev.Claim})
		switch ev.Kind {
		case locktable.EventGranted:
			parts = append(parts, fmt.Sprintf("%s granted %q, token %d", k, ev.Lock, ev.Token))
		case locktable.EventReleased:
			parts = append(parts, fmt.Sprintf("%s released %q (%v)", k, ev.Lock, ev.Reason))
		case locktable.EventDequeued:
			parts = append(parts, fmt.Sprintf("%s left the queue of %q (%v)", k, ev.Lock, ev.Reason))
		}
	}
	if len(res.Sends) > 0 {
		s := r.formatSends(res.Sends)
		parts = append(parts, s[1:len(s)-1])
	}
	if len(parts) == 0 {
		return "no effects"
	}
	return strings.Join(parts, "; ")
}

func (r *claimsRun) stateString() string {
	var parts []string
	for l := range r.holders {
		parts = append(parts, fmt.Sprintf("%q: holders %s, queue %s", r.lockName(l), r.names(r.holders[l]), r.names(r.queue[l])))
	}
	for _, w := range r.watches {
		if !w.ended {
			parts = append(parts, fmt.Sprintf("%s watches %q", w, r.lockName(w.lock)))
		}
	}
	if r.shutdown {
		parts = append(parts, "shut down")
	}
	return strings.Join(parts, "; ")
}

// CheckClaims explores every interleaving of cfg breadth first on the
// real lock table, with sessions of several claims in exclusive, shared
// and semaphore modes, and checks the safety properties in every state
// and the liveness property (no waiter starves while holders eventually
// let go) on the whole state graph.
func CheckClaims(cfg ClaimsConfig) Report {
	start := time.Now()
	cfg = cfg.withDefaults()
	rep := Report{Model: "claims", Config: cfg.String()}
	fresh := func() (replayable[claimsOp], *failure) { return newClaimsRun(&cfg) }
	g, waitMask, holdMask, steps, f := explore(fresh)
	if f != nil {
		rep.Violation = &Violation{Property: f.prop, Detail: f.detail, Trace: describeClaims(&cfg, steps)}
		return finish(&rep, g, start)
	}
	slot, stem, loop, starved := starvation(g, cfg.Sessions*cfg.Claims, waitMask, holdMask)
	if starved {
		lines := describeClaims(&cfg, append(slices.Clone(stem), loop...))
		rep.Violation = &Violation{
			Property: PropLiveness,
			Detail: fmt.Sprintf("claim s%d/c%d waits forever: in the cycle below it never ends and is never granted, "+
				"and no holder holds on throughout, so weak fairness (holders eventually let go) does not exclude it",
				slot/cfg.Claims+1, slot%cfg.Claims+1),
			Trace: lines[:len(stem)],
			Loop:  lines[len(stem):],
		}
	}
	return finish(&rep, g, start)
}

// describeClaims replays steps on a fresh table and describes each one.
func describeClaims(cfg *ClaimsConfig, steps []claimsOp) []string {
	r, _ := newClaimsRun(cfg)
	r.describe = true
	lines := make([]string, 0, len(steps))
	for i, op := range steps {
		before := r.stateString()
		line, f := r.step(op, i == len(steps)-1)
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
