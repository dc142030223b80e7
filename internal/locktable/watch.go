package locktable

import (
	"slices"
	"time"

	"github.com/batonlock/baton/protocol"
)

// Watches and values (docs/protocol-v2-watches.md, "v2 values and watches"). A claim
// carries a value its holder chose (ClaimRequest.Value, SetValue); a
// watch of a name is told every change of the name's holders, as
// SendChange frames to its session, in the order this table makes them:
// first the holders when the watch starts, then each grant, value change
// and end. A watch's id shares its session's claim ids.

// watch is one watch of a name: an entry in the name's list, in the
// order the watches began, and in its session's map.
type watch struct {
	id         ClaimID
	sess       *session
	name       string
	prev, next *watch
}

// watchList is the intrusive list of a name's watches.
type watchList struct {
	head, tail *watch
	n          int
}

// Watch starts watch wid of session sid on name and returns the name's
// state as SendChange frames to it: ChangeHeld for each holder, in grant
// order, then ChangeSynced. It counts as hearing from the session. Errors,
// which change nothing: ErrShutdown, ErrNoSession (also for a version 1
// session), a protocol sentinel for an invalid name, ErrClaimExists (the
// id names a claim or a watch of the session), ErrTooManyClaims (a watch
// counts as a claim against Limits.Claims).
func (t *Table) Watch(now time.Time, sid SessionID, wid ClaimID, name string) (Result, error) {
	var res Result
	if t.shutdown {
		return res, ErrShutdown
	}
	s := t.sessions[sid]
	if s == nil || s.v1 {
		return res, ErrNoSession
	}
	if err := protocol.ValidateName(name); err != nil {
		return res, err
	}
	if s.get(wid) != nil || t.watchOf(sid, wid) != nil {
		return res, ErrClaimExists
	}
	if t.limits.Claims > 0 && s.count()+len(t.watchesOf[sid]) >= t.limits.Claims {
		return res, ErrTooManyClaims
	}
	s.lastSeen = now
	w := &watch{id: wid, sess: s, name: name}
	if t.watches == nil {
		t.watches, t.watchesOf = map[string]*watchList{}, map[SessionID]map[ClaimID]*watch{}
	}
	if t.watchesOf[sid] == nil {
		t.watchesOf[sid] = map[ClaimID]*watch{}
	}
	t.watchesOf[sid][wid] = w
	wl := t.watches[name]
	if wl == nil {
		wl = &watchList{}
		t.watches[name] = wl
	}
	wl.push(w)
	t.watchCount++
	if l := t.locks[name]; l != nil {
		for c := l.holders.head; c != nil; c = c.next {
			res.send(w.change(t.heldChange(c)))
		}
	}
	res.send(w.change(protocol.Change{Kind: protocol.ChangeSynced}))
	return res, nil
}

// SetValue gives claim k, held or queued, a new value, and tells the
// watchers of a held claim's name. It counts as hearing from the session.
// ErrNoClaim when k is not a claim; protocol.ErrValueTooLong over
// protocol.MaxValueLen.
func (t *Table) SetValue(now time.Time, k Key, value string) (Result, error) {
	var res Result
	c := t.claim(k)
	if c == nil {
		return res, ErrNoClaim
	}
	if len(value) > protocol.MaxValueLen {
		return res, protocol.ErrValueTooLong
	}
	c.sess.lastSeen = now
	t.setValue(c, value)
	if c.holding {
		t.tell(c.lock.name, protocol.Change{Kind: protocol.ChangeValue, Mode: c.mode.wire(), Token: c.token, Value: value}, &res)
	}
	return res, nil
}

// EndWatches ends every watch of session sid, as when its connection is
// gone while the session is kept, or its watches fell behind, and returns
// their ids in order.
func (t *Table) EndWatches(sid SessionID) []ClaimID {
	ws := t.watchesOf[sid]
	if len(ws) == 0 {
		return nil
	}
	ids := make([]ClaimID, 0, len(ws))
	for id := range ws {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		t.unwatch(ws[id])
	}
	return ids
}

// Watching reports whether wid is a watch of session sid.
func (t *Table) Watching(sid SessionID, wid ClaimID) bool {
	return t.watchOf(sid, wid) != nil
}

// watchOf returns watch wid of session sid, or nil.
func (t *Table) watchOf(sid SessionID, wid ClaimID) *watch {
	if len(t.watchesOf) == 0 {
		return nil
	}
	return t.watchesOf[sid][wid]
}

// valueOf returns claim c's value.
func (t *Table) valueOf(c *claim) string {
	if len(t.values) == 0 || c == nil {
		return ""
	}
	return t.values[c]
}

// setValue gives claim c value v ("" removes it).
func (t *Table) setValue(c *claim, v string) {
	switch {
	case v != "" && t.values == nil:
		t.values = map[*claim]string{c: v}
	case v != "":
		t.values[c] = v
	default:
		delete(t.values, c)
	}
}

// Watchers returns how many watches name has.
func (t *Table) Watchers(name string) int {
	if wl := t.watches[name]; wl != nil {
		return wl.n
	}
	return 0
}

// WatchCount returns how many watches the table has.
func (t *Table) WatchCount() int { return t.watchCount }

func (t *Table) unwatch(w *watch) {
	ws := t.watchesOf[w.sess.id]
	delete(ws, w.id)
	if len(ws) == 0 {
		delete(t.watchesOf, w.sess.id)
	}
	wl := t.watches[w.name]
	wl.remove(w)
	t.watchCount--
	if wl.n == 0 {
		delete(t.watches, w.name)
	}
}

// revokeWatches ends, with ERROR(0x18), the watches that allow no longer
// permits, in name order.
func (t *Table) revokeWatches(allow func(p Peer, lock string) bool, res *Result) {
	names := make([]string, 0, len(t.watches))
	for name := range t.watches {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		for w := t.watches[name].head; w != nil; {
			next := w.next
			if !allow(w.sess.peer, name) {
				res.send(Send{Kind: SendError, Session: w.sess.id, Claim: w.id, Code: protocol.CodeNotAuthorized})
				t.unwatch(w)
			}
			w = next
		}
	}
}

// moveWatches ends the watches of the names match accepts, which are
// leaving this table, each with ERROR(0x03): the watcher watches again
// at the name's new owner. It comes before the moving claims end, so
// that no watcher is told a holder freed that only moved. Names are
// visited in order.
func (t *Table) moveWatches(match func(name string) bool, res *Result) {
	var names []string
	for name := range t.watches {
		if match(name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		for w := t.watches[name].head; w != nil; {
			next := w.next
			res.send(Send{Kind: SendError, Session: w.sess.id, Claim: w.id, Code: protocol.CodeNotOwner})
			t.unwatch(w)
			w = next
		}
	}
}

// tell sends change to every watch of name, in the order they began.
func (t *Table) tell(name string, change protocol.Change, res *Result) {
	wl := t.watches[name]
	if wl == nil {
		return
	}
	for w := wl.head; w != nil; w = w.next {
		res.send(w.change(change))
	}
}

// told reports a new holder c to its name's watchers.
func (t *Table) told(c *claim, res *Result) {
	if t.watchCount > 0 && t.watches[c.lock.name] != nil {
		t.tell(c.lock.name, t.heldChange(c), res)
	}
}

// heldChange is the ChangeHeld that reports holder c.
func (t *Table) heldChange(c *claim) protocol.Change {
	return protocol.Change{Kind: protocol.ChangeHeld, Mode: c.mode.wire(), Token: c.token, Value: t.valueOf(c),
		Label: c.sess.label, Identity: c.sess.peer.Identity}
}

func (w *watch) change(c protocol.Change) Send {
	return Send{Kind: SendChange, Session: w.sess.id, Claim: w.id, Change: &c}
}

// wire is the mode as the protocol numbers it.
func (m Mode) wire() protocol.Mode {
	switch m {
	case Shared:
		return protocol.ModeShared
	case Semaphore:
		return protocol.ModeSemaphore
	}
	return protocol.ModeExclusive
}

func (l *watchList) push(w *watch) {
	w.prev, w.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = w
	} else {
		l.head = w
	}
	l.tail = w
	l.n++
}

func (l *watchList) remove(w *watch) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		l.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		l.tail = w.prev
	}
	w.prev, w.next = nil, nil
	l.n--
}
