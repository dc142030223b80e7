package server

import (
	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/internal/rangelock"
)

// The types of the Server's views, events and administrator actions.
// They are the lock table's own (aliases, so nothing is copied), named
// here because code outside this module cannot import internal/.

type (
	// Peer is who a session's client is: Identity from its certificate
	// (empty without mutual TLS), Addr (host:port), and Via, for a
	// version 2 session relayed by another cluster node, that node and
	// the client's session id there ("n2/17"). An administrator action
	// names its caller with one; the zero Peer names nobody.
	Peer = locktable.Peer
	// SessionID is the server's id of a session, as SessionInfos and
	// LockInfo list it.
	SessionID = locktable.SessionID
	// ClaimID is the id of a claim within its session, chosen by the
	// client (0 for a version 1 connection's one claim).
	ClaimID = locktable.ClaimID
	// Mode is how a claim shares its lock: exclusive, shared or
	// semaphore (its String method names it).
	Mode = locktable.Mode
	// Reason is why a claim ended or left a queue (its String method
	// gives the label of the metrics and the audit log).
	Reason = locktable.Reason
	// LockInfo describes one lock: Name, Limit (a semaphore's; else 0),
	// Holders in grant order (Holder is the first of them), Waiters in
	// queue order (all of them, or a page) with WaiterCount counting the
	// whole queue, and Watchers, the watches on the name.
	LockInfo = locktable.LockInfo
	// HolderInfo is one holder of a lock: Session, Claim, Mode, Label,
	// Peer, Since (when it was granted), Lease and Token (its fencing
	// token).
	HolderInfo = locktable.HolderInfo
	// WaiterInfo is one waiter of a lock: Session, Claim, Mode, Label,
	// Peer, QueuedAt, Lease, LastSeen, and V1 for a version 1 session.
	WaiterInfo = locktable.WaiterInfo
	// Counts is the number of locks with a holder (Locks) and of claims
	// in a queue (Waiters).
	Counts = locktable.Counts
	// SessionInfo describes one session: ID, V1, Label, Peer, Lease,
	// LastSeen, its claims Held and Waiting, and Detached for a session
	// without a connection (kept to be resumed, or claims moved here
	// that no session adopted yet).
	SessionInfo = locktable.SessionInfo
	// TokenSource issues fencing tokens (Server.Tokens): Next returns a
	// token greater than every token it returned before.
	TokenSource = locktable.TokenSource
	// RangeKey is one range-lock key with its namespace (fcntl or flock).
	RangeKey = rangelock.Key
	// RangeSessionCount is one session's held ranges and waiting range
	// requests.
	RangeSessionCount = rangelock.SessionCount
	// RangePage is a page of one range-lock key: its held ranges and
	// waiting requests (at most as many as asked for), and the totals.
	RangePage = rangelock.View
	// RangeSessionID is the session of a range lock, as a RangePage's
	// ranges name it: the server's SessionID of the same session.
	RangeSessionID = rangelock.SessionID
)

// Errors of the administrator actions and of the views, for errors.Is.
var (
	ErrNoLock      = locktable.ErrNoLock      // nobody holds (or waits for) the lock
	ErrNoHolder    = locktable.ErrNoHolder    // the claim named holds nothing there
	ErrNoWaiter    = locktable.ErrNoWaiter    // the claim or address named is not in the queue
	ErrManyHolders = locktable.ErrManyHolders // a shared or semaphore lock: name the holder (ClaimRef)
)
