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
// (docs/design/2026-12-02-cluster-handoff.md, "Continuing version 2 claims across a planned
// change"), and what is left has no waiter that could be granted. Locks
// are visited in name order.
func (t *Table) EvictExcept(now time.Time, match func(name string) bool, keep func(SessionID) bool, v1, v2 protocol.Code) Result {
	var res Result
	t.moveWatches(match, &res)
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

// TellMoving starts a planned move of the locks whose name match accepts,
// for the claims whose session keep rejects, in two parts so that no
// claim is granted while a holder that is being told may still believe:
// their waiters end at once (they never held; the frame as EvictExcept
// sends one), and their version 1 holders are sent ERROR(v1) but keep
// their claims, and nobody is promoted in their place, until their
// sessions end: the client hangs up after reading the ERROR (having
// stopped its work) or its lease runs out. It returns those holders'
// sessions, in the order told; the version 2 holders keep rejects it
// leaves to EvictExcept.
func (t *Table) TellMoving(now time.Time, match func(name string) bool, keep func(SessionID) bool, v1, v2 protocol.Code) (res Result, told []SessionID) {
	t.moveWatches(match, &res)
	var names []string
	for name := range t.locks {
		if match(name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		l := t.locks[name]
		for _, c := range l.queue.list(l.waiters) {
			if keep(c.sess.id) {
				continue
			}
			code := v2
			if c.sess.v1 {
				code = v1
			}
			res.send(Send{Kind: SendError, Session: c.sess.id, Claim: c.id, Code: code})
			t.endClaim(now, c, ReasonMoved, false, &res)
		}
		for _, c := range l.holders.list(l.held) {
			if c.sess.v1 && !keep(c.sess.id) {
				res.send(Send{Kind: SendError, Session: c.sess.id, Claim: c.id, Code: v1})
				told = append(told, c.sess.id)
			}
		}
		// Ending waiters grants nothing the holders that stay do not
		// admit; a queue that an exclusive waiter blocked may move.
		t.promote(now, l, &res)
	}
	return res, told
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

// SessionLease returns session sid's lease, or 0 if there is no such
// session.
func (t *Table) SessionLease(sid SessionID) time.Duration {
	if s := t.sessions[sid]; s != nil {
		return s.lease
	}
	return 0
}
