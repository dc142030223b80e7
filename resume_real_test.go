package baton

import (
	"context"
	"errors"
	"github.com/batonlock/baton/internal/rangeapi"
	"net"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
)

// Resumable sessions against the real server, in process, through a
// proxy whose connections the test cuts.

// cut closes every connection through the proxy, both ends: the client
// and the server each see their connection end.
func (p *blackhole) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// cutClientSide closes the client's end of every connection through the
// proxy and leaves the server's end open and silent: the client sees
// its connection end, the server hears nothing (a link that died without
// a reset reaching the server). The server keeps a detach session, which
// the client resumes. (A cut of both ends, cut, is a reset the server
// sees: it ends a detach session at once.)
func (p *blackhole) cutClientSide() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.silenced == nil {
		p.silenced = map[net.Conn]bool{}
	}
	for i, c := range p.conns {
		if i%2 == 1 {
			p.silenced[c] = true // the server-side conn of pair i/2
		}
	}
	for i, c := range p.conns {
		if i%2 == 0 {
			c.Close()
		}
	}
	p.conns = nil
}

// muteDown stops passing the server's bytes to the clients of the
// connections through the proxy now; the client's still reach the
// server: a server that seems silent to its client.
func (p *blackhole) muteDown() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.muted == nil {
		p.muted = map[net.Conn]bool{}
	}
	for i, c := range p.conns {
		if i%2 == 0 {
			p.muted[c] = true
		}
	}
}

// waitResumed waits until s runs on a session other than id.
func waitResumed(t *testing.T, s *Session, id uint64) {
	t.Helper()
	deadline := time.Now().Add(fakeTimeout)
	for s.ID() == id {
		if time.Now().After(deadline) || s.Err() != nil {
			t.Fatalf("not resumed: %v", s.Err())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The connection of a resumable holder is killed while Do's function
// runs: the session resumes, the function's context is never cancelled,
// its token is unchanged, and nobody else gets the lock meanwhile.
func TestResumeRealConnectionKilled(t *testing.T) {
	t.Parallel()
	addr := startServer(t)
	proxy := newBlackhole(t, addr)
	const lease = 3 * time.Second
	s, err := New(Config{Address: proxy.ln.Addr().String()}).OpenSession(t.Context(),
		SessionOptions{Lease: lease, Label: "resumable", Resume: ResumeOn})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.Resumable() {
		t.Fatal("the server did not make the session resumable")
	}
	other := openReal(t, addr, lease, "other")

	started, finish := make(chan uint64, 1), make(chan struct{})
	cancelled := make(chan error, 1)
	done := make(chan error, 1)
	go func() {
		done <- s.Do(t.Context(), "job", Exclusive, func(ctx context.Context, token uint64) error {
			stop := context.AfterFunc(ctx, func() { cancelled <- context.Cause(ctx) })
			defer stop()
			started <- token
			<-finish
			return nil
		})
	}()
	token := wait(t, started)
	first := s.ID()
	broke := time.Now()
	proxy.cutClientSide()
	// The server keeps the claim while the client reconnects.
	if _, err := other.TryAcquire(t.Context(), "job", Exclusive); !errors.Is(err, ErrBusy) {
		t.Fatalf("lock free after the cut: %v", err)
	}
	waitResumed(t, s, first)
	// Resumed: confirmed by a PING on the new session.
	deadline := time.Now().Add(fakeTimeout)
	for {
		s.mu.Lock()
		anchor := s.rule.Anchor()
		reasserting := false
		for _, cl := range s.claims {
			reasserting = reasserting || cl.reassert
		}
		s.mu.Unlock()
		if anchor.After(broke) && !reasserting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the re-assertion was never answered")
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("resumed %v after the cut, session %d -> %d", time.Since(broke).Round(time.Millisecond), first, s.ID())
	if _, err := other.TryAcquire(t.Context(), "job", Exclusive); !errors.Is(err, ErrBusy) {
		t.Fatalf("lock free after the resume: %v", err)
	}
	select {
	case cause := <-cancelled:
		t.Fatalf("fn's context cancelled: %v", cause)
	default:
	}
	close(finish)
	if err := wait(t, done); err != nil {
		t.Fatalf("Do: %v", err)
	}
	// Released on the resumed session: the lock passes on.
	cl, err := other.Acquire(t.Context(), "job", Exclusive)
	if err != nil {
		t.Fatal(err)
	}
	if cl.Token() <= token {
		t.Fatalf("next token %d not above %d", cl.Token(), token)
	}
	cl.Release(t.Context())
	if s.Err() != nil {
		t.Fatalf("after Do: session %v", s.Err())
	}
}

// The default stays: a session that is not resumable loses its claims
// when its connection is killed, and the lock passes on at once.
func TestResumeRealDefaultReleasesAtOnce(t *testing.T) {
	t.Parallel()
	addr := startServer(t)
	proxy := newBlackhole(t, addr)
	const lease = 5 * time.Second
	s := openReal(t, proxy.ln.Addr().String(), lease, "plain")
	cl, err := s.Acquire(t.Context(), "job", Exclusive)
	if err != nil {
		t.Fatal(err)
	}
	other := openReal(t, addr, lease, "other")
	w := goAcquire(t.Context(), other, "job", Exclusive, false)
	waitAllQueued(t, other, 1)
	start := time.Now()
	proxy.cut()
	r := wait(t, w)
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Logf("granted %v after the cut", time.Since(start))
	if d := time.Since(start); d > lease/2 {
		t.Fatalf("granted %v after the cut, not at once", d)
	}
	wait(t, cl.Lost())
	if !errors.Is(cl.Err(), ErrConnectionClosed) {
		t.Fatalf("claim: %v", cl.Err())
	}
}

// Close of a resumable session releases its claims on the server at
// once, although the server keeps a resumable session's claims when its
// connection closes.
func TestResumeRealCloseReleases(t *testing.T) {
	t.Parallel()
	addr := startServer(t)
	const lease = 10 * time.Second
	s, err := New(Config{Address: addr}).OpenSession(t.Context(), SessionOptions{Lease: lease, Resume: ResumeOn})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(t.Context(), "job", Exclusive); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(t.Context(), "db", Shared); err != nil {
		t.Fatal(err)
	}
	other := openReal(t, addr, lease, "other")
	start := time.Now()
	s.Close()
	for _, name := range []string{"job", "db"} {
		cl, err := other.TryAcquire(t.Context(), name, Exclusive)
		if err != nil {
			t.Fatalf("%s after Close: %v", name, err)
		}
		cl.Release(t.Context())
	}
	t.Logf("Close and two claims elsewhere took %v", time.Since(start))
}

// A server that shuts down ends its sessions with ERROR 0x01 and their
// claims with them: the resumable session resumes on the next address,
// whose server does not have the claim, and the claim is lost there
// with ErrReassertRefused; the session lives on.
func TestResumeRealShutdownRefused(t *testing.T) {
	t.Parallel()
	addrA, srvA := startServerSrv(t)
	addrB := startServer(t)
	s, err := New(Config{Address: addrA}).OpenSession(t.Context(),
		SessionOptions{Lease: 3 * time.Second, Resume: ResumeOn, Addrs: []string{addrA, addrB}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	started, done := doUntilLost(t, s, "job")
	wait(t, started)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	srvA.Shutdown(ctx)
	err = wait(t, done)
	if !errors.Is(err, ErrReassertRefused) || !errors.Is(err, protocol.ErrReassertRefused) {
		t.Fatalf("Do: %v", err)
	}
	if s.Err() != nil {
		t.Fatalf("session: %v", s.Err())
	}
	cl, err := s.Acquire(t.Context(), "job", Exclusive) // on server B
	if err != nil {
		t.Fatal(err)
	}
	cl.Release(t.Context())
}

// A resumable session that took range locks resumes after a cut and
// re-asserts them (RangeResume) after its claims: the server kept them,
// answers done, and the session goes on holding them.
func TestResumeRealRangeLocksReasserted(t *testing.T) {
	t.Parallel()
	addr := startServer(t)
	proxy := newBlackhole(t, addr)
	s, err := New(Config{Address: proxy.ln.Addr().String()}).OpenSession(t.Context(),
		SessionOptions{Lease: 3 * time.Second, Resume: ResumeOn})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := rangeLock{Key: "f", Owner: 1, Type: protocol.LockWrite, End: 9}
	if _, err := s.setRangeWait(t.Context(), l, false); err != nil {
		t.Fatal(err)
	}
	cl, err := s.Acquire(t.Context(), "job", Exclusive)
	if err != nil {
		t.Fatal(err)
	}
	id := s.ID()
	proxy.cutClientSide()
	deadline := time.Now().Add(fakeTimeout)
	for s.Err() == nil && (s.ID() == id || !s.rangesConfirmed()) {
		if time.Now().After(deadline) {
			t.Fatal("neither resumed nor ended")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := s.Err(); err != nil {
		t.Fatalf("the session ended instead of keeping its range lock: %v", err)
	}
	if cl.Err() != nil || s.mirrorLen() != 1 {
		t.Fatalf("claim %v, %d ranges believed", cl.Err(), s.mirrorLen())
	}
	other := openReal(t, addr, 3*time.Second, "other")
	if _, err := other.setRangeWait(t.Context(), rangeLock{Key: "f", Owner: 2, Type: protocol.LockWrite, Start: 5, End: 5}, false); !errors.Is(err, rangeapi.ErrConflict) {
		t.Fatalf("another session's set over the kept lock: %v", err)
	}
}

// A connection reset on the way (the proxy closes both ends) is, to the
// server, the death of a client that promised DETACH: the waiter is
// granted at once, and the holder's re-assertion is refused.
func TestResumeRealResetReleases(t *testing.T) {
	t.Parallel()
	addr := startServer(t)
	proxy := newBlackhole(t, addr)
	const lease = 5 * time.Second
	s, err := New(Config{Address: proxy.ln.Addr().String()}).OpenSession(t.Context(),
		SessionOptions{Lease: lease, Label: "resumable", Resume: ResumeOn})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cl, err := s.Acquire(t.Context(), "job", Exclusive)
	if err != nil {
		t.Fatal(err)
	}
	other := openReal(t, addr, lease, "other")
	w := goAcquire(t.Context(), other, "job", Exclusive, false)
	waitAllQueued(t, other, 1)
	start := time.Now()
	proxy.cut()
	if r := wait(t, w); r.err != nil {
		t.Fatal(r.err)
	}
	if d := time.Since(start); d > lease/5 {
		t.Fatalf("granted %v after the reset, want at once", d)
	}
	wait(t, cl.Lost())
	if !errors.Is(cl.Err(), ErrReassertRefused) {
		t.Fatalf("claim: %v, want its re-assertion refused", cl.Err())
	}
}

// A holder whose server seems silent (its answers stop reaching it)
// leaves the connection on purpose after a quarter lease: it says DETACH
// first, which still reaches the server, so the server keeps the claim
// rather than taking the FIN that follows for the client's death, and
// the re-assertion on a new connection keeps the lock and its token.
func TestResumeRealSilentServerDetaches(t *testing.T) {
	t.Parallel()
	addr := startServer(t)
	proxy := newBlackhole(t, addr)
	const lease = 2 * time.Second
	s, err := New(Config{Address: proxy.ln.Addr().String()}).OpenSession(t.Context(),
		SessionOptions{Lease: lease, Label: "resumable", Resume: ResumeOn})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cl, err := s.Acquire(t.Context(), "job", Exclusive)
	if err != nil {
		t.Fatal(err)
	}
	token, first := cl.Token(), s.ID()
	other := openReal(t, addr, 10*time.Second, "other")
	w := goAcquire(t.Context(), other, "job", Exclusive, false)
	waitAllQueued(t, other, 1)
	proxy.muteDown()
	waitResumed(t, s, first)
	// Confirmed on the new session: its re-assertion was granted.
	deadline := time.Now().Add(fakeTimeout)
	for confirmed := false; !confirmed; {
		s.mu.Lock()
		confirmed = !cl.reassert
		s.mu.Unlock()
		if time.Now().After(deadline) || cl.Err() != nil {
			t.Fatalf("not re-asserted: %v", cl.Err())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if cl.Err() != nil || cl.Token() != token {
		t.Fatalf("claim %v, token %d (was %d)", cl.Err(), cl.Token(), token)
	}
	select {
	case r := <-w:
		t.Fatalf("the waiter was granted while the holder kept its claim: %v", r.err)
	default:
	}
}
