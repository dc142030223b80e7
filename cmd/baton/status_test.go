//go:build unix

package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// baton status checks the protocol port without the admin API and takes
// no lock; a closed port or another service is unavailable (69).
func TestStatus(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	code, out, errOut := cli("status", "--server", ts.addr)
	if code != exitOK || !strings.Contains(out, "protocol v1, round trip") {
		t.Fatalf("status: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	t.Logf("%s", strings.TrimSpace(out))
	// No lock was taken: the probe lock's name is free for --no-wait.
	p := startRun(t, "--server", ts.addr, "--no-wait", statusProbeLock, "--", "true")
	if code, _ := p.wait(); code != 0 {
		t.Errorf("the probe left its lock held: exit %d; stderr:\n%s", code, p.stderr)
	}

	addr := unreachableAddr(t)
	if code, _, errOut := cli("status", "--server", addr); code != 69 {
		t.Errorf("closed port: exit %d, want 69; stderr %q", code, errOut)
	}
	// An HTTP server is not a baton server.
	hs := httptest.NewServer(http.NotFoundHandler())
	defer hs.Close()
	if code, _, errOut := cli("status", "--server", strings.TrimPrefix(hs.URL, "http://"), "--timeout", "2s"); code != 69 {
		t.Errorf("HTTP server: exit %d, want 69; stderr %q", code, errOut)
	}
	if code, _, _ := cli("status", "--server", "127.0.0.1"); code != exitUsage {
		t.Errorf("no port: exit %d, want %d", code, exitUsage)
	}
}

// --admin pointed at the protocol port, or plain HTTP at a TLS port: the
// admin commands say what the address is instead of an HTTP parse error.
func TestAdminAddressHints(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	code, _, errOut := cli("locks", "--admin", ts.addr)
	if code != exitError || !strings.Contains(errOut, "is a baton protocol port, not the admin API") {
		t.Errorf("--admin at the protocol port: exit %d, stderr %q", code, errOut)
	}
	hs := httptest.NewTLSServer(http.NotFoundHandler())
	defer hs.Close()
	hs.Config.ErrorLog = nil
	addr := strings.TrimPrefix(hs.URL, "https://")
	code, _, errOut = cli("info", "--admin", addr)
	if code != exitError || !strings.Contains(errOut, "serves TLS: use --admin https://"+addr) {
		t.Errorf("plain HTTP at a TLS port: exit %d, stderr %q", code, errOut)
	}
}
