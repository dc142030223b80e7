package locktable

import (
	"errors"
	"time"

	"github.com/batonlock/baton/protocol"
)

// SessionID identifies a session: one connection and the failure detector
// (lease) of all its claims. The caller chooses it and never reuses it
// while the session lives.
type SessionID uint64

// ClaimID identifies one claim within its session. The client chooses it
// (a version 1 connection has the one claim V1Claim), so ids repeat across
// sessions: the table keys a claim by Key, its session and its claim id.
type ClaimID uint64

// V1Claim is the claim id of the one claim of a version 1 session.
const V1Claim ClaimID = 0

// Key names one claim in the table.
type Key struct {
	Session SessionID
	Claim   ClaimID
}

// Mode is how a claim shares its lock.
type Mode uint8

const (
	// Exclusive: one holder, conflicting with every other claim
	// (version 1's only mode).
	Exclusive Mode = iota + 1
	// Shared: any number of shared holders; conflicts with Exclusive.
	Shared
	// Semaphore: at most Limit holders of the name. A name is either a
	// semaphore or an exclusive/shared lock: while it has holders or
	// waiters, a claim of the other kind, or a semaphore claim with a
	// different Limit, is refused with a claim-level error.
	Semaphore
)

func (m Mode) String() string {
	switch m {
	case Exclusive:
		return "exclusive"
	case Shared:
		return "shared"
	case Semaphore:
		return "semaphore"
	}
	return "unknown"
}

// SessionParams open a session.
type SessionParams struct {
	Lease time.Duration // the failure detector of all the session's claims
	Peer  Peer
	Label string // chosen by the client, for introspection and audit only
}

// ClaimRequest is one claim as the table sees it.
type ClaimRequest struct {
	Name  string
	Mode  Mode
	Limit uint32 // Semaphore: the most holders the name may have (≥ 1)
	// NoWait: answer Busy instead of queueing when the claim cannot be
	// granted at once.
	NoWait bool
	// Ticket, when not 0, is the queue ticket a prior owner of the name
	// gave the claim when it queued it there: the re-assertion of a
	// queued claim on the node that took the name over (tickets.go).
	Ticket uint64
	// Value is the claim's value, at most protocol.MaxValueLen bytes,
	// reported to the name's watchers while the claim holds (watch.go).
	Value string
}

// Peer describes who holds a claim, for introspection and audit only: the
// table never decides anything by it except which waiter Kick removes.
type Peer struct {
	Identity string // from the client certificate; empty without mTLS
	Addr     string // remote address, host:port
	// Via names the cluster node that relays a version 2 session and the
	// client's session id there ("n2/17"); empty for a direct one.
	Via string
}

// Request is a version 1 ACQUIRE as the table sees it: a session with one
// exclusive, waiting claim.
type Request struct {
	Name  string
	Lease time.Duration
	Peer  Peer
}

// State is where a claim stands.
type State uint8

const (
	Waiting State = iota + 1
	Owner
	// Busy answers a NoWait claim that could not be granted at once: the
	// claim is not in the table.
	Busy
)

func (s State) String() string {
	switch s {
	case Waiting:
		return "waiting"
	case Owner:
		return "owner"
	case Busy:
		return "busy"
	}
	return "none"
}

// Status is a claim's answer to ACQUIRE or HEARTBEAT: WAITING, or
// ACQUIRED(Token), or (a NoWait claim only) Busy. Deadline is the instant after which the claim expires
// unless the client is heard from again.
type Status struct {
	State    State
	Token    uint64
	Deadline time.Time
}

// Reason says why a claim ended.
type Reason uint8

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

// Reasons lists every reason, for metrics that pre-create their labels.
var Reasons = []Reason{ReasonGraceful, ReasonExpired, ReasonIOTimeout, ReasonForce, ReasonShutdown, ReasonKick, ReasonProtocolError, ReasonRevoked, ReasonMoved}

func (r Reason) String() string {
	switch r {
	case ReasonGraceful:
		return "graceful"
	case ReasonExpired:
		return "expired"
	case ReasonIOTimeout:
		return "io_timeout"
	case ReasonForce:
		return "force"
	case ReasonShutdown:
		return "shutdown"
	case ReasonKick:
		return "kick"
	case ReasonProtocolError:
		return "protocol_error"
	case ReasonRevoked:
		return "revoked"
	case ReasonMoved:
		return "moved"
	}
	return "unknown"
}

// SendKind is a frame the caller must deliver to a claim other than the
// one that called, or to a session.
type SendKind uint8

const (
	// SendAcquired is a promotion push: ACQUIRED(Token), unprompted.
	SendAcquired SendKind = iota + 1
	// SendError ends one claim with ERROR(Code). On a version 1 session
	// (one claim) the connection is closed after it; on a version 2
	// session it is a claim-level frame and the session lives on.
	SendError
	// SendSessionError is ERROR(Code) to a version 2 session as a whole,
	// followed by closing its connection (shutdown). Claim is unused.
	SendSessionError
	// SendChange is CHANGE(Change) to watch Claim of the session.
	SendChange
)

// Send is one frame to deliver, to claim (Session, Claim).
type Send struct {
	Kind    SendKind
	Session SessionID
	Claim   ClaimID
	Token   uint64           // SendAcquired
	Code    protocol.Code    // SendError, SendSessionError
	Change  *protocol.Change // SendChange
}

// EventKind is an ownership change.
type EventKind uint8

const (
	// EventGranted: Claim became owner of Lock with Token after Waited.
	EventGranted EventKind = iota + 1
	// EventReleased: Claim stopped owning Lock after Held, for Reason.
	EventReleased
	// EventDequeued: waiting Claim left the queue of Lock, for Reason.
	EventDequeued
)

func (k EventKind) String() string {
	switch k {
	case EventGranted:
		return "granted"
	case EventReleased:
		return "released"
	case EventDequeued:
		return "dequeued"
	}
	return "unknown"
}

// Event is an ownership change, reported in the order it happened.
type Event struct {
	Kind    EventKind
	Lock    string
	Session SessionID
	Claim   ClaimID
	Mode    Mode
	Label   string
	Peer    Peer
	Token   uint64        // granted, released
	Reason  Reason        // released, dequeued
	Waited  time.Duration // granted: time in the queue (0 when granted at once)
	Held    time.Duration // released
}

// Result is what an operation requires of the caller: frames to send, in
// order, and ownership events, in order.
type Result struct {
	Sends  []Send
	Events []Event
}

func (r *Result) send(s Send)   { r.Sends = append(r.Sends, s) }
func (r *Result) event(e Event) { r.Events = append(r.Events, e) }

// Errors returned by Table operations.
var (
	ErrShutdown      = errors.New("locktable: shut down")
	ErrSessionExists = errors.New("locktable: session id already in use")
	ErrNoSession     = errors.New("locktable: no such session")
	ErrClaimExists   = errors.New("locktable: claim id already in use")
	ErrNoClaim       = errors.New("locktable: no such claim")
	ErrNoLock        = errors.New("locktable: no such lock")
	ErrNoWaiter      = errors.New("locktable: no such waiter")
	ErrNoHolder      = errors.New("locktable: no such holder")
	ErrManyHolders   = errors.New("locktable: the lock has several holders; name the claim")
	ErrNotExpired    = errors.New("locktable: lease has not expired")

	// Claim-level errors: the claim is refused, the session lives on.
	ErrInvalidMode   = errors.New("locktable: unknown claim mode")
	ErrInvalidLimit  = errors.New("locktable: a semaphore limit must be at least 1")
	ErrModeConflict  = errors.New("locktable: a semaphore and an exclusive or shared claim on one name")
	ErrLimitMismatch = errors.New("locktable: semaphore limit differs from the name's current limit")
)
