package clustercore

import "time"

// The policy of kept sessions (docs/protocol-v2-resume.md, "v2 resumable sessions
// and re-assertion"): when a resumable session whose connection broke
// may be kept, and when a kept session may end. The table keeps the
// session and ends it; package server (server/resume.go) holds the
// timers and asks the Router which names it serves.

// KeptLimits bound what kept sessions hold without a socket (the
// server's MaxKeptSessions and MaxKeptClaims; zero: no limit).
type KeptLimits struct {
	MaxSessions int
	MaxClaims   int
}

// KeptRefusal is why a session is not kept; KeptAllowed when it is.
type KeptRefusal int

const (
	KeptAllowed KeptRefusal = iota
	KeptTooManySessions
	KeptTooManyClaims
)

// Allow says whether one more session, with n claims, may be kept
// beside sessions kept sessions holding claims claims together.
func (l KeptLimits) Allow(sessions, claims, n int) KeptRefusal {
	switch {
	case l.MaxSessions > 0 && sessions >= l.MaxSessions:
		return KeptTooManySessions
	case l.MaxClaims > 0 && claims+n > l.MaxClaims:
		return KeptTooManyClaims
	}
	return KeptAllowed
}

// KeptRetry is how soon a kept session whose end KeptEnd.Hold put off is
// looked at again.
const KeptRetry = 50 * time.Millisecond

// KeptTimerAt is when the timer of a kept session whose lease ends at
// deadline fires: just after it, since the table ends a session only
// once more than a lease has passed.
func KeptTimerAt(deadline time.Time) time.Time { return deadline.Add(time.Millisecond) }

// KeptEnd is when one kept session may end, once its lease has passed.
//
// Its end must wait while one of its claims is on a name this node may
// not grant now: ending it would promote the claims queued behind with
// a token of this node's current epoch, which need not be above the
// name's earlier tokens. That is the case on a cluster node that has
// not committed an epoch yet (a restart, whose names the other nodes
// hand back before it does), has no epoch covering the change that gave
// it the name, is warming up, or is moving the name (Route holds it);
// and for claims a planned change installed here before the ring
// switched (Route forwards the name: the change's commit makes this
// node serve it, its fallback drops the claim). Waiting is safe: a later
// end only grants later. A wait longer than a lease past the deadline is
// reported once, since every such state should pass.
type KeptEnd struct {
	heldLong bool // its end has waited a lease past its deadline
}

// MayHold reports whether the end of a kept session whose lease ends at
// deadline may have to wait at now, so that the caller must ask about
// its names: only on a cluster node, and only past the deadline (before
// it, the table does not end the session anyway).
func (e *KeptEnd) MayHold(now, deadline time.Time, cluster bool) bool {
	return cluster && now.After(deadline)
}

// Hold records that the end waits at now for a name this node does not
// serve, and returns when to look again; warn is true the first time
// the wait has passed a lease beyond the deadline.
func (e *KeptEnd) Hold(now, deadline time.Time, lease time.Duration) (retryAt time.Time, warn bool) {
	if !e.heldLong && now.After(deadline.Add(lease)) {
		e.heldLong, warn = true, true
	}
	return now.Add(KeptRetry), warn
}
