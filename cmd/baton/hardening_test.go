//go:build unix

package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
)

// TestHTTPCannotStarveProtocol: under a low RLIMIT_NOFILE, a crowd of
// idle connections on the ops port (some after a keep-alive request, most
// silent) takes at most -http-max-connections descriptors: an ACQUIRE on
// the protocol port is answered at once, not after the HTTP timeouts.
func TestHTTPCannotStarveProtocol(t *testing.T) {
	t.Parallel()
	const limit, idle = 64, 150
	proc := startBatonCmd(t, exec.Command("sh", "-c",
		fmt.Sprintf(`ulimit -n %d && exec "$0" serve -log-format json -listen 127.0.0.1:0 -ops-listen 127.0.0.1:0 -http-max-connections 8`, limit), batonBin))
	rec := proc.waitLog(t, "baton listening")
	addr, _ := rec["addr"].(string)
	opsAddr, _ := rec["ops_addr"].(string)

	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range idle {
		c, err := net.DialTimeout("tcp", opsAddr, 5*time.Second)
		if err != nil {
			t.Fatalf("ops connection %d: %v", i, err)
		}
		conns = append(conns, c)
		if i < 4 { // keep-alive connections that made one request
			io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("keep-alive request %d: %v", i, err)
			}
			resp.Body.Close()
		}
	}

	start := time.Now()
	c := fdAcquire(t, addr, "after-the-crowd")
	f, err := fdReply(c, 3*time.Second)
	took := time.Since(start)
	t.Logf("ACQUIRE answered in %v with %d idle ops connections under %d descriptors", took, idle, limit)
	if err != nil || f.Type != protocol.TypeAcquired {
		t.Fatalf("ACQUIRE with %d idle ops connections: %v %v after %v (the HTTP side took the descriptors)", idle, f, err, took)
	}
}

// get fetches an ops URL and returns the status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestStalledAuditSinkKeepsSignals: with the audit log on a FIFO whose
// reader never reads, the writer stalls; /readyz says so (and /healthz
// does not), the metric shows it, a SIGHUP does not freeze the main loop,
// and SIGTERM still shuts the server down.
func TestStalledAuditSinkKeepsSignals(t *testing.T) {
	t.Parallel()
	fifo := filepath.Join(t.TempDir(), "audit.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	reader, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	p := startBaton(t, "-listen", "127.0.0.1:0", "-ops-listen", "127.0.0.1:0", "-audit-log", fifo, "-audit-stall-timeout", "1s")
	rec := p.waitLog(t, "baton listening")
	addr, _ := rec["addr"].(string)
	opsAddr, _ := rec["ops_addr"].(string)

	// Far more than the pipe's 64 KiB of records.
	name := strings.Repeat("n", 250)
	for i := range 300 {
		c := fdAcquire(t, addr, fmt.Sprintf("%s%d", name, i))
		if f, err := fdReply(c, 5*time.Second); err != nil || f.Type != protocol.TypeAcquired {
			t.Fatalf("cycle %d: %v %v", i, f, err)
		}
		c.Close()
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, body := get(t, "http://"+opsAddr+"/readyz")
		if code == http.StatusServiceUnavailable && strings.Contains(body, "audit log stalled") {
			t.Logf("/readyz: %d %s", code, strings.TrimSpace(body))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz = %d %q, want 503 for the stalled audit log", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, body := get(t, "http://"+opsAddr+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d %q: a stalled audit log must not fail liveness", code, body)
	}
	if m := scrape(t, opsAddr); m["baton_audit_waiting_seconds"] < 1 {
		t.Errorf("baton_audit_waiting_seconds = %v, want >= 1", m["baton_audit_waiting_seconds"])
	}

	// A SIGHUP whose reopen cannot finish, then SIGTERM.
	p.cmd.Process.Signal(syscall.SIGHUP)
	p.waitLog(t, "SIGHUP: cannot reopen the audit log; still writing to the old file")
	start := time.Now()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		t.Logf("exited %v after SIGTERM", time.Since(start).Round(time.Millisecond))
	case <-time.After(20 * time.Second):
		t.Fatal("SIGTERM after a SIGHUP on a stalled audit sink did not stop the server")
	}
}

// TestProbesUnderDescriptorExhaustion: when protocol clients have taken
// every descriptor, a TCP connect to the ops port still succeeds (the
// liveness probe of deploy/kubernetes) and GET /healthz is still answered
// through the ops listener's reserved descriptor, again and again.
func TestProbesUnderDescriptorExhaustion(t *testing.T) {
	t.Parallel()
	const limit = 32
	proc := startBatonCmd(t, exec.Command("sh", "-c",
		fmt.Sprintf(`ulimit -n %d && exec "$0" serve -log-format json -listen 127.0.0.1:0 -ops-listen 127.0.0.1:0 -io-timeout 10s`, limit), batonBin))
	rec := proc.waitLog(t, "baton listening")
	addr, _ := rec["addr"].(string)
	opsAddr, _ := rec["ops_addr"].(string)

	// Exhaust: sessions until one ACQUIRE gets no answer.
	exhausted := false
	for i := 0; i <= limit && !exhausted; i++ {
		c := fdAcquire(t, addr, fmt.Sprintf("fill-%d", i))
		if _, err := fdReply(c, 500*time.Millisecond); err != nil {
			exhausted = true
		}
	}
	if !exhausted {
		t.Fatalf("descriptors not exhausted under a limit of %d", limit)
	}
	proc.waitLog(t, "accept failed; retrying")

	for i := range 3 {
		c, err := net.DialTimeout("tcp", opsAddr, 5*time.Second)
		if err != nil {
			t.Fatalf("TCP liveness probe %d: %v", i, err)
		}
		c.Close()
		start := time.Now()
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := hc.Get("http://" + opsAddr + "/healthz")
		if err != nil {
			t.Fatalf("GET /healthz %d with descriptors exhausted: %v", i, err)
		}
		resp.Body.Close()
		t.Logf("GET /healthz %d: %d in %v", i, resp.StatusCode, time.Since(start).Round(time.Millisecond))
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET /healthz %d = %d", i, resp.StatusCode)
		}
	}
}
