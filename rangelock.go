package baton

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/batonlock/baton/internal/rangeapi"
	"github.com/batonlock/baton/internal/rangemirror"
	"github.com/batonlock/baton/protocol"
)

// rangeLock and rangeHolder are package ranges' Lock and Holder, as
// the session carries them (internal/rangeapi).
type (
	rangeLock   = rangeapi.Lock
	rangeHolder = rangeapi.Holder
)

// rangeOps are a Session's range operations, for package ranges.
type rangeOps struct{ s *Session }

func init() {
	rangeapi.For = func(s any) rangeapi.Ops { return rangeOps{s.(*Session)} }
}

func (o rangeOps) Set(ctx context.Context, l rangeLock, wait bool) (uint64, error) {
	return o.s.setRangeWait(ctx, l, wait)
}
func (o rangeOps) Unlock(ctx context.Context, l rangeLock) error { return o.s.unlockRange(ctx, l) }
func (o rangeOps) Query(ctx context.Context, l rangeLock) (rangeHolder, bool, error) {
	return o.s.queryRange(ctx, l)
}
func (o rangeOps) ReleaseOwner(ctx context.Context, key string, flock bool, owner uint64) error {
	return o.s.releaseOwner(ctx, key, flock, owner)
}
func (o rangeOps) Lost() <-chan struct{} { return o.s.Lost() }

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

// setRangeWait is ranges.Locker.Set (documented there): setRange,
// asked again while the key is unavailable if wait.
func (s *Session) setRangeWait(ctx context.Context, l rangeLock, wait bool) (token uint64, err error) {
	for pause := 20 * time.Millisecond; ; pause = min(2*pause, time.Second) {
		token, err = s.setRange(ctx, l, wait)
		if !wait || !errors.Is(err, rangeapi.ErrUnavailable) {
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

// setRange is one set request.
func (s *Session) setRange(ctx context.Context, l rangeLock, wait bool) (token uint64, err error) {
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
			return 0, &rangeapi.ConflictError{Holder: holderOf(f)}
		case protocol.RangeCancelled:
			if cancelled != nil {
				return 0, cancelled
			}
			return 0, rangeapi.ErrCancelled
		}
		return 0, rangeStatusErr(f)
	}
}

// unlockRange removes the bytes of l from its owner's locks on l.Key
// (F_UNLCK; flock: LOCK_UN), splitting ranges where l cuts them.
func (s *Session) unlockRange(ctx context.Context, l rangeLock) error {
	_, err := s.rangeOnce(ctx, protocol.RangeUnlock, l)
	return err
}

// queryRange is F_GETLK: the first lock of another owner that conflicts
// with l, and true; or false when l could be granted now.
func (s *Session) queryRange(ctx context.Context, l rangeLock) (rangeHolder, bool, error) {
	f, err := s.rangeOnce(ctx, protocol.RangeQuery, l)
	if err != nil || f.Status != protocol.RangeLocked {
		return rangeHolder{}, false, err
	}
	return holderOf(f), true, nil
}

// releaseOwner drops every lock of owner on key in the namespace (flock
// or fcntl) and ends its waiting requests there: what closing a file
// does to its owner's locks.
func (s *Session) releaseOwner(ctx context.Context, key string, flock bool, owner uint64) error {
	_, err := s.rangeOnce(ctx, protocol.RangeRelease, rangeLock{Key: key, Flock: flock, Owner: owner})
	return err
}

// rangeOnce sends one request answered by one frame and waits for it.
func (s *Session) rangeOnce(ctx context.Context, op protocol.RangeOp, l rangeLock) (protocol.Frame, error) {
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

func holderOf(f protocol.Frame) rangeHolder {
	return rangeHolder{Type: f.LockType, Owner: f.Owner, Session: f.Session, Label: f.Label, Start: f.Start, End: f.End}
}

func rangeStatusErr(f protocol.Frame) error {
	switch f.Status {
	case protocol.RangeDeadlock:
		return rangeapi.ErrDeadlock
	case protocol.RangeInvalid:
		return rangeapi.ErrInvalid
	case protocol.RangeUnavailable:
		return rangeapi.ErrUnavailable
	case protocol.RangeLimit:
		return rangeapi.ErrLimit
	case protocol.RangeDenied:
		return protocol.ErrNotAuthorized
	}
	return fmt.Errorf("%w: %v", ErrProtocolViolation, f)
}

// sendRange allocates a request id and sends a RANGE frame. On a
// session being resumed it waits for the resume to end, as a new claim
// does: the request goes after the re-assertions.
func (s *Session) sendRange(ctx context.Context, op protocol.RangeOp, flags uint8, l rangeLock) (uint32, chan protocol.Frame, error) {
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
func (s *Session) cancelRange(req uint32, l rangeLock) error {
	f := rangeFrame(protocol.RangeCancel, 0, rangeLock{Key: l.Key, Flock: l.Flock})
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
func rangeFrame(op protocol.RangeOp, flags uint8, l rangeLock) protocol.Frame {
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
