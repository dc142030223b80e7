package modelcheck

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/internal/rangelock"
)

// RangeTable is the part of *rangelock.Table that the range model
// drives. The checker explores the real table; the interface lets tests
// wrap it with mutations.
type RangeTable interface {
	Set(now time.Time, req rangelock.Request) (rangelock.Answer, rangelock.Result, error)
	Unlock(now time.Time, key string, ns rangelock.Namespace, o rangelock.Owner, r rangelock.Range) (rangelock.Result, error)
	Query(key string, ns rangelock.Namespace, o rangelock.Owner, typ rangelock.Type, r rangelock.Range) (rangelock.Lock, bool, error)
	ReleaseOwner(now time.Time, key string, ns rangelock.Namespace, o rangelock.Owner) (rangelock.Result, error)
	Cancel(now time.Time, sid rangelock.SessionID, tag uint64) (rangelock.Result, error)
	CloseSession(now time.Time, sid rangelock.SessionID) rangelock.Result
	Holders(key string, ns rangelock.Namespace) []rangelock.Lock
	Waiters(key string, ns rangelock.Namespace) []rangelock.Waiter
	Counts() rangelock.Counts
}

var _ RangeTable = (*rangelock.Table)(nil)

// RangeConfig bounds the range-lock model.
type RangeConfig struct {
	Owners int // lock owners, 1..3
	// Sessions groups the owners into sessions (owner i is in session
	// i·Sessions/Owners); 0 means one session per owner.
	Sessions int
	// Positions is the number of byte positions, 1..3; 0 means 2. Ranges
	// are [a,b] within them or [a,EOF]; a range to the end of the file
	// also covers every byte past them.
	Positions int
	Keys      int  // files, 1..2; 0 means 1
	Flock     bool // also flock locks on the first file
	NoWait    bool // also requests that do not wait
	// New returns a fresh table under test; nil means the real
	// rangelock.New with CounterTokens.
	New func() RangeTable
}

// Property names reported by the range model, beside PropFairFIFO,
// PropNoWithhold, PropTokens, PropConsistent, PropNoPanic,
// PropDeterminism and PropLiveness.
const (
	PropRangeNoConflict  = "no conflicting locks held (different owners, overlapping bytes, one a write)"
	PropRangeSemantics   = "held ranges, queries and answers follow fcntl and flock semantics"
	PropDeadlockSound    = "deadlock detection is sound: a refused request would have closed a wait-for cycle"
	PropDeadlockComplete = "deadlock detection is complete: the wait-for graph never has a cycle"
)

const (
	rangeOwnerIDBase = 10 // owner ids differ from session ids, to catch a mix-up
	rangeFilesPerKey = 2  // POSIX, flock
)

func (c RangeConfig) withDefaults() RangeConfig {
	if c.Sessions == 0 {
		c.Sessions = c.Owners
	}
	if c.Positions == 0 {
		c.Positions = 2
	}
	if c.Keys == 0 {
		c.Keys = 1
	}
	if c.New == nil {
		c.New = func() RangeTable { return rangelock.New(&locktable.CounterTokens{}) }
	}
	return c
}

func (c RangeConfig) String() string {
	c = c.withDefaults()
	s := fmt.Sprintf("%s in %s, %s, %s", plural(c.Owners, "owner"), plural(c.Sessions, "session"),
		plural(c.Positions, "byte position"), plural(c.Keys, "file"))
	if c.Flock {
		s += ", flock"
	}
	if c.NoWait {
		s += ", non-blocking requests"
	}
	return s
}

// Validate reports bounds the checker cannot explore.
func (c RangeConfig) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Owners < 1 || c.Owners > 3:
		return fmt.Errorf("owners must be 1..3, not %d", c.Owners)
	case c.Sessions < 1 || c.Sessions > c.Owners:
		return fmt.Errorf("sessions must be 1..owners, not %d", c.Sessions)
	case c.Positions < 1 || c.Positions > 3:
		return fmt.Errorf("positions must be 1..3, not %d", c.Positions)
	case c.Keys < 1 || c.Keys > 2:
		return fmt.Errorf("files must be 1..2, not %d", c.Keys)
	}
	return nil
}

type rOpKind uint8

const (
	rSet     rOpKind = iota + 1 // owner o asks for typ over lo..hi on file f (waiting or not)
	rUnlock                     // owner o unlocks lo..hi on f
	rRelease                    // owner o's descriptor of f closes: release-owner
	rCancel                     // owner o's waiting request is interrupted
	rClose                      // session s closes
)

type rangeOp struct {
	kind   rOpKind
	o, f   int8 // owner, file (rClose: o is the session)
	typ    rangelock.Type
	lo, hi int8 // byte positions; hi == Positions means to EOF
	wait   bool
}

// rWait is a waiting request in the checker's record.
type rWait struct {
	o, f   int
	typ    rangelock.Type
	lo, hi int
}

// rangeRun is one execution: the real table and the checker's own
// record of what it must hold, kept as a type per owner and byte (the
// last byte standing for every byte past the others), which makes the
// reference semantics of fcntl obvious: a lock sets bytes, an unlock
// clears them, and ranges are the maximal runs of one type.
type rangeRun struct {
	cfg      *RangeConfig
	t        RangeTable
	now      time.Time
	bytes    [][][]rangelock.Type // [file][owner][byte]
	order    [][]int              // per file: owners holding, in order of their first range
	queue    [][]*rWait           // per file, arrival order
	waits    []*rWait             // per owner
	open     []bool               // per session
	maxToken uint64
	describe bool
}

func (c *RangeConfig) files() int        { return c.Keys * rangeFilesPerKey }
func (c *RangeConfig) session(o int) int { return o * c.Sessions / c.Owners }

func (c *RangeConfig) fileUsed(f int) bool { return f%2 == 0 || (c.Flock && f == 1) }

func rangeFile(f int) (string, rangelock.Namespace) {
	if f%2 == 1 {
		return lockNames[f/2], rangelock.Flock
	}
	return lockNames[f/2], rangelock.POSIX
}

func (r *rangeRun) owner(o int) rangelock.Owner {
	return rangelock.Owner{Session: rangelock.SessionID(r.cfg.session(o) + 1), ID: rangelock.OwnerID(rangeOwnerIDBase + o)}
}

func (r *rangeRun) ownerIndex(ow rangelock.Owner) int {
	o := int(ow.ID) - rangeOwnerIDBase
	if o < 0 || o >= r.cfg.Owners || r.owner(o) != ow {
		return -1
	}
	return o
}

func (r *rangeRun) span(lo, hi int) rangelock.Range {
	if hi == r.cfg.Positions {
		return rangelock.Range{Start: uint64(lo), End: rangelock.MaxOffset}
	}
	return rangelock.Range{Start: uint64(lo), End: uint64(hi)}
}

func (r *rangeRun) spanString(f, lo, hi int) string {
	if f%2 == 1 {
		return ""
	}
	return " " + r.span(lo, hi).String()
}

func newRangeRun(cfg *RangeConfig) *rangeRun {
	r := &rangeRun{cfg: cfg, t: cfg.New(), now: epoch, waits: make([]*rWait, cfg.Owners), open: make([]bool, cfg.Sessions)}
	for s := range r.open {
		r.open[s] = true
	}
	n := cfg.files()
	r.bytes = make([][][]rangelock.Type, n)
	r.order = make([][]int, n)
	r.queue = make([][]*rWait, n)
	for f := range r.bytes {
		r.bytes[f] = make([][]rangelock.Type, cfg.Owners)
		for o := range r.bytes[f] {
			r.bytes[f][o] = make([]rangelock.Type, cfg.Positions+1)
		}
	}
	return r
}

func (r *rangeRun) alive(o int) bool { return r.open[r.cfg.session(o)] }

func (r *rangeRun) holds(f, o int) bool {
	return slices.ContainsFunc(r.bytes[f][o], func(t rangelock.Type) bool { return t != 0 })
}

func (r *rangeRun) holdsAny(o int) bool {
	for f := range r.bytes {
		if r.holds(f, o) {
			return true
		}
	}
	return false
}

// enabled lists the steps possible in the current state, in a fixed order.
func (r *rangeRun) enabled() []rangeOp {
	var ops []rangeOp
	P := r.cfg.Positions
	for o := range r.cfg.Owners {
		if !r.alive(o) {
			continue
		}
		if w := r.waits[o]; w != nil {
			// A waiting owner is blocked; another thread of it (or its
			// client) can still close the descriptor or interrupt it.
			ops = append(ops, rangeOp{kind: rCancel, o: int8(o)}, rangeOp{kind: rRelease, o: int8(o), f: int8(w.f)})
			continue
		}
		for f := range r.cfg.files() {
			if !r.cfg.fileUsed(f) {
				continue
			}
			for lo := range P {
				for hi := lo; hi <= P; hi++ {
					if f%2 == 1 && (lo != 0 || hi != P) {
						continue
					}
					for _, typ := range []rangelock.Type{rangelock.Read, rangelock.Write} {
						ops = append(ops, rangeOp{kind: rSet, o: int8(o), f: int8(f), typ: typ, lo: int8(lo), hi: int8(hi), wait: true})
						if r.cfg.NoWait {
							ops = append(ops, rangeOp{kind: rSet, o: int8(o), f: int8(f), typ: typ, lo: int8(lo), hi: int8(hi)})
						}
					}
					if slices.ContainsFunc(r.bytes[f][o][lo:hi+1], func(t rangelock.Type) bool { return t != 0 }) {
						ops = append(ops, rangeOp{kind: rUnlock, o: int8(o), f: int8(f), lo: int8(lo), hi: int8(hi)})
					}
				}
			}
			if r.holds(f, o) {
				ops = append(ops, rangeOp{kind: rRelease, o: int8(o), f: int8(f)})
			}
		}
	}
	for s, open := range r.open {
		if open {
			ops = append(ops, rangeOp{kind: rClose, o: int8(s)})
		}
	}
	return ops
}

// conflicts reports whether a request of owner o for typ over lo..hi
// conflicts with what owner p holds on f.
func (r *rangeRun) conflictsHolder(f, o int, typ rangelock.Type, lo, hi, p int) bool {
	if p == o {
		return false
	}
	for i := lo; i <= hi; i++ {
		if t := r.bytes[f][p][i]; t != 0 && (t == rangelock.Write || typ == rangelock.Write) {
			return true
		}
	}
	return false
}

func waitsConflict(o int, typ rangelock.Type, lo, hi int, w *rWait) bool {
	return w.o != o && (typ == rangelock.Write || w.typ == rangelock.Write) && lo <= w.hi && w.lo <= hi
}

// blockers returns the owners a request on f waits for: holders with a
// conflicting byte and owners of conflicting waiters among the first n.
func (r *rangeRun) blockers(f, o int, typ rangelock.Type, lo, hi, n int) (holders, waiters []int) {
	for p := range r.cfg.Owners {
		if r.conflictsHolder(f, o, typ, lo, hi, p) {
			holders = append(holders, p)
		}
	}
	if r.covered(f, o, typ, lo, hi) {
		return holders, nil
	}
	for _, w := range r.queue[f][:n] {
		if waitsConflict(o, typ, lo, hi, w) {
			waiters = append(waiters, w.o)
		}
	}
	return holders, waiters
}

// covered reports whether o already holds every byte of lo..hi with typ
// (or, for a read, with either type): the request takes nothing a waiter
// could want, so FIFO does not hold it back.
func (r *rangeRun) covered(f, o int, typ rangelock.Type, lo, hi int) bool {
	for _, t := range r.bytes[f][o][lo : hi+1] {
		if t == 0 || typ == rangelock.Write && t != rangelock.Write {
			return false
		}
	}
	return true
}

// edges returns the owners the waiting request w waits for.
func (r *rangeRun) edges(w *rWait) []int {
	n := slices.Index(r.queue[w.f], w)
	h, ws := r.blockers(w.f, w.o, w.typ, w.lo, w.hi, n)
	return append(h, ws...)
}

// reaches reports whether any of from reaches target in the wait-for
// graph of the record.
func (r *rangeRun) reaches(from []int, target int) bool {
	seen := make([]bool, r.cfg.Owners)
	stack := slices.Clone(from)
	for len(stack) > 0 {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if p == target {
			return true
		}
		if seen[p] {
			continue
		}
		seen[p] = true
		if w := r.waits[p]; w != nil {
			stack = append(stack, r.edges(w)...)
		}
	}
	return false
}

func (r *rangeRun) setBytes(f, o int, typ rangelock.Type, lo, hi int) {
	had := r.holds(f, o)
	for i := lo; i <= hi; i++ {
		r.bytes[f][o][i] = typ
	}
	switch has := r.holds(f, o); {
	case has && !had:
		r.order[f] = append(r.order[f], o)
	case had && !has:
		r.order[f] = slices.DeleteFunc(r.order[f], func(p int) bool { return p == o })
	}
}

func (r *rangeRun) dequeue(w *rWait) {
	r.queue[w.f] = slices.DeleteFunc(r.queue[w.f], func(x *rWait) bool { return x == w })
	r.waits[w.o] = nil
}

// runs returns owner o's locks on f: the maximal runs of one type, by
// start.
func (r *rangeRun) runs(f, o int) []rangelock.Lock {
	var out []rangelock.Lock
	b := r.bytes[f][o]
	for i := 0; i < len(b); {
		j := i
		for j+1 < len(b) && b[j+1] == b[i] {
			j++
		}
		if b[i] != 0 {
			out = append(out, rangelock.Lock{Owner: r.owner(o), Type: b[i], Range: r.span(i, j)})
		}
		i = j + 1
	}
	return out
}

// holders is what Holders must return for f.
func (r *rangeRun) holders(f int) []rangelock.Lock {
	var out []rangelock.Lock
	for _, o := range r.order[f] {
		out = append(out, r.runs(f, o)...)
	}
	return out
}

// query is what Query must answer: the first conflicting lock in the
// order of Holders.
func (r *rangeRun) query(f, o int, typ rangelock.Type, lo, hi int) (rangelock.Lock, bool) {
	if f%2 == 1 {
		lo, hi = 0, r.cfg.Positions // a flock query is about the whole file
	}
	q := r.span(lo, hi)
	for _, l := range r.holders(f) {
		if l.Owner != r.owner(o) && (typ == rangelock.Write || l.Type == rangelock.Write) &&
			l.Range.Start <= q.End && q.Start <= l.Range.End {
			return l, true
		}
	}
	return rangelock.Lock{}, false
}

func (r *rangeRun) step(op rangeOp, full bool) (line string, f *failure) {
	defer func() {
		if p := recover(); p != nil {
			f = fail(PropNoPanic, "the table panicked: %v", p)
		}
	}()
	r.now = r.now.Add(tick)
	o, fi := int(op.o), int(op.f)
	key, ns := rangeFile(fi)
	var res rangelock.Result
	var cancelled []*rWait
	switch op.kind {
	case rSet:
		return r.set(op, full)
	case rUnlock:
		var err error
		res, err = r.t.Unlock(r.now, key, ns, r.owner(o), r.span(int(op.lo), int(op.hi)))
		if r.describe {
			line = fmt.Sprintf("o%d unlocks %s%s", o+1, key, r.spanString(fi, int(op.lo), int(op.hi)))
		}
		if err != nil {
			return line, fail(PropConsistent, "unlock failed: %v", err)
		}
		r.setBytes(fi, o, 0, int(op.lo), int(op.hi))
	case rRelease:
		var err error
		res, err = r.t.ReleaseOwner(r.now, key, ns, r.owner(o))
		if r.describe {
			line = fmt.Sprintf("o%d closes its descriptor of %s (%v)", o+1, key, ns)
		}
		if err != nil {
			return line, fail(PropConsistent, "release-owner failed: %v", err)
		}
		if w := r.waits[o]; w != nil && w.f == fi {
			cancelled = append(cancelled, w)
			r.dequeue(w)
		}
		r.setBytes(fi, o, 0, 0, r.cfg.Positions)
	case rCancel:
		w := r.waits[o]
		var err error
		res, err = r.t.Cancel(r.now, r.owner(o).Session, uint64(o+1))
		if r.describe {
			line = fmt.Sprintf("o%d's waiting request is interrupted", o+1)
		}
		if err != nil {
			return line, fail(PropConsistent, "cancel failed: %v", err)
		}
		r.dequeue(w)
	case rClose:
		s := o
		res = r.t.CloseSession(r.now, rangelock.SessionID(s+1))
		if r.describe {
			line = fmt.Sprintf("session %d closes", s+1)
		}
		r.open[s] = false
		for p := range r.cfg.Owners {
			if r.cfg.session(p) != s {
				continue
			}
			if w := r.waits[p]; w != nil {
				cancelled = append(cancelled, w)
				r.dequeue(w)
			}
			for f := range r.bytes {
				r.setBytes(f, p, 0, 0, r.cfg.Positions)
			}
		}
	}
	if r.describe && len(res.Grants)+len(res.Cancelled) > 0 {
		line += " → " + r.formatResult(res)
	}
	if f := r.checkCancelled(res, cancelled); f != nil {
		return line, f
	}
	if f := r.applyGrants(res.Grants); f != nil {
		return line, f
	}
	return line, r.after(full)
}

func (r *rangeRun) set(op rangeOp, full bool) (line string, f *failure) {
	o, fi, lo, hi := int(op.o), int(op.f), int(op.lo), int(op.hi)
	key, ns := rangeFile(fi)
	req := rangelock.Request{Key: key, NS: ns, Owner: r.owner(o), Type: op.typ, Range: r.span(lo, hi), Wait: op.wait, Tag: uint64(o + 1)}
	ans, res, err := r.t.Set(r.now, req)
	if r.describe {
		how := "waits for"
		if !op.wait {
			how = "tries"
		}
		line = fmt.Sprintf("o%d %s %v %s%s → ", o+1, how, op.typ, key, r.spanString(fi, lo, hi))
		switch {
		case err != nil:
			line += fmt.Sprintf("refused (%v)", err)
		case ans.State == rangelock.Conflict:
			line += fmt.Sprintf("conflict with %v", ans.Conflict)
		case ans.State == rangelock.Granted:
			line += fmt.Sprintf("granted, token %d", ans.Token)
		default:
			line += ans.State.String()
		}
		if len(res.Grants)+len(res.Cancelled) > 0 {
			line += "; " + r.formatResult(res)
		}
	}
	if len(res.Cancelled) > 0 {
		return line, fail(PropConsistent, "a lock request cancelled waiters: %s", r.formatResult(res))
	}
	grants := res.Grants
	if ns == rangelock.Flock {
		held := rangelock.Type(0)
		if r.holds(fi, o) {
			held = r.bytes[fi][o][0]
		}
		if held == op.typ {
			if err != nil || ans.State != rangelock.Granted || len(grants) > 0 {
				return line, fail(PropRangeSemantics, "a flock request for the type o%d holds was answered %v, %v, %s; want granted, no change",
					o+1, ans.State, err, r.formatResult(res))
			}
			if f := r.token(ans.Token); f != nil {
				return line, f
			}
			return line, r.after(full)
		}
		if held != 0 {
			// Linux converts by dropping the old lock first.
			r.setBytes(fi, o, 0, 0, r.cfg.Positions)
			if f := r.applyGrants(grants); f != nil {
				return line, f
			}
			grants = nil
		}
	}
	hs, ws := r.blockers(fi, o, op.typ, lo, hi, len(r.queue[fi]))
	blocked := len(hs)+len(ws) > 0
	switch {
	case err == nil && ans.State == rangelock.Granted:
		switch {
		case len(hs) > 0:
			return line, fail(PropRangeNoConflict, "o%d was granted %v%s on %s while o%d holds a conflicting lock", o+1, op.typ, r.spanString(fi, lo, hi), key, hs[0]+1)
		case len(ws) > 0:
			return line, fail(PropFairFIFO, "o%d was granted %v%s on %s ahead of o%d, who waits since earlier for a conflicting lock", o+1, op.typ, r.spanString(fi, lo, hi), key, ws[0]+1)
		}
		if f := r.token(ans.Token); f != nil {
			return line, f
		}
		r.setBytes(fi, o, op.typ, lo, hi)
	case blocked && !op.wait:
		if err != nil || ans.State != rangelock.Conflict {
			return line, fail(PropRangeSemantics, "a conflicting request without wait was answered %v, %v; want conflict", ans.State, err)
		}
		want, ok := r.query(fi, o, op.typ, lo, hi)
		if !ok && !r.covered(fi, o, op.typ, lo, hi) {
			for _, w := range r.queue[fi] {
				if waitsConflict(o, op.typ, lo, hi, w) {
					want = rangelock.Lock{Owner: r.owner(w.o), Type: w.typ, Range: r.span(w.lo, w.hi), Waiting: true}
					break
				}
			}
		}
		if ans.Conflict != want {
			return line, fail(PropRangeSemantics, "the conflict reported is %v, want %v", ans.Conflict, want)
		}
	case blocked:
		cycle := r.reaches(append(hs, ws...), o)
		switch {
		case errors.Is(err, rangelock.ErrDeadlock) && !cycle:
			return line, fail(PropDeadlockSound, "o%d's request was refused as a deadlock, but o%d, whom it would wait for, does not wait for o%d, even indirectly",
				o+1, append(hs, ws...)[0]+1, o+1)
		case err == nil && ans.State == rangelock.Waiting && cycle:
			return line, fail(PropDeadlockComplete, "o%d waits for o%d, who waits for o%d (perhaps through others): a deadlock was queued", o+1, append(hs, ws...)[0]+1, o+1)
		case cycle && errors.Is(err, rangelock.ErrDeadlock), !cycle && err == nil && ans.State == rangelock.Waiting:
		default:
			return line, fail(PropRangeSemantics, "a blocked waiting request was answered %v, %v (deadlock: %v)", ans.State, err, cycle)
		}
		if !cycle {
			w := &rWait{o: o, f: fi, typ: op.typ, lo: lo, hi: hi}
			r.queue[fi] = append(r.queue[fi], w)
			r.waits[o] = w
		}
	default:
		return line, fail(PropNoWithhold, "o%d's request for %v%s on %s conflicts with nothing but was answered %v, %v",
			o+1, op.typ, r.spanString(fi, lo, hi), key, ans.State, err)
	}
	if f := r.applyGrants(grants); f != nil {
		return line, f
	}
	return line, r.after(full)
}

func (r *rangeRun) token(tok uint64) *failure {
	if tok <= r.maxToken {
		return fail(PropTokens, "token %d is not above the earlier %d", tok, r.maxToken)
	}
	r.maxToken = tok
	return nil
}

// applyGrants checks pushed grants, in order, against the rules and
// applies them to the record.
func (r *rangeRun) applyGrants(grants []rangelock.Grant) *failure {
	for _, g := range grants {
		o := r.ownerIndex(g.Owner)
		var w *rWait
		if o >= 0 {
			w = r.waits[o]
		}
		fi := -1
		if w != nil {
			fi = w.f
		}
		if w == nil || g.Tag != uint64(o+1) || g.Type != w.typ || g.Range != r.span(w.lo, w.hi) {
			return fail(PropConsistent, "grant %+v matches no waiting request", g)
		}
		if key, ns := rangeFile(fi); g.Key != key || g.NS != ns {
			return fail(PropConsistent, "grant %+v names another file than its request's", g)
		}
		n := slices.Index(r.queue[fi], w)
		hs, ws := r.blockers(fi, o, w.typ, w.lo, w.hi, n)
		switch {
		case len(hs) > 0:
			return fail(PropRangeNoConflict, "o%d was pushed a grant of %v%s while o%d holds a conflicting lock", o+1, w.typ, r.spanString(fi, w.lo, w.hi), hs[0]+1)
		case len(ws) > 0:
			return fail(PropFairFIFO, "o%d was pushed a grant of %v%s ahead of o%d, who waits since earlier", o+1, w.typ, r.spanString(fi, w.lo, w.hi), ws[0]+1)
		}
		if f := r.token(g.Token); f != nil {
			return f
		}
		r.dequeue(w)
		r.setBytes(fi, o, w.typ, w.lo, w.hi)
	}
	return nil
}

func (r *rangeRun) checkCancelled(res rangelock.Result, want []*rWait) *failure {
	var got, exp []string
	for _, c := range res.Cancelled {
		got = append(got, fmt.Sprintf("%s/%v/%v/%d", c.Key, c.NS, c.Owner, c.Tag))
	}
	for _, w := range want {
		key, ns := rangeFile(w.f)
		exp = append(exp, fmt.Sprintf("%s/%v/%v/%d", key, ns, r.owner(w.o), w.o+1))
	}
	slices.Sort(got)
	slices.Sort(exp)
	if !slices.Equal(got, exp) {
		return fail(PropConsistent, "cancelled %v, want %v", got, exp)
	}
	return nil
}

// after checks, once an operation is done, that no waiter could be
// granted and that the wait-for graph has no cycle; with full, it also
// compares the table's introspection and queries with the record.
func (r *rangeRun) after(full bool) *failure {
	for fi, q := range r.queue {
		for i, w := range q {
			if hs, ws := r.blockers(fi, w.o, w.typ, w.lo, w.hi, i); len(hs)+len(ws) == 0 {
				key, _ := rangeFile(fi)
				return fail(PropNoWithhold, "o%d waits for %v%s on %s, but it conflicts with no holder and no earlier waiter",
					w.o+1, w.typ, r.spanString(fi, w.lo, w.hi), key)
			}
		}
	}
	for o, w := range r.waits {
		if w != nil && r.reaches(r.edges(w), o) {
			return fail(PropDeadlockComplete, "o%d waits for itself through the wait-for graph", o+1)
		}
	}
	if full {
		return r.verify()
	}
	return nil
}

// verify compares the table's holders (in query order), queues, queries
// and counts with the record.
func (r *rangeRun) verify() *failure {
	files, ranges, waiters := 0, 0, 0
	for fi := range r.bytes {
		if !r.cfg.fileUsed(fi) {
			continue
		}
		key, ns := rangeFile(fi)
		want := r.holders(fi)
		if got := r.t.Holders(key, ns); !slices.Equal(got, want) {
			return fail(PropRangeSemantics, "%s (%v) holds %v, want %v", key, ns, got, want)
		}
		ranges += len(want)
		if len(want)+len(r.queue[fi]) > 0 {
			files++
		}
		got := r.t.Waiters(key, ns)
		if len(got) != len(r.queue[fi]) {
			return fail(PropFairFIFO, "%s (%v) has %d waiters, want %d", key, ns, len(got), len(r.queue[fi]))
		}
		for i, w := range r.queue[fi] {
			g := got[i]
			if g.Owner != r.owner(w.o) || g.Type != w.typ || g.Range != r.span(w.lo, w.hi) || g.Tag != uint64(w.o+1) {
				return fail(PropFairFIFO, "%s (%v): waiter %d is %v %v %v, want o%d %v %v", key, ns, i, g.Owner, g.Type, g.Range, w.o+1, w.typ, r.span(w.lo, w.hi))
			}
		}
		waiters += len(got)
		P := r.cfg.Positions
		for o := range r.cfg.Owners {
			for lo := range P {
				for hi := lo; hi <= P; hi++ {
					for _, typ := range []rangelock.Type{rangelock.Read, rangelock.Write} {
						got, ok, err := r.t.Query(key, ns, r.owner(o), typ, r.span(lo, hi))
						want, wok := r.query(fi, o, typ, lo, hi)
						if err != nil || ok != wok || got != want {
							return fail(PropRangeSemantics, "query of o%d for %v %v on %s (%v) answered %v, %v, %v; want %v, %v",
								o+1, typ, r.span(lo, hi), key, ns, got, ok, err, want, wok)
						}
					}
				}
			}
		}
	}
	if n := r.t.Counts(); n != (rangelock.Counts{Files: files, Ranges: ranges, Waiters: waiters}) {
		return fail(PropConsistent, "counts %+v, want %d files, %d ranges, %d waiters", n, files, ranges, waiters)
	}
	return nil
}

// key is the canonical state: open sessions; per file, its holders in
// order with their bytes, and its queue. Times and token values are left
// out.
func (r *rangeRun) key() string {
	var b strings.Builder
	for _, open := range r.open {
		if open {
			b.WriteByte(1)
		} else {
			b.WriteByte(0)
		}
	}
	for fi := range r.bytes {
		b.WriteByte(0xff)
		for _, o := range r.order[fi] {
			b.WriteByte(byte(o))
			for _, t := range r.bytes[fi][o] {
				b.WriteByte(byte(t))
			}
		}
		b.WriteByte(0xfe)
		for _, w := range r.queue[fi] {
			b.Write([]byte{byte(w.o), byte(w.typ), byte(w.lo), byte(w.hi)})
		}
	}
	return b.String()
}

// masks: an owner waits while it has a waiting request, and holds while
// it holds any lock.
func (r *rangeRun) masks() (wait, hold uint64) {
	for o := range r.cfg.Owners {
		if r.waits[o] != nil {
			wait |= 1 << o
		}
		if r.holdsAny(o) {
			hold |= 1 << o
		}
	}
	return wait, hold
}

func rangeString(ns rangelock.Namespace, rg rangelock.Range) string {
	if ns == rangelock.Flock {
		return ""
	}
	return " " + rg.String()
}

func (r *rangeRun) formatResult(res rangelock.Result) string {
	var parts []string
	for _, g := range res.Grants {
		parts = append(parts, fmt.Sprintf("push grant of %v %s%s to o%d, token %d", g.Type, g.Key,
			rangeString(g.NS, g.Range), r.ownerIndex(g.Owner)+1, g.Token))
	}
	for _, c := range res.Cancelled {
		parts = append(parts, fmt.Sprintf("o%d's waiting request on %s cancelled", r.ownerIndex(c.Owner)+1, c.Key))
	}
	return strings.Join(parts, "; ")
}

func (r *rangeRun) stateString() string {
	var parts []string
	for fi := range r.bytes {
		if !r.cfg.fileUsed(fi) {
			continue
		}
		key, ns := rangeFile(fi)
		var hs, ws []string
		for _, l := range r.holders(fi) {
			hs = append(hs, fmt.Sprintf("o%d %v%s", r.ownerIndex(l.Owner)+1, l.Type, rangeString(ns, l.Range)))
		}
		for _, w := range r.queue[fi] {
			ws = append(ws, fmt.Sprintf("o%d %v%s", w.o+1, w.typ, r.spanString(fi, w.lo, w.hi)))
		}
		parts = append(parts, fmt.Sprintf("%s (%v): holders [%s], queue [%s]", key, ns, strings.Join(hs, ", "), strings.Join(ws, ", ")))
	}
	return strings.Join(parts, "; ")
}

// CheckRanges explores every interleaving of cfg breadth first on the
// real range-lock table (internal/rangelock) and checks, in every state,
// that no conflicting locks are held, that held ranges, queries and
// answers follow the reference semantics (a byte-by-byte record), strict
// FIFO, that no grant is withheld, tokens, and that deadlock detection is
// sound and complete; and, on the whole state graph, that no waiter
// starves while holders eventually let go.
func CheckRanges(cfg RangeConfig) Report {
	start := time.Now()
	cfg = cfg.withDefaults()
	rep := Report{Model: "ranges", Config: cfg.String()}
	fresh := func() (replayable[rangeOp], *failure) { return newRangeRun(&cfg), nil }
	g, waitMask, holdMask, steps, f := explore(fresh)
	if f != nil {
		rep.Violation = &Violation{Property: f.prop, Detail: f.detail, Trace: describeRanges(&cfg, steps)}
		return finish(&rep, g, start)
	}
	o, stem, loop, starved := starvation(g, cfg.Owners, waitMask, holdMask)
	if starved {
		lines := describeRanges(&cfg, append(slices.Clone(stem), loop...))
		rep.Violation = &Violation{
			Property: PropLiveness,
			Detail: fmt.Sprintf("o%d waits forever: in the cycle below its request never ends and is never granted, "+
				"and no owner holds a lock throughout, so weak fairness (holders eventually let go) does not exclude it", o+1),
			Trace: lines[:len(stem)],
			Loop:  lines[len(stem):],
		}
	}
	return finish(&rep, g, start)
}

func describeRanges(cfg *RangeConfig, steps []rangeOp) []string {
	r := newRangeRun(cfg)
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

// Mutations of the range model: each wraps the real table so that it
// breaks one rule the way a real bug could, and the checker must report
// that rule (see TestRangeMutantsAreCaught and
// modelcheck -model=ranges -mutation=...).
const (
	// MutOvertakeWaiter grants a request that conflicts with no holder
	// at once, even though it conflicts with an earlier waiter.
	MutOvertakeWaiter = "overtake-waiter"
	// MutNoDeadlockCheck queues a waiting request that closes a wait-for
	// cycle instead of refusing it.
	MutNoDeadlockCheck = "no-deadlock-check"
	// MutFalseDeadlock refuses a waiting request as a deadlock whenever
	// an owner it would wait for waits itself, cycle or not.
	MutFalseDeadlock = "false-deadlock"
	// MutUnlockWhole unlocks all of the owner's ranges on an unlock of
	// part of them.
	MutUnlockWhole = "unlock-whole"
)

// RangeMutations lists the mutations of the range model.
var RangeMutations = []string{MutOvertakeWaiter, MutNoDeadlockCheck, MutFalseDeadlock, MutUnlockWhole}

// NewRangeMutant returns a fresh real table wrapped with mutation, or nil
// for an unknown mutation.
func NewRangeMutant(mutation string) func() RangeTable {
	if !slices.Contains(RangeMutations, mutation) {
		return nil
	}
	return func() RangeTable {
		return &rangeMutant{Table: rangelock.New(&locktable.CounterTokens{}), mutation: mutation}
	}
}

type rangeMutant struct {
	*rangelock.Table
	mutation string
	keys     []string
}

func (m *rangeMutant) Set(now time.Time, req rangelock.Request) (rangelock.Answer, rangelock.Result, error) {
	if !slices.Contains(m.keys, req.Key) {
		m.keys = append(m.keys, req.Key)
	}
	r := req.Range
	if req.NS == rangelock.Flock {
		r = rangelock.Whole
	}
	first, held, _ := m.Table.Query(req.Key, req.NS, req.Owner, req.Type, r)
	switch m.mutation {
	case MutOvertakeWaiter:
		if !held && req.NS == rangelock.POSIX && !m.covers(req.Key, req.Owner, req.Type, r) {
			for _, w := range m.Table.Waiters(req.Key, req.NS) {
				if w.Owner != req.Owner && (w.Type == rangelock.Write || req.Type == rangelock.Write) && w.Range.Start <= r.End && r.Start <= w.Range.End {
					// Granted on a shadow key nobody else uses.
					shadow := req
					shadow.Key += shadowSuffix
					shadow.Wait = false
					return m.Table.Set(now, shadow)
				}
			}
		}
	case MutFalseDeadlock:
		if held && req.Wait && req.NS == rangelock.POSIX && m.waits(first.Owner) {
			return rangelock.Answer{}, rangelock.Result{}, rangelock.ErrDeadlock
		}
	}
	ans, res, err := m.Table.Set(now, req)
	if m.mutation == MutNoDeadlockCheck && errors.Is(err, rangelock.ErrDeadlock) {
		return rangelock.Answer{State: rangelock.Waiting}, res, nil
	}
	return ans, res, err
}

// covers reports whether o holds every byte of r on key (POSIX) with
// typ, or with either type for a read: a re-lock or downgrade, which the
// table grants at once by the rules.
func (m *rangeMutant) covers(key string, o rangelock.Owner, typ rangelock.Type, r rangelock.Range) bool {
	pos := r.Start
	for _, l := range m.Table.Holders(key, rangelock.POSIX) {
		if l.Owner != o || l.Range.End < pos || (typ == rangelock.Write && l.Type != rangelock.Write) {
			continue
		}
		if l.Range.Start > pos {
			return false
		}
		if l.Range.End >= r.End {
			return true
		}
		pos = l.Range.End + 1
	}
	return false
}

// waits reports whether o has a waiting request on a key seen so far.
func (m *rangeMutant) waits(o rangelock.Owner) bool {
	for _, k := range m.keys {
		for _, ns := range []rangelock.Namespace{rangelock.POSIX, rangelock.Flock} {
			for _, w := range m.Table.Waiters(k, ns) {
				if w.Owner == o {
					return true
				}
			}
		}
	}
	return false
}

func (m *rangeMutant) Unlock(now time.Time, key string, ns rangelock.Namespace, o rangelock.Owner, r rangelock.Range) (rangelock.Result, error) {
	if m.mutation == MutUnlockWhole {
		r = rangelock.Whole
	}
	return m.Table.Unlock(now, key, ns, o, r)
}
