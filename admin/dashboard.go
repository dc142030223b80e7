package admin

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonlock/baton/acl"
	"github.com/batonlock/baton/server"
)

// The endpoints the web dashboard polls (/api/locks pages, /api/sessions,
// /api/summary, /api/cluster). A page from a Pager (*server.Server is one)
// copies only the lock names and the page's locks; otherwise the handlers
// share one snapshot of the table for Config.SnapshotMaxAge, discarded by
// a release or kick, so open dashboards copy the table at most once per
// period. Endpoints: docs/admin-api.md; cost:
// docs/design/2026-12-07-dashboard-cost.md.

// Pager is what a Backend offers to page through a large lock table
// without copying it. *server.Server is one.
type Pager interface {
	// LockNames returns the name of every lock with an owner, unsorted.
	LockNames() []string
	// Locks describes the locks of names that are still held, each
	// with at most its first waiters waiters.
	Locks(names []string, waiters int) []server.LockInfo
	// LockPage describes one lock with the waiters [offset,
	// offset+limit) of its queue.
	LockPage(name string, offset, limit int) (server.LockInfo, bool)
	// SessionInfos describes every session, unsorted.
	SessionInfos() []server.SessionInfo
	// OldestQueued returns when the longest-waiting claim arrived.
	OldestQueued() (time.Time, bool)
}

// DefaultSnapshotMaxAge is how long paged listings, sessions and the
// summary reuse one snapshot of the lock table when
// Config.SnapshotMaxAge is zero.
const DefaultSnapshotMaxAge = time.Second

// MaxPage is the largest page a listing returns (limit above it is
// lowered).
const MaxPage = 1000

// DefaultWaiterPage is how many waiters of each lock a view shows
// unless waiters_limit asks for another number (up to MaxPage): a queue
// of any length costs one page (waiters_total counts them all).
const DefaultWaiterPage = 100

// waiterPage parses waiters_limit and waiters_offset.
func waiterPage(w http.ResponseWriter, r *http.Request) (limit, offset int, ok bool) {
	q := r.URL.Query()
	limit = DefaultWaiterPage
	for _, p := range []struct {
		key string
		v   *int
	}{{"waiters_limit", &limit}, {"waiters_offset", &offset}} {
		if s := q.Get(p.key); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("%s %q: want a non-negative decimal number", p.key, s))
				return 0, 0, false
			}
			*p.v = n
		}
	}
	return min(limit, MaxPage), offset, true
}

// Stats counts what the dashboard charts that the lock table does not
// keep: grants since start. It is a server.Observer; install it among the
// server's observers and in Config.Stats.
type Stats struct{ grants atomic.Uint64 }

// Observe counts grants.
func (s *Stats) Observe(e server.Event) {
	if e.Kind == server.EventGranted {
		s.grants.Add(1)
	}
}

// Grants returns the number of grants (first grants and promotions) seen.
func (s *Stats) Grants() uint64 { return s.grants.Load() }

// Summary is the answer of GET /api/summary.
type Summary struct {
	Time Time `json:"time"`
	// GrantsTotal counts grants since start (the client derives a rate
	// from two summaries); absent without Config.Stats.
	GrantsTotal *uint64 `json:"grants_total,omitempty"`
	Sessions    int     `json:"sessions"` // open connections
	Locks       int     `json:"locks"`    // locks with a holder
	Waiters     int     `json:"waiters"`
	// LongestWaitMS is how long the oldest waiter has waited, as of
	// SnapshotAt.
	LongestWaitMS int64 `json:"longest_wait_ms"`
	SnapshotAt    Time  `json:"snapshot_at"`
}

// Session is a session with at least one claim, as GET /api/sessions
// lists it.
type Session struct {
	Protocol   int    `json:"protocol"`
	Session    uint64 `json:"session"`
	Label      string `json:"label,omitempty"`
	Identity   string `json:"identity"`
	RemoteAddr string `json:"remote_addr"`
	RelayedBy  string `json:"relayed_by,omitempty"` // as Holder's
	LeaseMS    int64  `json:"lease_ms"`
	// LastSeen is when the server last heard from the session.
	LastSeen Time `json:"last_seen"`
	Held     int  `json:"held"`    // claims holding a lock
	Waiting  int  `json:"waiting"` // claims in a queue
	// Detached is set for a session no connection serves: a resumable
	// session whose connection broke, kept for a resume until its lease
	// passes, or claims moved here not yet taken over.
	Detached bool `json:"detached,omitempty"`
	// RangesHeld and RangesWaiting count the session's held byte ranges
	// (fcntl and flock) and waiting range requests (GET /api/ranges).
	RangesHeld    int `json:"ranges_held"`
	RangesWaiting int `json:"ranges_waiting"`
}

// SessionList is the answer of GET /api/sessions.
type SessionList struct {
	Sessions []Session `json:"sessions"`
	Total    int       `json:"total"`
	Offset   int       `json:"offset"`
	// SnapshotAt is when the lock table was copied.
	SnapshotAt Time `json:"snapshot_at"`
}

// snapCache is one snapshot of the whole lock table, shared read-only.
type snapCache struct {
	mu  sync.Mutex
	at  time.Time
	all []server.LockInfo
}

// snapshot returns the shared snapshot, taking a new one when it is older
// than the maximum age. Concurrent callers wait for one copy.
func (h *handler) snapshot() ([]server.LockInfo, time.Time) {
	c := h.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.all == nil || time.Since(c.at) >= h.SnapshotMaxAge {
		c.all, c.at = h.Server.Snapshot(nil), time.Now()
	}
	return c.all, c.at
}

// invalidate discards the shared snapshot after a change made through the
// API, so the next view shows it.
func (h *handler) invalidate() {
	h.cache.mu.Lock()
	h.cache.all = nil
	h.cache.mu.Unlock()
}

// page parses limit and offset; limit 0 means no paging requested.
func page(w http.ResponseWriter, r *http.Request) (limit, offset int, ok bool) {
	q := r.URL.Query()
	for _, p := range []struct {
		key string
		v   *int
	}{{"limit", &limit}, {"offset", &offset}} {
		if s := q.Get(p.key); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("%s %q: want a non-negative decimal number", p.key, s))
				return 0, 0, false
			}
			*p.v = n
		}
	}
	if q.Has("offset") && limit == 0 {
		limit = MaxPage
	}
	return min(limit, MaxPage), offset, true
}

// window returns the part [offset, offset+limit) of n items.
func window(n, limit, offset int) (lo, hi int) {
	lo = min(offset, n)
	return lo, min(lo+limit, n)
}

// readable returns the filter of the locks the caller of r may read (nil:
// all).
func (h *handler) readable(r *http.Request) func(string) bool {
	if h.Authorizer == nil {
		return nil
	}
	id := caller(r).Identity
	return func(name string) bool { return h.Authorizer.AllowAdmin(id, acl.ActionRead, name) }
}

// pagedLocks answers GET /api/locks with limit or offset: one page, in
// name order.
func (h *handler) pagedLocks(w http.ResponseWriter, match func(string) bool, limit, offset, waiters int) {
	if p, ok := h.Server.(Pager); ok {
		at := time.Now()
		names := p.LockNames()
		if match != nil {
			names = slices.DeleteFunc(names, func(n string) bool { return !match(n) })
		}
		slices.Sort(names)
		lo, hi := window(len(names), limit, offset)
		total := len(names)
		list := LockList{Locks: []Lock{}, Offset: offset, Total: &total, SnapshotAt: &Time{at}}
		for _, l := range p.Locks(names[lo:hi], waiters) {
			list.Locks = append(list.Locks, fromInfo(l, 0, waiters))
		}
		writeJSON(w, http.StatusOK, list)
		return
	}
	all, at := h.snapshot()
	list := LockList{Locks: []Lock{}, Offset: offset, SnapshotAt: &Time{at}}
	n := 0
	for _, l := range all {
		if match != nil && !match(l.Name) {
			continue
		}
		if n >= offset && n < offset+limit {
			list.Locks = append(list.Locks, fromInfo(l, 0, waiters))
		}
		n++
	}
	list.Total = &n
	writeJSON(w, http.StatusOK, list)
}

func (h *handler) sessions(w http.ResponseWriter, r *http.Request) {
	limit, offset, ok := page(w, r)
	if !ok {
		return
	}
	if limit == 0 {
		limit = MaxPage
	}
	if p, ok := h.Server.(Pager); ok && h.Authorizer == nil {
		at := time.Now()
		infos := p.SessionInfos()
		slices.SortFunc(infos, func(a, b server.SessionInfo) int { return cmp.Compare(a.ID, b.ID) })
		lo, hi := window(len(infos), limit, offset)
		out := SessionList{Sessions: make([]Session, 0, hi-lo), Total: len(infos), Offset: offset, SnapshotAt: Time{at}}
		ranges := h.rangeCounts(r)
		for _, x := range infos[lo:hi] {
			s := Session{Protocol: 2, Session: uint64(x.ID), Label: x.Label, Identity: x.Peer.Identity, RemoteAddr: x.Peer.Addr, RelayedBy: x.Peer.Via,
				LeaseMS: x.Lease.Milliseconds(), LastSeen: Time{x.LastSeen}, Held: x.Held, Waiting: x.Waiting, Detached: x.Detached,
				RangesHeld: ranges[x.ID].Held, RangesWaiting: ranges[x.ID].Waiting}
			if x.V1 {
				s.Protocol = 1
			}
			out.Sessions = append(out.Sessions, s)
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	all, at := h.snapshot()
	may := h.readable(r)
	byID := map[uint64]*Session{}
	add := func(id server.SessionID, v1 bool, label string, p server.Peer, lease time.Duration, seen time.Time) *Session {
		s := byID[uint64(id)]
		if s == nil {
			s = &Session{Protocol: 2, Session: uint64(id), Label: label, Identity: p.Identity, RemoteAddr: p.Addr, RelayedBy: p.Via,
				LeaseMS: lease.Milliseconds(), LastSeen: Time{seen}}
			if v1 {
				s.Protocol = 1
			}
			byID[uint64(id)] = s
		}
		return s
	}
	for _, l := range all {
		if may != nil && !may(l.Name) {
			continue
		}
		for _, x := range l.Holders {
			add(x.Session, x.V1, x.Label, x.Peer, x.Lease, x.LastSeen).Held++
		}
		for _, x := range l.Waiters {
			add(x.Session, x.V1, x.Label, x.Peer, x.Lease, x.LastSeen).Waiting++
		}
	}
	var infos map[server.SessionID]server.SessionInfo // of sessions with range locks alone
	for id, c := range h.rangeCounts(r) {
		s := byID[uint64(id)]
		if s == nil {
			if infos == nil {
				infos = map[server.SessionID]server.SessionInfo{}
				if p, ok := h.Server.(Pager); ok {
					for _, x := range p.SessionInfos() {
						infos[x.ID] = x
					}
				}
			}
			x, ok := infos[id]
			if !ok {
				continue
			}
			s = add(x.ID, x.V1, x.Label, x.Peer, x.Lease, x.LastSeen)
		}
		s.RangesHeld, s.RangesWaiting = c.Held, c.Waiting
	}
	ids := make([]uint64, 0, len(byID))
	for id := range byID {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	lo, hi := window(len(ids), limit, offset)
	out := SessionList{Sessions: make([]Session, 0, hi-lo), Total: len(ids), Offset: offset, SnapshotAt: Time{at}}
	for _, id := range ids[lo:hi] {
		out.Sessions = append(out.Sessions, *byID[id])
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *handler) summary(w http.ResponseWriter, r *http.Request) {
	c := h.Server.Counts()
	s := Summary{Time: Time{time.Now()}, Sessions: h.Server.Sessions(), Locks: c.Locks, Waiters: c.Waiters}
	if h.Stats != nil {
		g := h.Stats.Grants()
		s.GrantsTotal = &g
	}
	if p, ok := h.Server.(Pager); ok {
		// Like the counts, the longest wait is one number about the
		// whole server, whoever asks.
		if t, ok := p.OldestQueued(); ok {
			s.LongestWaitMS = max(0, time.Since(t).Milliseconds())
		}
		s.SnapshotAt = s.Time
		writeJSON(w, http.StatusOK, s)
		return
	}
	all, at := h.snapshot()
	s.SnapshotAt = Time{at}
	may := h.readable(r)
	for _, l := range all {
		if len(l.Waiters) == 0 || (may != nil && !may(l.Name)) {
			continue
		}
		if d := at.Sub(l.Waiters[0].QueuedAt).Milliseconds(); d > s.LongestWaitMS {
			s.LongestWaitMS = d
		}
	}
	writeJSON(w, http.StatusOK, s)
}
