package rangelock

import (
	"cmp"
	"slices"
)

// Key is one key in one namespace: a file as the table knows it.
type Key struct {
	Key string
	NS  Namespace
}

// Keys returns every key with a holder or a waiting request, in no
// particular order.
func (t *Table) Keys() []Key {
	out := make([]Key, 0, len(t.files))
	for fk := range t.files {
		out = append(out, Key{fk.key, fk.ns})
	}
	return out
}

// View is one key's locks as an operator sees them: at most a page of
// its held ranges and of its waiting requests, with their totals.
type View struct {
	Key
	Holders      []Lock // in Holders' order
	HeldTotal    int    // held ranges of every owner
	Waiters      []Waiter
	WaitingTotal int
}

// View describes key in ns with at most held of its held ranges and
// waiting of its waiting requests; false when nobody holds or waits
// there. It copies only what it returns.
func (t *Table) View(key string, ns Namespace, held, waiting int) (View, bool) {
	f := t.files[fileKey{key, ns}]
	if f == nil {
		return View{}, false
	}
	v := View{Key: Key{key, ns}, WaitingTotal: len(f.queue)}
	for _, h := range f.holders {
		v.HeldTotal += h.n()
		i, j := 0, 0
		for len(v.Holders) < held && (i < len(h.reads) || j < len(h.writes)) {
			if j == len(h.writes) || i < len(h.reads) && h.reads[i].Start < h.writes[j].Start {
				v.Holders = append(v.Holders, Lock{Owner: h.owner, Type: Read, Range: h.reads[i]})
				i++
			} else {
				v.Holders = append(v.Holders, Lock{Owner: h.owner, Type: Write, Range: h.writes[j]})
				j++
			}
		}
	}
	for _, w := range f.queue[:min(waiting, len(f.queue))] {
		v.Waiters = append(v.Waiters, Waiter{Owner: w.owner, Tag: w.tag, Type: w.typ, Range: w.r, Since: w.since})
	}
	return v, true
}

// SessionCount is what one session holds and waits for in the table.
type SessionCount struct {
	Held    int // held ranges, over every owner and key
	Waiting int // waiting requests
}

// SessionCounts returns the count of every session with a lock or a
// waiting request.
func (t *Table) SessionCounts() map[SessionID]SessionCount {
	out := make(map[SessionID]SessionCount, len(t.sessions))
	for sid, s := range t.sessions {
		c := SessionCount{Waiting: len(s.waiters)}
		for id, or := range s.owners {
			for _, f := range or.held {
				c.Held += f.holder(Owner{sid, id}).n()
			}
		}
		out[sid] = c
	}
	return out
}

// OwnersOn returns the owners of session sid that hold a lock or wait on
// key in ns, in increasing order.
func (t *Table) OwnersOn(key string, ns Namespace, sid SessionID) []OwnerID {
	f := t.files[fileKey{key, ns}]
	s := t.sessions[sid]
	if f == nil || s == nil {
		return nil
	}
	var out []OwnerID
	for id, or := range s.owners {
		if or.held[f.fk] != nil || slices.ContainsFunc(or.waiting, func(w *waiter) bool { return w.f == f }) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// WaitingOn returns the waiting requests of session sid on key in ns,
// in arrival order.
func (t *Table) WaitingOn(key string, ns Namespace, sid SessionID) []Waiter {
	f := t.files[fileKey{key, ns}]
	s := t.sessions[sid]
	if f == nil || s == nil {
		return nil
	}
	var ws []*waiter
	for _, w := range s.waiters {
		if w.f == f {
			ws = append(ws, w)
		}
	}
	slices.SortFunc(ws, func(a, b *waiter) int { return cmp.Compare(a.seq, b.seq) })
	out := make([]Waiter, len(ws))
	for i, w := range ws {
		out[i] = Waiter{Owner: w.owner, Tag: w.tag, Type: w.typ, Range: w.r, Since: w.since}
	}
	return out
}

// SessionsOf returns the sessions that hold a lock or wait on key in ns,
// each once, in increasing order.
func (t *Table) SessionsOf(key string, ns Namespace) []SessionID {
	var out []SessionID
	for _, c := range t.CountsOn(key, ns) {
		out = append(out, c.Session)
	}
	return out
}

// KeyCount is what one session holds and waits for on one key.
type KeyCount struct {
	Session SessionID
	SessionCount
}

// CountsOn returns, for each session that holds a lock or waits on key
// in ns, its held ranges and waiting requests there, by session.
func (t *Table) CountsOn(key string, ns Namespace) []KeyCount {
	f := t.files[fileKey{key, ns}]
	if f == nil {
		return nil
	}
	by := map[SessionID]*KeyCount{}
	get := func(sid SessionID) *KeyCount {
		c := by[sid]
		if c == nil {
			c = &KeyCount{Session: sid}
			by[sid] = c
		}
		return c
	}
	for _, h := range f.holders {
		get(h.owner.Session).Held += h.n()
	}
	for _, w := range f.queue {
		get(w.owner.Session).Waiting++
	}
	out := make([]KeyCount, 0, len(by))
	for _, c := range by {
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b KeyCount) int { return cmp.Compare(a.Session, b.Session) })
	return out
}
