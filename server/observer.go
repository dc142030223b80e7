package server

import (
	"time"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

// EventKind says what an Event reports.
type EventKind uint8

const (
	// EventConnected: a connection was accepted (Peer.Addr).
	EventConnected EventKind = iota + 1
	// EventDisconnected: a connection was closed. (A version 1 hop that
	// carries several relayed claims one after another is one connection.)
	EventDisconnected
	// EventAcceptError: accept failed (Err); the server backs off and retries.
	EventAcceptError
	// EventTLSHandshakeError: a TLS handshake failed (Err).
	EventTLSHandshakeError
	// EventHeartbeat: a valid HEARTBEAT arrived.
	EventHeartbeat
	// EventErrorSent: an ERROR frame with Code was sent.
	EventErrorSent
	// EventDenied: the access-control list refused Peer the lock Lock.
	EventDenied
	// EventGranted: Peer became owner of Lock with Token after Waited.
	EventGranted
	// EventReleased: Peer stopped owning Lock (Token) after Held, for Reason.
	EventReleased
	// EventDequeued: waiting Peer left the queue of Lock, for Reason.
	EventDequeued
	// EventShutdown: graceful shutdown began.
	EventShutdown
	// EventForceRelease: administrator Admin took Lock (Token) from its
	// owner Peer. It comes just before the EventReleased it causes.
	EventForceRelease
	// EventKick: administrator Admin removed waiter Peer from the queue
	// of Lock. It comes just before the EventDequeued it causes.
	EventKick
	// EventAdminDenied: the admin API refused administrator Admin the
	// Action on Lock (empty for a request about no lock in particular).
	// The server itself never sends it; the admin API does.
	EventAdminDenied
	// EventRefused: a version 2 CLAIM (Session, Claim, Lock when known)
	// was answered REFUSED with claim-level Code; the session lives on.
	EventRefused
	// EventSessionKept: the connection of resumable version 2 Session
	// broke and the server keeps its claims for the rest of its lease.
	EventSessionKept
	// EventReasserted: a version 2 re-assertion of claim Claim on Lock
	// arrived on Session; Action is its result (ReassertResults), Token
	// the token it keeps, Code the REFUSED code of a refused one.
	EventReasserted
	// EventRangeRefused: a version 2 RANGE set of Session on key Lock was
	// refused by a limit; Action is which (RangeRefusals).
	EventRangeRefused
	// EventLimit: a limit (Action, one of Limits) refused something of
	// Peer: a claim on Lock, a session, or keeping a resumable Session.
	EventLimit
	// EventRangeGranted: Peer's Session was granted the range lock Range
	// on key Lock, with Token, after Waited.
	EventRangeGranted
	// EventRangeReleased: the range lock Range of Peer's Session on key
	// Lock ended, wholly or in part; Action is why (RangeReleaseReasons).
	EventRangeReleased
	// EventRangeForceRelease: administrator Admin released the range
	// locks of owner Range.Owner of Session on key Lock. It comes just
	// before the EventRangeReleased (reason "force") it causes.
	EventRangeForceRelease
	// EventRangeRevoked: a held range lock or a waiting range request
	// (Range.Waiting) of Session on key Lock was ended by an
	// administrator (Action "admin") or by a reloaded access-control
	// list (Action "acl").
	EventRangeRevoked
)

func (k EventKind) String() string {
	switch k {
	case EventConnected:
		return "connected"
	case EventDisconnected:
		return "disconnected"
	case EventAcceptError:
		return "accept_error"
	case EventTLSHandshakeError:
		return "tls_handshake_error"
	case EventHeartbeat:
		return "heartbeat"
	case EventErrorSent:
		return "error_sent"
	case EventDenied:
		return "denied"
	case EventGranted:
		return "granted"
	case EventReleased:
		return "released"
	case EventDequeued:
		return "dequeued"
	case EventShutdown:
		return "shutdown"
	case EventForceRelease:
		return "force_release"
	case EventKick:
		return "kick"
	case EventAdminDenied:
		return "admin_denied"
	case EventRefused:
		return "refused"
	case EventSessionKept:
		return "session_kept"
	case EventReasserted:
		return "reasserted"
	case EventRangeRefused:
		return "range_refused"
	case EventLimit:
		return "limit"
	case EventRangeGranted:
		return "range_granted"
	case EventRangeReleased:
		return "range_released"
	case EventRangeForceRelease:
		return "range_force_release"
	case EventRangeRevoked:
		return "range_revoked"
	}
	return "unknown"
}

// Event is one thing that happened in the server, for metrics, audit and
// logs. Fields that do not apply to a kind are zero.
type Event struct {
	Kind   EventKind
	Time   time.Time
	Lock   string
	Peer   Peer
	Token  uint64
	Reason Reason
	Code   protocol.Code
	Waited time.Duration
	Held   time.Duration
	Err    error
	// Admin is who asked for an administrative action: the caller's
	// certificate identity (empty without mTLS) and address.
	Admin Peer
	// Action is the admin action refused (EventAdminDenied), such as
	// "read", "release" or "kick", or the limit behind EventRangeRefused
	// or EventLimit.
	Action string
	// Protocol is the protocol version of the session the event is
	// about: 1 or 2 (protocol.Version2); 0 where no session is involved.
	Protocol uint8
	// Session, Claim, Mode and Label name the claim of an ownership or
	// administrator event: the server's session id, the claim id the
	// client chose (0 for version 1), the claim's mode and the session's
	// label (empty for version 1).
	Session SessionID
	Claim   ClaimID
	Mode    Mode
	Label   string
	// Range is the range lock of a range event (EventRange*); nil for
	// the others.
	Range *RangeLock
}

// RangeLock describes the range lock, or range request, of a range
// event: one record per request or owner, never one per byte.
type RangeLock struct {
	Flock bool   // flock's namespace; else fcntl's
	Owner uint64 // the lock owner within its session, as the client chose it
	// Type is "read" or "write" ("write" when a release ended some
	// write bytes); empty in EventRangeForceRelease.
	Type       string
	Start, End uint64 // the bytes, both included; End 0x7fffffffffffffff: to the end of the file
	// Ranges is, in EventRangeReleased, how many of the owner's held
	// ranges ended or were cut.
	Ranges int
	// Waiting marks, in EventRangeRevoked, a waiting request.
	Waiting bool
}

// Namespace is "flock" or "posix".
func (r *RangeLock) Namespace() string {
	if r.Flock {
		return "flock"
	}
	return "posix"
}

// Observer receives the server's events.
//
// Ownership events (granted, released, dequeued) are delivered while the
// lock table is locked, so for each lock they arrive in exactly the order
// they happened: a release always before the next grant. Observe must
// therefore be quick, must not block, and must not call back into the
// Server.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// Observers fans events out to several observers in order.
type Observers []Observer

// Observe passes e to every observer.
func (o Observers) Observe(e Event) {
	for _, x := range o {
		x.Observe(e)
	}
}

func fromTable(now time.Time, e locktable.Event) Event {
	var kind EventKind
	switch e.Kind {
	case locktable.EventGranted:
		kind = EventGranted
	case locktable.EventReleased:
		kind = EventReleased
	case locktable.EventDequeued:
		kind = EventDequeued
	}
	return Event{Kind: kind, Time: now, Lock: e.Lock, Peer: Peer(e.Peer), Token: e.Token,
		Reason: Reason(e.Reason), Waited: e.Waited, Held: e.Held, Protocol: protocol.Version,
		Session: SessionID(e.Session), Claim: ClaimID(e.Claim), Mode: Mode(e.Mode), Label: e.Label}
}
