package baton

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/clientrule"
	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// Tests of Session against the real server, in process.

func openReal(t testing.TB, addr string, lease time.Duration, label string) *Session {
	t.Helper()
	s, err := New(Config{Address: addr}).OpenSession(context.Background(), SessionOptions{Lease: lease, Label: label})
	if err != nil {
		t.Fatal(err)
	}
	if s.version() != 2 {
		t.Fatalf("the server answered version %d", s.version())
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestSessionRealModes(t *testing.T) {
	addr := startServer(t)
	a := openReal(t, addr, 5*time.Second, "a")
	b := openReal(t, addr, 5*time.Second, "b")
	ctx := t.Context()

	// Shared holders coexist, each with its own token; exclusive waits.
	r1, err := a.Acquire(ctx, "db", Shared)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := b.Acquire(ctx, "db", Shared)
	if err != nil {
		t.Fatal(err)
	}
	if r2.Token() <= r1.Token() {
		t.Fatalf("tokens %d then %d", r1.Token(), r2.Token())
	}
	if _, err := b.TryAcquire(ctx, "db", Exclusive); !errors.Is(err, ErrBusy) {
		t.Fatalf("TryAcquire exclusive under readers: %v", err)
	}
	w := goAcquire(ctx, b, "db", Exclusive, false)
	waitAllQueued(t, b, 1)
	// A later reader does not overtake the queued writer.
	if _, err := a.TryAcquire(ctx, "db", Shared); !errors.Is(err, ErrBusy) {
		t.Fatalf("reader overtook a queued writer: %v", err)
	}
	if err := r1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-w:
		t.Fatalf("writer granted under a reader: %v", r.err)
	case <-time.After(20 * time.Millisecond):
	}
	if err := r2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wr := wait(t, w)
	if wr.err != nil || wr.cl.Token() <= r2.Token() {
		t.Fatalf("writer: %v %v", wr.err, wr.cl)
	}
	wr.cl.Release(ctx)

	// Semaphore: at most N; a different N or a mode mix is refused and
	// the session lives on.
	var held []*Claim
	for range 3 {
		cl, err := a.TryAcquire(ctx, "pool", Semaphore(3))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, cl)
	}
	if _, err := b.TryAcquire(ctx, "pool", Semaphore(3)); !errors.Is(err, ErrBusy) {
		t.Fatalf("fourth holder of a semaphore(3): %v", err)
	}
	if _, err := b.Acquire(ctx, "pool", Semaphore(4)); !errors.Is(err, protocol.ErrLimitMismatch) {
		t.Fatalf("other limit: %v", err)
	}
	if _, err := b.Acquire(ctx, "pool", Exclusive); !errors.Is(err, protocol.ErrModeConflict) {
		t.Fatalf("mode mix: %v", err)
	}
	for _, cl := range held {
		if err := cl.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if a.Err() != nil || b.Err() != nil {
		t.Fatal(a.Err(), b.Err())
	}
}

// A version 1 client and version 2 claims share one FIFO.
func TestSessionRealWithV1Client(t *testing.T) {
	addr := startServer(t)
	s := openReal(t, addr, 5*time.Second, "v2")
	ctx := t.Context()
	r, err := s.Acquire(ctx, "job", Shared)
	if err != nil {
		t.Fatal(err)
	}
	v1 := make(chan error, 1)
	var v1Token atomic.Uint64
	go func() {
		v1 <- New(Config{Address: addr}).Do(ctx, "job", 5*time.Second, func(ctx context.Context, token uint64) error {
			v1Token.Store(token)
			return nil
		})
	}()
	// Wait until the v1 claim is queued: a shared no-wait claim is then
	// busy (it would overtake the queued v1 writer).
	deadline := time.Now().Add(fakeTimeout)
	for {
		cl, err := s.TryAcquire(ctx, "job", Shared)
		if errors.Is(err, ErrBusy) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		cl.Release(ctx)
		if time.Now().After(deadline) {
			t.Fatal("the v1 claim never queued")
		}
		time.Sleep(time.Millisecond)
	}
	later := goAcquire(ctx, s, "job", Shared, false)
	r.Release(ctx)
	if err := wait(t, v1); err != nil {
		t.Fatal(err)
	}
	lr := wait(t, later)
	if lr.err != nil || lr.cl.Token() <= v1Token.Load() {
		t.Fatalf("later reader: %v, token %v after v1's %d", lr.err, lr.cl, v1Token.Load())
	}
}

// lockChecker records holders per name and fails on a conflict or a
// token that goes back.
type lockChecker struct {
	mu        sync.Mutex
	readers   map[string]int
	writer    map[string]bool
	lastW     map[string]uint64 // token of the last exclusive grant
	maxTok    map[string]uint64 // largest token granted so far
	grants    atomic.Int64
	conflicts []string
}

func newLockChecker() *lockChecker {
	return &lockChecker{readers: map[string]int{}, writer: map[string]bool{}, lastW: map[string]uint64{}, maxTok: map[string]uint64{}}
}

func (c *lockChecker) enter(name string, m Mode, token uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.grants.Add(1)
	bad := func(format string, args ...any) { c.conflicts = append(c.conflicts, fmt.Sprintf(format, args...)) }
	if c.writer[name] {
		bad("%s: %v holder %d while a writer holds", name, m, token)
	}
	if m == Exclusive {
		// A writer excludes everyone: every grant before it has ended.
		if token <= c.maxTok[name] {
			bad("%s: writer token %d not above %d, the largest granted before", name, token, c.maxTok[name])
		}
		if c.readers[name] > 0 {
			bad("%s: writer %d while %d readers hold", name, token, c.readers[name])
		}
		c.writer[name] = true
		c.lastW[name] = token
	} else {
		// Concurrent readers start their work in any order, but every
		// reader comes after the last writer.
		if token <= c.lastW[name] {
			bad("%s: reader token %d not above the last writer's, %d", name, token, c.lastW[name])
		}
		c.readers[name]++
	}
	c.maxTok[name] = max(c.maxTok[name], token)
}

func (c *lockChecker) leave(name string, m Mode) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m == Exclusive {
		c.writer[name] = false
	} else {
		c.readers[name]--
	}
}

// 100 goroutines on one session and 20 sessions contend for shared and
// exclusive claims on a few names: never two conflicting holders, tokens
// strictly increasing per name.
func TestSessionRealContention(t *testing.T) {
	addr := startServer(t)
	sessions := []*Session{openReal(t, addr, 5*time.Second, "shared-session")}
	for i := range 20 {
		sessions = append(sessions, openReal(t, addr, 5*time.Second, fmt.Sprint("s", i)))
	}
	chk := newLockChecker()
	names := []string{"n0", "n1", "n2"}
	const rounds = 30
	var wg sync.WaitGroup
	worker := func(s *Session, seed int) {
		defer wg.Done()
		for i := range rounds {
			name := names[(seed+i)%len(names)]
			m := Shared
			if (seed+i)%4 == 0 {
				m = Exclusive
			}
			err := s.Do(t.Context(), name, m, func(ctx context.Context, token uint64) error {
				chk.enter(name, m, token)
				defer chk.leave(name, m)
				if i%5 == 0 {
					time.Sleep(100 * time.Microsecond)
				}
				return nil
			})
			if err != nil {
				t.Error(err)
				return
			}
		}
	}
	start := time.Now()
	for g := range 100 { // 100 goroutines on one session
		wg.Add(1)
		go worker(sessions[0], g)
	}
	for i, s := range sessions[1:] { // 20 sessions, 2 goroutines each
		for g := range 2 {
			wg.Add(1)
			go worker(s, 1000+2*i+g)
		}
	}
	wg.Wait()
	t.Logf("%d grants in %v", chk.grants.Load(), time.Since(start))
	for _, c := range chk.conflicts {
		t.Error(c)
	}
	if want := int64(140 * rounds); chk.grants.Load() != want {
		t.Fatalf("%d grants, want %d", chk.grants.Load(), want)
	}
}

// A writer is not starved behind a stream of readers that overlap
// without pause: once it is queued, no reader that came later is granted
// before it.
func TestSessionRealWriterNotStarved(t *testing.T) {
	addr := startServer(t)
	rs := openReal(t, addr, 5*time.Second, "readers")
	ws := openReal(t, addr, 5*time.Second, "writer")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var afterWriter atomic.Int64 // readers granted after the writer queued
	var readerGrants atomic.Int64
	var writerQueued, writerGranted atomic.Bool
	enough := make(chan struct{})
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				queuedBefore := writerQueued.Load()
				err := rs.Do(t.Context(), "x", Shared, func(ctx context.Context, token uint64) error {
					if queuedBefore && !writerGranted.Load() {
						afterWriter.Add(1)
					}
					if readerGrants.Add(1) == 50 {
						close(enough)
					}
					time.Sleep(2 * time.Millisecond)
					return nil
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	// Let the stream of readers run, then queue the writer; readers that
	// ask after its QUEUED arrived must not be granted before it.
	wait(t, enough)
	start := time.Now()
	res := make(chan error, 1)
	go func() {
		res <- ws.Do(t.Context(), "x", Exclusive, func(ctx context.Context, token uint64) error {
			writerGranted.Store(true)
			return nil
		})
	}()
	// The writer queues behind the readers, unless it came in a gap
	// between them and was granted at once (then there is nothing to
	// check but its grant).
	for deadline := time.Now().Add(fakeTimeout); !writerGranted.Load(); time.Sleep(time.Millisecond) {
		ws.mu.Lock()
		queued := 0
		for _, cl := range ws.claims {
			if st, _ := ws.rule.Claim(cl.id); st == clientrule.ClaimQueued {
				queued++
			}
		}
		ws.mu.Unlock()
		if queued == 1 {
			writerQueued.Store(true)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the writer was neither queued nor granted")
		}
	}
	err := wait(t, res)
	waited := time.Since(start)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("writer waited %v behind 8 looping readers", waited)
	if n := afterWriter.Load(); n != 0 {
		t.Fatalf("%d readers that asked after the writer was queued were granted before it", n)
	}
	if waited > 2*time.Second {
		t.Fatalf("writer waited %v", waited)
	}
}

// The loss of a session cancels the function of every claim on it.
func TestSessionRealLossCancelsEveryFn(t *testing.T) {
	addr, srv := startServerSrv(t)
	s := openReal(t, addr, 5*time.Second, "lost")
	const n = 50
	started := make(chan struct{}, n)
	errs := make(chan error, n)
	for i := range n {
		go func() {
			errs <- s.Do(t.Context(), fmt.Sprint("job", i), Exclusive, func(ctx context.Context, token uint64) error {
				started <- struct{}{}
				<-ctx.Done()
				return context.Cause(ctx)
			})
		}()
	}
	for range n {
		wait(t, started)
	}
	go srv.Shutdown(context.Background())
	for range n {
		if err := wait(t, errs); !errors.Is(err, protocol.ErrShuttingDown) {
			t.Fatalf("Do: %v", err)
		}
	}
}

// A child process holding 1,000 claims on one session is killed with
// SIGKILL: every claim queued behind them on another session is granted
// within milliseconds.
func TestSessionRealKilledHolderPromotesWaiters(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	addr := startServer(t)
	const n = 1000
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=session-holder", helperAddrEnv+"="+addr, fmt.Sprintf("BATON_TEST_HELPER_CLAIMS=%d", n))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "held") {
		t.Fatalf("helper: %q %v", line, err)
	}
	s := openReal(t, addr, 10*time.Second, "waiter")
	// Queue one claim behind each held one; each must be busy now.
	if _, err := s.TryAcquire(t.Context(), "held-0", Exclusive); !errors.Is(err, ErrBusy) {
		t.Fatalf("held-0 not held by the child: %v", err)
	}
	var wg sync.WaitGroup
	granted := make(chan time.Time, n)
	queued := make(chan struct{}, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			queued <- struct{}{}
			cl, err := s.Acquire(t.Context(), fmt.Sprint("held-", i), Exclusive)
			if err != nil {
				t.Error(err)
				return
			}
			granted <- time.Now()
			cl.Release(t.Context())
		}()
	}
	for range n {
		<-queued
	}
	// Every CLAIM is answered QUEUED before the kill: a PING round trip
	// behind them proves it (answers come in order).
	waitAllQueued(t, s, n)
	killed := time.Now()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var first, last time.Time
	for range n {
		select {
		case at := <-granted:
			if first.IsZero() {
				first = at
			}
			last = at
		case <-time.After(fakeTimeout):
			t.Fatal("not every waiter was promoted")
		}
	}
	wg.Wait()
	d := last.Sub(killed)
	t.Logf("first waiter promoted %v, all %d %v after SIGKILL of the holder", first.Sub(killed), n, d)
	if d > 2*time.Second {
		t.Fatalf("promotion took %v", d)
	}
}

// waitAllQueued waits until the session has n claims queued.
func waitAllQueued(t *testing.T, s *Session, n int) {
	t.Helper()
	deadline := time.Now().Add(fakeTimeout)
	for {
		s.mu.Lock()
		q := 0
		for _, cl := range s.claims {
			if st, _ := s.rule.Claim(cl.id); st == clientrule.ClaimQueued {
				q++
			}
		}
		s.mu.Unlock()
		if q == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d claims queued", q, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// runSessionHolder is the helper process of the kill test: it takes n
// exclusive claims on one session, prints "held", and waits to be killed.
func runSessionHolder(addr string, n int) {
	s, err := New(Config{Address: addr}).OpenSession(context.Background(), SessionOptions{Lease: 10 * time.Second, Label: "holder"})
	if err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		os.Exit(1)
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Acquire(context.Background(), fmt.Sprint("held-", i), Exclusive); err != nil {
				fmt.Fprintln(os.Stderr, "holder:", err)
				os.Exit(1)
			}
		}()
	}
	wg.Wait()
	fmt.Println("held")
	time.Sleep(time.Hour)
}

// A Session speaks TLS through the Client's *tls.Dialer; a certificate
// that fails verification is a permanent error.
func TestSessionRealTLS(t *testing.T) {
	cert, pool := selfSigned(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &server.Server{
		Logger:    slog.New(slog.DiscardHandler),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}},
	}
	served := make(chan struct{})
	go func() { defer close(served); srv.Serve(ln) }()
	defer func() { srv.Shutdown(context.Background()); <-served }()
	addr := ln.Addr().String()

	c := New(Config{Address: addr, Dialer: &tls.Dialer{Config: &tls.Config{RootCAs: pool}}})
	s, err := c.OpenSession(t.Context(), SessionOptions{Lease: 5 * time.Second, Label: "tls"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Do(t.Context(), "tls", Shared, func(context.Context, uint64) error { return nil }); err != nil || s.version() != 2 {
		t.Fatalf("Do over TLS: %v (version %d)", err, s.version())
	}
	untrusting := New(Config{Address: addr, Dialer: &tls.Dialer{Config: &tls.Config{RootCAs: x509.NewCertPool()}}})
	_, err = untrusting.OpenSession(t.Context(), SessionOptions{Lease: 5 * time.Second})
	var cv *tls.CertificateVerificationError
	if !errors.As(err, &cv) || Temporary(err) {
		t.Fatalf("OpenSession with an untrusted certificate: %v (Temporary %v)", err, Temporary(err))
	}
}

// cancelConn cancels a context once the opening's answer (WELCOME, 12
// bytes) has been read, and holds the context's "deadline in the past"
// until the opening has cleared its deadline: the worst order for a
// cancellation that races with the end of OpenSession.
type cancelConn struct {
	net.Conn
	cancel   context.CancelFunc
	read     int
	cleared  chan struct{} // closed when the zero deadline was set
	past     chan struct{} // closed when a past deadline was applied
	closed   chan struct{}
	clearOne sync.Once
	closeOne sync.Once
}

func (c *cancelConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.read < 12 && c.read+n >= 12 {
		c.cancel()
	}
	c.read += n
	return n, err
}

func (c *cancelConn) SetDeadline(t time.Time) error {
	if t.IsZero() {
		err := c.Conn.SetDeadline(t)
		c.clearOne.Do(func() { close(c.cleared) })
		return err
	}
	if t.Before(time.Now()) {
		select {
		case <-c.cleared:
		case <-c.closed:
		case <-time.After(fakeTimeout):
		}
		defer close(c.past)
	}
	return c.Conn.SetDeadline(t)
}

func (c *cancelConn) Close() error {
	c.closeOne.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

type cancelDialer struct{ conn *cancelConn }

func (d *cancelDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	d.conn.Conn = c
	return d.conn, nil
}

// A context cancelled just as the opening completes either fails
// OpenSession or leaves a healthy session; never a session whose
// connection carries the cancellation's deadline in the past.
func TestSessionOpenCancelRace(t *testing.T) {
	addr := startServer(t)
	ctx, cancel := context.WithCancel(t.Context())
	d := &cancelDialer{conn: &cancelConn{cancel: cancel, cleared: make(chan struct{}), past: make(chan struct{}), closed: make(chan struct{})}}
	s, err := New(Config{Address: addr, Dialer: d}).OpenSession(ctx, SessionOptions{Lease: 5 * time.Second})
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("OpenSession: %v", err)
		}
		<-d.conn.past // the watch's late deadline hit a closed connection
		return
	}
	defer s.Close()
	select {
	case <-d.conn.past:
	case <-time.After(200 * time.Millisecond): // the watch never ran: fine
	}
	cl, err := s.Acquire(t.Context(), "job", Exclusive)
	if err != nil {
		t.Fatalf("session opened but then: %v", err)
	}
	cl.Release(t.Context())
}

// An administrator's force-release of one claim (by its token) cancels
// that claim's work only; the session and its other claims live on, and
// the waiter behind it is promoted.
func TestSessionRealForceReleaseOneClaim(t *testing.T) {
	addr, srv := startServerSrv(t)
	s := openReal(t, addr, 5*time.Second, "revoked")
	other := openReal(t, addr, 5*time.Second, "waiter")
	a, err := s.Acquire(t.Context(), "a", Exclusive)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Acquire(t.Context(), "b", Shared)
	if err != nil {
		t.Fatal(err)
	}
	w := goAcquire(t.Context(), other, "a", Exclusive, false)
	waitAllQueued(t, other, 1)
	if err := srv.ForceReleaseClaimBy("a", server.ClaimRef{Token: a.Token()}, server.Peer{}); err != nil {
		t.Fatal(err)
	}
	wait(t, a.Lost())
	if !errors.Is(a.Err(), protocol.ErrClosedByAdmin) {
		t.Fatalf("revoked claim: %v", a.Err())
	}
	if r := wait(t, w); r.err != nil || r.cl.Token() <= a.Token() {
		t.Fatalf("waiter: %v", r.err)
	}
	select {
	case <-b.Lost():
		t.Fatalf("the other claim was lost: %v", b.Err())
	default:
	}
	if err := b.Release(t.Context()); err != nil || s.Err() != nil {
		t.Fatalf("release of the other claim: %v, session %v", err, s.Err())
	}
	// The revoked claim's Release reports the revocation and sends nothing.
	if err := a.Release(t.Context()); !errors.Is(err, protocol.ErrClosedByAdmin) {
		t.Fatal(err)
	}
}
