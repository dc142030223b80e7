package baton

import (
	"crypto/tls"
	"errors"
	"fmt"

	"github.com/batonlock/baton/protocol"
)

// Conditions that end a claim without an ERROR frame from the server.
var (
	// ErrHeartbeatTimeout: no reply confirmed the claim within 0.8 of the
	// lease, so the client gave it up before the server could hand the
	// lock to someone else. It closes the connection once the guarded
	// work has stopped (Do's function returned, Release called), and at
	// the latest one lease after the last confirmation (Claim.CloseBy).
	ErrHeartbeatTimeout = errors.New("baton: heartbeat timeout: claim not confirmed within 0.8 of the lease")
	// ErrConnectionClosed: the connection ended without an ERROR frame (EOF,
	// reset, failed write). The error returned wraps the I/O error too.
	ErrConnectionClosed = errors.New("baton: connection closed")
	// ErrProtocolViolation: the server sent something the protocol forbids
	// (WAITING after ACQUIRED, a changed token, an unexpected or malformed
	// frame). The client closed the connection.
	ErrProtocolViolation = errors.New("baton: protocol violation")
	// ErrBusy: TryAcquire found the lock held by someone else.
	ErrBusy = errors.New("baton: lock is held by another client")
)

// ServerError is an ERROR frame received from the server. The server closes
// the connection after sending it.
//
// Unwrap returns the protocol's sentinel for the code (for example
// protocol.ErrShuttingDown), so callers branch with errors.Is; codes that
// protocol version 1 does not define unwrap to nothing but are still
// classified by Temporary.
type ServerError struct {
	Code   protocol.Code
	Reason string // human-readable text from the server; never branch on it
}

func (e *ServerError) Error() string {
	if e.Reason == "" || e.Reason == e.Code.Reason() {
		return fmt.Sprintf("baton: server error %v", e.Code)
	}
	return fmt.Sprintf("baton: server error %v: %s", e.Code, e.Reason)
}

// Temporary reports whether the error is a server condition (code below
// 0x10) after which a new attempt may succeed. Codes 0x10 and above are
// client errors: retrying the same request cannot help.
func (e *ServerError) Temporary() bool { return e.Code.Temporary() }

// Unwrap returns the protocol sentinel of the code, or nil for an unknown
// code.
func (e *ServerError) Unwrap() error { return e.Code.Err() }

// dialError marks a failure to connect, which DoRetry retries.
type dialError struct{ err error }

func (e *dialError) Error() string { return "baton: " + e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// Temporary reports whether err is a failure after which a new attempt on a
// new connection may succeed, the same test DoRetry applies: a failure to
// connect (other than a TLS certificate that failed verification), a lost
// connection, a claim given up (ErrHeartbeatTimeout), or a *ServerError
// with a temporary code. Protocol violations, client errors (codes 0x10
// and above), ErrBusy and context errors are not temporary.
func Temporary(err error) bool {
	if err == nil {
		return false
	}
	var se *ServerError
	var de *dialError
	var cv *tls.CertificateVerificationError
	switch {
	case errors.As(err, &se):
		return se.Temporary()
	case errors.As(err, &cv):
		return false // a certificate that failed verification stays bad
	case errors.As(err, &de):
		return true
	}
	return errors.Is(err, ErrConnectionClosed) || errors.Is(err, ErrHeartbeatTimeout)
}
