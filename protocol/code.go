package protocol

import (
	"errors"
	"fmt"
)

// Code is the error code carried by an ERROR frame.
//
// Codes below 0x10 are server conditions (the client may reconnect); codes
// 0x10 and above are client errors (report, do not retry). Unknown codes
// are classified by the same range.
type Code uint8

// The error codes of protocol version 1.
const (
	CodeShuttingDown  Code = 0x01
	CodeClosedByAdmin Code = 0x02
	// CodeNotOwner is a cluster node's answer to a request another node
	// relayed to it for a lock it does not own (their rings disagree for
	// a moment): retry, with backoff, on any node. docs/cluster.md.
	CodeNotOwner Code = 0x03
	// CodeLimitReached answers a request over one of the server's limits
	// (claims per session, waiters per lock, sessions per client;
	// docs/capacity.md): nothing was taken, nothing held changed. Retry
	// with backoff, after releasing something or when the queue is
	// shorter. In version 2 it refuses a CLAIM (claim level) or, for
	// sessions per client, a HELLO (session level).
	CodeLimitReached       Code = 0x07
	CodeUnsupportedVersion Code = 0x10
	CodeFirstNotAcquire    Code = 0x11
	CodeDuplicateAcquire   Code = 0x12
	CodeUnknownMessage     Code = 0x13
	CodeEmptyName          Code = 0x14
	CodeNameTooLong        Code = 0x15
	CodeInvalidName        Code = 0x16
	CodeInvalidLease       Code = 0x17
	CodeNotAuthorized      Code = 0x18
)

// The error codes that protocol version 2 adds. Version 2 also uses the
// version 1 codes whose meaning it shares (CodesV2 lists which).
const (
	// CodeReassertRefused answers a re-assertion whose claim is not held
	// here: it is gone (expired, ended, never there, or the secret does
	// not match), or a conflicting claim holds the lock. The client has
	// lost the claim. Claim level.
	CodeReassertRefused Code = 0x04
	// CodeStaleRing answers a re-assertion that names a ring older than
	// the one in which this node took the name: open a fresh session and
	// re-assert again. Claim level.
	CodeStaleRing Code = 0x05
	// CodeSlowWatcher ends a watch (REVOKED with the watch's id) whose
	// session did not read its changes fast enough: the server drops
	// the watch rather than hold an unbounded backlog. The client may
	// watch again; it starts from the current state. Claim level.
	CodeSlowWatcher Code = 0x08

	CodeInvalidFrame       Code = 0x19 // session level
	CodeFrameTooLong       Code = 0x1a // session level
	CodeFirstNotHello      Code = 0x1b // session level
	CodeDuplicateHello     Code = 0x1c // session level
	CodeInvalidLabel       Code = 0x1d // session level
	CodeUnsupportedFeature Code = 0x1e // session level in HELLO, claim level in CLAIM
	CodeClaimInUse         Code = 0x1f // session level
	CodeUnknownMode        Code = 0x20 // claim level
	CodeInvalidLimit       Code = 0x21 // claim level
	CodeLimitMismatch      Code = 0x22 // claim level
	CodeModeConflict       Code = 0x23 // claim level
	CodeValueTooLong       Code = 0x24 // claim level
)

// Codes lists every code defined by protocol version 1, in numeric order.
// A version 1 server sends only these (and, where version 1 and version 2
// claims meet on one name, CodeModeConflict; docs/protocol-v2.md).
var Codes = []Code{
	CodeShuttingDown, CodeClosedByAdmin, CodeNotOwner, CodeLimitReached,
	CodeUnsupportedVersion, CodeFirstNotAcquire, CodeDuplicateAcquire,
	CodeUnknownMessage, CodeEmptyName, CodeNameTooLong, CodeInvalidName,
	CodeInvalidLease, CodeNotAuthorized,
}

// CodesV2 lists every code a version 2 session can carry, in numeric
// order: the version 1 codes whose meaning version 2 shares, then the
// codes it adds.
var CodesV2 = []Code{
	CodeShuttingDown, CodeClosedByAdmin, CodeNotOwner, CodeReassertRefused, CodeStaleRing,
	CodeLimitReached, CodeSlowWatcher, CodeUnsupportedVersion, CodeUnknownMessage, CodeEmptyName,
	CodeInvalidName, CodeInvalidLease, CodeNotAuthorized,
	CodeInvalidFrame, CodeFrameTooLong, CodeFirstNotHello,
	CodeDuplicateHello, CodeInvalidLabel, CodeUnsupportedFeature,
	CodeClaimInUse, CodeUnknownMode, CodeInvalidLimit, CodeLimitMismatch,
	CodeModeConflict, CodeValueTooLong,
}

// Temporary reports whether the code is a server condition, after which a
// client may reconnect (immediately after CodeShuttingDown, with backoff
// otherwise). It classifies unknown codes by the same range.
func (c Code) Temporary() bool { return c < 0x10 }

// Sentinel errors, one per code. Callers branch on them with errors.Is;
// Code.Err and CodeOf convert between a code and its sentinel.
var (
	ErrShuttingDown       = &codeError{CodeShuttingDown, "server shutting down"}
	ErrClosedByAdmin      = &codeError{CodeClosedByAdmin, "closed by administrator"}
	ErrNotOwner           = &codeError{CodeNotOwner, "not the owner"}
	ErrLimitReached       = &codeError{CodeLimitReached, "server limit reached"}
	ErrUnsupportedVersion = &codeError{CodeUnsupportedVersion, "unsupported protocol version"}
	ErrFirstNotAcquire    = &codeError{CodeFirstNotAcquire, "first message must be ACQUIRE"}
	ErrDuplicateAcquire   = &codeError{CodeDuplicateAcquire, "duplicate ACQUIRE"}
	ErrUnknownMessage     = &codeError{CodeUnknownMessage, "unknown message type"}
	ErrEmptyName          = &codeError{CodeEmptyName, "empty lock name"}
	ErrNameTooLong        = &codeError{CodeNameTooLong, "lock name too long (> 255 bytes)"}
	ErrInvalidName        = &codeError{CodeInvalidName, "lock name is not valid UTF-8"}
	ErrInvalidLease       = &codeError{CodeInvalidLease, "lease out of range"}
	ErrNotAuthorized      = &codeError{CodeNotAuthorized, "not authorized for lock"}

	ErrReassertRefused    = &codeError{CodeReassertRefused, "re-assertion refused"}
	ErrStaleRing          = &codeError{CodeStaleRing, "stale ring"}
	ErrSlowWatcher        = &codeError{CodeSlowWatcher, "watcher too slow: its changes were not read"}
	ErrInvalidFrame       = &codeError{CodeInvalidFrame, "malformed frame"}
	ErrFrameTooLong       = &codeError{CodeFrameTooLong, "frame too long (> 512 bytes)"}
	ErrFirstNotHello      = &codeError{CodeFirstNotHello, "first frame must be HELLO"}
	ErrDuplicateHello     = &codeError{CodeDuplicateHello, "duplicate HELLO"}
	ErrInvalidLabel       = &codeError{CodeInvalidLabel, "session label is not valid UTF-8"}
	ErrUnsupportedFeature = &codeError{CodeUnsupportedFeature, "unsupported feature (reserved flag set)"}
	ErrClaimInUse         = &codeError{CodeClaimInUse, "claim id in use"}
	ErrUnknownMode        = &codeError{CodeUnknownMode, "unknown claim mode"}
	ErrInvalidLimit       = &codeError{CodeInvalidLimit, "invalid semaphore limit for the mode"}
	ErrLimitMismatch      = &codeError{CodeLimitMismatch, "semaphore limit differs from the lock's"}
	ErrModeConflict       = &codeError{CodeModeConflict, "mode cannot be mixed with the lock's claims"}
	ErrValueTooLong       = &codeError{CodeValueTooLong, "claim value too long (> 1024 bytes)"}
)

// codeError is the type of the sentinels. It is unexported so that the
// only values are the sentinels themselves.
type codeError struct {
	code   Code
	reason string
}

func (e *codeError) Error() string { return "baton: " + e.reason }

var sentinels = map[Code]*codeError{}

func init() {
	for _, e := range []*codeError{
		ErrShuttingDown, ErrClosedByAdmin, ErrNotOwner, ErrLimitReached, ErrUnsupportedVersion,
		ErrFirstNotAcquire, ErrDuplicateAcquire, ErrUnknownMessage,
		ErrEmptyName, ErrNameTooLong, ErrInvalidName, ErrInvalidLease,
		ErrNotAuthorized,
		ErrReassertRefused, ErrStaleRing, ErrSlowWatcher,
		ErrInvalidFrame, ErrFrameTooLong, ErrFirstNotHello, ErrDuplicateHello,
		ErrInvalidLabel, ErrUnsupportedFeature, ErrClaimInUse, ErrUnknownMode,
		ErrInvalidLimit, ErrLimitMismatch, ErrModeConflict, ErrValueTooLong,
	} {
		sentinels[e.code] = e
	}
}

// Err returns the sentinel error of a known code, or nil for a code that
// neither protocol version 1 nor version 2 defines.
func (c Code) Err() error {
	if e, ok := sentinels[c]; ok {
		return e
	}
	return nil
}

// Reason returns the canonical human-readable text of the code. Clients
// must branch on the code, never on this text.
func (c Code) Reason() string {
	if e, ok := sentinels[c]; ok {
		return e.reason
	}
	if c.Temporary() {
		return "unknown server condition"
	}
	return "unknown client error"
}

func (c Code) String() string { return fmt.Sprintf("0x%02x (%s)", uint8(c), c.Reason()) }

// CodeOf returns the code of a sentinel error found in err's chain.
func CodeOf(err error) (Code, bool) {
	var e *codeError
	if errors.As(err, &e) {
		return e.code, true
	}
	return 0, false
}
