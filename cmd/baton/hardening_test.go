//go:build unix

package main

import (
	"bufio"
	"encoding/json"
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

	// The first grant of a new process may wait up to a second for the
	// token clock (docs/fencing.md): take it before the timed fill.
	if f, err := fdReply(fdAcquire(t, addr, "first"), 5*time.Second); err != nil || f.Type != protocol.TypeAcquired {
		t.Fatalf("first ACQUIRE: %v %v", f, err)
	}
	// Exhaust: sessions until one ACQUIRE gets no answer.
	exhausted := false
	for i := 0; i <= limit && !exhausted; i++ {
		c := fdAcquire(t, addr, fmt.Sprintf("fill-%d", i))
		if _, err := fdReply(c, time.Second); err != nil {
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

// TestAuditFileSizeLimit: a real 'baton serve' under RLIMIT_FSIZE (with
// SIGXFSZ ignored, so writes past the limit are cut short and then fail
// with EFBIG) counts exactly the records that did not reach the file, and
// after a restart without the limit the next record starts on a fresh
// line instead of being glued to the torn one.
func TestAuditFileSizeLimit(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "audit.log")
	proc := startBatonCmd(t, exec.Command("sh", "-c",
		`trap '' XFSZ; ulimit -f 8 && exec "$0" serve -log-format json -listen 127.0.0.1:0 -ops-listen 127.0.0.1:0 -audit-log "$1"`, batonBin, path))
	rec := proc.waitLog(t, "baton listening")
	addr, _ := rec["addr"].(string)
	opsAddr, _ := rec["ops_addr"].(string)

	records := 0
	for i := 0; scrape(t, opsAddr)["baton_audit_dropped_total"] == 0; i++ {
		if i == 500 {
			t.Fatalf("no audit record dropped after %d records under a file-size limit", records)
		}
		c := fdAcquire(t, addr, fmt.Sprintf("limited-%d", i))
		if f, err := fdReply(c, 5*time.Second); err != nil || f.Type != protocol.TypeAcquired {
			t.Fatalf("cycle %d: %v %v", i, f, err)
		}
		c.Close()
		records += 2 // granted, released
		waitAuditSettled(t, opsAddr, path, records)
	}
	complete, dropped := auditCounts(t, opsAddr, path)
	t.Logf("%d records: %d complete lines in the file, %d dropped", records, complete, dropped)
	proc.cmd.Process.Signal(syscall.SIGTERM)
	<-proc.exited

	b, _ := os.ReadFile(path)
	if len(b) == 0 || b[len(b)-1] == '\n' {
		t.Fatalf("the file-size limit did not tear a line: %q", b)
	}
	next := startBaton(t, "-listen", "127.0.0.1:0", "-audit-log", path)
	addr, _ = next.waitLog(t, "baton listening")["addr"].(string)
	c := fdAcquire(t, addr, "after-restart")
	if f, err := fdReply(c, 5*time.Second); err != nil || f.Type != protocol.TypeAcquired {
		t.Fatalf("after restart: %v %v", f, err)
	}
	c.Close()
	next.cmd.Process.Signal(syscall.SIGTERM)
	<-next.exited
	b, _ = os.ReadFile(path)
	ls := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	var bad []string
	after := 0
	for _, l := range ls {
		if !json.Valid([]byte(l)) {
			bad = append(bad, l)
		} else if strings.Contains(l, `"after-restart"`) {
			after++
		}
	}
	if len(bad) != 1 || after != 2 {
		t.Fatalf("want exactly one torn line and the 2 records after the restart on lines of their own; torn lines %q, %d records after\nfile:\n%s", bad, after, b)
	}
}

// auditCounts returns the complete lines of the audit file and the
// server's dropped count.
func auditCounts(t *testing.T, opsAddr, path string) (complete, dropped int) {
	t.Helper()
	dropped = int(scrape(t, opsAddr)["baton_audit_dropped_total"])
	b, _ := os.ReadFile(path)
	for _, l := range strings.SplitAfter(string(b), "\n") {
		if strings.HasSuffix(l, "\n") && json.Valid([]byte(l)) {
			complete++
		}
	}
	return complete, dropped
}

// waitAuditSettled waits until every one of the records observed is
// either a complete line of the file or counted as dropped: exactly, not
// more.
func waitAuditSettled(t *testing.T, opsAddr, path string, records int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		complete, dropped := auditCounts(t, opsAddr, path)
		if complete+dropped == records {
			return
		}
		if complete+dropped > records || time.Now().After(deadline) {
			t.Fatalf("%d records observed, but %d complete lines + %d dropped", records, complete, dropped)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
