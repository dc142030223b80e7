package baton

import (
	"context"
	"errors"
	"github.com/batonlock/baton/internal/rangeapi"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// TestSessionRangeLocks: the range operations of a Session against the
// real server: grant, a conflict naming its holder, query, a blocking set
// promoted across sessions, deadlock, a wait withdrawn by its context,
// flock, release-owner, and a session's close releasing everything.
func TestSessionRangeLocks(t *testing.T) {
	addr := startServer(t)
	a := openReal(t, addr, 5*time.Second, "host-a")
	b := openReal(t, addr, 5*time.Second, "host-b")
	ctx := t.Context()
	w := func(owner, start, end uint64) rangeLock {
		return rangeLock{Key: "f", Owner: owner, Type: protocol.LockWrite, Start: start, End: end}
	}
	t1, err := a.setRangeWait(ctx, w(1, 0, 99), false)
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.setRangeWait(ctx, w(2, 50, protocol.MaxRangeEnd), false)
	var ce *rangeapi.ConflictError
	if !errors.As(err, &ce) || !errors.Is(err, rangeapi.ErrConflict) || ce.Holder.Label != "host-a" || ce.Holder.Owner != 1 || ce.Holder.Session != a.ID() {
		t.Fatalf("conflicting set: %v", err)
	}
	if h, ok, err := b.queryRange(ctx, w(2, 100, 200)); err != nil || ok {
		t.Fatalf("query of free bytes: %v %v %v", h, ok, err)
	}
	got := make(chan error, 1)
	var t2 uint64
	go func() {
		var err error
		t2, err = b.setRangeWait(ctx, w(2, 50, protocol.MaxRangeEnd), true)
		got <- err
	}()
	// b waits (queued now or a moment later); a's unlock lets it in.
	if err := a.unlockRange(ctx, w(1, 0, 99)); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if t2 <= t1 {
		t.Errorf("promoted token %d not above %d", t2, t1)
	}
	// Deadlock: a holds g, b waits for it, a waits for b's f.
	if _, err := a.setRangeWait(ctx, rangeLock{Key: "g", Owner: 1, Type: protocol.LockWrite, End: protocol.MaxRangeEnd}, false); err != nil {
		t.Fatal(err)
	}
	go func() {
		_, err := b.setRangeWait(ctx, rangeLock{Key: "g", Owner: 2, Type: protocol.LockWrite, End: protocol.MaxRangeEnd}, true)
		got <- err
	}()
	// Whichever of the two waits reaches the server second closes the
	// cycle and is refused; the other stays queued.
	actx, acancel := context.WithCancel(ctx)
	defer acancel()
	aGot := make(chan error, 1)
	go func() {
		_, err := a.setRangeWait(actx, w(1, 60, 60), true)
		aGot <- err
	}()
	select {
	case err := <-aGot: // a's wait came second
		if !errors.Is(err, rangeapi.ErrDeadlock) {
			t.Fatalf("a waiting for b's range while b waits for a's: %v (want rangeapi.ErrDeadlock)", err)
		}
		if err := a.releaseOwner(ctx, "g", false, 1); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("b's wait for g after a released: %v", err)
		}
	case err := <-got: // b's wait came second
		if !errors.Is(err, rangeapi.ErrDeadlock) {
			t.Fatalf("b waiting for a's g while a waits for b's range: %v (want rangeapi.ErrDeadlock)", err)
		}
		acancel()
		if err := <-aGot; !errors.Is(err, context.Canceled) {
			t.Fatalf("a's withdrawn wait: %v", err)
		}
		if err := a.releaseOwner(ctx, "g", false, 1); err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("neither wait of the cycle was refused")
	}
	// A wait withdrawn by its context.
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := a.setRangeWait(cctx, w(1, 60, 60), true); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait with a deadline: %v", err)
	}
	// flock is its own namespace; closing b's session releases all.
	fl := rangeLock{Key: "f", Flock: true, Owner: 9, Type: protocol.LockWrite}
	if _, err := b.setRangeWait(ctx, fl, false); err != nil {
		t.Fatal(err)
	}
	go func() {
		_, err := a.setRangeWait(ctx, rangeLock{Key: "f", Flock: true, Owner: 3, Type: protocol.LockRead}, true)
		got <- err
	}()
	b.Close()
	if err := <-got; err != nil {
		t.Fatalf("a's flock after b closed: %v", err)
	}
	if _, err := a.setRangeWait(ctx, w(1, 0, protocol.MaxRangeEnd), false); err != nil {
		t.Fatalf("b's fcntl ranges outlived its session: %v", err)
	}
	if _, err := a.setRangeWait(ctx, rangeLock{Key: "", Owner: 1, Type: protocol.LockWrite}, false); !errors.Is(err, rangeapi.ErrInvalid) {
		t.Fatalf("empty key: %v", err)
	}
}

// TestSetRangeLimit: a set past a server's range-lock cap is
// rangeapi.ErrLimit, at once even with wait (a cap is not a node that cannot
// serve the key for now, which SetRange asks again), and nothing changed.
func TestSetRangeLimit(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &server.Server{Logger: slog.New(slog.DiscardHandler), RangeOwnersPerSession: 1}
	served := make(chan struct{})
	go func() { defer close(served); srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-served })
	s := openReal(t, ln.Addr().String(), 5*time.Second, "capped")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	l := rangeLock{Key: "f", Owner: 1, Type: protocol.LockWrite, End: 9}
	if _, err := s.setRangeWait(ctx, l, false); err != nil {
		t.Fatal(err)
	}
	l.Owner, l.Start, l.End = 2, 20, 29
	if _, err := s.setRangeWait(ctx, l, true); !errors.Is(err, rangeapi.ErrLimit) {
		t.Fatalf("a second owner's set: %v, want rangeapi.ErrLimit", err)
	}
	if h, ok, err := s.queryRange(ctx, rangeLock{Key: "f", Owner: 3, Type: protocol.LockWrite, Start: 20, End: 29}); err != nil || ok {
		t.Fatalf("the refused range is held: %v %v %v", h, ok, err)
	}
}

// denyKeys is an Authorizer that refuses every lock name in its set.
type denyKeys map[string]bool

func (d denyKeys) Allow(_, lock string) bool { return !d[lock] }

// TestSetRangeNotAuthorized: a range set on a key the server's ACL
// refuses returns protocol.ErrNotAuthorized (the mount's EACCES), not a
// protocol violation, and the session lives on.
func TestSetRangeNotAuthorized(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &server.Server{Logger: slog.New(slog.DiscardHandler), Authorizer: denyKeys{"mount:etc/passwd": true}}
	served := make(chan struct{})
	go func() { defer close(served); srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-served })
	s := openReal(t, ln.Addr().String(), 5*time.Second, "refused")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	l := rangeLock{Key: "mount:etc/passwd", Owner: 1, Type: protocol.LockWrite, End: 9}
	if _, err := s.setRangeWait(ctx, l, true); !errors.Is(err, protocol.ErrNotAuthorized) {
		t.Fatalf("a set on a refused key: %v, want ErrNotAuthorized", err)
	}
	l.Key = "mount:home/report"
	if _, err := s.setRangeWait(ctx, l, false); err != nil {
		t.Fatalf("a set on an allowed key after the refusal: %v", err)
	}
}
