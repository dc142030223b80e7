package locktable

import (
	"errors"
	"time"

	"github.com/batonlock/baton/protocol"
)

// ClaimID identifies one claim on one lock. The caller chooses it; today
// the server uses one claim per connection.
type ClaimID uint64

// Peer describes who holds a claim, for introspection and audit only: the
// table never decides anything by it except which waiter Kick removes.
type Peer struct {
	Identity string // from the client certificate; empty without mTLS
	Addr     string // remote address, host:port
}

// Request is an ACQUIRE as the table sees it.
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
)

func (s State) String() string {
	switch s {
	case Waiting:
		return "waiting"
	case Owner:
		return "owner"
	}
	return "none"
}

// Status is a claim's answer to ACQUIRE or HEARTBEAT: WAITING, or
// ACQUIRED(Token). Deadline is the instant after which the claim expires
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
)

// Reasons lists every reason, for metrics that pre-create their labels.
var Reasons = []Reason{ReasonGraceful, ReasonExpired, ReasonIOTimeout, ReasonForce, ReasonShutdown, ReasonKick, ReasonProtocolError, ReasonRevoked}

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
	}
	return "unknown"
}

// SendKind is a frame the caller must deliver to a claim other than the
// one that called.
type SendKind uint8

const (
	// SendAcquired is a promotion push: ACQUIRED(Token), unprompted.
	SendAcquired SendKind = iota + 1
	// SendError is ERROR(Code) followed by closing the claim's connection.
	SendError
)

// Send is one frame to deliver.
type Send struct {
	Kind  SendKind
	Claim ClaimID
	Token uint64        // SendAcquired
	Code  protocol.Code // SendError
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
	Kind   EventKind
	Lock   string
	Claim  ClaimID
	Peer   Peer
	Token  uint64        // granted, released
	Reason Reason        // released, dequeued
	Waited time.Duration // granted: time in the queue (0 when granted at once)
	Held   time.Duration // released
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
	ErrShutdown    = errors.New("locktable: shut down")
	ErrClaimExists = errors.New("locktable: claim id already in use")
	ErrNoClaim     = errors.New("locktable: no such claim")
	ErrNoLock      = errors.New("locktable: no such lock")
	ErrNoWaiter    = errors.New("locktable: no such waiter")
	ErrNotExpired  = errors.New("locktable: lease has not expired")
)
