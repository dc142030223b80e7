package locktable

import "errors"

// Limits bound what one client can make the table hold. A zero field
// means no limit.
type Limits struct {
	// Claims is the most claims, held and queued together, that one
	// session other than a version 1 session (which has one) may have.
	Claims int
	// Waiters is the most claims that may wait in one lock's queue.
	Waiters int
}

// Claim-level errors of a limit: the claim is refused and nothing
// changes; the session and every other claim live on.
var (
	ErrTooManyClaims  = errors.New("locktable: the session has as many claims as the server allows")
	ErrTooManyWaiters = errors.New("locktable: the lock has as many waiters as the server allows")
)

// SetLimits sets the limits that Claim (and Acquire) enforce from now
// on; claims already in the table are kept.
func (t *Table) SetLimits(l Limits) { t.limits = l }

// ClaimCount returns how many claims, held and queued, session sid has.
func (t *Table) ClaimCount(sid SessionID) int {
	if s := t.sessions[sid]; s != nil {
		return s.count()
	}
	return 0
}

func (s *session) count() int {
	n := len(s.claims)
	if s.one != nil {
		n++
	}
	return n
}

// overLimit checks a new claim of session s for req on lock l (nil: no
// lock yet) against the limits, before anything changes. A claim with a
// prior owner's queue ticket restores a place that was already held, and
// a no-wait claim never waits, so neither counts as a new waiter.
func (t *Table) overLimit(s *session, l *lock, req ClaimRequest) error {
	switch {
	case t.limits.Claims > 0 && !s.v1 && req.Ticket == 0 && s.count()+len(t.watchesOf[s.id]) >= t.limits.Claims:
		return ErrTooManyClaims
	case t.limits.Waiters > 0 && l != nil && req.Ticket == 0 && !req.NoWait && l.waiters >= t.limits.Waiters:
		// A queue this long has a head, so the claim would wait.
		return ErrTooManyWaiters
	}
	return nil
}
