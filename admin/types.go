package admin

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/batonlock/baton/server"
)

// TimeFormat is how the API writes times: RFC 3339 in UTC with
// milliseconds.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

// Time is a time.Time that encodes as TimeFormat.
type Time struct{ time.Time }

// MarshalJSON writes t in UTC with milliseconds.
func (t Time) MarshalJSON() ([]byte, error) {
	return json.Marshal(t.UTC().Format(TimeFormat))
}

// UnmarshalJSON reads any RFC 3339 time.
func (t *Time) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return err
	}
	t.Time = v
	return nil
}

// Lock is one lock: its holders and its waiters in FIFO order.
type Lock struct {
	Name string `json:"name"`
	// Limit is the semaphore limit of a semaphore lock; absent for an
	// exclusive or shared lock.
	Limit uint32 `json:"limit,omitempty"`
	// Holder is the earliest granted holder, the only one of an exclusive
	// lock; null when nobody holds it.
	Holder *Holder `json:"holder"`
	// Holders lists every holder in grant order: several for a shared or
	// semaphore lock.
	Holders []Holder `json:"holders"`
	// Waiters are one page of the queue, in FIFO order: from
	// WaitersOffset, at most waiters_limit (default DefaultWaiterPage).
	Waiters []Waiter `json:"waiters"`
	// WaitersTotal is the length of the whole queue.
	WaitersTotal  int `json:"waiters_total"`
	WaitersOffset int `json:"waiters_offset,omitempty"`
	// Watchers is how many sessions watch the name (docs/election.md).
	Watchers int `json:"watchers"`
	// Node is the cluster node that owns the name, set by 'baton locks'
	// when it lists a cluster (each node's API lists the names it owns
	// and leaves Node empty).
	Node string `json:"node,omitempty"`
}

// Claim names one claim: the protocol version of its session, the
// server's session id, the claim id its client chose (0 for version 1),
// its mode and its session's label (version 2). Session and claim
// address it in POST .../release?claim=SESSION/CLAIM and DELETE
// .../waiters/SESSION%2FCLAIM.
type Claim struct {
	Protocol int    `json:"protocol"`
	Session  uint64 `json:"session"`
	Claim    uint64 `json:"claim"`
	Mode     string `json:"mode"`
	Label    string `json:"label,omitempty"`
}

// Ref is the claim's address for the admin API and CLI: SESSION/CLAIM.
func (c Claim) Ref() string { return fmt.Sprintf("%d/%d", c.Session, c.Claim) }

// Holder is a holder of a lock.
type Holder struct {
	Identity   string `json:"identity"` // empty without mTLS
	RemoteAddr string `json:"remote_addr"`
	// RelayedBy names the cluster node that relays the claim's session
	// and the session's id there ("n2/17"); absent for a direct one.
	RelayedBy string `json:"relayed_by,omitempty"`
	Since     Time   `json:"since"` // when the lock was granted
	LeaseMS   int64  `json:"lease_ms"`
	Token     uint64 `json:"token"`
	// Value is the value its holder published with the claim
	// (docs/election.md), as text: bytes that are not UTF-8 read as
	// U+FFFD; absent when it has none.
	Value string `json:"value,omitempty"`
	Claim
}

// Waiter is a claim in a lock's queue.
type Waiter struct {
	Identity   string `json:"identity"`
	RemoteAddr string `json:"remote_addr"`
	RelayedBy  string `json:"relayed_by,omitempty"` // as Holder's
	QueuedAt   Time   `json:"queued_at"`
	Claim
}

// LockList is the answer of GET /api/locks.
type LockList struct {
	Locks []Lock `json:"locks"`
	// Total, Offset and SnapshotAt are set for a paged request (limit or
	// offset given): the number of matching locks, the page's first
	// index, and when the shared snapshot was taken.
	Total      *int  `json:"total,omitempty"`
	Offset     int   `json:"offset,omitempty"`
	SnapshotAt *Time `json:"snapshot_at,omitempty"`
}

// Info is the answer of GET /api/info.
type Info struct {
	Version      string            `json:"version"`
	StartedAt    Time              `json:"started_at"`
	UptimeMS     int64             `json:"uptime_ms"`
	ShuttingDown bool              `json:"shutting_down"`
	Counts       Counts            `json:"counts"`
	Config       map[string]string `json:"config"` // effective setting of every flag
	// Cluster reports whether GET /api/cluster answers (the server is
	// clustered).
	Cluster bool `json:"cluster"`
}

// Counts are the server's sizes.
type Counts struct {
	Connections int `json:"connections"`
	Locks       int `json:"locks"` // locks with an owner
	Waiters     int `json:"waiters"`
}

// Released is the answer of POST /api/locks/{name}/release: the lock as it
// is right after the release (null when nobody was waiting).
type Released struct {
	Released string `json:"released"`
	Lock     *Lock  `json:"lock"`
}

// Kicked is the answer of DELETE /api/locks/{name}/waiters/{remote_addr}:
// the lock as it is right after the waiter left.
type Kicked struct {
	Kicked string `json:"kicked"`
	Lock   *Lock  `json:"lock"`
}

// ErrorBody is the body of every error response.
type ErrorBody struct {
	Error string `json:"error"`
}

// fromInfo converts l, keeping the waiters [offset, offset+limit) of
// l.Waiters.
func fromInfo(l server.LockInfo, offset, limit int) Lock {
	lo := min(offset, len(l.Waiters))
	waiters := l.Waiters[lo:min(lo+limit, len(l.Waiters))]
	out := Lock{
		Name:         l.Name,
		Limit:        l.Limit,
		Holders:      make([]Holder, 0, len(l.Holders)),
		Waiters:      make([]Waiter, 0, len(waiters)),
		WaitersTotal: max(l.WaiterCount, len(l.Waiters)),
		Watchers:     l.Watchers,
	}
	for _, h := range l.Holders {
		out.Holders = append(out.Holders, Holder{Identity: h.Peer.Identity, RemoteAddr: h.Peer.Addr, RelayedBy: h.Peer.Via,
			Since: Time{h.Since}, LeaseMS: h.Lease.Milliseconds(), Token: h.Token, Value: h.Value,
			Claim: claimOf(h.V1, h.Session, h.Claim, h.Mode, h.Label)})
	}
	if len(out.Holders) > 0 {
		h := out.Holders[0]
		out.Holder = &h
	}
	for _, w := range waiters {
		out.Waiters = append(out.Waiters, Waiter{Identity: w.Peer.Identity,
			RemoteAddr: w.Peer.Addr, RelayedBy: w.Peer.Via, QueuedAt: Time{w.QueuedAt},
			Claim: claimOf(w.V1, w.Session, w.Claim, w.Mode, w.Label)})
	}
	return out
}

// QueueLength is the length of the lock's whole queue, of which Waiters
// is a page (an older server sends them all, without waiters_total).
func (l Lock) QueueLength() int { return max(l.WaitersTotal, l.WaitersOffset+len(l.Waiters)) }

func claimOf(v1 bool, session server.SessionID, claim server.ClaimID, mode server.Mode, label string) Claim {
	p := 2
	if v1 {
		p = 1
	}
	return Claim{Protocol: p, Session: uint64(session), Claim: uint64(claim), Mode: mode.String(), Label: label}
}

// ParseClaimRef parses SESSION/CLAIM, the address of one claim.
func ParseClaimRef(s string) (session, claim uint64, err error) {
	a, b, ok := strings.Cut(s, "/")
	if ok {
		session, err = strconv.ParseUint(a, 10, 64)
		if err == nil {
			claim, err = strconv.ParseUint(b, 10, 32)
		}
	}
	if !ok || err != nil {
		return 0, 0, fmt.Errorf("claim %q: want SESSION/CLAIM, two decimal numbers as listed", s)
	}
	return session, claim, nil
}
