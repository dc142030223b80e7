// Package rangeapi joins the Session of package baton, which carries
// range-lock requests, to package ranges, which is their public API.
// Package baton registers For; package ranges converts these values to
// its own documented types. Nothing else should use it.
package rangeapi

import (
	"context"
	"errors"
	"fmt"

	"github.com/batonlock/baton/protocol"
)

// Lock is ranges.Lock; Type is protocol.LockRead or LockWrite.
type Lock struct {
	Key        string
	Flock      bool
	Owner      uint64
	Type       uint8
	Start, End uint64
}

// Holder is ranges.Holder.
type Holder struct {
	Type       uint8
	Owner      uint64
	Session    uint64
	Label      string
	Start, End uint64
}

// The errors of range requests; package ranges documents and exports
// the same values.
var (
	ErrConflict    = errors.New("baton: range lock held by another owner")
	ErrDeadlock    = errors.New("baton: waiting for the range lock would deadlock")
	ErrInvalid     = errors.New("baton: invalid range lock request")
	ErrCancelled   = errors.New("baton: waiting range lock cancelled")
	ErrUnavailable = errors.New("baton: range locks of this key are not served now (a cluster node taking the key over): ask again later")
	ErrLimit       = errors.New("baton: too many waiting range requests or lock owners on this session")
)

// ConflictError is a set refused because Holder conflicts with it.
type ConflictError struct{ Holder Holder }

func (e *ConflictError) Error() string {
	h := e.Holder
	return fmt.Sprintf("baton: range lock held: %v lock on [%d,%d] by owner %d of session %d (%q)",
		TypeName(h.Type), h.Start, h.End, h.Owner, h.Session, h.Label)
}

func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// TypeName names a lock type as ranges.LockType's String does.
func TypeName(t uint8) string {
	switch t {
	case protocol.LockRead:
		return "read"
	case protocol.LockWrite:
		return "write"
	}
	return fmt.Sprintf("LockType(%d)", t)
}

// Ops are a session's range operations.
type Ops interface {
	Set(ctx context.Context, l Lock, wait bool) (uint64, error)
	Unlock(ctx context.Context, l Lock) error
	Query(ctx context.Context, l Lock) (Holder, bool, error)
	ReleaseOwner(ctx context.Context, key string, flock bool, owner uint64) error
	Lost() <-chan struct{}
}

// For returns the operations of session, a *baton.Session; package baton
// sets it when it is initialised (it cannot be named here without an
// import cycle).
var For func(session any) Ops
