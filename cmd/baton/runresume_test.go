//go:build unix

package main

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// cutProxy forwards TCP connections to target until cut closes them all.
type cutProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln}
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
			p.wg.Go(func() { io.Copy(up, c); up.Close() })
			p.wg.Go(func() { io.Copy(c, up); c.Close() })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

// cut closes every connection through the proxy, both ends.
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// 'baton run --resumable' keeps its lock through a killed connection:
// COMMAND runs on with its token, the server still holds the lock for it
// a lease after the cut, and the lock is released at once when COMMAND
// exits.
func TestRunResumable(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	proxy := newCutProxy(t, ts.addr)
	const lease = 2 * time.Second
	r := startRunEnv(t, []string{"BATON_RESUMABLE=true"}, "--server", proxy.ln.Addr().String(), "--lease", lease.String(), "job", "--", "sh", "-c", holdScript+"; echo still $BATON_TOKEN")
	tok := tokenOf(t, r.line(), "held")
	cut := time.Now()
	proxy.cut()
	// Past the lease: a session that was not resumed would have lost
	// the lock on the server and in baton run.
	time.Sleep(lease + lease/4)
	busy := startRun(t, "--server", ts.addr, "--no-wait", "job", "--", "true")
	if code, _ := busy.wait(); code != exitTempFail {
		t.Fatalf("--no-wait %v after the cut: exit %d, want %d (the lock kept); stderr:\n%s", time.Since(cut), code, exitTempFail, busy.stderr)
	}
	if !r.running() {
		t.Fatalf("baton run exited; stderr:\n%s", r.stderr)
	}
	io.WriteString(r.stdin, "done\n")
	if still := tokenOf(t, r.line(), "still"); still != tok {
		t.Fatalf("token %d, then %d", tok, still)
	}
	if code, _ := r.wait(); code != 0 {
		t.Fatalf("baton run --resumable: exit %d; stderr:\n%s", code, r.stderr)
	}
	next := startRun(t, "--server", ts.addr, "--no-wait", "job", "--", "true")
	if code, _ := next.wait(); code != 0 {
		t.Fatalf("--no-wait after baton run exited: exit %d; stderr:\n%s", code, next.stderr)
	}
}

func TestRunResumableWithDirIsUsageError(t *testing.T) {
	t.Parallel()
	var out, errb syncBuffer
	if code := runRun([]string{"--dir", t.TempDir(), "--resumable", "--", "true"}, &out, &errb); code != exitUsage {
		t.Fatalf("exit %d; stderr: %s", code, errb.String())
	}
}
