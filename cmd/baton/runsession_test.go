//go:build unix

package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"
)

// Two 'baton run --shared' hold one name at once, each with its own
// token; an exclusive 'baton run' waits until both have exited.
func TestRunShared(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	r1 := startRun(t, "--server", ts.addr, "--shared", "db", "--", "sh", "-c", holdScript)
	t1 := tokenOf(t, r1.line(), "held")
	r2 := startRunEnv(t, []string{"BATON_SHARED=true"}, "--server", ts.addr, "db", "--", "sh", "-c", holdScript)
	t2 := tokenOf(t, r2.line(), "held") // both hold now
	if t2 <= t1 {
		t.Fatalf("reader tokens %d then %d", t1, t2)
	}
	busy := startRun(t, "--server", ts.addr, "--no-wait", "db", "--", "sh", "-c", "echo ran")
	if code, out := busy.wait(); code != exitTempFail || out != "" {
		t.Fatalf("exclusive --no-wait under readers: exit %d, output %q; stderr:\n%s", code, out, busy.stderr)
	}
	w := startRun(t, "--server", ts.addr, "--lease", "400ms", "db", "--", "sh", "-c", "echo writer $BATON_TOKEN")
	ts.waitQueued(t)
	io.WriteString(r1.stdin, "done\n")
	if code, _ := r1.wait(); code != 0 {
		t.Fatalf("reader 1: exit %d; stderr:\n%s", code, r1.stderr)
	}
	select {
	case l := <-w.lines:
		t.Fatalf("writer ran while a reader held the lock: %q", l)
	case <-time.After(50 * time.Millisecond):
	}
	io.WriteString(r2.stdin, "done\n")
	if code, _ := r2.wait(); code != 0 {
		t.Fatalf("reader 2: exit %d; stderr:\n%s", code, r2.stderr)
	}
	if tw := tokenOf(t, w.line(), "writer"); tw <= t2 {
		t.Fatalf("writer token %d not above the readers' %d", tw, t2)
	}
	if code, _ := w.wait(); code != 0 {
		t.Fatalf("writer: exit %d; stderr:\n%s", code, w.stderr)
	}
}

// --semaphore N admits N holders; the next waits (or is busy with
// --no-wait) and runs when a place frees; another N is refused.
func TestRunSemaphore(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	var holders []*runProc
	for range 2 {
		p := startRun(t, "--server", ts.addr, "--semaphore", "2", "pool", "--", "sh", "-c", holdScript)
		tokenOf(t, p.line(), "held")
		holders = append(holders, p)
	}
	busy := startRunEnv(t, []string{"BATON_SEMAPHORE=2"}, "--server", ts.addr, "--no-wait", "pool", "--", "sh", "-c", "echo ran")
	if code, out := busy.wait(); code != exitTempFail || out != "" {
		t.Fatalf("third --no-wait: exit %d, output %q; stderr:\n%s", code, out, busy.stderr)
	}
	other := startRun(t, "--server", ts.addr, "--semaphore", "3", "pool", "--", "sh", "-c", "echo ran")
	if code, out := other.wait(); code != exitUnavailable || out != "" || !strings.Contains(other.stderr.String(), "limit") {
		t.Fatalf("another limit: exit %d, output %q; stderr:\n%s", code, out, other.stderr)
	}
	third := startRun(t, "--server", ts.addr, "--semaphore", "2", "pool", "--", "sh", "-c", "echo third $BATON_TOKEN")
	select {
	case l := <-third.lines:
		t.Fatalf("third holder ran while two held: %q", l)
	case <-time.After(100 * time.Millisecond):
	}
	io.WriteString(holders[0].stdin, "done\n")
	holders[0].wait()
	tokenOf(t, third.line(), "third")
	if code, _ := third.wait(); code != 0 {
		t.Fatalf("third: exit %d; stderr:\n%s", code, third.stderr)
	}
	io.WriteString(holders[1].stdin, "done\n")
	holders[1].wait()
}

// A shared lock lost while the command runs (the server shuts down):
// the command gets SIGTERM and baton run exits 76.
func TestRunSharedLost(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	p := startRun(t, "--server", ts.addr, "--shared", "db", "--", "sh", "-c", `trap 'exit 0' TERM; echo ready; while :; do sleep 0.05; done`)
	if l := p.line(); l != "ready" {
		t.Fatalf("command said %q", l)
	}
	go ts.srv.Shutdown(context.Background())
	code, _ := p.wait()
	if code != exitLost || !strings.Contains(p.stderr.String(), "SIGTERM") || !strings.Contains(p.stderr.String(), "shared lock") {
		t.Fatalf("exit %d, want %d and a SIGTERM; stderr:\n%s", code, exitLost, p.stderr)
	}
}

func TestRunModeUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--shared", "--semaphore", "2", "job", "--", "true"},
		{"--semaphore", "-1", "job", "--", "true"},
		{"--semaphore", "4294967296", "job", "--", "true"},
		{"--shared", "--dir", t.TempDir(), "--", "true"},
	} {
		var out, errb bytes.Buffer
		if code := runRun(args, &out, &errb); code != exitUsage {
			t.Errorf("baton run %q: exit %d, want %d; stderr: %s", args, code, exitUsage, errb.String())
		}
	}
}
