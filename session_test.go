package baton

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
)

// openFake opens a session on a fresh fake and returns both ends.
func openFake(t *testing.T, lease time.Duration) (*Session, *fakeV2Conn) {
	t.Helper()
	fake := newFakeV2(t)
	return openOn(t, fake.client(), fake, lease)
}

func openOn(t *testing.T, c *Client, fake *fakeV2, lease time.Duration) (*Session, *fakeV2Conn) {
	t.Helper()
	type result struct {
		s   *Session
		err error
	}
	res := make(chan result, 1)
	go func() {
		s, err := c.OpenSession(t.Context(), SessionOptions{Lease: lease, Label: "w1"})
		res <- result{s, err}
	}()
	fc, hello := fake.acceptV2()
	if hello.LeaseMS != uint32(lease/time.Millisecond) || hello.Label != "w1" {
		t.Fatalf("HELLO %v", hello)
	}
	fc.welcome()
	r := <-res
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { r.s.Close() })
	return r.s, fc
}

type claimResult struct {
	cl  *Claim
	err error
}

func goAcquire(ctx context.Context, s *Session, name string, m Mode, noWait bool) chan claimResult {
	res := make(chan claimResult, 1)
	go func() {
		var cl *Claim
		var err error
		if noWait {
			cl, err = s.TryAcquire(ctx, name, m)
		} else {
			cl, err = s.Acquire(ctx, name, m)
		}
		res <- claimResult{cl, err}
	}()
	return res
}

func wait[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(fakeTimeout):
		t.Fatal("timeout")
		var zero T
		return zero
	}
}

func TestSessionClaimModes(t *testing.T) {
	s, fc := openFake(t, 10*time.Second)
	if s.version() != 2 || s.ID() != 7 {
		t.Fatalf("version %d id %d", s.version(), s.ID())
	}
	for i, m := range []Mode{Exclusive, Shared, Semaphore(4)} {
		res := goAcquire(t.Context(), s, "job", m, false)
		f := fc.expect(protocol.TypeClaim)
		if f.Mode != m.kind || f.Limit != m.limit || f.Name != "job" || f.NoWait() {
			t.Fatalf("CLAIM %v for %v", f, m)
		}
		fc.send(protocol.AppendGranted(nil, f.Claim, uint64(100+i)))
		r := wait(t, res)
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.cl.Token() != uint64(100+i) || r.cl.Mode() != m || r.cl.Name() != "job" || r.cl.ID() != f.Claim {
			t.Fatalf("token %d mode %v", r.cl.Token(), r.cl.Mode())
		}
		done := make(chan error, 1)
		go func() { done <- r.cl.Release(t.Context()) }()
		rel := fc.expect(protocol.TypeRelease)
		if rel.Claim != f.Claim {
			t.Fatalf("RELEASE %d, want %d", rel.Claim, f.Claim)
		}
		fc.send(protocol.AppendReleased(nil, f.Claim))
		if err := wait(t, done); err != nil {
			t.Fatal(err)
		}
		select {
		case <-r.cl.Lost():
		default:
			t.Fatal("Lost not closed after Release")
		}
	}
}

func TestSessionQueuedThenPromoted(t *testing.T) {
	s, fc := openFake(t, 10*time.Second)
	res := goAcquire(t.Context(), s, "job", Exclusive, false)
	f := fc.expect(protocol.TypeClaim)
	fc.send(protocol.AppendQueued(nil, f.Claim))
	// A PING answered meanwhile does not grant anything.
	select {
	case r := <-res:
		t.Fatalf("Acquire returned while queued: %v", r.err)
	case <-time.After(50 * time.Millisecond):
	}
	fc.send(protocol.AppendPromoted(nil, f.Claim, 42))
	r := wait(t, res)
	if r.err != nil || r.cl.Token() != 42 {
		t.Fatalf("err %v token %d", r.err, r.cl.Token())
	}
}

// Answers split into single bytes and several answers coalesced in one
// write are read alike.
func TestSessionSplitAndCoalescedFrames(t *testing.T) {
	s, fc := openFake(t, 10*time.Second)
	a := goAcquire(t.Context(), s, "a", Shared, false)
	fa := fc.expect(protocol.TypeClaim)
	b := goAcquire(t.Context(), s, "b", Shared, false)
	fb := fc.expect(protocol.TypeClaim)
	var buf []byte
	buf = protocol.AppendQueued(buf, fa.Claim)
	buf = protocol.AppendGranted(buf, fb.Claim, 9)
	buf = protocol.AppendPromoted(buf, fa.Claim, 10)
	for i := range buf { // one byte per write
		fc.send(buf[i : i+1])
	}
	ra, rb := wait(t, a), wait(t, b)
	if ra.err != nil || rb.err != nil || ra.cl.Token() != 10 || rb.cl.Token() != 9 {
		t.Fatalf("%v %v", ra, rb)
	}
	c := goAcquire(t.Context(), s, "c", Exclusive, false)
	fcl := fc.expect(protocol.TypeClaim)
	fc.send(append(protocol.AppendQueued(nil, fcl.Claim), protocol.AppendPromoted(nil, fcl.Claim, 11)...))
	if rc := wait(t, c); rc.err != nil || rc.cl.Token() != 11 {
		t.Fatalf("%v", rc)
	}
}

func TestSessionBusyAndRefused(t *testing.T) {
	s, fc := openFake(t, 10*time.Second)
	res := goAcquire(t.Context(), s, "job", Exclusive, true)
	f := fc.expect(protocol.TypeClaim)
	if !f.NoWait() {
		t.Fatal("TryAcquire sent no ClaimNoWait flag")
	}
	fc.send(protocol.AppendBusy(nil, f.Claim))
	if r := wait(t, res); !errors.Is(r.err, ErrBusy) {
		t.Fatalf("TryAcquire: %v, want ErrBusy", r.err)
	}
	res = goAcquire(t.Context(), s, "pool", Semaphore(3), false)
	f = fc.expect(protocol.TypeClaim)
	fc.send(protocol.AppendRefused(nil, f.Claim, protocol.CodeLimitMismatch, ""))
	r := wait(t, res)
	var se *ServerError
	if !errors.As(r.err, &se) || se.Code != protocol.CodeLimitMismatch || !errors.Is(r.err, protocol.ErrLimitMismatch) || Temporary(r.err) {
		t.Fatalf("refused: %v", r.err)
	}
	// The session lives on.
	res = goAcquire(t.Context(), s, "job", Exclusive, false)
	f = fc.expect(protocol.TypeClaim)
	fc.send(protocol.AppendGranted(nil, f.Claim, 5))
	if r := wait(t, res); r.err != nil {
		t.Fatal(r.err)
	}
	if s.Err() != nil {
		t.Fatal(s.Err())
	}
}

// Client-side validation needs no round trip.
func TestSessionValidation(t *testing.T) {
	s, _ := openFake(t, 10*time.Second)
	for _, tc := range []struct {
		name string
		m    Mode
		want error
	}{
		{"", Exclusive, protocol.ErrEmptyName},
		{string(make([]byte, 256)), Exclusive, protocol.ErrNameTooLong},
		{"\xff", Shared, protocol.ErrInvalidName},
		{"x", Semaphore(0), protocol.ErrInvalidLimit},
		{"x", Mode{kind: 9}, protocol.ErrUnknownMode},
	} {
		if _, err := s.Acquire(t.Context(), tc.name, tc.m); !errors.Is(err, tc.want) {
			t.Errorf("Acquire(%q, %v): %v, want %v", tc.name, tc.m, err, tc.want)
		}
	}
	c := New(Config{Address: "127.0.0.1:1"})
	if _, err := c.OpenSession(t.Context(), SessionOptions{}); !errors.Is(err, protocol.ErrInvalidLease) {
		t.Errorf("lease 0: %v", err)
	}
	if _, err := c.OpenSession(t.Context(), SessionOptions{Lease: time.Second, Label: "\xff"}); !errors.Is(err, protocol.ErrInvalidLabel) {
		t.Errorf("bad label: %v", err)
	}
}

// REVOKED ends one claim: its work is cancelled with the code as cause,
// and the session and the other claims live on.
func TestSessionRevokedEndsOneClaim(t *testing.T) {
	s, fc := openFake(t, 10*time.Second)
	started := make(chan struct{}, 2)
	errs := make(chan error, 2)
	causes := make(chan error, 2)
	for _, name := range []string{"a", "b"} {
		go func() {
			errs <- s.Do(t.Context(), name, Exclusive, func(ctx context.Context, token uint64) error {
				started <- struct{}{}
				<-ctx.Done()
				causes <- context.Cause(ctx)
				return nil
			})
		}()
		f := fc.expect(protocol.TypeClaim)
		fc.send(protocol.AppendGranted(nil, f.Claim, uint64(f.Claim)))
		wait(t, started)
	}
	fc.send(protocol.AppendRevoked(nil, 1, protocol.CodeClosedByAdmin, "ops"))
	cause := wait(t, causes)
	if !errors.Is(cause, protocol.ErrClosedByAdmin) {
		t.Fatalf("cause %v", cause)
	}
	if err := wait(t, errs); !errors.Is(err, protocol.ErrClosedByAdmin) {
		t.Fatalf("Do returned %v, want the revocation joined", err)
	}
	// No RELEASE for a revoked claim; claim 2 still held, session live.
	select {
	case err := <-errs:
		t.Fatalf("the other Do returned %v", err)
	case f := <-fc.frames:
		if f.Type != protocol.TypePing {
			t.Fatalf("client sent %v after REVOKED", f)
		}
	case <-time.After(50 * time.Millisecond):
	}
	if s.Err() != nil {
		t.Fatal(s.Err())
	}
}

// A session-level ERROR loses every claim and closes the connection.
func TestSessionErrorLosesEveryClaim(t *testing.T) {
	s, fc := openFake(t, 10*time.Second)
	var cls []*Claim
	for _, name := range []string{"a", "b", "c"} {
		res := goAcquire(t.Context(), s, name, Shared, false)
		f := fc.expect(protocol.TypeClaim)
		fc.send(protocol.AppendGranted(nil, f.Claim, 1))
		cls = append(cls, wait(t, res).cl)
	}
	queued := goAcquire(t.Context(), s, "d", Exclusive, false)
	f := fc.expect(protocol.TypeClaim)
	fc.send(protocol.AppendQueued(nil, f.Claim))
	fc.send(protocol.AppendSessionError(nil, protocol.CodeShuttingDown, ""))
	for _, cl := range cls {
		wait(t, cl.Lost())
		if !errors.Is(cl.Err(), protocol.ErrShuttingDown) {
			t.Fatalf("claim err %v", cl.Err())
		}
	}
	if r := wait(t, queued); !errors.Is(r.err, protocol.ErrShuttingDown) {
		t.Fatalf("queued: %v", r.err)
	}
	fc.waitEOF()
	wait(t, s.Lost())
	if _, err := s.Acquire(t.Context(), "e", Exclusive); !errors.Is(err, protocol.ErrShuttingDown) {
		t.Fatalf("Acquire on a lost session: %v", err)
	}
	if !Temporary(s.Err()) {
		t.Fatal("shutdown is not temporary")
	}
}

// Every answer that does not fit, every push for a claim in the wrong
// state, and every frame that does not decode is a violation: the session
// closes and every claim is lost.
func TestSessionViolations(t *testing.T) {
	type setup struct {
		held, queued, pending uint32 // claim ids in each state (0: none)
	}
	for _, tc := range []struct {
		name string
		send func(st setup) []byte
	}{
		{"GRANTED for another claim than the oldest request", func(st setup) []byte { return protocol.AppendGranted(nil, st.pending+100, 1) }},
		{"QUEUED for a held claim", func(st setup) []byte { return protocol.AppendQueued(nil, st.held) }},
		{"RELEASED answering a CLAIM", func(st setup) []byte { return protocol.AppendReleased(nil, st.pending) }},
		{"PONG with nothing unanswered", func(st setup) []byte { return protocol.AppendPong(nil, 1) }},
		{"WELCOME again", func(st setup) []byte { return protocol.AppendWelcome(nil, 7) }},
		{"PROMOTED for a held claim", func(st setup) []byte { return protocol.AppendPromoted(nil, st.held, 9) }},
		{"PROMOTED for a claim not answered yet", func(st setup) []byte { return protocol.AppendPromoted(nil, st.pending, 9) }},
		{"PROMOTED for no claim", func(st setup) []byte { return protocol.AppendPromoted(nil, 999, 9) }},
		{"REVOKED for a claim not answered yet", func(st setup) []byte {
			return protocol.AppendRevoked(nil, st.pending, protocol.CodeClosedByAdmin, "")
		}},
		{"REVOKED for no claim", func(st setup) []byte { return protocol.AppendRevoked(nil, 999, protocol.CodeClosedByAdmin, "") }},
		{"QUEUED for a no-wait claim", func(st setup) []byte { return nil }},
		{"BUSY for a claim that waits", func(st setup) []byte { return protocol.AppendBusy(nil, st.pending) }},
		{"length 0", func(st setup) []byte { return []byte{0, 0} }},
		{"length over 512", func(st setup) []byte { return []byte{0x02, 0x01} }},
		{"unknown type", func(st setup) []byte { return []byte{0, 1, 0x7f} }},
		{"client frame type", func(st setup) []byte { return protocol.AppendPing(nil, 1) }},
		{"bad payload size", func(st setup) []byte { return []byte{0, 2, byte(protocol.TypeGranted), 0} }},
		{"version 1 frame", func(st setup) []byte { return protocol.AppendAcquired(nil, 1) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, fc := openFake(t, 10*time.Second)
			held := goAcquire(t.Context(), s, "h", Exclusive, false)
			f := fc.expect(protocol.TypeClaim)
			fc.send(protocol.AppendGranted(nil, f.Claim, 1))
			st := setup{held: f.Claim}
			hcl := wait(t, held).cl
			queued := goAcquire(t.Context(), s, "q", Exclusive, false)
			f = fc.expect(protocol.TypeClaim)
			fc.send(protocol.AppendQueued(nil, f.Claim))
			st.queued = f.Claim
			// TCP keeps the order: QUEUED is read before the bad frame.
			nowait := tc.name == "QUEUED for a no-wait claim"
			pending := goAcquire(t.Context(), s, "p", Exclusive, nowait)
			f = fc.expect(protocol.TypeClaim)
			st.pending = f.Claim
			b := tc.send(st)
			if nowait {
				b = protocol.AppendQueued(nil, st.pending)
			}
			fc.send(b)
			fc.waitEOF()
			wait(t, hcl.Lost())
			if !errors.Is(hcl.Err(), ErrProtocolViolation) {
				t.Fatalf("held claim: %v", hcl.Err())
			}
			for _, ch := range []chan claimResult{queued, pending} {
				if r := wait(t, ch); !errors.Is(r.err, ErrProtocolViolation) {
					t.Fatalf("waiting claim: %v", r.err)
				}
			}
			if !errors.Is(s.Err(), ErrProtocolViolation) || Temporary(s.Err()) {
				t.Fatalf("session: %v", s.Err())
			}
			t.Log(s.Err())
		})
	}
}

// WELCOME with a reserved flag set, or any other first answer, fails
// the opening.
func TestSessionOpeningViolations(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer []byte
		want   error
	}{
		{"WELCOME with flags", protocol.AppendFrame(nil, protocol.Frame{Type: protocol.TypeWelcome, Session: 1, Flags: 1}), ErrProtocolViolation},
		{"PONG", protocol.AppendPong(nil, 1), ErrProtocolViolation},
		{"GRANTED", protocol.AppendGranted(nil, 1, 1), ErrProtocolViolation},
		{"ERROR 0x17", protocol.AppendSessionError(nil, protocol.CodeInvalidLease, ""), protocol.ErrInvalidLease},
		{"v1 ERROR 0x01", protocol.AppendError(nil, protocol.CodeShuttingDown, ""), protocol.ErrShuttingDown},
		{"EOF", nil, ErrConnectionClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := newFakeV2(t)
			res := make(chan error, 1)
			go func() {
				s, err := fake.client().OpenSession(t.Context(), SessionOptions{Lease: 10 * time.Second})
				if s != nil {
					s.Close()
				}
				res <- err
			}()
			fc, _ := fake.acceptV2()
			if tc.answer == nil {
				fc.c.Close()
			} else {
				fc.send(tc.answer)
			}
			if err := wait(t, res); !errors.Is(err, tc.want) {
				t.Fatalf("OpenSession: %v, want %v", err, tc.want)
			}
		})
	}
}

func TestSessionOpenContext(t *testing.T) {
	fake := newFakeV2(t)
	ctx, cancel := context.WithCancel(t.Context())
	res := make(chan error, 1)
	go func() {
		_, err := fake.client().OpenSession(ctx, SessionOptions{Lease: 10 * time.Second})
		res <- err
	}()
	fc, _ := fake.acceptV2()
	cancel()
	if err := wait(t, res); !errors.Is(err, context.Canceled) {
		t.Fatalf("OpenSession: %v", err)
	}
	fc.waitEOF()
}

// Cancelling Acquire's context while queued sends RELEASE at once and
// leaves the session usable.
func TestSessionAcquireContextLeavesQueue(t *testing.T) {
	s, fc := openFake(t, 10*time.Second)
	ctx, cancel := context.WithCancel(t.Context())
	res := goAcquire(ctx, s, "job", Exclusive, false)
	f := fc.expect(protocol.TypeClaim)
	fc.send(protocol.AppendQueued(nil, f.Claim))
	cancel()
	if r := wait(t, res); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("Acquire: %v", r.err)
	}
	rel := fc.expect(protocol.TypeRelease)
	if rel.Claim != f.Claim {
		t.Fatalf("RELEASE(%d), want %d", rel.Claim, f.Claim)
	}
	// A PROMOTED that crossed the RELEASE is valid and changes nothing.
	fc.send(protocol.AppendPromoted(nil, f.Claim, 3))
	fc.send(protocol.AppendReleased(nil, f.Claim))
	res = goAcquire(t.Context(), s, "job", Exclusive, false)
	f2 := fc.expect(protocol.TypeClaim)
	fc.send(protocol.AppendGranted(nil, f2.Claim, 4))
	if r := wait(t, res); r.err != nil {
		t.Fatal(r.err)
	}
}

// A RELEASE that crossed a REVOKED is answered RELEASED; neither is a
// violation, and Release reports success (the work had stopped).
func TestSessionReleaseCrossesRevoked(t *testing.T) {
	s, fc := openFake(t, 10*time.Second)
	res := goAcquire(t.Context(), s, "job", Exclusive, false)
	f := fc.expect(protocol.TypeClaim)
	fc.send(protocol.AppendGranted(nil, f.Claim, 1))
	cl := wait(t, res).cl
	done := make(chan error, 1)
	go func() { done <- cl.Release(t.Context()) }()
	fc.expect(protocol.TypeRelease)
	fc.send(protocol.AppendRevoked(nil, f.Claim, protocol.CodeClosedByAdmin, ""))
	fc.send(protocol.AppendReleased(nil, f.Claim))
	if err := wait(t, done); err != nil {
		t.Fatal(err)
	}
	if s.Err() != nil {
		t.Fatal(s.Err())
	}
}

// Claim ids are not reused while a request about them is unanswered.
func TestSessionClaimIDs(t *testing.T) {
	s, fc := openFake(t, 10*time.Second)
	seen := map[uint32]bool{}
	for i := range 5 {
		res := goAcquire(t.Context(), s, fmt.Sprint("n", i), Exclusive, true)
		f := fc.expect(protocol.TypeClaim)
		if seen[f.Claim] {
			t.Fatalf("claim id %d reused", f.Claim)
		}
		seen[f.Claim] = true
		fc.send(protocol.AppendBusy(nil, f.Claim))
		wait(t, res)
	}
}

// The session PINGs at about a quarter of the lease, one at a time,
// with increasing sequence numbers.
func TestSessionPings(t *testing.T) {
	lease := 400 * time.Millisecond
	_, fc := openFake(t, lease)
	start := time.Now()
	var last uint64
	for range 4 {
		f := fc.expect(protocol.TypePing)
		if f.Seq != last+1 {
			t.Fatalf("PING seq %d after %d", f.Seq, last)
		}
		last = f.Seq
		select {
		case g := <-fc.frames:
			t.Fatalf("%v while a PING is unanswered", g)
		case <-time.After(20 * time.Millisecond):
		}
		fc.send(protocol.AppendPong(nil, f.Seq))
	}
	el := time.Since(start)
	t.Logf("4 PINGs in %v (lease %v)", el, lease)
	if el < 3*lease/4-60*time.Millisecond || el > 4*lease {
		t.Fatalf("4 PINGs took %v with lease %v", el, lease)
	}
}

// When nothing is answered for 0.8 of the lease, every claim is lost:
// the work is cancelled first, and the connection closes once the work
// has stopped.
func TestSessionGiveUpCancelsBeforeClose(t *testing.T) {
	lease := 500 * time.Millisecond
	s, fc := openFake(t, lease)
	started := make(chan struct{})
	release := make(chan struct{})
	var cancelledAt time.Time
	doErr := make(chan error, 1)
	before := time.Now() // the CLAIM, the anchor, is sent after this
	go func() {
		doErr <- s.Do(t.Context(), "job", Exclusive, func(ctx context.Context, token uint64) error {
			close(started)
			<-ctx.Done()
			cancelledAt = time.Now()
			if !errors.Is(context.Cause(ctx), ErrHeartbeatTimeout) {
				t.Errorf("cause %v", context.Cause(ctx))
			}
			<-release
			return nil
		})
	}()
	f := fc.expect(protocol.TypeClaim)
	sent := time.Now()
	fc.send(protocol.AppendGranted(nil, f.Claim, 1))
	<-started
	// From now on the fake answers nothing.
	select {
	case <-fc.eof:
		t.Fatal("closed before the work stopped")
	case <-time.After(lease * 9 / 10):
	}
	if fc.closed() {
		t.Fatal("closed before the work stopped")
	}
	close(release)
	eofAt := fc.waitEOF()
	err := wait(t, doErr)
	if !errors.Is(err, ErrHeartbeatTimeout) {
		t.Fatalf("Do: %v", err)
	}
	giveUp := cancelledAt.Sub(sent)
	t.Logf("gave up %v after the CLAIM was sent (0.8·lease = %v); closed %v after the cancel", giveUp, lease*4/5, eofAt.Sub(cancelledAt))
	if cancelledAt.Sub(before) < lease*4/5 || giveUp > lease {
		t.Fatalf("gave up %v after the last answered request, want from 0.8·lease to lease", giveUp)
	}
}

// With two held claims, a give-up keeps the connection open until the
// work of both has stopped: closing when the first stops would let the
// server hand the second's lock over while its work is still stopping.
func TestSessionGiveUpWaitsForEveryClaimsWork(t *testing.T) {
	lease := 2 * time.Second
	s, fc := openFake(t, lease)
	first := goAcquire(t.Context(), s, "first", Exclusive, false)
	f := fc.expect(protocol.TypeClaim)
	fc.send(protocol.AppendGranted(nil, f.Claim, 1))
	second := goAcquire(t.Context(), s, "second", Exclusive, false)
	f = fc.expect(protocol.TypeClaim)
	fc.send(protocol.AppendGranted(nil, f.Claim, 2))
	a, b := wait(t, first).cl, wait(t, second).cl
	// From now on the fake answers nothing: both claims are lost at the
	// give-up, and both works are told.
	wait(t, a.Lost())
	wait(t, b.Lost())
	if err := a.Release(t.Context()); !errors.Is(err, ErrHeartbeatTimeout) {
		t.Fatalf("first Release: %v", err)
	}
	select {
	case <-fc.eof:
		t.Fatal("closed when the first claim's work stopped, while the second's still ran")
	case <-time.After(lease / 20):
	}
	if late := time.Since(s.CloseBy()); late > 0 {
		t.Fatalf("the check came %v after CloseBy: too late to tell the two closes apart", late)
	}
	released := time.Now()
	if err := b.Release(t.Context()); !errors.Is(err, ErrHeartbeatTimeout) {
		t.Fatalf("second Release: %v", err)
	}
	eofAt := fc.waitEOF()
	t.Logf("closed %v after the second work stopped, %v before CloseBy", eofAt.Sub(released), s.CloseBy().Sub(eofAt))
	if !eofAt.Before(s.CloseBy()) {
		t.Fatalf("closed at CloseBy%+v, want when the second claim's work stopped", eofAt.Sub(s.CloseBy()))
	}
}

// Work that ignores its cancellation does not keep the connection open
// beyond anchor + lease, the claim's CloseBy (the session's).
func TestSessionGiveUpClosesByAnchorPlusLease(t *testing.T) {
	lease := 400 * time.Millisecond
	s, fc := openFake(t, lease)
	res := goAcquire(t.Context(), s, "job", Exclusive, false)
	f := fc.expect(protocol.TypeClaim)
	fc.send(protocol.AppendGranted(nil, f.Claim, 1))
	cl := wait(t, res).cl
	wait(t, cl.Lost())
	closeBy := cl.CloseBy()
	if !closeBy.Equal(s.CloseBy()) {
		t.Fatalf("claim's CloseBy %v, session's %v", closeBy, s.CloseBy())
	}
	eofAt := fc.waitEOF()
	t.Logf("closed %v after CloseBy", eofAt.Sub(closeBy))
	if eofAt.Before(closeBy.Add(-5*time.Millisecond)) || eofAt.After(closeBy.Add(lease/2)) {
		t.Fatalf("closed at CloseBy%+v", eofAt.Sub(closeBy))
	}
	if !errors.Is(cl.Release(t.Context()), ErrHeartbeatTimeout) {
		t.Fatal(cl.Err())
	}
}

// EOF loses every claim.
func TestSessionEOF(t *testing.T) {
	s, fc := openFake(t, 10*time.Second)
	res := goAcquire(t.Context(), s, "job", Exclusive, false)
	f := fc.expect(protocol.TypeClaim)
	fc.send(protocol.AppendGranted(nil, f.Claim, 1))
	cl := wait(t, res).cl
	fc.c.Close()
	wait(t, cl.Lost())
	if !errors.Is(cl.Err(), ErrConnectionClosed) || !Temporary(cl.Err()) {
		t.Fatal(cl.Err())
	}
}

// Close ends every claim and closes the connection.
func TestSessionClose(t *testing.T) {
	s, fc := openFake(t, 10*time.Second)
	res := goAcquire(t.Context(), s, "job", Exclusive, false)
	f := fc.expect(protocol.TypeClaim)
	fc.send(protocol.AppendGranted(nil, f.Claim, 1))
	cl := wait(t, res).cl
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	fc.waitEOF()
	if !errors.Is(cl.Err(), ErrSessionClosed) {
		t.Fatal(cl.Err())
	}
	if err := cl.Release(t.Context()); !errors.Is(err, ErrSessionClosed) {
		t.Fatal(err)
	}
	if _, err := s.Acquire(t.Context(), "x", Exclusive); !errors.Is(err, ErrSessionClosed) {
		t.Fatal(err)
	}
}

// Uncontended claim and release cost one write each.
func TestSessionOneWritePerRequest(t *testing.T) {
	fake := newFakeV2(t)
	d := &countDialer{}
	c := New(Config{Address: fake.ln.Addr().String(), Dialer: d})
	s, fc := openOn(t, c, fake, time.Minute)
	var tokens atomic.Uint64
	go fc.serveGrantAll(&tokens)
	before := d.writes.Load()
	const n = 50
	for range n {
		cl, err := s.Acquire(t.Context(), "job", Exclusive)
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if w := d.writes.Load() - before; w != 2*n {
		t.Fatalf("%d writes for %d claims and releases", w, 2*n)
	}
}

// Many goroutines on one session: every claim is answered to its own
// caller.
func TestSessionConcurrentUse(t *testing.T) {
	s, fc := openFake(t, 10*time.Second)
	var tokens atomic.Uint64
	go fc.serveGrantAll(&tokens)
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[uint64]bool{}
	for g := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				err := s.Do(t.Context(), fmt.Sprint("n", g, "-", i), Shared, func(ctx context.Context, token uint64) error {
					mu.Lock()
					defer mu.Unlock()
					if seen[token] {
						return fmt.Errorf("token %d twice", token)
					}
					seen[token] = true
					return nil
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(seen) != 1000 {
		t.Fatalf("%d tokens", len(seen))
	}
}

// v1Only answers a connection of fake as a version 1 server does:
// ERROR 0x10 to a version 2 opening (then close), or the ACQUIRE of a
// version 1 claim, which it returns.
func v1Only(t *testing.T, fake *fakeV2) (*fakeV2Conn, protocol.Acquire) {
	t.Helper()
	fc := fake.acceptRaw()
	var b [1]byte
	if _, err := io.ReadFull(fc.c, b[:]); err != nil || protocol.Type(b[0]) != protocol.TypeAcquire {
		t.Fatalf("v1 fake: first byte %x, %v", b, err)
	}
	a, err := protocol.ReadAcquireBody(fc.c)
	if errors.Is(err, protocol.ErrUnsupportedVersion) {
		fc.send(protocol.AppendError(nil, protocol.CodeUnsupportedVersion, ""))
		fc.c.Close()
		return nil, a
	}
	if err != nil {
		t.Fatalf("v1 fake: %v", err)
	}
	go func() {
		defer close(fc.eof)
		io.Copy(io.Discard, fc.c)
		fc.eofAt = time.Now()
	}()
	return fc, a
}

// A server that speaks version 1 only: the session falls back, each
// exclusive claim on its own version 1 connection.
func TestSessionFallbackToV1(t *testing.T) {
	fake := newFakeV2(t)
	c := fake.client()
	res := make(chan error, 1)
	var s *Session
	go func() {
		var err error
		s, err = c.OpenSession(t.Context(), SessionOptions{Lease: 2 * time.Second, Label: "w1"})
		res <- err
	}()
	if fc, a := v1Only(t, fake); fc != nil || a.Version != protocol.Version2 {
		t.Fatalf("opening read as version %d", a.Version)
	}
	if err := wait(t, res); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.version() != 1 {
		t.Fatal("no fallback")
	}
	if _, err := s.Acquire(t.Context(), "job", Shared); !errors.Is(err, ErrServerTooOld) || !errors.Is(err, protocol.ErrUnsupportedVersion) {
		t.Fatalf("shared on v1: %v", err)
	}
	if _, err := s.Acquire(t.Context(), "job", Semaphore(2)); !errors.Is(err, ErrServerTooOld) {
		t.Fatalf("semaphore on v1: %v", err)
	}
	// Exclusive, waiting.
	done := make(chan error, 1)
	go func() {
		done <- s.Do(t.Context(), "job", Exclusive, func(ctx context.Context, token uint64) error {
			if token != 77 {
				return fmt.Errorf("token %d", token)
			}
			return nil
		})
	}()
	fc1, acq := v1Only(t, fake)
	if acq.Name != "job" || acq.LeaseMS != 2000 || acq.Version != protocol.Version {
		t.Fatalf("v1 ACQUIRE %+v", acq)
	}
	fc1.send(protocol.AppendWaiting(nil))
	fc1.send(protocol.AppendAcquired(nil, 77))
	if err := wait(t, done); err != nil {
		t.Fatal(err)
	}
	wait(t, fc1.eof)
	// Exclusive, no-wait: WAITING is busy, as TryAcquire.
	r := goAcquire(t.Context(), s, "job", Exclusive, true)
	fc2, _ := v1Only(t, fake)
	fc2.send(protocol.AppendWaiting(nil))
	if rr := wait(t, r); !errors.Is(rr.err, ErrBusy) {
		t.Fatalf("TryAcquire on v1: %v", rr.err)
	}
	wait(t, fc2.eof)
	// Close releases the claims still held.
	r = goAcquire(t.Context(), s, "other", Exclusive, false)
	fc3, _ := v1Only(t, fake)
	fc3.send(protocol.AppendAcquired(nil, 78))
	cl := wait(t, r).cl
	if cl.Token() != 78 {
		t.Fatal(cl.Token())
	}
	s.Close()
	wait(t, fc3.eof)
	if !errors.Is(cl.Err(), nil) {
		t.Fatal(cl.Err())
	}
	if _, err := s.Acquire(t.Context(), "job", Exclusive); !errors.Is(err, ErrSessionClosed) {
		t.Fatal(err)
	}
}

// RefuseOldServer turns a server too old for sessions into
// ErrServerTooOld, which still carries the server's answer.
func TestSessionRefuseOldServer(t *testing.T) {
	fake := newFakeV2(t)
	res := make(chan error, 1)
	go func() {
		_, err := fake.client().OpenSession(t.Context(), SessionOptions{Lease: time.Second, RefuseOldServer: true})
		res <- err
	}()
	v1Only(t, fake)
	err := wait(t, res)
	var se *ServerError
	if !errors.Is(err, ErrServerTooOld) || !errors.Is(err, protocol.ErrUnsupportedVersion) || !errors.As(err, &se) {
		t.Fatalf("OpenSession on a version 1 server: %v; want ErrServerTooOld with the server's *ServerError", err)
	}
}

// A session lost while a RELEASE is on its way still releases the claim
// (the server ends every claim of a closed session): Release reports
// success, since the claim was held until it was called.
func TestSessionReleaseThenSessionLost(t *testing.T) {
	s, fc := openFake(t, 10*time.Second)
	res := goAcquire(t.Context(), s, "job", Exclusive, false)
	f := fc.expect(protocol.TypeClaim)
	fc.send(protocol.AppendGranted(nil, f.Claim, 1))
	cl := wait(t, res).cl
	done := make(chan error, 1)
	go func() { done <- cl.Release(t.Context()) }()
	fc.expect(protocol.TypeRelease)
	fc.send(protocol.AppendSessionError(nil, protocol.CodeShuttingDown, ""))
	if err := wait(t, done); err != nil {
		t.Fatalf("Release: %v", err)
	}
	wait(t, cl.Released()) // Release does not wait for the answer
	if err := cl.Err(); err != nil {
		t.Fatalf("Err: %v", err)
	}
	if !errors.Is(s.Err(), protocol.ErrShuttingDown) {
		t.Fatal(s.Err())
	}
}

// Whatever bytes follow WELCOME, the session never panics or hangs: it
// either lives on or ends with an error, and every claim ends with it.
func FuzzSessionServerBytes(f *testing.F) {
	f.Add(protocol.AppendGranted(nil, 1, 5))
	f.Add(append(protocol.AppendQueued(nil, 1), protocol.AppendPromoted(nil, 1, 7)...))
	f.Add(protocol.AppendRevoked(nil, 1, 2, "x"))
	f.Add(protocol.AppendSessionError(nil, 1, ""))
	f.Add([]byte{0, 0})
	f.Add([]byte{0x02, 0x01, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		fake := newFakeV2(t)
		s, fc := openOn(t, fake.client(), fake, time.Minute)
		res := goAcquire(t.Context(), s, "job", Shared, false)
		fc.expect(protocol.TypeClaim)
		fc.send(b)
		fc.c.Close() // EOF after the bytes: the session must end
		wait(t, s.Lost())
		r := wait(t, res)
		if r.err == nil {
			wait(t, r.cl.Lost())
			if r.cl.Err() == nil {
				t.Fatal("claim still fine after the session ended")
			}
		}
		if s.Err() == nil {
			t.Fatal("session ended without a cause")
		}
	})
}

// A give-up with no held claim (only a queued one) has no work to wait
// for: the connection closes at once, not at CloseBy.
func TestSessionGiveUpWithoutWorkClosesAtOnce(t *testing.T) {
	lease := time.Second
	s, fc := openFake(t, lease)
	res := goAcquire(t.Context(), s, "job", Exclusive, false)
	f := fc.expect(protocol.TypeClaim)
	fc.send(protocol.AppendQueued(nil, f.Claim))
	if r := wait(t, res); !errors.Is(r.err, ErrHeartbeatTimeout) {
		t.Fatalf("queued Acquire: %v", r.err)
	}
	eofAt := fc.waitEOF()
	closeBy := s.CloseBy()
	t.Logf("closed %v before CloseBy", closeBy.Sub(eofAt))
	if !eofAt.Before(closeBy.Add(-lease / 10)) {
		t.Fatalf("closed at CloseBy%+v, want at the give-up, 0.2·lease before it", eofAt.Sub(closeBy))
	}
}

// TestSessionWorkDoesNotStartAfterGiveUpIsDue: when the give-up deadline
// has passed but the reader has not noticed yet (a process frozen between
// the grant and the start of the work, a late netpoller), the work must not
// start: the claim is lost instead. The test holds the reader back by
// moving its read deadline, as a frozen process's late wake-up would.
func TestSessionWorkDoesNotStartAfterGiveUpIsDue(t *testing.T) {
	fake := newFakeV2(t)
	const lease = 300 * time.Millisecond
	type opened struct {
		s   *Session
		err error
	}
	res := make(chan opened, 1)
	go func() {
		s, err := fake.client().OpenSession(t.Context(), SessionOptions{Lease: lease})
		res <- opened{s, err}
	}()
	fc, _ := fake.acceptV2()
	fc.welcome()
	o := <-res
	if o.err != nil {
		t.Fatal(o.err)
	}
	s := o.s
	defer s.Close()
	got := make(chan *Claim, 1)
	go func() {
		cl, err := s.Acquire(t.Context(), "job", Exclusive)
		if err != nil {
			t.Error(err)
		}
		got <- cl
	}()
	claim := fc.expect(protocol.TypeClaim)
	fc.send(protocol.AppendGranted(nil, claim.Claim, 42))
	cl := <-got
	if cl == nil {
		return
	}
	time.Sleep(20 * time.Millisecond) // the reader is back in its read
	s.conn.SetReadDeadline(time.Now().Add(time.Hour))
	time.Sleep(time.Until(s.CloseBy().Add(-lease / 10))) // past anchor + 0.8·lease
	ran := false
	err := cl.run(t.Context(), func(context.Context, uint64) error { ran = true; return nil })
	if ran || !errors.Is(err, ErrHeartbeatTimeout) {
		t.Fatalf("work ran: %v, err %v; want no work and ErrHeartbeatTimeout", ran, err)
	}
	select {
	case <-cl.Lost():
	default:
		t.Fatal("claim not lost")
	}
}
