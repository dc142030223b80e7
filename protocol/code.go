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
	CodeShuttingDown       Code = 0x01
	CodeClosedByAdmin      Code = 0x02
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

// Codes lists every code defined by protocol version 1, in numeric order.
var Codes = []Code{
	CodeShuttingDown, CodeClosedByAdmin,
	CodeUnsupportedVersion, CodeFirstNotAcquire, CodeDuplicateAcquire,
	CodeUnknownMessage, CodeEmptyName, CodeNameTooLong, CodeInvalidName,
	CodeInvalidLease, CodeNotAuthorized,
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
	ErrUnsupportedVersion = &codeError{CodeUnsupportedVersion, "unsupported protocol version"}
	ErrFirstNotAcquire    = &codeError{CodeFirstNotAcquire, "first message must be ACQUIRE"}
	ErrDuplicateAcquire   = &codeError{CodeDuplicateAcquire, "duplicate ACQUIRE"}
	ErrUnknownMessage     = &codeError{CodeUnknownMessage, "unknown message type"}
	ErrEmptyName          = &codeError{CodeEmptyName, "empty lock name"}
	ErrNameTooLong        = &codeError{CodeNameTooLong, "lock name too long (> 255 bytes)"}
	ErrInvalidName        = &codeError{CodeInvalidName, "lock name is not valid UTF-8"}
	ErrInvalidLease       = &codeError{CodeInvalidLease, "lease must be positive"}
	ErrNotAuthorized      = &codeError{CodeNotAuthorized, "not authorized for lock"}
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
		ErrShuttingDown, ErrClosedByAdmin, ErrUnsupportedVersion,
		ErrFirstNotAcquire, ErrDuplicateAcquire, ErrUnknownMessage,
		ErrEmptyName, ErrNameTooLong, ErrInvalidName, ErrInvalidLease,
		ErrNotAuthorized,
	} {
		sentinels[e.code] = e
	}
}

// Err returns the sentinel error of a known code, or nil for a code that
// protocol version 1 does not define.
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
