//go:build unix

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/opstest"
	"github.com/batonlock/baton/internal/tokenstore"
	"github.com/batonlock/baton/protocol"
)

// takeTokens starts 'baton serve' with args, takes n grants of n locks and returns the process and the last token.
func takeTokens(t *testing.T, n int, args ...string) (*batonProc, uint64) {
	t.Helper()
	return takeTokensEnv(t, n, nil, args...)
}

// takeTokensEnv is takeTokens with BATON_* variables in env.
func takeTokensEnv(t *testing.T, n int, env []string, args ...string) (*batonProc, uint64) {
	t.Helper()
	cmd := exec.Command(batonBin, append([]string{"serve", "-log-format", "json", "-listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = env
	p := startBatonCmd(t, cmd)
	addr, _ := p.waitLog(t, "baton listening")["addr"].(string)
	var last uint64
	for i := range n {
		c := opstest.Dial(t, addr)
		c.Acquire("fenced-"+strconv.Itoa(i), 10*time.Second) // tokens are server-wide
		tok := c.Expect(protocol.TypeAcquired, 0).Token
		if tok <= last {
			t.Fatalf("grant %d: token %d <= %d", i, tok, last)
		}
		last = tok
		c.Close()
	}
	return p, last
}

// stopProc ends p by SIGKILL or SIGTERM and waits for it to exit.
func stopProc(t *testing.T, p *batonProc, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(opstest.Timeout):
		t.Fatalf("baton serve did not exit after %v", sig)
	}
}

// TestServeTokensIncreaseAcrossFastRestart: the in-memory default after a
// restart at once, by kill -9 and by SIGTERM. With token = max(prev+1,
// unix_seconds<<20) a restart within the same second started lower.
func TestServeTokensIncreaseAcrossFastRestart(t *testing.T) {
	t.Parallel()
	_, last := takeTokens(t, 0)
	var p *batonProc
	for round, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM, syscall.SIGKILL} {
		if p != nil {
			stopProc(t, p, sig)
		}
		start := time.Now()
		var tok uint64
		p, tok = takeTokens(t, 5)
		t.Logf("round %d (%v): restart to first grants %v, last token %d", round, sig, time.Since(start), tok)
		if tok <= last {
			t.Fatalf("round %d: token %d after a restart by %v is not above %d from before", round, tok, sig, last)
		}
		last = tok
	}
}

// TestServeDataDirTokensAcrossKill: with -data-dir, kill -9 and an
// immediate restart continue above the last token, with no wait for the
// clock; BATON_DATA_DIR works as well as the flag.
func TestServeDataDirTokensAcrossKill(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p, last := takeTokens(t, 3, "-data-dir", dir)
	for round := range 3 {
		stopProc(t, p, syscall.SIGKILL)
		start := time.Now()
		var tok uint64
		if round == 1 {
			p, tok = takeTokensEnv(t, 3, []string{"BATON_DATA_DIR=" + dir})
		} else {
			p, tok = takeTokens(t, 3, "-data-dir", dir)
		}
		t.Logf("round %d: restart to grants %v, token %d", round, time.Since(start), tok)
		if tok <= last {
			t.Fatalf("round %d: token %d after kill -9 is not above %d", round, tok, last)
		}
		last = tok
	}
	if _, err := os.Stat(filepath.Join(dir, tokenstore.FileName)); err != nil {
		t.Errorf("no token file: %v", err)
	}
}

// TestServeDataDirCorrupt: a token file that cannot be parsed stops the
// server from starting, with a message naming the file, instead of
// starting low.
func TestServeDataDirCorrupt(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, tokenstore.FileName)
	if err := os.WriteFile(path, []byte("baton-tokens 1\nlimit 12\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(batonBin, "serve", "-listen", "127.0.0.1:0", "-data-dir", dir)
	out, err := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != exitError {
		t.Fatalf("exit %d (%v), want %d; output:\n%s", code, err, exitError, out)
	}
	if !strings.Contains(string(out), path) || !strings.Contains(string(out), "corrupt") {
		t.Errorf("output does not name the corrupt file %s:\n%s", path, out)
	}
}
