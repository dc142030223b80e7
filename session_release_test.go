package baton

import (
	"errors"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
)

// Release returns once RELEASE is written, without waiting for the
// server's RELEASED: the claim stops being held at once (Lost closed,
// Err nil), Released tells when the server has applied it, and the id
// is not reused until then.
func TestSessionReleaseDoesNotWaitForReleased(t *testing.T) {
	s, fc := openFake(t, 10*time.Second)
	res := goAcquire(t.Context(), s, "job", Exclusive, false)
	f := fc.expect(protocol.TypeClaim)
	fc.send(protocol.AppendGranted(nil, f.Claim, 1))
	cl := wait(t, res).cl
	released := cl.Released()

	done := make(chan error, 1)
	go func() { done <- cl.Release(t.Context()) }()
	if err := wait(t, done); err != nil { // no RELEASED sent yet
		t.Fatalf("Release: %v", err)
	}
	if rel := fc.expect(protocol.TypeRelease); rel.Claim != f.Claim {
		t.Fatalf("RELEASE(%d), want %d", rel.Claim, f.Claim)
	}
	select {
	case <-cl.Lost():
	default:
		t.Fatal("Lost not closed after Release")
	}
	if err := cl.Err(); err != nil {
		t.Fatalf("Err after Release: %v", err)
	}
	select {
	case <-released:
		t.Fatal("Released closed before RELEASED")
	default:
	}
	if err := cl.Release(t.Context()); err != nil { // idempotent
		t.Fatalf("second Release: %v", err)
	}
	if n := countFrames(fc); n != 0 {
		t.Fatalf("a second Release sent %d more frames", n)
	}

	// While the RELEASE is unanswered its id stays in use.
	res = goAcquire(t.Context(), s, "job", Exclusive, false)
	f2 := fc.expect(protocol.TypeClaim)
	if f2.Claim == f.Claim {
		t.Fatalf("claim id %d reused before its RELEASED", f.Claim)
	}
	fc.send(protocol.AppendReleased(nil, f.Claim))
	wait(t, released)
	if cl.Released() != released {
		t.Fatal("Released returned another channel")
	}
	fc.send(protocol.AppendGranted(nil, f2.Claim, 2))
	if r := wait(t, res); r.err != nil || r.cl.Token() != 2 {
		t.Fatalf("second claim: token %v, %v", r.cl, r.err)
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
}

// countFrames returns how many client frames arrive within a short
// while (none expected).
func countFrames(fc *fakeV2Conn) int {
	n := 0
	for {
		select {
		case <-fc.frames:
			n++
		case <-time.After(50 * time.Millisecond):
			return n
		}
	}
}

// A session lost after Release but before RELEASED: the release went
// through (the server ends every claim of a session that ends), so Err
// stays nil and Released is closed with the session.
func TestSessionReleasedClosedBySessionEnd(t *testing.T) {
	s, fc := openFake(t, 10*time.Second)
	res := goAcquire(t.Context(), s, "job", Exclusive, false)
	f := fc.expect(protocol.TypeClaim)
	fc.send(protocol.AppendGranted(nil, f.Claim, 1))
	cl := wait(t, res).cl
	if err := cl.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	fc.expect(protocol.TypeRelease)
	fc.send(protocol.AppendSessionError(nil, protocol.CodeShuttingDown, ""))
	wait(t, cl.Released())
	wait(t, s.Lost())
	if err := cl.Err(); err != nil {
		t.Fatalf("Err: %v, want nil: Release came first", err)
	}
	if !errors.Is(s.Err(), protocol.ErrShuttingDown) {
		t.Fatal(s.Err())
	}
	// A claim lost before its Release reports why, and Released is closed.
	s2, fc2 := openFake(t, 10*time.Second)
	res = goAcquire(t.Context(), s2, "job", Exclusive, false)
	f = fc2.expect(protocol.TypeClaim)
	fc2.send(protocol.AppendGranted(nil, f.Claim, 1))
	cl = wait(t, res).cl
	fc2.send(protocol.AppendRevoked(nil, f.Claim, protocol.CodeClosedByAdmin, ""))
	wait(t, cl.Lost())
	wait(t, cl.Released())
	var se *ServerError
	if err := cl.Release(t.Context()); !errors.As(err, &se) || se.Code != protocol.CodeClosedByAdmin {
		t.Fatalf("Release after REVOKED: %v", err)
	}
}

// On a real server: after Release, every later request of the same
// session finds the claim released (frames are applied in order), and
// another session is granted the lock once Released is closed.
func TestSessionReleaseOrderReal(t *testing.T) {
	addr := startServer(t)
	a := openReal(t, addr, 10*time.Second, "a")
	b := openReal(t, addr, 10*time.Second, "b")
	ctx := t.Context()
	for i := range 200 {
		cl, err := a.Acquire(ctx, "x", Exclusive)
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.Release(ctx); err != nil {
			t.Fatal(err)
		}
		// The same session: its next TryAcquire is applied after the
		// RELEASE, so the lock is free.
		cl2, err := a.TryAcquire(ctx, "x", Exclusive)
		if err != nil {
			t.Fatalf("cycle %d: TryAcquire on the releasing session: %v", i, err)
		}
		if err := cl2.Release(ctx); err != nil {
			t.Fatal(err)
		}
		wait(t, cl2.Released())
		// Another session, once Released is closed.
		cl3, err := b.TryAcquire(ctx, "x", Exclusive)
		if err != nil {
			t.Fatalf("cycle %d: TryAcquire on another session after Released: %v", i, err)
		}
		if err := cl3.Release(ctx); err != nil {
			t.Fatal(err)
		}
		wait(t, cl3.Released())
	}
}
