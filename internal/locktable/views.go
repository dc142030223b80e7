package locktable

import "time"

// These read-only views let a caller page through a large table without
// copying it: names first (cheap), then the few locks of one page.

// Names returns the name of every lock with a holder, in no particular
// order.
func (t *Table) Names() []string {
	out := make([]string, 0, len(t.locks))
	for name := range t.locks {
		out = append(out, name)
	}
	return out
}

// SessionInfo describes one open session and how many claims it has.
type SessionInfo struct {
	ID       SessionID
	V1       bool // a version 1 session
	Label    string
	Peer     Peer
	Lease    time.Duration
	LastSeen time.Time
	Held     int // claims holding a lock
	Waiting  int // claims in a queue
	// Detached is set for a detached session (a resumable session whose
	// connection broke, or claims moved here that no session adopted
	// yet), with the origin it stands for.
	Detached *Origin
}

// SessionInfos describes every open session, in no particular order.
func (t *Table) SessionInfos() []SessionInfo {
	out := make([]SessionInfo, 0, len(t.sessions))
	for _, s := range t.sessions {
		info := SessionInfo{ID: s.id, V1: s.v1, Label: s.label, Peer: s.peer, Lease: s.lease, LastSeen: s.lastSeen, Detached: s.origin}
		count := func(c *claim) {
			if c.holding {
				info.Held++
			} else {
				info.Waiting++
			}
		}
		if s.one != nil {
			count(s.one)
		}
		for _, c := range s.claims {
			count(c)
		}
		out = append(out, info)
	}
	return out
}

// OldestQueued returns when the claim that has waited longest, of all
// queues, arrived; false when no claim waits.
func (t *Table) OldestQueued() (time.Time, bool) {
	var oldest time.Time
	if t.waiters == 0 {
		return oldest, false
	}
	for _, l := range t.locks {
		if h := l.queue.head; h != nil && (oldest.IsZero() || h.queuedAt.Before(oldest)) {
			oldest = h.queuedAt
		}
	}
	return oldest, !oldest.IsZero()
}
