package server

import (
	"errors"
	"time"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/internal/rangelock"
)

// The types of the Server's views, events and administrator actions.
// They are the server's own, copied from the lock table's at the
// boundary (views.go), so that an embedder can read and name them.

// Peer is who a session's client is. An administrator action names its
// caller with one; the zero Peer names nobody.
type Peer struct {
	Identity string // from the client's certificate; empty without mutual TLS
	Addr     string // the remote address, host:port
	// Via is, for a version 2 session relayed by another cluster node,
	// that node and the client's session id there ("n2/17").
	Via string
}

// SessionID is the server's id of a session, as SessionInfos, LockInfo
// and RangeView list it.
type SessionID uint64

// ClaimID is the id of a claim within its session, chosen by the client
// (0 for a version 1 connection's one claim).
type ClaimID uint64

// Mode is how a claim shares its lock.
type Mode uint8

// The modes of a claim.
const (
	Exclusive Mode = iota + 1 // one holder (version 1's only mode)
	Shared                    // any number of shared holders
	Semaphore                 // at most the lock's Limit holders
)

// String returns "exclusive", "shared", "semaphore" or "unknown".
func (m Mode) String() string { return locktable.Mode(m).String() }

// Reason is why a claim ended or left a queue.
type Reason uint8

// The reasons of EventReleased and EventDequeued.
const (
	ReasonGraceful      Reason = iota + 1 // the client closed its connection (or it was reset)
	ReasonExpired                         // a lease passed without a frame from the client
	ReasonIOTimeout                       // a write to the client could not complete in time
	ReasonForce                           // an administrator force-released the lock
	ReasonShutdown                        // the server shut down
	ReasonKick                            // an administrator removed the waiter
	ReasonProtocolError                   // the client broke the protocol after ACQUIRE
	ReasonRevoked                         // a reloaded access-control list no longer allows the claim
	ReasonMoved                           // a planned cluster change moved the lock to another node
)

// Reasons lists every Reason, for metrics that create their labels
// ahead.
var Reasons = []Reason{ReasonGraceful, ReasonExpired, ReasonIOTimeout, ReasonForce, ReasonShutdown,
	ReasonKick, ReasonProtocolError, ReasonRevoked, ReasonMoved}

// String returns the label of the metrics and the audit log:
// "graceful", "expired", "io_timeout", "force", "shutdown", "kick",
// "protocol_error", "revoked", "moved", or "unknown".
func (r Reason) String() string { return locktable.Reason(r).String() }

// LockInfo describes one lock.
type LockInfo struct {
	Name  string
	Limit uint32 // a semaphore's limit; 0 for an exclusive or shared lock
	// Holder is the earliest granted of Holders: the one holder of an
	// exclusive lock.
	Holder  HolderInfo
	Holders []HolderInfo // every holder, in grant order
	// Waiters are the waiters in queue order: all of them, or the page
	// asked for (LockPage, Locks).
	Waiters []WaiterInfo
	// WaiterCount is the length of the whole queue.
	WaiterCount int
	// Watchers is how many watches the name has.
	Watchers int
}

// HolderInfo is one holder of a lock.
type HolderInfo struct {
	Session  SessionID
	Claim    ClaimID
	Mode     Mode
	Label    string // the session's, chosen by the client (empty for version 1)
	Peer     Peer
	Since    time.Time     // when it was granted
	Lease    time.Duration // the session's lease
	Token    uint64        // its fencing token
	LastSeen time.Time     // when the session was last heard
	V1       bool          // a version 1 session's one claim
	Value    string        // the value the claim published to watchers
}

// WaiterInfo is one waiter of a lock.
type WaiterInfo struct {
	Session  SessionID
	Claim    ClaimID
	Mode     Mode
	Label    string // the session's, chosen by the client (empty for version 1)
	Peer     Peer
	QueuedAt time.Time     // when it joined the queue
	Lease    time.Duration // the session's lease
	LastSeen time.Time     // when the session was last heard
	V1       bool          // a version 1 session's one claim
}

// Counts is the size of the lock table.
type Counts struct {
	Locks   int // locks with a holder
	Waiters int // claims in a queue
}

// SessionInfo describes one session of the lock table.
type SessionInfo struct {
	ID       SessionID
	V1       bool   // a version 1 session
	Label    string // chosen by the client (empty for version 1)
	Peer     Peer
	Lease    time.Duration
	LastSeen time.Time // when the session was last heard
	Held     int       // claims holding a lock
	Waiting  int       // claims in a queue
	// Detached is set for a session without a connection: kept to be
	// resumed, or claims moved here that no session adopted yet.
	Detached bool
}

// TokenSource issues fencing tokens (Config.Tokens): Next returns a
// token greater than every token it returned before.
type TokenSource interface {
	Next() uint64
}

// RangeKey is one key of the range locks (a file, for a mount) in one
// namespace: fcntl's (POSIX) or flock's, which never conflict.
type RangeKey struct {
	Key   string
	Flock bool // flock's namespace; else fcntl's
}

// Namespace is "flock" or "posix".
func (k RangeKey) Namespace() string {
	if k.Flock {
		return "flock"
	}
	return "posix"
}

// RangeHolder is one held range of a range-lock key.
type RangeHolder struct {
	Session    SessionID
	Owner      uint64 // the lock owner within its session, as the client chose it
	Type       string // "read" or "write"
	Start, End uint64 // the bytes, both included; End 0x7fffffffffffffff: to the end of the file
}

// RangeWaiter is one waiting request of a range-lock key.
type RangeWaiter struct {
	RangeHolder           // what it asks for
	Req         uint64    // the request's id, as the client chose it
	Since       time.Time // when it began to wait
}

// RangeSessionCount is one session's held ranges and waiting range
// requests.
type RangeSessionCount struct {
	Held    int // held ranges, over every owner and key
	Waiting int // waiting requests
}

// Errors of the administrator actions and of the views, for errors.Is.
var (
	ErrNoLock      = errors.New("baton: no such lock")                           // nobody holds (or waits for) the lock
	ErrNoHolder    = errors.New("baton: no such holder")                         // the claim named holds nothing there
	ErrNoWaiter    = errors.New("baton: no such waiter")                         // the claim or address named is not in the queue
	ErrManyHolders = errors.New("baton: the lock has several holders; name one") // a shared or semaphore lock: name the holder (ClaimRef)
)

// adminErr is err with the lock table's errors of an administrator
// action replaced by the server's.
func adminErr(err error) error {
	switch {
	case errors.Is(err, locktable.ErrNoLock):
		return ErrNoLock
	case errors.Is(err, locktable.ErrNoHolder):
		return ErrNoHolder
	case errors.Is(err, locktable.ErrNoWaiter):
		return ErrNoWaiter
	case errors.Is(err, locktable.ErrManyHolders):
		return ErrManyHolders
	}
	return err
}

// The conversions from the tables' types. Peer, Counts and
// RangeSessionCount have the same fields as the table's and convert
// directly.

func lockInfoOf(l locktable.LockInfo) LockInfo { return lockInfosOf([]locktable.LockInfo{l})[0] }

// lockInfosOf converts ls with three allocations in all: a dashboard
// copies thousands of locks.
func lockInfosOf(ls []locktable.LockInfo) []LockInfo {
	nh, nw := 0, 0
	for _, l := range ls {
		nh, nw = nh+len(l.Holders), nw+len(l.Waiters)
	}
	out := make([]LockInfo, 0, len(ls))
	hs, ws := make([]HolderInfo, nh), make([]WaiterInfo, nw)
	for _, l := range ls {
		li := LockInfo{Name: l.Name, Limit: l.Limit, Holder: holderOf(l.Holder), WaiterCount: l.WaiterCount, Watchers: l.Watchers}
		if l.Holders != nil {
			// Each lock's part of hs and ws is capped: an append to one
			// never writes into the next.
			li.Holders, hs = hs[:len(l.Holders):len(l.Holders)], hs[len(l.Holders):]
			for i, h := range l.Holders {
				li.Holders[i] = holderOf(h)
			}
		}
		if l.Waiters != nil {
			li.Waiters, ws = ws[:len(l.Waiters):len(l.Waiters)], ws[len(l.Waiters):]
			for i, w := range l.Waiters {
				li.Waiters[i] = WaiterInfo{Session: SessionID(w.Session), Claim: ClaimID(w.Claim), Mode: Mode(w.Mode), Label: w.Label,
					Peer: Peer(w.Peer), QueuedAt: w.QueuedAt, Lease: w.Lease, LastSeen: w.LastSeen, V1: w.V1}
			}
		}
		out = append(out, li)
	}
	return out
}

func holderOf(h locktable.HolderInfo) HolderInfo {
	return HolderInfo{Session: SessionID(h.Session), Claim: ClaimID(h.Claim), Mode: Mode(h.Mode), Label: h.Label, Peer: Peer(h.Peer),
		Since: h.Since, Lease: h.Lease, Token: h.Token, LastSeen: h.LastSeen, V1: h.V1, Value: h.Value}
}

func sessionInfoOf(s locktable.SessionInfo) SessionInfo {
	return SessionInfo{ID: SessionID(s.ID), V1: s.V1, Label: s.Label, Peer: Peer(s.Peer), Lease: s.Lease,
		LastSeen: s.LastSeen, Held: s.Held, Waiting: s.Waiting, Detached: s.Detached != nil}
}

func rangeKeyOf(k rangelock.Key) RangeKey {
	return RangeKey{Key: k.Key, Flock: k.NS == rangelock.Flock}
}

func (k RangeKey) ns() rangelock.Namespace {
	if k.Flock {
		return rangelock.Flock
	}
	return rangelock.POSIX
}

func rangeHolderOf(o rangelock.Owner, t rangelock.Type, r rangelock.Range) RangeHolder {
	return RangeHolder{Session: SessionID(o.Session), Owner: uint64(o.ID), Type: t.String(), Start: r.Start, End: r.End}
}
