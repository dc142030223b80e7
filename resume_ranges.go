package baton

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/batonlock/baton/internal/rangelock"
	"github.com/batonlock/baton/internal/rangemirror"
	"github.com/batonlock/baton/protocol"
)

// Range locks of a resumable session (docs/client.md, "Resumable
// sessions").
//
// The session keeps a mirror of its range locks: every answer and push
// to its RANGE requests is applied to it in the order received, the
// answers to requests whose caller has gone included, so that it is
// what the server holds for the session as far as the client can tell.
// After a break, the new session re-asserts each lock of the mirror
// (RangeResume), naming the earlier session, before the requests that
// were in flight are asked again. The locks are believed, while their
// re-assertions are unanswered, until the give-up at the break, as
// claims are; a re-assertion refused ends the whole session, for a
// range lock has no Lost of its own.

// rangeSent is a RANGE request in flight on a resumable session.
type rangeSent struct {
	f         protocol.Frame // as sent; f.Claim is its request id
	seq       uint64         // the order of sending: in-flight requests are asked again in it
	cancelled bool           // a set whose wait was withdrawn (RangeCancel)
}

// rangeResume is one unanswered re-assertion of a range lock.
type rangeResume struct {
	f protocol.Frame // the RangeResume frame, naming names[at]
	// names are the earlier sessions the lock may be in: those whose
	// re-assertions were cut off, the latest first, then the one where
	// it was confirmed. A conflict names the next, in turn.
	names []*resumeIdent
	at    int
}

// Bounds of the pause before a re-assertion answered RangeUnavailable
// is sent again.
const (
	minRangeResumePause = 20 * time.Millisecond
	maxRangeResumePause = time.Second
)

// initRanges starts the mirror of a resumable session. s.mu is held or
// the session is not shared yet.
func (s *Session) initRanges() {
	r := &s.ranges
	if s.ident == nil || r.mirror != nil {
		return
	}
	r.mirror = rangemirror.New()
	r.sent = map[uint32]*rangeSent{}
	r.resumes = map[uint32]*rangeResume{}
	r.home = s.ident
}

// allocRangeID returns a request id that no request of the session
// uses. s.mu is held.
func (r *rangeReqs) allocRangeID() uint32 {
	for {
		r.next++
		if r.next == 0 {
			continue
		}
		if _, used := r.pending[r.next]; used {
			continue
		}
		if _, used := r.resumes[r.next]; used {
			continue
		}
		return r.next
	}
}

// recordSent keeps RANGE frame f, sent with request id f.Claim, for the
// mirror and for a resume. s.mu is held.
func (r *rangeReqs) recordSent(f protocol.Frame) {
	if r.mirror == nil {
		return
	}
	switch f.Op {
	case protocol.RangeCancel:
		if rs := r.sent[f.Claim]; rs != nil {
			rs.cancelled = true
		}
		return
	}
	r.seq++
	r.sent[f.Claim] = &rangeSent{f: f, seq: r.seq}
}

// applyAnswer applies ANSWER f to the mirror: as a push when its request
// waits in the mirror, else as the answer to the request sent. s.mu is
// held.
func (r *rangeReqs) applyAnswer(f protocol.Frame) {
	if r.mirror == nil {
		return
	}
	rs := r.sent[f.Claim]
	if rs == nil {
		return
	}
	if _, waiting := r.mirror.Waiting[f.Claim]; waiting {
		r.mirror.Pushed(f.Claim, f.Status)
	} else {
		r.mirror.Answered(rs.f, f.Status)
	}
	if f.Status != protocol.RangeQueued {
		delete(r.sent, f.Claim)
		delete(r.closeReqs, f.Claim)
	}
}

// breakRanges is the break of a resumable session's connection for its
// range requests: an unlock or release in flight is applied to the
// mirror now (those bytes are let go, never re-asserted) and asked again
// after the re-assertions; a set or query is asked again then too, a
// waiting set losing its place; a set whose wait was withdrawn is
// answered cancelled here. The unanswered re-assertions are made again
// from the mirror. The locks are believed until giveUp, or the earlier
// give-up of a break whose re-assertions are still unanswered. s.mu is
// held.
func (s *Session) breakRanges(giveUp time.Time) {
	r := &s.ranges
	if r.mirror == nil {
		return
	}
	clear(r.resumes) // their pending re-sends are stopped by resume
	for req, rs := range r.sent {
		switch rs.f.Op {
		case protocol.RangeUnlock, protocol.RangeRelease:
			r.mirror.Answered(rs.f, protocol.RangeDone)
		case protocol.RangeSet:
			delete(r.mirror.Waiting, req)
			if rs.cancelled {
				r.answerLocally(req, protocol.RangeCancelled)
			}
		}
	}
	if r.mirror.Len() > 0 && r.until.IsZero() {
		r.until = giveUp
	}
}

// answerLocally answers request req with status st without the server,
// and forgets it. s.mu is held.
func (r *rangeReqs) answerLocally(req uint32, st protocol.RangeStatus) {
	ch := r.pending[req]
	delete(r.pending, req)
	delete(r.sent, req)
	if ch == nil {
		return
	}
	drainQueued(ch)
	select {
	case ch <- protocol.Frame{Type: protocol.TypeRangeAnswer, Claim: req, Status: st}:
	default:
	}
}

// drainQueued empties a request's channel of the QUEUED answers of a
// connection that broke: only those can be left in it while the
// request is unanswered, and its new answers need the room.
func drainQueued(ch chan protocol.Frame) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// installRanges appends, on the session just opened after a break, the
// re-assertion of every range lock of the mirror, then the requests
// that were in flight at the break. It returns an error when the
// session cannot be resumed. s.mu is held; the caller flushes.
func (s *Session) installRanges() error {
	r := &s.ranges
	if r.mirror == nil {
		return nil
	}
	r.pause = 0
	locks := r.mirror.Locks()
	slices.SortFunc(locks, func(a, b rangelock.KeyLock) int {
		return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(a.NS, b.NS),
			cmp.Compare(a.Lock.Owner.ID, b.Lock.Owner.ID), cmp.Compare(a.Lock.Range.Start, b.Lock.Range.Start))
	})
	if len(locks) == 0 {
		r.home, r.cutOff, r.until = s.ident, nil, time.Time{}
	} else {
		// The re-assertions cut off on a session may have moved the
		// locks there, and one cut off earlier may still arrive and
		// move them again: name those sessions, the latest first, then
		// the session where the locks were all confirmed.
		var names []*resumeIdent
		for i := len(r.cutOff) - 1; i >= 0; i-- {
			names = append(names, r.cutOff[i])
		}
		names = append(names, r.home)
		longest := 0
		for _, n := range names {
			longest = max(longest, len(n.node))
		}
		for _, kl := range locks {
			if len(kl.Key)+longest > protocol.MaxRangeResumeText {
				return fmt.Errorf("%w: range lock key %q and node too long for a re-assertion", ErrNotResumed, kl.Key)
			}
		}
		for _, kl := range locks {
			f := rangemirror.Frame(protocol.RangeResume, kl)
			f.Claim = r.allocRangeID()
			rr := &rangeResume{f: naming(f, names[0]), names: names}
			r.resumes[f.Claim] = rr
			s.out = protocol.AppendRange(s.out, rr.f)
		}
		r.cutOff = append(r.cutOff, s.ident)
	}
	inFlight := make([]*rangeSent, 0, len(r.sent))
	for req, rs := range r.sent {
		if rs.f.Op == protocol.RangeQuery && r.pending[req] == nil {
			// Its caller has gone and it changes nothing.
			delete(r.sent, req)
			delete(r.pending, req)
			continue
		}
		if rs.cancelled { // withdrawn while the connection was down
			r.answerLocally(req, protocol.RangeCancelled)
			continue
		}
		inFlight = append(inFlight, rs)
	}
	slices.SortFunc(inFlight, func(a, b *rangeSent) int { return cmp.Compare(a.seq, b.seq) })
	for _, rs := range inFlight {
		if ch := r.pending[rs.f.Claim]; ch != nil {
			drainQueued(ch)
		}
		s.out = protocol.AppendRange(s.out, rs.f)
	}
	return nil
}

// naming returns RangeResume f naming the earlier session prior.
func naming(f protocol.Frame, prior *resumeIdent) protocol.Frame {
	f.Type = protocol.TypeRange
	f.Session, f.Secret, f.Node = prior.session, prior.secret, prior.node
	return f
}

// rangeReasserted acts on answer f to the re-assertion rr. It returns
// the error that ends the session, or nil. s.mu is held.
func (s *Session) rangeReasserted(rr *rangeResume, f protocol.Frame, now time.Time) error {
	r := &s.ranges
	req := f.Claim
	if !r.until.IsZero() && !now.Before(r.until) {
		return notResumed(s.breakCause, s.lastAttempt)
	}
	desc := func() string {
		return fmt.Sprintf("re-assertion %v answered %v", rr.f, f.Status)
	}
	switch {
	case f.Status == protocol.RangeDone:
		delete(r.resumes, req)
		r.mirror.Answered(rr.f, f.Status)
		if len(r.resumes) == 0 {
			r.home, r.cutOff, r.until = s.ident, nil, time.Time{}
		}
		return nil
	case f.Status == protocol.RangeConflict && len(rr.names) > 1:
		// Not in the session named: in another, then. While the client
		// believes, its lock is kept in one of them (nobody else can
		// hold it), and a cut-off re-assertion arriving late may move
		// it from one to another: name them in turn, pausing after
		// each round, until one answers done or the give-up.
		rr.at = (rr.at + 1) % len(rr.names)
		rr.f = naming(rr.f, rr.names[rr.at])
		if rr.at == 0 { // a round done: pause
			s.retryRangeResume(req, rr, now)
			return nil
		}
		s.out = protocol.AppendRange(s.out, rr.f)
		if s.startWrite() {
			go s.flush() // startWrite counted it in s.bg
		}
		return nil
	case f.Status == protocol.RangeConflict:
		return fmt.Errorf("%w: %s", ErrReassertRefused, desc())
	case f.Status == protocol.RangeUnavailable:
		s.retryRangeResume(req, rr, now)
		return nil
	}
	return fmt.Errorf("%w: %s", ErrReassertRefused, desc())
}

// retryRangeResume sends re-assertion rr again on the session in use
// after a pause (20 ms doubling to 1 s), unless the give-up comes first:
// the expiry ends the session then. s.mu is held.
func (s *Session) retryRangeResume(req uint32, rr *rangeResume, now time.Time) {
	r := &s.ranges
	r.pause = min(max(2*r.pause, minRangeResumePause), maxRangeResumePause)
	if !r.until.IsZero() && !now.Add(r.pause).Before(r.until) {
		return
	}
	s.resendLater(r.pause, func() bool {
		if r.resumes[req] != rr {
			return false
		}
		s.out = protocol.AppendRange(s.out, rr.f)
		return true
	})
}

// releaseRangesLocked appends, as Close of a resumable session, a
// RangeRelease for every owner, key and namespace that the mirror holds
// or has waiting or that a set in flight names: the server keeps them
// when the connection closes. It returns how many were sent; their
// answers are awaited as the claims' releases. s.mu is held; the caller
// flushes.
func (s *Session) releaseRangesLocked() int {
	r := &s.ranges
	if r.mirror == nil {
		return 0
	}
	type target struct {
		key   string
		flock bool
		owner uint64
	}
	seen := map[target]bool{}
	var targets []target
	add := func(key string, flock bool, owner uint64) {
		t := target{key, flock, owner}
		if !seen[t] {
			seen[t] = true
			targets = append(targets, t)
		}
	}
	for _, kl := range r.mirror.Locks() {
		add(kl.Key, kl.NS == rangelock.Flock, uint64(kl.Lock.Owner.ID))
	}
	for _, f := range r.mirror.Waiting {
		add(f.Name, f.Flags&protocol.RangeFlock != 0, f.Owner)
	}
	for _, rs := range r.sent {
		if rs.f.Op == protocol.RangeSet {
			add(rs.f.Name, rs.f.Flags&protocol.RangeFlock != 0, rs.f.Owner)
		}
	}
	slices.SortFunc(targets, func(a, b target) int {
		if a.flock != b.flock {
			if a.flock {
				return 1
			}
			return -1
		}
		return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.owner, b.owner))
	})
	if r.pending == nil {
		r.pending = map[uint32]chan protocol.Frame{}
	}
	if r.closeReqs == nil {
		r.closeReqs = map[uint32]struct{}{}
	}
	for _, t := range targets {
		f := protocol.Frame{Op: protocol.RangeRelease, Name: t.key, Owner: t.owner, Claim: r.allocRangeID()}
		if t.flock {
			f.Flags = protocol.RangeFlock
		}
		r.pending[f.Claim] = nil // no caller: the answer is the mirror's
		r.recordSent(f)
		r.closeReqs[f.Claim] = struct{}{}
		s.out = protocol.AppendRange(s.out, f)
	}
	return len(targets)
}
