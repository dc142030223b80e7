package admin

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/batonlock/baton/internal/glob"
	"github.com/batonlock/baton/internal/rangelock"
	"github.com/batonlock/baton/server"
)

// The range-lock endpoints (fcntl byte ranges and flock, docs/posix-locks.md):
//
//	GET  /api/ranges[?key=K|match=GLOB][&limit=N&offset=M][&holders_limit=H&waiters_limit=W]
//	POST /api/ranges/{key}/release?owner=SESSION/OWNER
//
// A listing is one page of keys (limit, default and at most MaxPage) in
// key order, each with at most holders_limit held ranges and
// waiters_limit waiting requests (default DefaultWaiterPage, at most
// MaxPage) and their totals: a key of any size costs one page.

// RangeBackend is what a Backend offers to show and release range
// locks. *server.Server is one; without it /api/ranges answers 404.
type RangeBackend interface {
	// RangeKeys returns every key with a holder or a waiting request.
	RangeKeys() []server.RangeKey
	// RangeViews describes the keys still in use, each with at most held
	// held ranges and waiting waiting requests.
	RangeViews(keys []server.RangeKey, held, waiting int) []server.RangeView
	// RangeSessionCounts returns the held ranges and waiting requests of
	// each session on keys (nil: all).
	RangeSessionCounts(keys []server.RangeKey) map[server.SessionID]server.RangeSessionCount
	// ReleaseRangesBy releases owner's range locks on key and ends its
	// session (server.ErrNoHolder: the owner has nothing there).
	ReleaseRangesBy(key string, session, owner uint64, by server.Peer) error
}

// RangeOwner names one lock owner of a range lock: its session (as
// GET /api/sessions lists it) and the owner the client chose within it
// (a process or an open file). SESSION/OWNER addresses it in POST
// .../release?owner=.
type RangeOwner struct {
	Session    uint64 `json:"session"`
	Owner      uint64 `json:"owner"`
	Label      string `json:"label,omitempty"`
	Identity   string `json:"identity"` // empty without mTLS
	RemoteAddr string `json:"remote_addr"`
	RelayedBy  string `json:"relayed_by,omitempty"` // as Holder's
}

// Ref is the owner's address for the admin API and CLI: SESSION/OWNER.
func (o RangeOwner) Ref() string { return fmt.Sprintf("%d/%d", o.Session, o.Owner) }

// RangeHeld is one held range.
type RangeHeld struct {
	RangeOwner
	Type  string `json:"type"` // read or write
	Start uint64 `json:"start"`
	// Length is the number of bytes from start; 0 means to the end of
	// the file, as fcntl's l_len.
	Length uint64 `json:"length"`
}

// RangeWaiting is one waiting range request, in arrival order.
type RangeWaiting struct {
	RangeHeld
	Req   uint64 `json:"req"` // the request's id within its session
	Since Time   `json:"since"`
}

// RangeKey is one key's range locks in one namespace.
type RangeKey struct {
	Key       string `json:"key"`
	Namespace string `json:"ns"` // posix (fcntl) or flock
	// Holders are a page of the held ranges: owners in the order they
	// took their first range, each owner's ranges by start; at most
	// holders_limit of HoldersTotal.
	Holders      []RangeHeld    `json:"holders"`
	HoldersTotal int            `json:"holders_total"`
	Waiters      []RangeWaiting `json:"waiters"`
	WaitersTotal int            `json:"waiters_total"`
	// Node is the cluster node that owns the key, set by 'baton ranges'
	// when it lists a cluster (each node's API leaves it empty).
	Node string `json:"node,omitempty"`
}

// RangeList is the answer of GET /api/ranges.
type RangeList struct {
	Ranges     []RangeKey `json:"ranges"`
	Total      int        `json:"total"` // matching keys
	Offset     int        `json:"offset"`
	SnapshotAt Time       `json:"snapshot_at"`
}

// RangesReleased is the answer of POST /api/ranges/{key}/release: the
// key's locks right after (empty when none is left).
type RangesReleased struct {
	Released string     `json:"released"` // the key
	Owner    string     `json:"owner"`    // SESSION/OWNER
	Ranges   []RangeKey `json:"ranges"`
}

func fromView(v server.RangeView) RangeKey {
	out := RangeKey{Key: v.Key, Namespace: v.Namespace(), Holders: make([]RangeHeld, 0, len(v.Holders)),
		HoldersTotal: v.HeldTotal, Waiters: make([]RangeWaiting, 0, len(v.Waiters)), WaitersTotal: v.WaitingTotal}
	held := func(h server.RangeHolder) RangeHeld {
		who := v.Sessions[h.Session]
		return RangeHeld{RangeOwner: RangeOwner{Session: uint64(h.Session), Owner: h.Owner, Label: who.Label, Identity: who.Peer.Identity,
			RemoteAddr: who.Peer.Addr, RelayedBy: who.Peer.Via},
			Type: h.Type, Start: h.Start, Length: rangelock.Range{Start: h.Start, End: h.End}.Len()}
	}
	for _, h := range v.Holders {
		out.Holders = append(out.Holders, held(h))
	}
	for _, w := range v.Waiters {
		out.Waiters = append(out.Waiters, RangeWaiting{RangeHeld: held(w.RangeHolder), Req: w.Req, Since: Time{w.Since}})
	}
	return out
}

// perKey parses holders_limit and waiters_limit.
func perKey(w http.ResponseWriter, r *http.Request) (held, waiting int, ok bool) {
	held, waiting = DefaultWaiterPage, DefaultWaiterPage
	q := r.URL.Query()
	for _, p := range []struct {
		key string
		v   *int
	}{{"holders_limit", &held}, {"waiters_limit", &waiting}} {
		if s := q.Get(p.key); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("%s %q: want a non-negative decimal number", p.key, s))
				return 0, 0, false
			}
			*p.v = n
		}
	}
	return min(held, MaxPage), min(waiting, MaxPage), true
}

func (h *handler) ranges(w http.ResponseWriter, r *http.Request, rb RangeBackend) {
	q := r.URL.Query()
	var match func(string) bool
	switch {
	case q.Has("key"):
		key := q.Get("key")
		match = func(k string) bool { return k == key }
	case q.Has("match"):
		p, err := glob.Compile(q.Get("match"))
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("bad match pattern: %v (at most %d bytes and %d runs of '*')",
				err, glob.MaxLen, glob.MaxStars))
			return
		}
		match = p.Match
	}
	if may := h.readable(r); may != nil {
		pattern := match
		match = func(k string) bool { return (pattern == nil || pattern(k)) && may(k) }
	}
	limit, offset, ok := page(w, r)
	if !ok {
		return
	}
	if limit == 0 {
		limit = MaxPage
	}
	held, waiting, ok := perKey(w, r)
	if !ok {
		return
	}
	at := time.Now()
	keys := rb.RangeKeys()
	if match != nil {
		keys = slices.DeleteFunc(keys, func(k server.RangeKey) bool { return !match(k.Key) })
	}
	slices.SortFunc(keys, func(a, b server.RangeKey) int {
		if c := cmp.Compare(a.Key, b.Key); c != 0 || a.Flock == b.Flock {
			return c
		}
		if a.Flock { // fcntl's namespace first
			return 1
		}
		return -1
	})
	lo, hi := window(len(keys), limit, offset)
	out := RangeList{Ranges: []RangeKey{}, Total: len(keys), Offset: offset, SnapshotAt: Time{at}}
	for _, v := range rb.RangeViews(keys[lo:hi], held, waiting) {
		out.Ranges = append(out.Ranges, fromView(v))
	}
	writeJSON(w, http.StatusOK, out)
}

// ParseRangeOwner parses SESSION/OWNER, the address of one range-lock
// owner.
func ParseRangeOwner(s string) (session, owner uint64, err error) {
	a, b, ok := strings.Cut(s, "/")
	if ok {
		session, err = strconv.ParseUint(a, 10, 64)
		if err == nil {
			owner, err = strconv.ParseUint(b, 10, 64)
		}
	}
	if !ok || err != nil || session == 0 {
		return 0, 0, fmt.Errorf("owner %q: want SESSION/OWNER, two decimal numbers as GET /api/ranges lists them", s)
	}
	return session, owner, nil
}

func (h *handler) releaseRanges(w http.ResponseWriter, r *http.Request, rb RangeBackend, key string) {
	by := caller(r)
	ref := r.URL.Query().Get("owner")
	session, owner, err := ParseRangeOwner(ref)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := rb.ReleaseRangesBy(key, session, owner, by); err != nil {
		if errors.Is(err, server.ErrNoHolder) {
			writeError(w, http.StatusNotFound, fmt.Sprintf("range key %q has no lock or waiting request of owner %s", key, ref))
			return
		}
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	h.Logger.Warn("admin: range locks released", "key", key, "owner", ref, "admin_identity", by.Identity, "admin_addr", by.Addr)
	out := RangesReleased{Released: key, Owner: ref, Ranges: []RangeKey{}}
	keys := []server.RangeKey{{Key: key}, {Key: key, Flock: true}}
	for _, v := range rb.RangeViews(keys, DefaultWaiterPage, DefaultWaiterPage) {
		out.Ranges = append(out.Ranges, fromView(v))
	}
	writeJSON(w, http.StatusOK, out)
}

// rangeCounts returns the range counts of the sessions for GET
// /api/sessions, counted on the keys the caller of r may read; nil
// without a RangeBackend.
func (h *handler) rangeCounts(r *http.Request) map[server.SessionID]server.RangeSessionCount {
	rb, ok := h.Server.(RangeBackend)
	if !ok {
		return nil
	}
	may := h.readable(r)
	if may == nil {
		return rb.RangeSessionCounts(nil)
	}
	keys := slices.DeleteFunc(rb.RangeKeys(), func(k server.RangeKey) bool { return !may(k.Key) })
	return rb.RangeSessionCounts(keys)
}
