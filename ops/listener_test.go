package ops_test

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/batonlock/baton/ops"
)

// TestLimitListener: at the cap Accept waits until an accepted connection
// closes; Close ends a waiting Accept.
func TestLimitListener(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := ops.LimitListener(raw, 2)
	accepted := make(chan net.Conn, 3)
	acceptErr := make(chan error, 1)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				acceptErr <- err
				return
			}
			accepted <- c
		}
	}()
	for range 3 {
		c, err := net.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	first := <-accepted
	<-accepted
	select {
	case <-accepted:
		t.Fatal("a third connection was accepted over the cap of 2")
	case <-time.After(200 * time.Millisecond):
	}
	first.Close()
	first.Close() // a second Close must not free a second slot
	select {
	case c := <-accepted:
		defer c.Close()
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting connection was not accepted after one closed")
	}
	l.Close()
	select {
	case err := <-acceptErr:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept after Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Accept did not return after Close")
	}
}

// TestHTTPServerTimeouts: a connection that sends nothing is closed after
// ReadHeaderTimeout, and an idle keep-alive connection after IdleTimeout.
func TestHTTPServerTimeouts(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := ops.NewHTTPServer(ops.Handler(nil, nil), slog.New(slog.DiscardHandler))
	go hs.Serve(l)
	defer hs.Close()

	closedAfter := func(c net.Conn) (time.Duration, error) {
		start := time.Now()
		c.SetReadDeadline(time.Now().Add(ops.IdleTimeout + 10*time.Second))
		_, err := io.Copy(io.Discard, c)
		return time.Since(start), err
	}
	type result struct {
		took time.Duration
		err  error
	}
	silent, idle := make(chan result, 1), make(chan result, 1)
	go func() {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			silent <- result{0, err}
			return
		}
		defer c.Close()
		took, err := closedAfter(c)
		silent <- result{took, err}
	}()
	go func() {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			idle <- result{0, err}
			return
		}
		defer c.Close()
		io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			idle <- result{0, err}
			return
		}
		resp.Body.Close()
		took, err := closedAfter(c) // reads the rest of the response, then waits
		idle <- result{took, err}
	}()
	for _, tc := range []struct {
		name  string
		ch    chan result
		bound time.Duration
	}{{"silent", silent, ops.ReadHeaderTimeout}, {"idle keep-alive", idle, ops.IdleTimeout}} {
		r := <-tc.ch
		t.Logf("%s connection closed by the server after %v (timeout %v)", tc.name, r.took.Round(time.Millisecond), tc.bound)
		if r.err != nil || r.took < tc.bound-time.Second || r.took > tc.bound+5*time.Second {
			t.Errorf("%s connection: closed after %v (%v), want about %v", tc.name, r.took, r.err, tc.bound)
		}
	}
}
