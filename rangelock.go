package baton

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/batonlock/baton/internal/rangemirror"
	"github.com/batonlock/baton/protocol"
)

// Errors of the range-lock operations of a Session.
var (
	// ErrRangeConflict: a set without waiting found a conflicting lock
	// (EAGAIN). The error is a *RangeConflictError naming it.
	ErrRangeConflict = errors.New("baton: range lock held by another owner")
	// ErrDeadlock: waiting would close a cycle of owners waiting for each
	// other (EDEADLK); nothing changed.
	ErrDeadlock = errors.New("baton: waiting for the range lock would deadlock")
	// ErrInvalidRange: the server refused the request as invalid: an
	// unknown type, start after end, an end past protocol.MaxRangeEnd or
	// an empty key (EINVAL).
	ErrInvalidRange = errors.New("baton: invalid range lock request")
	// ErrRangeCancelled: a waiting set ended without a grant because its
	// owner's locks on the key were released meanwhile (ReleaseOwner).
	ErrRangeCancelled = errors.New("baton: waiting range lock cancelled")
	// ErrRangeUnavailable: a cluster node cannot serve the key's range
	// locks now (the node taking the key over warms up after a failure,
	// or a planned change moved it with range locks on it, for their
	// holders' lease; docs/cluster.md, "Range locks"); nothing changed
	// (ENOLCK). SetRange with wait asks again until it can.
	ErrRangeUnavailable = errors.New("baton: range locks of this key are not served now (a cluster node taking the key over): ask again later")
	// ErrRangeLimit: the server refused the set because the session or
	// its owner already has as many waiting requests, or the session as
	// many lock owners, as the server allows (ENOLCK); nothing changed,
	// except that a flock conversion has dropped the old lock. It lasts
	// until the session's own requests end, so SetRange does not retry.
	ErrRangeLimit = errors.New("baton: too many waiting range requests or lock owners on this session")
)

// LockType is a range lock's type.
type LockType uint8

// The lock types: ReadLock is shared (F_RDLCK, LOCK_SH), WriteLock
// exclusive (F_WRLCK, LOCK_EX).
const (
	ReadLock  LockType = LockType(protocol.LockRead)
	WriteLock LockType = LockType(protocol.LockWrite)
)

func (t LockType) String() string {
	switch t {
	case ReadLock:
		return "read"
	case WriteLock:
		return "write"
	}
	return fmt.Sprintf("LockType(%d)", uint8(t))
}

// ToEnd is the End of a range that runs to the end of the file, however
// large it grows (fcntl's l_len 0).
const ToEnd = protocol.MaxRangeEnd

// RangeLock names a range lock: what a FUSE server's GetLk, SetLk and
// SetLkw receive (the file, the lock owner, the range, the type, and
// whether it is a flock lock).
type RangeLock struct {
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

// RangeHolder is a lock that conflicts with a request.
type RangeHolder struct {
	Type       LockType
	Owner      uint64 // its owner within its session
	Session    uint64 // its owner's session id
	Label      string // that session's label
	Start, End uint64
}

// RangeConflictError is a set refused because Holder conflicts with it.
// It matches ErrRangeConflict with errors.Is.
type RangeConflictError struct{ Holder RangeHolder }

func (e *RangeConflictError) Error() string {
	h := e.Holder
	return fmt.Sprintf("baton: range lock held: %v lock on [%d,%d] by owner %d of session %d (%q)",
		h.Type, h.Start, h.End, h.Owner, h.Session, h.Label)
}

func (e *RangeConflictError) Is(target error) bool { return target == ErrRangeConflict }

// rangeReqs are a session's range requests awaiting answers and, on a
// resumable session, its record of its range locks (resume_ranges.go).
type rangeReqs struct {
	next    uint32
	pending map[uint32]chan protocol.Frame // nil channel: the caller has gone

	// Resumable sessions only (mirror nil otherwise).
	mirror  *rangemirror.Mirror     // the locks held, as the answers and pushes say
	sent    map[uint32]*rangeSent   // the requests in flight, by id
	seq     uint64                  // counts the requests sent
	resumes map[uint32]*rangeResume // unanswered re-assertions, by request id
	// home is the session where the mirror's locks were last all
	// confirmed; cutOff the sessions their re-assertions were sent on
	// since, oldest first, while some are unanswered.
	home      *resumeIdent
	cutOff    []*resumeIdent
	until     time.Time // while re-assertions are due or unanswered: their give-up
	pause     time.Duration
	closeReqs map[uint32]struct{} // Close's releases not answered yet
}

// SetRange takes the lock l (F_SETLK; with wait, F_SETLKW or flock without
// LOCK_NB) and returns its fencing token. Without wait, a conflict is a
// *RangeConflictError at once. With wait, it waits in the server's FIFO
// until the lock is pushed, or ctx ends: then the wait is withdrawn and
// ctx.Err() returned, unless the grant crossed the withdrawal, in which
// case the lock is held and its token returned. A wait that would
// deadlock is ErrDeadlock. A new lock over the owner's own ranges
// replaces them (merge, split, upgrade, downgrade). On a cluster, a key
// whose range locks are not served for now is ErrRangeUnavailable
// without wait; with wait, the request is sent again, at most a second
// apart, until it is served or ctx ends.
//
// On a resumable session the lock survives a broken connection: the
// session re-asserts it on its new session (see Session). A request in
// flight at the break is sent again after the re-assertions, a waiting
// set losing its place in the queue; one made while the session
// resumes waits for the resume.
func (s *Session) SetRange(ctx context.Context, l RangeLock, wait bool) (token uint64, err error) {
	for pause := 20 * time.Millisecond; ; pause = min(2*pause, time.Second) {
		token, err = s.setRange(ctx, l, wait)
		if !wait || !errors.Is(err, ErrRangeUnavailable) {
			return token, err
		}
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-s.lost:
			return 0, s.Err()
		}
	}
}

// setRange is one SetRange request.
func (s *Session) setRange(ctx context.Context, l RangeLock, wait bool) (token uint64, err error) {
	flags := uint8(0)
	if wait {
		flags |= protocol.RangeWait
	}
	req, ch, err := s.sendRange(ctx, protocol.RangeSet, flags, l)
	if err != nil {
		return 0, err
	}
	var cancelled error // ctx's error once the wait is withdrawn
	for {
		var f protocol.Frame
		select {
		case f = <-ch:
		case <-s.lost:
			s.forgetRange(req)
			return 0, s.Err()
		case <-ctx.Done():
			if cancelled == nil {
				cancelled = ctx.Err()
				if err := s.cancelRange(req, l); err != nil {
					return 0, err
				}
			}
			ctx = context.Background() // now wait for the request's final answer
			continue
		}
		switch f.Status {
		case protocol.RangeGranted, protocol.RangePromoted:
			return f.Token, nil
		case protocol.RangeQueued:
			continue
		case protocol.RangeConflict:
			return 0, &RangeConflictError{holderOf(f)}
		case protocol.RangeCancelled:
			if cancelled != nil {
				return 0, cancelled
			}
			return 0, ErrRangeCancelled
		}
		return 0, rangeStatusErr(f)
	}
}

// UnlockRange removes the bytes of l from its owner's locks on l.Key
// (F_UNLCK; flock: LOCK_UN), splitting ranges where l cuts them.
func (s *Session) UnlockRange(ctx context.Context, l RangeLock) error {
	_, err := s.rangeOnce(ctx, protocol.RangeUnlock, l)
	return err
}

// QueryRange is F_GETLK: the first lock of another owner that conflicts
// with l, and true; or false when l could be granted now.
func (s *Session) QueryRange(ctx context.Context, l RangeLock) (RangeHolder, bool, error) {
	f, err := s.rangeOnce(ctx, protocol.RangeQuery, l)
	if err != nil || f.Status != protocol.RangeLocked {
		return RangeHolder{}, false, err
	}
	return holderOf(f), true, nil
}

// ReleaseOwner drops every lock of owner on key in the namespace (flock
// or fcntl) and ends its waiting requests there: what closing a file
// does to its owner's locks.
func (s *Session) ReleaseOwner(ctx context.Context, key string, flock bool, owner uint64) error {
	_, err := s.rangeOnce(ctx, protocol.RangeRelease, RangeLock{Key: key, Flock: flock, Owner: owner})
	return err
}

// rangeOnce sends one request answered by one frame and waits for it.
func (s *Session) rangeOnce(ctx context.Context, op protocol.RangeOp, l RangeLock) (protocol.Frame, error) {
	req, ch, err := s.sendRange(ctx, op, 0, l)
	if err != nil {
		return protocol.Frame{}, err
	}
	select {
	case f := <-ch:
		switch f.Status {
		case protocol.RangeDone, protocol.RangeFree, protocol.RangeLocked:
			return f, nil
		}
		return f, rangeStatusErr(f)
	case <-s.lost:
		s.forgetRange(req)
		return protocol.Frame{}, s.Err()
	case <-ctx.Done():
		// The answer still comes; the reader drops it.
		s.forgetRange(req)
		return protocol.Frame{}, ctx.Err()
	}
}

func holderOf(f protocol.Frame) RangeHolder {
	return RangeHolder{Type: LockType(f.LockType), Owner: f.Owner, Session: f.Session, Label: f.Label, Start: f.Start, End: f.End}
}

func rangeStatusErr(f protocol.Frame) error {
	switch f.Status {
	case protocol.RangeDeadlock:
		return ErrDeadlock
	case protocol.RangeInvalid:
		return ErrInvalidRange
	case protocol.RangeUnavailable:
		return ErrRangeUnavailable
	case protocol.RangeLimit:
		return ErrRangeLimit
	case protocol.RangeDenied:
		return protocol.ErrNotAuthorized
	}
	return fmt.Errorf("%w: %v", ErrProtocolViolation, f)
}

// sendRange allocates a request id and sends a RANGE frame. On a
// session being resumed it waits for the resume to end, as a new claim
// does: the request goes after the re-assertions.
func (s *Session) sendRange(ctx context.Context, op protocol.RangeOp, flags uint8, l RangeLock) (uint32, chan protocol.Frame, error) {
	if s.v1 {
		return 0, nil, ErrServerTooOld
	}
	f := rangeFrame(op, flags, l)
	s.mu.Lock()
	if err := s.waitResumedLocked(ctx); err != nil {
		s.mu.Unlock()
		return 0, nil, err
	}
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return 0, nil, err
	}
	r := &s.ranges
	if r.pending == nil {
		r.pending = map[uint32]chan protocol.Frame{}
	}
	f.Claim = r.allocRangeID()
	ch := make(chan protocol.Frame, 2)
	r.pending[f.Claim] = ch
	r.recordSent(f)
	s.out = protocol.AppendRange(s.out, f)
	flush := s.startWrite()
	s.mu.Unlock()
	if flush {
		s.flush()
	}
	return f.Claim, ch, nil
}

// cancelRange withdraws the waiting set req (RangeCancel). While the
// session is being resumed nothing is sent: the set, not asked again,
// is answered cancelled when the resume ends.
func (s *Session) cancelRange(req uint32, l RangeLock) error {
	f := rangeFrame(protocol.RangeCancel, 0, RangeLock{Key: l.Key, Flock: l.Flock})
	f.Claim = req
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return err
	}
	s.ranges.recordSent(f)
	if s.resuming {
		s.mu.Unlock()
		return nil
	}
	s.out = protocol.AppendRange(s.out, f)
	flush := s.startWrite()
	s.mu.Unlock()
	if flush {
		s.flush()
	}
	return nil
}

// rangeFrame is the RANGE frame of op on l, its request id not set.
func rangeFrame(op protocol.RangeOp, flags uint8, l RangeLock) protocol.Frame {
	if l.Flock {
		flags |= protocol.RangeFlock
		l.Start, l.End = 0, 0
	}
	return protocol.Frame{Op: op, Flags: flags, LockType: uint8(l.Type), Owner: l.Owner, Start: l.Start, End: l.End, Name: l.Key}
}

// forgetRange stops routing the answers to req: they are dropped (a
// resumable session's mirror still applies them).
func (s *Session) forgetRange(req uint32) {
	s.mu.Lock()
	if _, ok := s.ranges.pending[req]; ok {
		s.ranges.pending[req] = nil
	}
	s.mu.Unlock()
}

// receivedRange routes an ANSWER frame to its request and applies it to
// the mirror of a resumable session. s.mu is held. It reports an error
// for an answer to no request, and the error that ends the session when
// a re-assertion cannot be kept.
func (s *Session) receivedRange(f protocol.Frame, now time.Time) error {
	if rr := s.ranges.resumes[f.Claim]; rr != nil {
		return s.rangeReasserted(rr, f, now)
	}
	ch, ok := s.ranges.pending[f.Claim]
	if !ok {
		return fmt.Errorf("%w: %v answers no range request", ErrProtocolViolation, f)
	}
	s.ranges.applyAnswer(f)
	if f.Status != protocol.RangeQueued {
		delete(s.ranges.pending, f.Claim)
		s.checkDrained()
	}
	if ch != nil {
		select {
		case ch <- f:
		default: // the requester has gone (a queued answer left unread)
		}
	}
	return nil
}
