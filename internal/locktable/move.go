package locktable

import (
	"slices"
	"time"

	"github.com/batonlock/baton/protocol"
)

// EvictExcept ends, for ReasonMoved, every claim on the locks whose name
// match accepts whose session keep rejects, with a frame as Evict sends
// one (ERROR(v1) to a version 1 session, which ends; ERROR(v2) to a
// version 2 claim), then promotes the waiters their ends let in: the
// claims keep accepts stay, to be exported and continue elsewhere
// (docs/cluster.md, "Continuing version 2 claims across a planned
// change"), and what is left has no waiter that could be granted. Locks
// are visited in name order.
func (t *Table) EvictExcept(now time.Time, match func(name string) bool, keep func(SessionID) bool, v1, v2 protocol.Code) Result {
	var res Result
	var names []string
	for name := range t.locks {
		if match(name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		l := t.locks[name]
		for _, c := range append(l.holders.list(l.held), l.queue.list(l.waiters)...) {
			if keep(c.sess.id) {
				continue
			}
			if c.sess.v1 {
				res.send(Send{Kind: SendError, Session: c.sess.id, Claim: c.id, Code: v1})
			} else {
				res.send(Send{Kind: SendError, Session: c.sess.id, Claim: c.id, Code: v2})
			}
			t.endClaim(now, c, ReasonMoved, false, &res)
		}
		t.promote(now, l, &res) // grants only kept claims; removes the lock once empty
	}
	return res
}

// SessionClaims returns the ids of session sid's claims, sorted.
func (t *Table) SessionClaims(sid SessionID) []ClaimID {
	s := t.sessions[sid]
	if s == nil {
		return nil
	}
	ids := s.ids()
	slices.Sort(ids)
	return ids
}
