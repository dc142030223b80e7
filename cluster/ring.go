package cluster

import (
	"slices"
	"time"

	"github.com/batonlock/baton/cluster/ring"
)

// Ring maps lock names to the node that owns them: the pure rendezvous
// ring of package ring, which clients use too.
type Ring = ring.Ring

// NewRing returns the ring of version over the serving members (node
// ids). Duplicates are ignored.
func NewRing(version uint64, members []string) *Ring { return ring.New(version, members) }

// RingEntry is a ring with the time its version was committed (the Raft
// leader's clock, written into the log entry, so every node has the same
// value).
type RingEntry struct {
	Ring        *Ring
	CommittedAt time.Time
}

// DefaultHistory is how many recent rings a History keeps.
const DefaultHistory = 8

// History keeps the last few rings in version order, so that a new owner
// can tell which node owned a name before a change and when the change
// was committed. It is not safe for concurrent use; Node guards its own.
type History struct {
	entries []RingEntry
	max     int
}

// NewHistory returns a history that keeps the last keep rings (at least 1).
func NewHistory(keep int) *History { return &History{max: max(keep, 1)} }

// Add records a ring; a version not above the latest is ignored (a
// replayed log entry), so Add is idempotent.
func (h *History) Add(r *Ring, committedAt time.Time) {
	if n := len(h.entries); n > 0 && r.Version() <= h.entries[n-1].Ring.Version() {
		return
	}
	h.entries = append(h.entries, RingEntry{Ring: r, CommittedAt: committedAt})
	if len(h.entries) > h.max {
		h.entries = slices.Delete(h.entries, 0, len(h.entries)-h.max)
	}
}

// Latest returns the most recent ring, and false when there is none.
func (h *History) Latest() (RingEntry, bool) {
	if len(h.entries) == 0 {
		return RingEntry{}, false
	}
	return h.entries[len(h.entries)-1], true
}

// Get returns the ring of version, and false when it is not (or no longer)
// kept.
func (h *History) Get(version uint64) (RingEntry, bool) {
	for _, e := range h.entries {
		if e.Ring.Version() == version {
			return e, true
		}
	}
	return RingEntry{}, false
}

// Previous returns the ring before version, and false when it is not kept.
func (h *History) Previous(version uint64) (RingEntry, bool) {
	for i := len(h.entries) - 1; i >= 0; i-- {
		if h.entries[i].Ring.Version() < version {
			return h.entries[i], true
		}
	}
	return RingEntry{}, false
}

// Entries returns the kept rings, oldest first.
func (h *History) Entries() []RingEntry { return slices.Clone(h.entries) }
