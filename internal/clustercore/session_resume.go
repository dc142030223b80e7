package clustercore

import "time"

// What a node does with the resumable sessions it keeps
// (docs/protocol-v2-resume.md, "v2 resumable sessions and
// re-assertion"), beside the limits and the end's wait in kept.go: an
// open session whose client went elsewhere, and a kept session whose
// timer fired. Package server (resume.go) holds the sessions, their
// connections and timers, and makes the table calls.

// SessionAbandon is what keeping an open resumable session whose client
// went elsewhere found: a relaying node opened a second upstream for
// its origin, or a re-assertion named it, so its connection is given
// up as if it had broken.
type SessionAbandon struct {
	// ClaimsKept: its claims were kept (the table still had the session
	// and the kept-session limits allowed it).
	ClaimsKept bool
	// Ranges: it holds range locks, kept for its client's resume
	// whatever the limits.
	Ranges bool
	// ClaimsLeft: it still has claims in the table.
	ClaimsLeft bool
}

// Kept reports whether the session is kept: its connection is closed,
// its reader ends without ending what it holds, and its range locks are
// kept. A session that keeps nothing stays open.
func (a SessionAbandon) Kept() bool { return a.ClaimsKept || a.Ranges }

// EndsClaims reports whether its claims end now: a session kept for its
// range locks alone ends the claims a kept-session limit did not keep,
// as its connection's end would, since its reader will not.
func (a SessionAbandon) EndsClaims() bool { return a.Ranges && !a.ClaimsKept && a.ClaimsLeft }

// HoldFor is Hold for a kept session whose claims are on names, at now
// past its deadline (MayHold): its end waits while one of them is a
// name this node does not serve now (serves false). It returns when to
// look again and, the first time the wait passes a lease beyond the
// deadline, the name to warn about ("" otherwise); held false: it may
// end now.
func (e *KeptEnd) HoldFor(now, deadline time.Time, lease time.Duration, names []string, serves func(name string) bool) (retryAt time.Time, warn string, held bool) {
	for _, name := range names {
		if serves(name) {
			continue
		}
		retryAt, w := e.Hold(now, deadline, lease)
		if w {
			warn = name
		}
		return retryAt, warn, true
	}
	return time.Time{}, "", false
}
