package baton

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// startServer runs an in-process baton server on 127.0.0.1 and returns its
// address.
func startServer(t testing.TB) string {
	t.Helper()
	addr, _ := startServerSrv(t)
	return addr
}

// startServerSrv is startServer, also returning the server.
func startServerSrv(t testing.TB) (string, *server.Server) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &server.Server{Logger: slog.New(slog.DiscardHandler)}
	served := make(chan struct{})
	go func() { defer close(served); srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-served
	})
	return ln.Addr().String(), srv
}

// queueDialer tells when a connection it made reads a WAITING frame, so a
// test knows a claim is queued without sleeping.
type queueDialer struct {
	net.Dialer
	queued chan struct{}
	once   sync.Once
}

func newQueueDialer() *queueDialer { return &queueDialer{queued: make(chan struct{})} }

func (d *queueDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := d.Dialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &queueConn{Conn: c, d: d}, nil
}

type queueConn struct {
	net.Conn
	d *queueDialer
}

// Read sees every frame's type byte first: the client reads frames field
// by field.
func (c *queueConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n == 1 && protocol.Type(p[0]) == protocol.TypeWaiting {
		c.d.once.Do(func() { close(c.d.queued) })
	}
	return n, err
}

func (d *queueDialer) wait(t *testing.T) {
	t.Helper()
	select {
	case <-d.queued:
	case <-time.After(fakeTimeout):
		t.Fatal("claim was never queued")
	}
}

// Two Do calls on one lock run strictly one after the other.
func TestRealServerMutualExclusion(t *testing.T) {
	t.Parallel()
	addr := startServer(t)
	var active atomic.Int32
	type span struct {
		start, end time.Time
		token      uint64
	}
	run := func(c *Client, hold <-chan struct{}, started chan<- struct{}, out *span) error {
		return c.Do(t.Context(), "shared", time.Second, func(ctx context.Context, token uint64) error {
			if n := active.Add(1); n != 1 {
				t.Errorf("%d holders at once", n)
			}
			out.start, out.token = time.Now(), token
			close(started)
			<-hold
			out.end = time.Now()
			active.Add(-1)
			return nil
		})
	}
	var a, b span
	holdA, startedA, startedB := make(chan struct{}), make(chan struct{}), make(chan struct{})
	errA, errB := make(chan error, 1), make(chan error, 1)
	go func() { errA <- run(New(Config{Address: addr}), holdA, startedA, &a) }()
	<-startedA
	qd := newQueueDialer()
	holdB := make(chan struct{})
	close(holdB) // B returns at once
	go func() { errB <- run(New(Config{Address: addr, Dialer: qd}), holdB, startedB, &b) }()
	qd.wait(t) // B is queued behind A
	select {
	case <-startedB:
		t.Fatal("B ran while A held the lock")
	default:
	}
	close(holdA)
	if err := result(t, errA); err != nil {
		t.Fatal(err)
	}
	if err := result(t, errB); err != nil {
		t.Fatal(err)
	}
	if !a.end.Before(b.start) {
		t.Errorf("B started %v before A ended", a.end.Sub(b.start))
	}
	if b.token <= a.token {
		t.Errorf("tokens %d then %d: not increasing", a.token, b.token)
	}
	t.Logf("B started %v after A ended; tokens %d, %d", b.start.Sub(a.end), a.token, b.token)
}

// A holder process killed with SIGKILL cannot release, but its kernel
// closes the connection: the waiter runs at once, long before the lease
// (10s) could have expired.
func TestRealServerHolderKilled(t *testing.T) {
	t.Parallel()
	addr := startServer(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=holder", helperAddrEnv+"="+addr)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("holder: %v", err)
	}
	holderToken, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(line), "held "), 10, 64)
	if err != nil {
		t.Fatalf("holder said %q", line)
	}

	qd := newQueueDialer()
	started := make(chan time.Time, 1)
	var token uint64
	done := make(chan error, 1)
	go func() {
		done <- New(Config{Address: addr, Dialer: qd}).Do(t.Context(), "killed-holder", 10*time.Second, func(_ context.Context, tok uint64) error {
			token = tok
			started <- time.Now()
			return nil
		})
	}()
	qd.wait(t)
	killed := time.Now()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := result(t, done); err != nil {
		t.Fatal(err)
	}
	if d := (<-started).Sub(killed); d > time.Second {
		t.Errorf("waiter ran %v after the holder was killed; want at once (lease is 10s)", d)
	} else {
		t.Logf("waiter ran %v after SIGKILL of the holder", d)
	}
	if token <= holderToken {
		t.Errorf("waiter token %d not above holder token %d", token, holderToken)
	}
	io.Copy(io.Discard, out)
}

// blackhole is a TCP proxy that can silently drop everything in both
// directions, closes included, like a network partition.
type blackhole struct {
	ln      net.Listener
	target  string
	dropped atomic.Bool
	mu      sync.Mutex
	conns   []net.Conn
	// silenced are the server-side connections whose client side was
	// cut: they stay open and silent (cutClientSide).
	silenced map[net.Conn]bool
	// muted are client-side connections to which nothing from the
	// server is passed on any more (muteDown).
	muted map[net.Conn]bool
	wg    sync.WaitGroup
}

func newBlackhole(t *testing.T, target string) *blackhole {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &blackhole{ln: ln, target: target}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			p.wg.Go(func() { p.pipe(up, c) })
			p.wg.Go(func() { p.pipe(c, up) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *blackhole) pipe(dst, src net.Conn) {
	buf := make([]byte, 512)
	for {
		n, err := src.Read(buf)
		if p.dropped.Load() {
			if err != nil {
				return // the close is dropped too: dst stays open
			}
			continue
		}
		p.mu.Lock()
		mute := p.muted[dst]
		p.mu.Unlock()
		if n > 0 && !mute {
			dst.Write(buf[:n])
		}
		if err != nil {
			p.mu.Lock()
			silent := p.silenced[dst]
			p.mu.Unlock()
			if !silent {
				dst.Close()
			}
			return
		}
	}
}

// A holder whose traffic is blackholed gives up and has fn cancelled
// before the server's lease ends; the next holder starts after that.
func TestRealServerBlackholedHolder(t *testing.T) {
	t.Parallel()
	const lease = time.Second
	addr := startServer(t)
	proxy := newBlackhole(t, addr)

	holderStarted := make(chan struct{})
	var cancelledAt time.Time
	holderDone := make(chan error, 1)
	go func() {
		holderDone <- New(Config{Address: proxy.ln.Addr().String()}).Do(t.Context(), "partitioned", lease, func(ctx context.Context, _ uint64) error {
			close(holderStarted)
			<-ctx.Done()
			cancelledAt = time.Now()
			return nil
		})
	}()
	<-holderStarted

	qd := newQueueDialer()
	var startedAt time.Time
	waiterDone := make(chan error, 1)
	go func() {
		waiterDone <- New(Config{Address: addr, Dialer: qd}).Do(t.Context(), "partitioned", lease, func(context.Context, uint64) error {
			startedAt = time.Now()
			return nil
		})
	}()
	qd.wait(t)
	partitioned := time.Now()
	proxy.dropped.Store(true)

	if err := result(t, holderDone); !errors.Is(err, ErrHeartbeatTimeout) {
		t.Fatalf("holder: %v, want ErrHeartbeatTimeout", err)
	}
	if err := result(t, waiterDone); err != nil {
		t.Fatal(err)
	}
	if !cancelledAt.Before(startedAt) {
		t.Fatalf("waiter started %v before the holder's fn was cancelled", cancelledAt.Sub(startedAt))
	}
	// The waiter can only start once the server's lease of the holder
	// has run out: at least a lease after the holder's last heartbeat,
	// which was at most lease/4 before the partition.
	if d := startedAt.Sub(partitioned); d < 3*lease/4-50*time.Millisecond {
		t.Errorf("waiter started %v after the partition; the server cannot have expired the holder yet", d)
	}
	t.Logf("partition→holder cancelled %v, →waiter started %v (margin %v)",
		cancelledAt.Sub(partitioned), startedAt.Sub(partitioned), startedAt.Sub(cancelledAt))
}
