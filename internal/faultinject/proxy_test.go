//go:build linux

package faultinject_test

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/faultinject"
)

// quiet is how long a test listens to be sure that nothing arrives. It
// can only make a broken proxy pass by luck, never a working one fail.
const quiet = 300 * time.Millisecond

// proxied starts a proxy in front of a listener and returns the client's
// and the server's end of one proxied connection.
func proxied(t *testing.T) (*faultinject.Proxy, *net.TCPConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	p, err := faultinject.NewProxy(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	client, server := dialThrough(t, p, ln)
	return p, client, server
}

func dialThrough(t *testing.T, p *faultinject.Proxy, ln net.Listener) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(5 * time.Second))
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

func send(t *testing.T, from, to net.Conn, msg string) {
	t.Helper()
	if _, err := from.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	to.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(to, buf); err != nil || string(buf) != msg {
		t.Fatalf("read %q, %v; want %q", buf, err, msg)
	}
}

// silent requires that c reads nothing, not even an end, for quiet.
func silent(t *testing.T, c net.Conn, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(quiet))
	n, err := c.Read(make([]byte, 64))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("%s: read %d bytes, %v; want nothing at all", what, n, err)
	}
}

// isReset requires that c's next read fails with a connection reset.
func isReset(t *testing.T, c net.Conn, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := c.Read(make([]byte, 64))
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("%s: read error %v, want a connection reset", what, err)
	}
}

func TestProxyForwardsAndHalfCloses(t *testing.T) {
	_, c, s := proxied(t)
	send(t, c, s, "hello")
	send(t, s, c, "world")
	c.CloseWrite()
	s.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := s.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("server read %d, %v after the client's half-close; want EOF", n, err)
	}
	send(t, s, c, "still open the other way")
	s.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("client read %d, %v after the server's close; want EOF", n, err)
	}
}

func TestProxyDelay(t *testing.T) {
	p, c, s := proxied(t)
	const d = 150 * time.Millisecond
	p.SetDelay(d)
	start := time.Now()
	c.Write([]byte("a"))
	c.Write([]byte("b"))
	s.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 2)
	if _, err := io.ReadFull(s, buf); err != nil || string(buf) != "ab" {
		t.Fatalf("read %q, %v; want \"ab\" in order", buf, err)
	}
	send(t, s, c, "c")
	if rtt := time.Since(start); rtt < 2*d {
		t.Fatalf("round trip %v through a delay of %v each way; want at least %v", rtt, d, 2*d)
	}
	p.SetDelay(0)
	start = time.Now()
	send(t, c, s, "d")
	t.Logf("with the delay removed, one way takes %v", time.Since(start))
}

func TestProxyBlackholeThenHeal(t *testing.T) {
	p, c, s := proxied(t)
	send(t, c, s, "before")
	p.Blackhole()
	c.Write([]byte("lost"))
	s.Write([]byte("lost too"))
	silent(t, s, "server during the blackhole")
	silent(t, c, "client during the blackhole")
	c.CloseWrite() // a partition does not carry a close either
	silent(t, s, "server after the client's close, during the blackhole")

	if n := p.Heal(); n != 1 {
		t.Fatalf("Heal reset %d connections, want 1", n)
	}
	isReset(t, s, "server after the heal")

	// New connections flow again.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p2, err := faultinject.NewProxy(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	p2.Blackhole()
	p2.Heal()
	c2, s2 := dialThrough(t, p2, ln)
	send(t, c2, s2, "after")
}

func TestProxyBlackholeHoldsNewConnections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p, err := faultinject.NewProxy(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.Blackhole()
	c, s := dialThrough(t, p, ln)
	c.Write([]byte("x"))
	silent(t, s, "server of a connection made during the blackhole")
}

func TestProxyReset(t *testing.T) {
	p, c, s := proxied(t)
	send(t, c, s, "hello")
	if n := p.Reset(); n != 1 {
		t.Fatalf("Reset reset %d connections, want 1", n)
	}
	isReset(t, c, "client")
	isReset(t, s, "server")
}

func TestProxyUpstreamDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p, err := faultinject.NewProxy(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if errors.Is(err, syscall.ECONNRESET) {
		return // the reset came before connect(2) returned
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	isReset(t, c, "client of a proxy whose server is down")
}
