package rangelock

import (
	"cmp"
	"slices"
	"time"

	"github.com/batonlock/baton/internal/locktable"
)

// Table holds the byte-range and flock locks of every key. It is not safe
// for concurrent use; callers serialize access.
type Table struct {
	tokens   locktable.TokenSource
	files    map[fileKey]*file
	sessions map[SessionID]*sessRec
	ranges   int // held ranges, over all files
	waiters  int
	limits   Limits
	// gate, when gated, is the instant before which nothing is granted
	// (gate.go).
	gate  time.Time
	gated bool
}

// SetLimits sets the table's limits; New's table has none but the
// default search bound.
func (t *Table) SetLimits(l Limits) { t.limits = l }

type fileKey struct {
	key string
	ns  Namespace
}

func (a fileKey) compare(b fileKey) int {
	if c := cmp.Compare(a.key, b.key); c != 0 {
		return c
	}
	return cmp.Compare(a.ns, b.ns)
}

// file is one key in one namespace: its holders in the order Query
// reports them, the index of their ranges, and its FIFO queue.
type file struct {
	fk fileKey
	// holders in the order of their first range: an owner joins the end
	// when it goes from no range on the file to some, as in Linux's lock
	// list, which F_GETLK walks. So they are sorted by seq.
	holders    []*holder
	byOwner    map[Owner]*holder // the holders by owner
	reads      index             // every holder's read ranges
	writes     index             // every holder's write ranges
	nextHolder uint64
	queue      []*waiter // arrival order, so by seq
	nextSeq    uint64
}

// edit puts the bytes of r into h's ranges of type typ (add) or takes
// them out, and keeps f's index of that type in step.
func (f *file) edit(h *holder, typ Type, r Range, add bool) {
	sp, x := &h.reads, &f.reads
	if typ == Write {
		sp, x = &h.writes, &f.writes
	}
	var i, j int
	var with []Range
	if add {
		var merged Range
		i, j, merged = sp.join(r)
		with = []Range{merged}
	} else {
		i, j, with = sp.cut(r)
	}
	for _, old := range (*sp)[i:j] {
		x.delete(old.Start, h)
	}
	*sp = spansReplace(*sp, i, j, with)
	for _, nr := range with {
		x.insert(nr, typ, h)
	}
}

// unindex takes all of h's ranges out of f's index.
func (f *file) unindex(h *holder) {
	for _, r := range h.reads {
		f.reads.delete(r.Start, h)
	}
	for _, r := range h.writes {
		f.writes.delete(r.Start, h)
	}
}

// index returns w's position in f's queue: a binary search by seq.
func (f *file) index(w *waiter) int {
	i, _ := slices.BinarySearchFunc(f.queue, w.seq, func(x *waiter, seq uint64) int { return cmp.Compare(x.seq, seq) })
	return i
}

// holder returns o's holder on f, or nil.
func (f *file) holder(o Owner) *holder { return f.byOwner[o] }

// holder is one owner's ranges on one file, by type. The two sets are
// disjoint; a flock holder has Whole in one of them.
type holder struct {
	owner  Owner
	seq    uint64 // its place in file.holders
	reads  spans
	writes spans
}

// released describes the bytes of r that h holds, as a Released
// without key and cause; false when it holds none of them. It costs
// binary searches, not a walk over h's ranges.
func (h *holder) released(r Range) (Released, bool) {
	rel := Released{Owner: h.owner, Type: Read}
	found := false
	for _, s := range []struct {
		typ Type
		sp  spans
	}{{Write, h.writes}, {Read, h.reads}} {
		i, j := s.sp.from(r.Start), s.sp.after(r.End)
		if i >= j {
			continue
		}
		lo, hi := max(s.sp[i].Start, r.Start), min(s.sp[j-1].End, r.End)
		if !found {
			rel.Range = Range{lo, hi}
			rel.Type = s.typ
		} else {
			rel.Range = Range{min(rel.Range.Start, lo), max(rel.Range.End, hi)}
		}
		rel.Ranges += j - i
		found = true
	}
	return rel, found
}

func (h *holder) empty() bool { return len(h.reads) == 0 && len(h.writes) == 0 }

func (h *holder) n() int { return len(h.reads) + len(h.writes) }

type waiter struct {
	f     *file
	seq   uint64 // arrival number on f
	owner Owner
	tag   uint64
	typ   Type
	r     Range
	since time.Time
	// noWait: a request without Wait queued before the token gate, to
	// be granted when it opens (gate.go).
	noWait bool
}

type sessRec struct {
	owners  map[OwnerID]*ownerRec
	waiters map[uint64]*waiter // by tag; nil until the session first waits
}

// ownerRec is what one owner holds and waits for, over all files.
type ownerRec struct {
	held    map[fileKey]*file
	waiting []*waiter // arrival order
}

// New returns an empty table that takes a fencing token for every grant
// from tokens (nil means a locktable.ClockTokens on the system clock), so
// that a server can give named and range locks one token sequence.
func New(tokens locktable.TokenSource) *Table {
	if tokens == nil {
		tokens = &locktable.ClockTokens{}
	}
	return &Table{tokens: tokens, files: map[fileKey]*file{}, sessions: map[SessionID]*sessRec{}}
}

func validate(key string, ns Namespace) error {
	switch {
	case key == "":
		return ErrInvalidKey
	case ns != POSIX && ns != Flock:
		return ErrInvalidNamespace
	}
	return nil
}

func (t *Table) owner(o Owner, create bool) *ownerRec {
	s := t.sessions[o.Session]
	if s == nil {
		if !create {
			return nil
		}
		s = &sessRec{owners: map[OwnerID]*ownerRec{}}
		t.sessions[o.Session] = s
	}
	or := s.owners[o.ID]
	if or == nil && create {
		or = &ownerRec{held: map[fileKey]*file{}}
		s.owners[o.ID] = or
	}
	return or
}

// tidy forgets an owner that holds and waits for nothing, and a session
// without owners.
func (t *Table) tidy(o Owner) {
	s := t.sessions[o.Session]
	if s == nil {
		return
	}
	if or := s.owners[o.ID]; or != nil && len(or.held) == 0 && len(or.waiting) == 0 {
		delete(s.owners, o.ID)
	}
	if len(s.owners) == 0 && len(s.waiters) == 0 {
		delete(t.sessions, o.Session)
	}
}

func (t *Table) tidyFile(f *file) {
	if len(f.holders) == 0 && len(f.queue) == 0 {
		delete(t.files, f.fk)
	}
}

// holderConflict returns the first range of another owner on f that
// conflicts with a lock of type typ over r by o, in Query's order:
// the conflicting range of the earliest holder, and of its ranges the
// one with the lowest start. The index yields the conflicting ranges
// only, so this costs O(log n) plus the ranges of the other type that
// overlap r, not a visit to every holder.
func (f *file) holderConflict(o Owner, typ Type, r Range) (Lock, bool) {
	var first *node
	f.conflicts(typ, r, func(n *node) bool {
		if n.h.owner != o && (first == nil || n.h.seq < first.h.seq || n.h.seq == first.h.seq && n.r.Start < first.r.Start) {
			first = n
		}
		return true
	})
	if first == nil {
		return Lock{}, false
	}
	return Lock{Owner: first.h.owner, Type: first.typ, Range: first.r}, true
}

// blockedByHolder reports whether a range of another owner on f
// conflicts with a lock of type typ over r by o: holderConflict without
// the order, stopping at the first.
func (f *file) blockedByHolder(o Owner, typ Type, r Range) bool {
	return !f.conflicts(typ, r, func(n *node) bool { return n.h.owner == o })
}

// conflicts calls fn with every held range on f, of any owner, that
// overlaps r and whose type or typ is Write, until fn returns false; it
// returns false when fn did.
func (f *file) conflicts(typ Type, r Range, fn func(*node) bool) bool {
	if !f.writes.overlapping(r, fn) {
		return false
	}
	return typ == Read || f.reads.overlapping(r, fn)
}

func conflicting(o Owner, typ Type, r Range, p Owner, ptyp Type, pr Range) bool {
	return o != p && (typ == Write || ptyp == Write) && r.overlaps(pr)
}

// covers reports whether h already holds every byte of r with type typ
// or, for a read, with either type: a request that changes nothing (a
// re-lock) or only lowers what h holds (a downgrade).
func (h *holder) covers(typ Type, r Range) bool {
	if h == nil {
		return false
	}
	for pos := r.Start; ; {
		s, ok := h.writes.first(Range{pos, pos})
		if !ok && typ == Read {
			s, ok = h.reads.first(Range{pos, pos})
		}
		if !ok {
			return false
		}
		if s.End >= r.End {
			return true
		}
		pos = s.End + 1
	}
}

// waiterConflict returns the first of the first n waiters of f that
// conflicts with a lock of type typ over r by o. A request that only
// re-locks or downgrades what o holds conflicts with no waiter: it takes
// nothing a waiter could want.
func (f *file) waiterConflict(o Owner, typ Type, r Range, n int) (*waiter, bool) {
	if f.holder(o).covers(typ, r) {
		return nil, false
	}
	for _, w := range f.queue[:n] {
		if conflicting(o, typ, r, w.owner, w.typ, w.r) {
			return w, true
		}
	}
	return nil, false
}

// Query is F_GETLK (F_OFD_GETLK): the first held lock of another owner
// that conflicts with a lock of type typ over r by o, in Linux's lock-list
// order: owners in the order they took their first range on the file
// (since they last held none), and each owner's ranges by start. For
// Flock, r is ignored. Waiting requests are not locks and are not
// reported. It reports false when nothing conflicts.
func (t *Table) Query(key string, ns Namespace, o Owner, typ Type, r Range) (Lock, bool, error) {
	if err := validate(key, ns); err != nil {
		return Lock{}, false, err
	}
	if typ != Read && typ != Write {
		return Lock{}, false, ErrInvalidType
	}
	if ns == Flock {
		r = Whole
	}
	if !r.valid() {
		return Lock{}, false, ErrInvalidRange
	}
	f := t.files[fileKey{key, ns}]
	if f == nil {
		return Lock{}, false, nil
	}
	l, ok := f.holderConflict(o, typ, r)
	return l, ok, nil
}

// Set is F_SETLK or F_SETLKW (Wait) with F_RDLCK or F_WRLCK, or flock
// with LOCK_SH or LOCK_EX (Wait unless LOCK_NB).
//
// A request is granted at once when it conflicts with no lock held by
// another owner and with no earlier waiting request of another owner
// (strict FIFO; see the package doc), or only re-locks or downgrades
// bytes the owner holds. A granted POSIX request replaces
// the owner's own ranges over its bytes atomically (upgrade, downgrade,
// split) and merges with the owner's ranges of the same type that it
// overlaps or touches. A flock request of the type the owner holds
// changes nothing; one of the other type first drops the owner's lock,
// granting waiters that now fit, and is then treated as a new request,
// as Linux converts flock locks.
//
// A request that cannot be granted at once is answered Conflict without
// Wait; with Wait it is queued unless waiting would close a cycle in the
// wait-for graph, which is refused with ErrDeadlock.
func (t *Table) Set(now time.Time, req Request) (Answer, Result, error) {
	var res Result
	if err := validate(req.Key, req.NS); err != nil {
		return Answer{}, res, err
	}
	if req.Type != Read && req.Type != Write {
		return Answer{}, res, ErrInvalidType
	}
	if req.NS == Flock {
		req.Range = Whole
	}
	if !req.Range.valid() {
		return Answer{}, res, ErrInvalidRange
	}
	if t.gated && !t.closed(now) {
		// The gate's time has come before its timer: open it first, so
		// that the requests that waited for it keep their place.
		res = t.OpenGate(now)
	}
	s := t.sessions[req.Owner.Session]
	if req.Wait && s != nil && s.waiters[req.Tag] != nil {
		return Answer{}, res, ErrTagExists
	}
	if n := t.limits.OwnersPerSession; n > 0 && s != nil && s.owners[req.Owner.ID] == nil && len(s.owners) >= n {
		return Answer{}, res, ErrOwners
	}
	fk := fileKey{req.Key, req.NS}
	f := t.files[fk]
	if f == nil {
		f = &file{fk: fk}
	}
	if req.NS == Flock {
		if h := f.holder(req.Owner); h != nil {
			held := Read
			if len(h.writes) > 0 {
				held = Write
			}
			if held == req.Type {
				return Answer{State: Granted, Token: t.tokens.Next()}, res, nil
			}
			t.unset(f, h, Whole, CauseConvert, &res)
			t.promote(now, f, &res)
		}
	}
	if l, ok := f.holderConflict(req.Owner, req.Type, req.Range); ok {
		return t.blocked(now, f, req, l, res)
	}
	if w, ok := f.waiterConflict(req.Owner, req.Type, req.Range, len(f.queue)); ok {
		return t.blocked(now, f, req, Lock{Owner: w.owner, Type: w.typ, Range: w.r, Waiting: true}, res)
	}
	if t.closed(now) {
		// Free, but no token before the gate: it waits its turn. One
		// without Wait is queued too, since nothing before it conflicts:
		// the gate's opening grants it for certain (gate.go).
		return t.queue(now, f, req, res)
	}
	t.files[fk] = f
	// Only a downgrade frees bytes a waiter could want; any other grant
	// adds to what is held, so no waiter can fit that did not before,
	// and the queue is not scanned (with 1,000 waiters on a key, each
	// grant there would cost a check of all of them).
	h, down := f.holder(req.Owner), false
	if h != nil && req.Type == Read {
		_, down = h.writes.first(req.Range)
	}
	tok := t.grant(f, req.Owner, req.Type, req.Range)
	if down {
		t.promote(now, f, &res)
	}
	return Answer{State: Granted, Token: tok}, res, nil
}

// blocked answers a request that conflicts with l: Conflict, ErrDeadlock
// or Waiting.
func (t *Table) blocked(now time.Time, f *file, req Request, l Lock, res Result) (Answer, Result, error) {
	if !req.Wait {
		t.tidyFile(f)
		return Answer{State: Conflict, Conflict: l}, res, nil
	}
	return t.queue(now, f, req, res)
}

// queue puts req at the end of f's queue, unless a limit or the deadlock
// check refuses it.
func (t *Table) queue(now time.Time, f *file, req Request, res Result) (Answer, Result, error) {
	if s := t.sessions[req.Owner.Session]; s != nil && s.waiters[req.Tag] != nil {
		t.tidyFile(f)
		return Answer{}, res, ErrTagExists
	}
	if err := t.waitLimit(req.Owner); err != nil {
		t.tidyFile(f)
		return Answer{}, res, err
	}
	if err := t.wouldDeadlock(f, req); err != nil {
		t.tidyFile(f)
		return Answer{}, res, err
	}
	t.files[f.fk] = f
	f.nextSeq++
	w := &waiter{f: f, seq: f.nextSeq, owner: req.Owner, tag: req.Tag, typ: req.Type, r: req.Range, since: now, noWait: !req.Wait}
	f.queue = append(f.queue, w)
	or := t.owner(req.Owner, true)
	or.waiting = append(or.waiting, w)
	s := t.sessions[req.Owner.Session]
	if s.waiters == nil {
		s.waiters = map[uint64]*waiter{}
	}
	s.waiters[req.Tag] = w
	t.waiters++
	return Answer{State: Waiting}, res, nil
}

// waitLimit refuses one more waiting request of o when its session or
// o itself has as many as the limits allow.
func (t *Table) waitLimit(o Owner) error {
	s := t.sessions[o.Session]
	if s == nil {
		return nil
	}
	if n := t.limits.WaitingPerSession; n > 0 && len(s.waiters) >= n {
		return ErrSessionWaiting
	}
	if or := s.owners[o.ID]; or != nil {
		if n := t.limits.WaitingPerOwner; n > 0 && len(or.waiting) >= n {
			return ErrOwnerWaiting
		}
	}
	return nil
}

// grant gives o a lock of type typ over r on f and returns its token.
func (t *Table) grant(f *file, o Owner, typ Type, r Range) uint64 {
	t.hold(f, o, typ, r)
	return t.tokens.Next()
}

// hold gives o a lock of type typ over r on f.
func (t *Table) hold(f *file, o Owner, typ Type, r Range) {
	h := f.holder(o)
	if h == nil {
		f.nextHolder++
		h = &holder{owner: o, seq: f.nextHolder}
		f.holders = append(f.holders, h)
		if f.byOwner == nil {
			f.byOwner = map[Owner]*holder{}
		}
		f.byOwner[o] = h
		t.owner(o, true).held[f.fk] = f
	}
	n := h.n()
	other := Write
	if typ == Write {
		other = Read
	}
	f.edit(h, other, r, false)
	f.edit(h, typ, r, true)
	t.ranges += h.n() - n
}

// unset takes r out of h's ranges on f, forgetting h when it holds
// nothing more, and reports what ended in res (with cause c) when h
// held some of r (res nil: a move, which releases nothing).
func (t *Table) unset(f *file, h *holder, r Range, c Cause, res *Result) {
	if res != nil {
		if rel, ok := h.released(r); ok {
			rel.Key, rel.NS, rel.Cause = f.fk.key, f.fk.ns, c
			res.Released = append(res.Released, rel)
		}
	}
	n := h.n()
	f.edit(h, Read, r, false)
	f.edit(h, Write, r, false)
	t.ranges += h.n() - n
	if !h.empty() {
		return
	}
	i, _ := slices.BinarySearchFunc(f.holders, h.seq, func(x *holder, seq uint64) int { return cmp.Compare(x.seq, seq) })
	f.holders = slices.Delete(f.holders, i, i+1)
	delete(f.byOwner, h.owner)
	if or := t.owner(h.owner, false); or != nil {
		delete(or.held, f.fk)
		t.tidy(h.owner)
	}
}

// promote grants, in queue order, every waiter of f that conflicts with
// no holder and no earlier waiter, until none does. A grant can let an
// earlier waiter through (a waiter's own downgrade), hence the repeat;
// each round grants at least one waiter, so it ends.
func (t *Table) promote(now time.Time, f *file, res *Result) {
	if t.closed(now) {
		t.tidyFile(f)
		return // OpenGate grants them
	}
	for granted := true; granted; {
		granted = false
		for i := 0; i < len(f.queue); i++ {
			w := f.queue[i]
			if f.blockedByHolder(w.owner, w.typ, w.r) {
				continue
			}
			if _, ok := f.waiterConflict(w.owner, w.typ, w.r, i); ok {
				continue
			}
			t.dequeue(w)
			i--
			tok := t.grant(f, w.owner, w.typ, w.r)
			res.Grants = append(res.Grants, Grant{Key: f.fk.key, NS: f.fk.ns, Owner: w.owner, Tag: w.tag,
				Type: w.typ, Range: w.r, Token: tok, Waited: now.Sub(w.since), NoWait: w.noWait})
			granted = true
		}
	}
	t.tidyFile(f)
}

// dequeue takes w out of its file's queue and its owner's and session's
// records.
func (t *Table) dequeue(w *waiter) {
	i := w.f.index(w)
	w.f.queue = slices.Delete(w.f.queue, i, i+1)
	t.forget(w)
}

// forget takes w, out of its queue already, out of its owner's and
// session's records.
func (t *Table) forget(w *waiter) {
	t.waiters--
	s := t.sessions[w.owner.Session]
	delete(s.waiters, w.tag)
	if or := s.owners[w.owner.ID]; or != nil {
		or.waiting = slices.DeleteFunc(or.waiting, func(x *waiter) bool { return x == w })
	}
	t.tidy(w.owner)
}

// Unlock is F_UNLCK over r (POSIX) or LOCK_UN (Flock, r ignored): o's
// ranges lose the bytes of r, split where r cuts them, and waiters that
// now fit are granted. o's own waiting requests stay queued.
func (t *Table) Unlock(now time.Time, key string, ns Namespace, o Owner, r Range) (Result, error) {
	var res Result
	if err := validate(key, ns); err != nil {
		return res, err
	}
	if ns == Flock {
		r = Whole
	}
	if !r.valid() {
		return res, ErrInvalidRange
	}
	f := t.files[fileKey{key, ns}]
	if f == nil {
		return res, nil
	}
	if h := f.holder(o); h != nil {
		t.unset(f, h, r, CauseUnlock, &res)
		t.promote(now, f, &res)
	}
	return res, nil
}

// ReleaseOwner drops every lock o holds on key in ns and cancels o's
// waiting requests there: what closing a file descriptor does to its
// owner's locks (for POSIX locks, any descriptor of the file the process
// has; for OFD and flock locks, the last descriptor of the open file
// description).
func (t *Table) ReleaseOwner(now time.Time, key string, ns Namespace, o Owner) (Result, error) {
	var res Result
	if err := validate(key, ns); err != nil {
		return res, err
	}
	f := t.files[fileKey{key, ns}]
	if f == nil {
		return res, nil
	}
	if or := t.owner(o, false); or != nil {
		for _, w := range slices.Clone(or.waiting) {
			if w.f == f {
				t.dequeue(w)
				res.Cancelled = append(res.Cancelled, Cancelled{Key: key, NS: ns, Owner: o, Tag: w.tag})
			}
		}
	}
	if h := f.holder(o); h != nil {
		t.unset(f, h, Whole, CauseRelease, &res)
	}
	t.promote(now, f, &res)
	return res, nil
}

// Cancel removes the waiting request tag of session sid (an interrupted
// F_SETLKW), granting waiters it held back.
func (t *Table) Cancel(now time.Time, sid SessionID, tag uint64) (Result, error) {
	var res Result
	s := t.sessions[sid]
	if s == nil || s.waiters[tag] == nil {
		return res, ErrNoWaiter
	}
	w := s.waiters[tag]
	t.dequeue(w)
	t.promote(now, w.f, &res)
	return res, nil
}

// CloseSession drops every lock and waiting request of every owner of
// session sid (the session closed or expired) and grants the waiters
// that now fit. Its own waiters are reported Cancelled. The table keeps
// no list of open sessions: the caller makes no further request for sid.
func (t *Table) CloseSession(now time.Time, sid SessionID) Result {
	var res Result
	s := t.sessions[sid]
	if s == nil {
		return res
	}
	touched := map[fileKey]*file{}
	ids := t.dequeueSession(s, touched, &res)
	// Each file's holder list is compacted once, not once per owner: a
	// session may hold with many owners on one file.
	gone := map[*holder]bool{}
	for _, id := range ids {
		or := s.owners[id]
		if or == nil {
			continue
		}
		for _, f := range sortedFiles(or.held) { // Released in key order
			touched[f.fk] = f
			h := f.holder(Owner{sid, id})
			if rel, ok := h.released(Whole); ok {
				rel.Key, rel.NS, rel.Cause = f.fk.key, f.fk.ns, CauseSession
				res.Released = append(res.Released, rel)
			}
			t.ranges -= h.n()
			f.unindex(h)
			delete(f.byOwner, h.owner)
			gone[h] = true
		}
	}
	for _, f := range touched {
		f.holders = slices.DeleteFunc(f.holders, func(h *holder) bool { return gone[h] })
	}
	for _, f := range sortedFiles(touched) {
		t.promote(now, f, &res)
	}
	delete(t.sessions, sid)
	return res
}

// DropWaiting ends every waiting request of session sid, reported
// Cancelled, and grants the waiters that now fit; its held ranges stay.
// A session whose connection broke is kept so: its locks wait for their
// client's resume, but a grant to it would reach nobody.
func (t *Table) DropWaiting(now time.Time, sid SessionID) Result {
	var res Result
	s := t.sessions[sid]
	if s == nil {
		return res
	}
	touched := map[fileKey]*file{}
	t.dequeueSession(s, touched, &res)
	for _, f := range sortedFiles(touched) {
		t.promote(now, f, &res)
	}
	return res
}

// dequeueSession takes every waiting request of s out of its queue, in
// arrival order, into res.Cancelled, adds their files to touched, and
// returns s's owner ids in order.
func (t *Table) dequeueSession(s *sessRec, touched map[fileKey]*file, res *Result) []OwnerID {
	ids := make([]OwnerID, 0, len(s.owners))
	for id := range s.owners {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var ws []*waiter
	for _, id := range ids {
		ws = append(ws, s.owners[id].waiting...)
	}
	slices.SortFunc(ws, func(a, b *waiter) int { return cmp.Compare(a.tag, b.tag) })
	// One pass over each queue, not one per waiter: a session may wait
	// many times on one file.
	gone := make(map[*waiter]bool, len(ws))
	for _, w := range ws {
		gone[w] = true
		touched[w.f.fk] = w.f
	}
	for _, f := range touched {
		f.queue = slices.DeleteFunc(f.queue, func(x *waiter) bool { return gone[x] })
	}
	for _, w := range ws {
		t.forget(w)
		res.Cancelled = append(res.Cancelled, Cancelled{Key: w.f.fk.key, NS: w.f.fk.ns, Owner: w.owner, Tag: w.tag})
	}
	return ids
}

func sortedFiles(m map[fileKey]*file) []*file {
	fs := make([]*file, 0, len(m))
	for _, f := range m {
		fs = append(fs, f)
	}
	slices.SortFunc(fs, func(a, b *file) int { return a.fk.compare(b.fk) })
	return fs
}

// Holders returns the locks held on key in ns, in Query's order: owners
// in the order of their first range, each owner's ranges by start.
func (t *Table) Holders(key string, ns Namespace) []Lock {
	f := t.files[fileKey{key, ns}]
	if f == nil {
		return nil
	}
	var out []Lock
	for _, h := range f.holders {
		i, j := 0, 0
		for i < len(h.reads) || j < len(h.writes) {
			if j == len(h.writes) || i < len(h.reads) && h.reads[i].Start < h.writes[j].Start {
				out = append(out, Lock{Owner: h.owner, Type: Read, Range: h.reads[i]})
				i++
			} else {
				out = append(out, Lock{Owner: h.owner, Type: Write, Range: h.writes[j]})
				j++
			}
		}
	}
	return out
}

// Waiters returns the waiting requests on key in ns, in arrival order.
func (t *Table) Waiters(key string, ns Namespace) []Waiter {
	f := t.files[fileKey{key, ns}]
	if f == nil {
		return nil
	}
	out := make([]Waiter, len(f.queue))
	for i, w := range f.queue {
		out[i] = Waiter{Owner: w.owner, Tag: w.tag, Type: w.typ, Range: w.r, Since: w.since}
	}
	return out
}

// Counts are the table's sizes.
type Counts struct {
	Files   int // keys (per namespace) with a holder or a waiter
	Ranges  int // held ranges
	Waiters int // waiting requests
}

// Counts returns the table's sizes.
func (t *Table) Counts() Counts {
	return Counts{Files: len(t.files), Ranges: t.ranges, Waiters: t.waiters}
}

// SessionsOn returns, for each key that match accepts, the sessions that
// hold a lock or wait there, each once, in no particular order. It is
// what a cluster node needs when a planned change moves keys away.
func (t *Table) SessionsOn(match func(key string) bool) map[string][]SessionID {
	var out map[string][]SessionID
	add := func(key string, sid SessionID) {
		if out == nil {
			out = map[string][]SessionID{}
		}
		if !slices.Contains(out[key], sid) {
			out[key] = append(out[key], sid)
		}
	}
	for fk, f := range t.files {
		if !match(fk.key) {
			continue
		}
		for _, h := range f.holders {
			add(fk.key, h.owner.Session)
		}
		for _, w := range f.queue {
			add(fk.key, w.owner.Session)
		}
	}
	return out
}
