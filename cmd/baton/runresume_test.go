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
	// clientOnly: a cut closes the clients' ends only, and the server's
	// stay open and silent.
	clientOnly bool
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
			p.wg.Go(func() {
				io.Copy(up, c)
				p.mu.Lock()
				silent := p.clientOnly
				p.mu.Unlock()
				if !silent {
					up.Close()
				}
			})
			p.wg.Go(func() { io.Copy(c, up); c.Close() })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		p.clientOnly = false
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// cutClientSide closes the clients' ends of the connections through the
// proxy and leaves the server's ends open and silent: the client sees its
// connection end, the server hears nothing, as on a link that died
// without a reset reaching the server. (A reset the server sees ends a
// session with the detach flag at once, as the client's death.)
func (p *cutProxy) cutClientSide() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clientOnly = true
	for i, c := range p.conns {
		if i%2 == 0 {
			c.Close()
		}
	}
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
	proxy.cutClientSide()
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
