package admin

import (
	"encoding/json"
	"time"

	"github.com/batonlock/baton/internal/locktable"
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

// Lock is one lock: its holder and its waiters in FIFO order.
type Lock struct {
	Name    string   `json:"name"`
	Holder  *Holder  `json:"holder"` // null when nobody holds it
	Waiters []Waiter `json:"waiters"`
}

// Holder is the owner of a lock.
type Holder struct {
	Identity   string `json:"identity"` // empty without mTLS
	RemoteAddr string `json:"remote_addr"`
	Since      Time   `json:"since"` // when the lock was granted
	LeaseMS    int64  `json:"lease_ms"`
	Token      uint64 `json:"token"`
}

// Waiter is a claim in a lock's queue.
type Waiter struct {
	Identity   string `json:"identity"`
	RemoteAddr string `json:"remote_addr"`
	QueuedAt   Time   `json:"queued_at"`
}

// LockList is the answer of GET /api/locks.
type LockList struct {
	Locks []Lock `json:"locks"`
}

// Info is the answer of GET /api/info.
type Info struct {
	Version      string            `json:"version"`
	StartedAt    Time              `json:"started_at"`
	UptimeMS     int64             `json:"uptime_ms"`
	ShuttingDown bool              `json:"shutting_down"`
	Counts       Counts            `json:"counts"`
	Config       map[string]string `json:"config"` // effective setting of every flag
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

func fromInfo(l locktable.LockInfo) Lock {
	h := l.Holder
	out := Lock{
		Name: l.Name,
		Holder: &Holder{Identity: h.Peer.Identity, RemoteAddr: h.Peer.Addr,
			Since: Time{h.Since}, LeaseMS: h.Lease.Milliseconds(), Token: h.Token},
		Waiters: make([]Waiter, 0, len(l.Waiters)),
	}
	for _, w := range l.Waiters {
		out.Waiters = append(out.Waiters, Waiter{Identity: w.Peer.Identity,
			RemoteAddr: w.Peer.Addr, QueuedAt: Time{w.QueuedAt}})
	}
	return out
}
