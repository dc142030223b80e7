package rangelock

import "slices"

// What a cluster node needs to hand a key's range locks to the key's new
// owner at a planned change (server/relayranges.go): take the key's
// state out of the old owner's table, install the held ranges at the new
// owner under a stand-in session, and give them to the session that
// continues there.

// KeyLock is a held range with its key and namespace.
type KeyLock struct {
	Key  string
	NS   Namespace
	Lock Lock
}

// TakeKeys takes every key that match accepts out of the table: it
// returns the held ranges (by key and namespace, each file's holders in
// Query's order) and the waiting requests, in arrival order per file,
// and forgets both, granting nothing. The caller hands the held ranges
// on and answers the waiting requests.
func (t *Table) TakeKeys(match func(key string) bool) (held []KeyLock, waiting []Cancelled) {
	var fks []fileKey
	for fk := range t.files {
		if match(fk.key) {
			fks = append(fks, fk)
		}
	}
	slices.SortFunc(fks, fileKey.compare)
	for _, fk := range fks {
		f := t.files[fk]
		for _, l := range t.Holders(fk.key, fk.ns) {
			held = append(held, KeyLock{Key: fk.key, NS: fk.ns, Lock: l})
		}
		for len(f.queue) > 0 {
			w := f.queue[0]
			t.dequeue(w)
			waiting = append(waiting, Cancelled{Key: fk.key, NS: fk.ns, Owner: w.owner, Tag: w.tag})
		}
		for len(f.holders) > 0 {
			t.unset(f, f.holders[0], Whole, 0, nil)
		}
		delete(t.files, fk)
	}
	return held, waiting
}

// Install adds a held range handed over by TakeKeys at another table,
// without a token: its holder was told one when it was granted. It
// refuses, with ErrConflict, a range that conflicts with another owner's,
// which a hand-off to a node that serves nothing on the key yet never
// meets.
func (t *Table) Install(kl KeyLock) error {
	if err := validate(kl.Key, kl.NS); err != nil {
		return err
	}
	l := kl.Lock
	if l.Type != Read && l.Type != Write {
		return ErrInvalidType
	}
	if !l.Range.valid() {
		return ErrInvalidRange
	}
	fk := fileKey{kl.Key, kl.NS}
	f := t.files[fk]
	if f == nil {
		f = &file{fk: fk}
	}
	if _, ok := f.holderConflict(l.Owner, l.Type, l.Range); ok {
		return ErrConflict
	}
	t.files[fk] = f
	t.hold(f, l.Owner, l.Type, l.Range)
	return nil
}

// HasSession reports whether session sid holds or waits for anything.
func (t *Table) HasSession(sid SessionID) bool { return t.sessions[sid] != nil }

// MoveSession gives the ranges session from holds on key, in both
// namespaces, to session to, owner by owner (the owner ids stay), and
// returns how many ranges moved. from must not wait on key (a stand-in
// session of a hand-off never does). Nothing conflicts afterwards that
// did not before, so nothing is granted.
func (t *Table) MoveSession(from, to SessionID, key string) int {
	n := 0
	for _, ns := range []Namespace{POSIX, Flock} {
		f := t.files[fileKey{key, ns}]
		if f == nil {
			continue
		}
		var moved []Lock
		for _, l := range t.Holders(key, ns) {
			if l.Owner.Session == from {
				moved = append(moved, l)
			}
		}
		for _, l := range moved {
			if h := f.holder(l.Owner); h != nil {
				t.unset(f, h, Whole, 0, nil)
			}
		}
		for _, l := range moved {
			t.hold(f, Owner{Session: to, ID: l.Owner.ID}, l.Type, l.Range)
		}
		n += len(moved)
	}
	return n
}
