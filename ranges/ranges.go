// Package ranges takes POSIX byte-range (fcntl) and flock(2) locks
// through a baton Session: what a FUSE file system such as `baton mount`
// needs to share a file's locks across machines. Most programs want the
// named locks of package baton instead.
//
//	s, err := c.OpenSession(ctx, baton.SessionOptions{Lease: 10 * time.Second})
//	...
//	r := ranges.New(s)
//	token, err := r.Set(ctx, ranges.Lock{Key: "/data/f", Owner: 1, Type: ranges.WriteLock, End: ranges.ToEnd}, true)
//
// The locks live as long as the session; on a resumable session they are
// re-asserted after a broken connection (docs/posix-locks.md, "From Go").
package ranges

import (
	"context"
	"errors"
	"fmt"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/rangeapi"
	"github.com/batonlock/baton/protocol"
)

// Errors of the range operations.
var (
	// ErrConflict: a set without waiting found a conflicting lock
	// (EAGAIN). The error is a *ConflictError naming it.
	ErrConflict = rangeapi.ErrConflict
	// ErrDeadlock: waiting would close a cycle of owners waiting for each
	// other (EDEADLK); nothing changed.
	ErrDeadlock = rangeapi.ErrDeadlock
	// ErrInvalid: the server refused the request as invalid: an unknown
	// type, start after end, an end past ToEnd or an empty key (EINVAL).
	ErrInvalid = rangeapi.ErrInvalid
	// ErrCancelled: a waiting set ended without a grant because its
	// owner's locks on the key were released meanwhile (ReleaseOwner).
	ErrCancelled = rangeapi.ErrCancelled
	// ErrUnavailable: a cluster node cannot serve the key's range locks
	// now (the node taking the key over warms up after a failure, or a
	// planned change moved it with range locks on it, for their holders'
	// lease; docs/cluster.md, "Range locks"); nothing changed (ENOLCK).
	// Set with wait asks again until it can.
	ErrUnavailable = rangeapi.ErrUnavailable
	// ErrLimit: the server refused the set because the session or its
	// owner already has as many waiting requests, or the session as many
	// lock owners, as the server allows (ENOLCK); nothing changed, except
	// that a flock conversion has dropped the old lock. It lasts until
	// the session's own requests end, so Set does not retry.
	ErrLimit = rangeapi.ErrLimit
	// ErrNoSession: New was given a nil Session.
	ErrNoSession = errors.New("baton/ranges: no session")
)

// LockType is a range lock's type.
type LockType uint8

// The lock types: ReadLock is shared (F_RDLCK, LOCK_SH), WriteLock
// exclusive (F_WRLCK, LOCK_EX).
const (
	ReadLock  LockType = LockType(protocol.LockRead)
	WriteLock LockType = LockType(protocol.LockWrite)
)

func (t LockType) String() string { return rangeapi.TypeName(uint8(t)) }

// ToEnd is the End of a range that runs to the end of the file, however
// large it grows (fcntl's l_len 0).
const ToEnd = protocol.MaxRangeEnd

// Lock names a range lock: what a FUSE server's GetLk, SetLk and SetLkw
// receive (the file, the lock owner, the range, the type, and whether it
// is a flock lock).
type Lock struct {
	// Key is the file, 1 to 255 bytes. Every client that locks the same
	// file must use the same key.
	Key string
	// Flock puts the lock in flock(2)'s namespace: whole file, one lock
	// per owner (an open file description). Otherwise it is an fcntl
	// byte-range lock. The two never conflict with each other.
	Flock bool
	// Owner is the lock owner within the session (the POSIX lock owner, or
	// the open file description for OFD and flock locks). Locks of one
	// owner never conflict with each other.
	Owner uint64
	// Type is ReadLock or WriteLock; Unlock and ReleaseOwner ignore it.
	Type LockType
	// Start and End are the first and last byte, both included; End ToEnd
	// means to the end of the file. Ignored for flock.
	Start, End uint64
}

// Holder is a lock that conflicts with a request.
type Holder struct {
	Type       LockType
	Owner      uint64 // its owner within its session
	Session    uint64 // its owner's session id
	Label      string // that session's label
	Start, End uint64
}

// ConflictError is a set refused because Holder conflicts with it. It
// matches ErrConflict with errors.Is.
type ConflictError struct{ Holder Holder }

func (e *ConflictError) Error() string {
	h := e.Holder
	return fmt.Sprintf("baton: range lock held: %v lock on [%d,%d] by owner %d of session %d (%q)",
		h.Type, h.Start, h.End, h.Owner, h.Session, h.Label)
}

func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// Locker takes range locks on one Session. Its methods are safe for
// concurrent use. A session too old for range locks (see
// baton.SessionOptions.RefuseOldServer) fails them with
// baton.ErrServerTooOld.
type Locker struct{ ops rangeapi.Ops }

// New returns the Locker of s. A nil s gives a Locker whose every
// operation fails with ErrNoSession.
func New(s *baton.Session) *Locker {
	if s == nil {
		return &Locker{}
	}
	return &Locker{ops: rangeapi.For(s)}
}

// Set takes the lock l (F_SETLK; with wait, F_SETLKW or flock without
// LOCK_NB) and returns its fencing token. Without wait, a conflict is a
// *ConflictError at once. With wait, it waits in the server's FIFO until
// the lock is pushed, or ctx ends: then the wait is withdrawn and
// ctx.Err() returned, unless the grant crossed the withdrawal, in which
// case the lock is held and its token returned. A wait that would
// deadlock is ErrDeadlock. A new lock over the owner's own ranges
// replaces them (merge, split, upgrade, downgrade). On a cluster, a key
// whose range locks are not served for now is ErrUnavailable without
// wait; with wait, the request is sent again, at most a second apart,
// until it is served or ctx ends.
//
// On a resumable session the lock survives a broken connection: the
// session re-asserts it on its new session (see baton.Session). A
// request in flight at the break is sent again after the
// re-assertions, a waiting set losing its place in the queue; one made
// while the session resumes waits for the resume.
func (r *Locker) Set(ctx context.Context, l Lock, wait bool) (token uint64, err error) {
	if r.ops == nil {
		return 0, ErrNoSession
	}
	token, err = r.ops.Set(ctx, l.api(), wait)
	var ce *rangeapi.ConflictError
	if errors.As(err, &ce) {
		return 0, &ConflictError{holder(ce.Holder)}
	}
	return token, err
}

// Unlock removes the bytes of l from its owner's locks on l.Key
// (F_UNLCK; flock: LOCK_UN), splitting ranges where l cuts them.
func (r *Locker) Unlock(ctx context.Context, l Lock) error {
	if r.ops == nil {
		return ErrNoSession
	}
	return r.ops.Unlock(ctx, l.api())
}

// Query is F_GETLK: the first lock of another owner that conflicts with
// l, and true; or false when l could be granted now.
func (r *Locker) Query(ctx context.Context, l Lock) (Holder, bool, error) {
	if r.ops == nil {
		return Holder{}, false, ErrNoSession
	}
	h, ok, err := r.ops.Query(ctx, l.api())
	return holder(h), ok, err
}

// ReleaseOwner drops every lock of owner on key in the namespace (flock
// or fcntl) and ends its waiting requests there: what closing a file
// does to its owner's locks.
func (r *Locker) ReleaseOwner(ctx context.Context, key string, flock bool, owner uint64) error {
	if r.ops == nil {
		return ErrNoSession
	}
	return r.ops.ReleaseOwner(ctx, key, flock, owner)
}

// Lost is the session's Lost: closed when the session has ended, and
// with it every range lock taken through it.
func (r *Locker) Lost() <-chan struct{} {
	if r.ops == nil {
		return closed
	}
	return r.ops.Lost()
}

var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (l Lock) api() rangeapi.Lock {
	return rangeapi.Lock{Key: l.Key, Flock: l.Flock, Owner: l.Owner, Type: uint8(l.Type), Start: l.Start, End: l.End}
}

func holder(h rangeapi.Holder) Holder {
	return Holder{Type: LockType(h.Type), Owner: h.Owner, Session: h.Session, Label: h.Label, Start: h.Start, End: h.End}
}
