package ranges_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/ranges"
	"github.com/batonlock/baton/server"
)

func startServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &server.Server{Logger: slog.New(slog.DiscardHandler)}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Shutdown(context.Background())
		<-done
	})
	return ln.Addr().String()
}

func openSession(t *testing.T, addr, label string) *baton.Session {
	t.Helper()
	s, err := baton.New(baton.Config{Address: addr}).OpenSession(t.Context(),
		baton.SessionOptions{Lease: 5 * time.Second, Label: label})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// The operations reach the session and come back in this package's
// types: a conflict is a *ConflictError naming the holder, and matches
// ErrConflict.
func TestLocker(t *testing.T) {
	t.Parallel()
	addr := startServer(t)
	ctx := t.Context()
	a, b := ranges.New(openSession(t, addr, "a")), ranges.New(openSession(t, addr, "b"))
	l := ranges.Lock{Key: "/f", Owner: 1, Type: ranges.WriteLock, Start: 10, End: ranges.ToEnd}
	if tok, err := a.Set(ctx, l, false); err != nil || tok == 0 {
		t.Fatalf("a's set: token %d, %v", tok, err)
	}
	mine := ranges.Lock{Key: "/f", Owner: 2, Type: ranges.ReadLock, Start: 0, End: 20}
	_, err := b.Set(ctx, mine, false)
	var ce *ranges.ConflictError
	if !errors.As(err, &ce) || !errors.Is(err, ranges.ErrConflict) {
		t.Fatalf("b's conflicting set: %v; want a *ranges.ConflictError", err)
	}
	if h := ce.Holder; h.Type != ranges.WriteLock || h.Owner != 1 || h.Label != "a" || h.Start != 10 || h.End != ranges.ToEnd {
		t.Fatalf("conflict's holder %+v", h)
	}
	if h, found, err := b.Query(ctx, mine); err != nil || !found || h.Type != ranges.WriteLock || h.Owner != 1 {
		t.Fatalf("b's query: %+v %v %v", h, found, err)
	}
	if err := a.Unlock(ctx, l); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Set(ctx, mine, false); err != nil {
		t.Fatalf("b's set after a unlocked: %v", err)
	}
	if err := b.ReleaseOwner(ctx, "/f", false, 2); err != nil {
		t.Fatal(err)
	}
	if _, found, err := a.Query(ctx, ranges.Lock{Key: "/f", Owner: 1, Type: ranges.WriteLock, End: ranges.ToEnd}); err != nil || found {
		t.Fatalf("a's query after b released its owner: found %v, %v", found, err)
	}
	select {
	case <-a.Lost():
		t.Fatal("a's Lost closed while the session lives")
	default:
	}
}

// A Locker of no session refuses every operation with ErrNoSession
// instead of crashing.
func TestLockerNoSession(t *testing.T) {
	t.Parallel()
	r := ranges.New(nil)
	l := ranges.Lock{Key: "/f", Type: ranges.WriteLock}
	if _, err := r.Set(t.Context(), l, true); !errors.Is(err, ranges.ErrNoSession) {
		t.Fatalf("Set: %v", err)
	}
	if err := r.Unlock(t.Context(), l); !errors.Is(err, ranges.ErrNoSession) {
		t.Fatalf("Unlock: %v", err)
	}
	if _, _, err := r.Query(t.Context(), l); !errors.Is(err, ranges.ErrNoSession) {
		t.Fatalf("Query: %v", err)
	}
	if err := r.ReleaseOwner(t.Context(), "/f", false, 1); !errors.Is(err, ranges.ErrNoSession) {
		t.Fatalf("ReleaseOwner: %v", err)
	}
	<-r.Lost() // closed: nothing is held
}

func TestLockTypeString(t *testing.T) {
	if ranges.ReadLock.String() != "read" || ranges.WriteLock.String() != "write" || ranges.LockType(9).String() != "LockType(9)" {
		t.Fatal(ranges.ReadLock, ranges.WriteLock, ranges.LockType(9))
	}
}
