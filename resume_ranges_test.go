package baton

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
)

// Tests of the re-assertion of a resumable session's range locks
// (resume_ranges.go) against the scripted fake server.

// rangeRes is what a SetRange in the background returns.
type rangeRes struct {
	token uint64
	err   error
}

func goSetRange(ctx context.Context, s *Session, l rangeLock, wait bool) chan rangeRes {
	ch := make(chan rangeRes, 1)
	go func() {
		tok, err := s.setRangeWait(ctx, l, wait)
		ch <- rangeRes{tok, err}
	}()
	return ch
}

// expectRange reads the next RANGE frame and checks its op and lock.
func expectRange(t *testing.T, fc *fakeV2Conn, op protocol.RangeOp, l rangeLock) protocol.Frame {
	t.Helper()
	f := fc.expect(protocol.TypeRange)
	want := rangeFrame(op, 0, l)
	if f.Op != op || f.Name != want.Name || f.Flags&protocol.RangeFlock != want.Flags&protocol.RangeFlock ||
		f.Owner != want.Owner || f.LockType != want.LockType || f.Start != want.Start || f.End != want.End {
		t.Fatalf("%v, want %v %+v", f, op, l)
	}
	return f
}

// expectRangeResume reads the next RANGE frame and checks it re-asserts
// lock l naming the earlier session prior, with secret sec, on node n1.
func expectRangeResume(t *testing.T, fc *fakeV2Conn, l rangeLock, prior uint64, sec byte) protocol.Frame {
	t.Helper()
	f := expectRange(t, fc, protocol.RangeResume, l)
	if f.Session != prior || f.Secret != secretOf(sec) || f.Node != "n1" || f.Flags&protocol.RangeWait != 0 {
		t.Fatalf("%v secret % x, want prior session %d secret %02x node n1", f, f.Secret[:2], prior, sec)
	}
	return f
}

// holdRange makes s hold range lock l, granted with token.
func holdRange(t *testing.T, s *Session, fc *fakeV2Conn, l rangeLock, token uint64) {
	t.Helper()
	res := goSetRange(t.Context(), s, l, false)
	f := expectRange(t, fc, protocol.RangeSet, l)
	fc.send(protocol.AppendRangeAnswer(nil, f.Claim, protocol.RangeGranted, token, protocol.Frame{}))
	if r := wait(t, res); r.err != nil || r.token != token {
		t.Fatalf("SetRange %+v: %d, %v", l, r.token, r.err)
	}
}

func answerRange(fc *fakeV2Conn, req uint32, st protocol.RangeStatus) {
	fc.send(protocol.AppendRangeAnswer(nil, req, st, 0, protocol.Frame{}))
}

// mirrorLen is how many ranges the session believes it holds.
func (s *Session) mirrorLen() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ranges.mirror.Len()
}

// rangesConfirmed reports whether no range re-assertion is unanswered
// and the session in use is the locks' home.
func (s *Session) rangesConfirmed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ranges.until.IsZero() && len(s.ranges.resumes) == 0 && s.ranges.home == s.ident && len(s.ranges.cutOff) == 0
}

var (
	posixF = rangeLock{Key: "f", Owner: 1, Type: protocol.LockWrite, Start: 0, End: 99}
	flockG = rangeLock{Key: "g", Flock: true, Owner: 2, Type: protocol.LockRead}
)

// A resumable session keeps its range locks through a broken
// connection: after the claim's re-assertion, each lock is re-asserted
// once, naming the earlier session; answered done, the session lives on
// and its next range requests go on the new connection.
func TestResumeRangeLocksReasserted(t *testing.T) {
	fake := newFakeV2(t)
	s, fc := openResumable(t, fake, SessionOptions{Lease: 2 * time.Second})
	cl := holdClaim(t, s, fc, "job", 100)
	holdRange(t, s, fc, posixF, 200)
	holdRange(t, s, fc, flockG, 201)

	fc.c.Close()
	fc2 := resumeConn(t, fake, 8, 0x22, 0)
	expectReassert(t, fc2, cl.ID(), "job", 100, 0, 7, 0x11)
	r1 := expectRangeResume(t, fc2, posixF, 7, 0x11)
	r2 := expectRangeResume(t, fc2, flockG, 7, 0x11)
	if r1.Claim == r2.Claim {
		t.Fatalf("two re-assertions with request id %d", r1.Claim)
	}
	fc2.send(protocol.AppendGranted(nil, cl.ID(), 100))
	answerRange(fc2, r1.Claim, protocol.RangeDone)
	answerRange(fc2, r2.Claim, protocol.RangeDone)

	// Exactly two: the next RANGE is the new request.
	l := rangeLock{Key: "h", Owner: 3, Type: protocol.LockWrite, Start: 5, End: 5}
	res := goSetRange(t.Context(), s, l, false)
	f := expectRange(t, fc2, protocol.RangeSet, l)
	fc2.send(protocol.AppendRangeAnswer(nil, f.Claim, protocol.RangeGranted, 202, protocol.Frame{}))
	if r := wait(t, res); r.err != nil || r.token != 202 {
		t.Fatalf("SetRange after the resume: %d, %v", r.token, r.err)
	}
	if !notClosed(s.Lost()) || s.Err() != nil || cl.Err() != nil || s.ID() != 8 {
		t.Fatalf("session %v, claim %v, id %d", s.Err(), cl.Err(), s.ID())
	}
	if !s.rangesConfirmed() || s.mirrorLen() != 3 {
		t.Fatalf("confirmed %v, %d ranges believed", s.rangesConfirmed(), s.mirrorLen())
	}
	unlocked := make(chan error, 1)
	go func() { unlocked <- s.unlockRange(t.Context(), posixF) }()
	u := expectRange(t, fc2, protocol.RangeUnlock, posixF)
	answerRange(fc2, u.Claim, protocol.RangeDone)
	if err := wait(t, unlocked); err != nil {
		t.Fatal(err)
	}
	if n := s.mirrorLen(); n != 2 {
		t.Fatalf("%d ranges believed after the unlock, want 2", n)
	}

	// Confirmed on session 8: a later break names it.
	fc2.c.Close()
	fc3 := resumeConn(t, fake, 9, 0x33, 0)
	expectReassert(t, fc3, cl.ID(), "job", 100, 0, 8, 0x22)
	expectRangeResume(t, fc3, flockG, 8, 0x22)
	expectRangeResume(t, fc3, l, 8, 0x22)
}

// A range lock whose re-assertion is answered conflict is lost, and a
// range lock has no loss of its own: the session ends, its claims with
// it, and the connection closes.
func TestResumeRangeConflictEndsSession(t *testing.T) {
	fake := newFakeV2(t)
	s, fc := openResumable(t, fake, SessionOptions{Lease: 2 * time.Second})
	cl := holdClaim(t, s, fc, "job", 100)
	holdRange(t, s, fc, posixF, 200)
	fc.c.Close()
	fc2 := resumeConn(t, fake, 8, 0x22, 0)
	expectReassert(t, fc2, cl.ID(), "job", 100, 0, 7, 0x11)
	r := expectRangeResume(t, fc2, posixF, 7, 0x11)
	fc2.send(protocol.AppendGranted(nil, cl.ID(), 100))
	fc2.send(protocol.AppendRangeAnswer(nil, r.Claim, protocol.RangeConflict, 0,
		protocol.Frame{LockType: protocol.LockWrite, Owner: 9, Session: 3, End: 10, Label: "other"}))
	wait(t, s.Lost())
	if !errors.Is(s.Err(), ErrReassertRefused) || !errors.Is(cl.Err(), ErrReassertRefused) {
		t.Fatalf("session %v, claim %v", s.Err(), cl.Err())
	}
	fc2.waitEOF()
	if _, err := s.setRangeWait(t.Context(), posixF, false); !errors.Is(err, ErrReassertRefused) {
		t.Fatalf("SetRange on the ended session: %v", err)
	}
}

// Re-assertions cut off on an intermediate session may have moved the
// locks there: the next resume names that session first and, answered
// conflict there, the session where the locks were confirmed, then
// each in turn (a late cut-off re-assertion may move them) until done.
func TestResumeRangeCutNamesBothSessions(t *testing.T) {
	fake := newFakeV2(t)
	s, fc := openResumable(t, fake, SessionOptions{Lease: 2 * time.Second})
	holdRange(t, s, fc, posixF, 200)
	holdRange(t, s, fc, flockG, 201)
	fc.c.Close()
	fc2 := resumeConn(t, fake, 8, 0x22, 0)
	expectRangeResume(t, fc2, posixF, 7, 0x11)
	expectRangeResume(t, fc2, flockG, 7, 0x11)
	fc2.c.Close() // before the answers
	fc3 := resumeConn(t, fake, 9, 0x33, 0)
	a := expectRangeResume(t, fc3, posixF, 8, 0x22)
	b := expectRangeResume(t, fc3, flockG, 8, 0x22)
	answerRange(fc3, a.Claim, protocol.RangeDone) // it had moved into 8
	fc3.send(protocol.AppendRangeAnswer(nil, b.Claim, protocol.RangeConflict, 0, protocol.Frame{}))
	b2 := expectRangeResume(t, fc3, flockG, 7, 0x11)
	if b2.Claim != b.Claim {
		t.Fatalf("re-sent with request id %d, want %d", b2.Claim, b.Claim)
	}
	if s.rangesConfirmed() {
		t.Fatal("confirmed with a re-assertion unanswered")
	}
	// Conflict there too: the cut-off re-assertion may have moved it
	// into 8 meanwhile. Named in turn, after a pause.
	fc3.send(protocol.AppendRangeAnswer(nil, b2.Claim, protocol.RangeConflict, 0, protocol.Frame{}))
	sent := time.Now()
	b3 := expectRangeResume(t, fc3, flockG, 8, 0x22)
	if b3.Claim != b.Claim || time.Since(sent) < minRangeResumePause {
		t.Fatalf("named 8 again as request %d after %v, want %d after at least %v", b3.Claim, time.Since(sent), b.Claim, minRangeResumePause)
	}
	answerRange(fc3, b3.Claim, protocol.RangeDone)
	fc3.send(protocol.AppendPong(nil, fc3.expect(protocol.TypePing).Seq))
	if s.Err() != nil || !s.rangesConfirmed() || s.mirrorLen() != 2 {
		t.Fatalf("session %v, confirmed %v, %d ranges", s.Err(), s.rangesConfirmed(), s.mirrorLen())
	}
	// Conflict with no other session to name ends the session.
	fc3.c.Close()
	fc4 := resumeConn(t, fake, 10, 0x44, 0)
	c := expectRangeResume(t, fc4, posixF, 9, 0x33)
	expectRangeResume(t, fc4, flockG, 9, 0x33)
	fc4.send(protocol.AppendRangeAnswer(nil, c.Claim, protocol.RangeConflict, 0, protocol.Frame{}))
	wait(t, s.Lost())
	if !errors.Is(s.Err(), ErrReassertRefused) {
		t.Fatalf("session: %v", s.Err())
	}
}

// Every session whose re-assertions were cut off since the locks were
// confirmed may hold them (one cut off earlier may arrive last): the
// next resume names each, the latest first, then the confirmed one, in
// turn, pausing after each round, until one answers done.
func TestResumeRangeNamesEveryCutOffSession(t *testing.T) {
	fake := newFakeV2(t)
	s, fc := openResumable(t, fake, SessionOptions{Lease: 2 * time.Second})
	holdRange(t, s, fc, posixF, 200)
	fc.c.Close()
	fc2 := resumeConn(t, fake, 8, 0x22, 0)
	expectRangeResume(t, fc2, posixF, 7, 0x11)
	fc2.c.Close() // before the answer
	fc3 := resumeConn(t, fake, 9, 0x33, 0)
	expectRangeResume(t, fc3, posixF, 8, 0x22)
	fc3.c.Close() // before the answer
	fc4 := resumeConn(t, fake, 10, 0x44, 0)
	a := expectRangeResume(t, fc4, posixF, 9, 0x33)
	for _, next := range []struct {
		session uint64
		secret  byte
	}{{8, 0x22}, {7, 0x11}} {
		fc4.send(protocol.AppendRangeAnswer(nil, a.Claim, protocol.RangeConflict, 0, protocol.Frame{}))
		a = expectRangeResume(t, fc4, posixF, next.session, next.secret)
	}
	fc4.send(protocol.AppendRangeAnswer(nil, a.Claim, protocol.RangeConflict, 0, protocol.Frame{}))
	sent := time.Now()
	a = expectRangeResume(t, fc4, posixF, 9, 0x33) // a round done: after a pause
	if time.Since(sent) < minRangeResumePause {
		t.Fatalf("named 9 again after %v, want at least %v", time.Since(sent), minRangeResumePause)
	}
	answerRange(fc4, a.Claim, protocol.RangeDone)
	fc4.send(protocol.AppendPong(nil, fc4.expect(protocol.TypePing).Seq))
	if s.Err() != nil || !s.rangesConfirmed() {
		t.Fatalf("session %v, confirmed %v", s.Err(), s.rangesConfirmed())
	}
}

// An unlock in flight at the break is never re-asserted: its bytes are
// let go, and the unlock is sent again after the re-assertions, with its
// request id, and its caller gets the answer. A set in flight is asked
// again after them too. A set whose wait was withdrawn before the break
// is answered cancelled at once, one withdrawn while the session resumes
// when the resume ends; neither is asked again.
func TestResumeRangeRequestsInFlight(t *testing.T) {
	fake := newFakeV2(t)
	s, fc := openResumable(t, fake, SessionOptions{Lease: 2 * time.Second})
	holdRange(t, s, fc, posixF, 200)
	other := rangeLock{Key: "k", Owner: 4, Type: protocol.LockWrite, Start: 10, End: 19}
	holdRange(t, s, fc, other, 201)

	unlocked := make(chan error, 1)
	go func() { unlocked <- s.unlockRange(t.Context(), posixF) }()
	u := expectRange(t, fc, protocol.RangeUnlock, posixF)

	waiting := rangeLock{Key: "w", Owner: 5, Type: protocol.LockWrite, End: protocol.MaxRangeEnd}
	set := goSetRange(t.Context(), s, waiting, true)
	w := expectRange(t, fc, protocol.RangeSet, waiting)
	answerRange(fc, w.Claim, protocol.RangeQueued)

	// Withdrawn before the break.
	withdrawn := rangeLock{Key: "x", Owner: 6, Type: protocol.LockRead, Start: 1, End: 2}
	xctx, xcancel := context.WithCancel(t.Context())
	gone := goSetRange(xctx, s, withdrawn, true)
	x := expectRange(t, fc, protocol.RangeSet, withdrawn)
	answerRange(fc, x.Claim, protocol.RangeQueued)
	xcancel()
	if c := fc.expect(protocol.TypeRange); c.Op != protocol.RangeCancel || c.Claim != x.Claim {
		t.Fatalf("%v, want the cancel of %d", c, x.Claim)
	}
	// Withdrawn while resuming.
	later := rangeLock{Key: "y", Owner: 7, Type: protocol.LockRead}
	yctx, ycancel := context.WithCancel(t.Context())
	goneLater := goSetRange(yctx, s, later, true)
	y := expectRange(t, fc, protocol.RangeSet, later)
	answerRange(fc, y.Claim, protocol.RangeQueued)
	waitAllRangesQueued(t, s, 3)

	fc.c.Close()
	fc2, _ := fake.acceptV2() // HELLO read, not answered yet
	if res := wait(t, gone); !errors.Is(res.err, context.Canceled) {
		t.Fatalf("set withdrawn before the break: %d, %v", res.token, res.err)
	}
	ycancel()
	select {
	case res := <-goneLater:
		t.Fatalf("set withdrawn while resuming returned before the resume: %d, %v", res.token, res.err)
	case <-time.After(20 * time.Millisecond):
	}
	fc2.welcomeResumable(8, 0x22, "n1", 0)
	r := expectRangeResume(t, fc2, other, 7, 0x11) // not posixF: being unlocked
	u2 := expectRange(t, fc2, protocol.RangeUnlock, posixF)
	w2 := expectRange(t, fc2, protocol.RangeSet, waiting)
	if u2.Claim != u.Claim || w2.Claim != w.Claim || w2.Flags&protocol.RangeWait == 0 {
		t.Fatalf("asked again as %v and %v, want request ids %d and %d", u2, w2, u.Claim, w.Claim)
	}
	if res := wait(t, goneLater); !errors.Is(res.err, context.Canceled) {
		t.Fatalf("set withdrawn while resuming: %d, %v", res.token, res.err)
	}
	answerRange(fc2, r.Claim, protocol.RangeDone)
	answerRange(fc2, u2.Claim, protocol.RangeDone)
	if err := wait(t, unlocked); err != nil {
		t.Fatalf("UnlockRange: %v", err)
	}
	answerRange(fc2, w2.Claim, protocol.RangeQueued)
	fc2.send(protocol.AppendRangeAnswer(nil, w2.Claim, protocol.RangePromoted, 205, protocol.Frame{}))
	if res := wait(t, set); res.err != nil || res.token != 205 {
		t.Fatalf("waiting set: %d, %v", res.token, res.err)
	}
	// Nothing else was asked again: the next frame is a new request.
	l := rangeLock{Key: "z", Owner: 8, Type: protocol.LockWrite}
	res := goSetRange(t.Context(), s, l, false)
	f := expectRange(t, fc2, protocol.RangeSet, l)
	fc2.send(protocol.AppendRangeAnswer(nil, f.Claim, protocol.RangeGranted, 206, protocol.Frame{}))
	if got := wait(t, res); got.err != nil {
		t.Fatal(got.err)
	}
	if s.Err() != nil || !s.rangesConfirmed() || s.mirrorLen() != 3 {
		t.Fatalf("session %v, confirmed %v, %d ranges (want k, w and z)", s.Err(), s.rangesConfirmed(), s.mirrorLen())
	}
}

// waitAllRangesQueued waits until n sets wait in the session's mirror.
func waitAllRangesQueued(t *testing.T, s *Session, n int) {
	t.Helper()
	deadline := time.Now().Add(fakeTimeout)
	for {
		s.mu.Lock()
		got := len(s.ranges.mirror.Waiting)
		s.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sets waiting, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A re-assertion answered unavailable (a node warming up) is sent again
// on the same session after a pause, and the lock is kept when it is
// answered done.
func TestResumeRangeUnavailableRetried(t *testing.T) {
	fake := newFakeV2(t)
	s, fc := openResumable(t, fake, SessionOptions{Lease: 2 * time.Second})
	holdRange(t, s, fc, posixF, 200)
	fc.c.Close()
	fc2 := resumeConn(t, fake, 8, 0x22, 0)
	r := expectRangeResume(t, fc2, posixF, 7, 0x11)
	sent := time.Now()
	answerRange(fc2, r.Claim, protocol.RangeUnavailable)
	r2 := expectRangeResume(t, fc2, posixF, 7, 0x11)
	if pause := time.Since(sent); pause < minRangeResumePause || r2.Claim != r.Claim {
		t.Fatalf("sent again %v later with request id %d, want at least %v and %d", pause, r2.Claim, minRangeResumePause, r.Claim)
	}
	answerRange(fc2, r2.Claim, protocol.RangeUnavailable)
	r3 := expectRangeResume(t, fc2, posixF, 7, 0x11)
	answerRange(fc2, r3.Claim, protocol.RangeDone)
	fc2.send(protocol.AppendPong(nil, fc2.expect(protocol.TypePing).Seq))
	if s.Err() != nil || !s.rangesConfirmed() || s.mirrorLen() != 1 {
		t.Fatalf("session %v, confirmed %v, %d ranges", s.Err(), s.rangesConfirmed(), s.mirrorLen())
	}
}

// pongOnly answers the PINGs of fc, and nothing else, until it ends.
func pongOnly(fc *fakeV2Conn) {
	for {
		select {
		case f := <-fc.frames:
			if f.Type == protocol.TypePing {
				fc.send(protocol.AppendPong(nil, f.Seq))
			}
		case <-fc.eof:
			return
		}
	}
}

// A range re-assertion never answered: the locks are believed until the
// give-up at the break, not a moment longer, and the session ends then
// with ErrNotResumed, although the new connection answers its PINGs.
func TestResumeRangeGiveUp(t *testing.T) {
	fake := newFakeV2(t)
	const lease = time.Second
	s, fc := openResumable(t, fake, SessionOptions{Lease: lease})
	holdRange(t, s, fc, posixF, 200)
	giveUp := s.giveUp()
	fc.c.Close()
	fc2 := resumeConn(t, fake, 8, 0x22, 0)
	expectRangeResume(t, fc2, posixF, 7, 0x11)
	go pongOnly(fc2)
	wait(t, s.Lost())
	late := time.Since(giveUp)
	t.Logf("ended %v after the give-up", late)
	if late < 0 || late > lease/4 {
		t.Fatalf("ended %v after the give-up, want at it", late)
	}
	if err := s.Err(); !errors.Is(err, ErrNotResumed) || !errors.Is(err, ErrHeartbeatTimeout) {
		t.Fatalf("session: %v", err)
	}
	fc2.waitEOF()
}

// The give-up ends the session also while the resume is still dialing.
func TestResumeRangeGiveUpWhileReconnecting(t *testing.T) {
	fake := newFakeV2(t)
	const lease = time.Second
	s, fc := openResumable(t, fake, SessionOptions{Lease: lease})
	holdRange(t, s, fc, posixF, 200)
	giveUp := s.giveUp()
	fc.c.Close()
	fake.acceptV2() // HELLO read, never answered
	wait(t, s.Lost())
	if late := time.Since(giveUp); late < 0 || late > lease/4 {
		t.Fatalf("ended %v after the give-up, want at it", late)
	}
	if err := s.Err(); !errors.Is(err, ErrNotResumed) || !errors.Is(err, ErrHeartbeatTimeout) {
		t.Fatalf("session: %v", err)
	}
}

// Close of a resumable session releases every owner's range locks on
// each key first, since the server keeps them when the connection
// closes, and waits for the answers before it closes.
func TestResumeCloseReleasesRanges(t *testing.T) {
	fake := newFakeV2(t)
	s, fc := openResumable(t, fake, SessionOptions{Lease: 2 * time.Second})
	holdRange(t, s, fc, posixF, 200)
	holdRange(t, s, fc, rangeLock{Key: "f", Owner: 1, Type: protocol.LockRead, Start: 500, End: 600}, 201)
	holdRange(t, s, fc, flockG, 202)
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	a := expectRange(t, fc, protocol.RangeRelease, rangeLock{Key: "f", Owner: 1})
	b := expectRange(t, fc, protocol.RangeRelease, rangeLock{Key: "g", Flock: true, Owner: 2})
	answerRange(fc, a.Claim, protocol.RangeDone)
	select {
	case err := <-closed:
		t.Fatalf("Close returned before every release was answered: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	if fc.closed() {
		t.Fatal("connection closed before the releases were answered")
	}
	answerRange(fc, b.Claim, protocol.RangeDone)
	if err := wait(t, closed); err != nil {
		t.Fatal(err)
	}
	fc.waitEOF()
}

// A range request made while the session resumes waits for the resume
// and goes after the re-assertions.
func TestResumeNewRangeWaitsForResume(t *testing.T) {
	fake := newFakeV2(t)
	s, fc := openResumable(t, fake, SessionOptions{Lease: 2 * time.Second})
	holdRange(t, s, fc, posixF, 200)
	fc.c.Close()
	fc2, _ := fake.acceptV2() // HELLO read, not answered yet
	s.mu.Lock()
	resuming := s.resuming
	s.mu.Unlock()
	if !resuming {
		t.Fatal("not resuming")
	}
	res := goSetRange(t.Context(), s, flockG, false)
	deadline := time.Now().Add(fakeTimeout)
	for awaiting := 0; awaiting == 0; {
		if time.Now().After(deadline) {
			t.Fatal("SetRange does not wait for the resume")
		}
		time.Sleep(time.Millisecond)
		s.mu.Lock()
		awaiting = s.waitingResume
		s.mu.Unlock()
	}
	fc2.welcomeResumable(8, 0x22, "n1", 0)
	r := expectRangeResume(t, fc2, posixF, 7, 0x11)
	f := expectRange(t, fc2, protocol.RangeSet, flockG)
	answerRange(fc2, r.Claim, protocol.RangeDone)
	fc2.send(protocol.AppendRangeAnswer(nil, f.Claim, protocol.RangeGranted, 201, protocol.Frame{}))
	if got := wait(t, res); got.err != nil || got.token != 201 {
		t.Fatalf("SetRange: %d, %v", got.token, got.err)
	}
}

// An answer to a request whose caller has gone still changes what the
// session holds: an unlock answered done after its caller left is not
// re-asserted at the next break.
func TestResumeRangeAnswerToGoneCaller(t *testing.T) {
	fake := newFakeV2(t)
	s, fc := openResumable(t, fake, SessionOptions{Lease: 2 * time.Second})
	holdRange(t, s, fc, posixF, 200)
	holdRange(t, s, fc, flockG, 201)
	ctx, cancel := context.WithCancel(t.Context())
	unlocked := make(chan error, 1)
	go func() { unlocked <- s.unlockRange(ctx, posixF) }()
	u := expectRange(t, fc, protocol.RangeUnlock, posixF)
	cancel()
	if err := wait(t, unlocked); !errors.Is(err, context.Canceled) {
		t.Fatalf("UnlockRange: %v", err)
	}
	answerRange(fc, u.Claim, protocol.RangeDone)
	// A round trip after it: the answer has been read.
	holdRange(t, s, fc, rangeLock{Key: "h", Owner: 3, Type: protocol.LockWrite}, 202)
	if n := s.mirrorLen(); n != 2 {
		t.Fatalf("%d ranges believed, want g and h", n)
	}
	fc.c.Close()
	fc2 := resumeConn(t, fake, 8, 0x22, 0)
	expectRangeResume(t, fc2, flockG, 7, 0x11)
	expectRangeResume(t, fc2, rangeLock{Key: "h", Owner: 3, Type: protocol.LockWrite}, 7, 0x11)
}
