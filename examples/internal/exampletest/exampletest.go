// Package exampletest holds what the tests of the examples share: an
// in-process baton server, the baton binary, and child processes whose
// output lines a test can wait for.
package exampletest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/server"
)

// Timeout bounds every wait for an event: generous, for a loaded machine.
const Timeout = 20 * time.Second

// StartServer runs an in-process baton server on 127.0.0.1 until the test
// ends and returns it with its address.
func StartServer(t testing.TB) (*server.Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &server.Server{Logger: slog.New(slog.DiscardHandler)}
	served := make(chan struct{})
	go func() { defer close(served); srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-served
	})
	return srv, ln.Addr().String()
}

// WaitFor polls cond until it holds, failing the test after Timeout. It
// is for state that announces no event, such as a server's queue length.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting after %v for %s", Timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var (
	buildOnce sync.Once
	batonBin  string
	buildErr  error
)

// Baton builds cmd/baton once per test binary and returns its path. The
// file lives in a directory that Cleanup removes; call Cleanup from
// TestMain after m.Run.
func Baton(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "baton-example-")
		if err != nil {
			buildErr = err
			return
		}
		batonBin = filepath.Join(dir, "baton")
		out, err := exec.Command("go", "build", "-o", batonBin,
			"github.com/batonlock/baton/cmd/baton").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build ./cmd/baton: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return batonBin
}

// Cleanup removes what Baton built.
func Cleanup() {
	if batonBin != "" {
		os.RemoveAll(filepath.Dir(batonBin))
	}
}

// Env returns this process's environment without BATON_* variables (a
// developer's BATON_SERVER must not leak into a test), plus extra.
func Env(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BATON_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// Proc is a child process whose standard output a test reads line by
// line. Everything it writes to standard output and standard error is
// also kept for failure messages.
type Proc struct {
	Cmd    *exec.Cmd
	name   string
	lines  chan string
	exited chan struct{}
	err    error // from Wait; read after exited is closed
	out    syncBuffer
}

// Start starts cmd, which must not have Stdout or Stderr set. The process
// is killed when the test ends, if it is still running.
func Start(t testing.TB, name string, cmd *exec.Cmd) *Proc {
	t.Helper()
	p := &Proc{Cmd: cmd, name: name, lines: make(chan string, 1000), exited: make(chan struct{})}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = &p.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		defer close(p.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.out.Write(append(sc.Bytes(), '\n'))
			p.lines <- sc.Text()
		}
		io.Copy(io.Discard, stdout)
	}()
	go func() {
		<-copied // Wait closes the pipe: read it all first
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			cmd.Process.Kill()
			<-p.exited
		}
		if strings.Contains(p.out.String(), "DATA RACE") {
			t.Errorf("%s: the race detector reported a race:\n%s", name, p.Output())
		}
	})
	return p
}

// Line waits for the next line of standard output that matches re and
// returns its submatches; lines before it that do not match are skipped.
// It fails the test if the process exits first or after Timeout.
func (p *Proc) Line(t testing.TB, re *regexp.Regexp) []string {
	t.Helper()
	timeout := time.After(Timeout)
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				t.Fatalf("%s exited (%v) before printing a line matching %q; its output:\n%s",
					p.name, p.Cmd.ProcessState, re, p.Output())
			}
			if m := re.FindStringSubmatch(line); m != nil {
				return m
			}
		case <-timeout:
			t.Fatalf("%s printed no line matching %q within %v; its output:\n%s", p.name, re, Timeout, p.Output())
		}
	}
}

// Wait waits for the process to exit and returns its exit code (-1 if a
// signal killed it). It fails the test after Timeout.
func (p *Proc) Wait(t testing.TB) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(Timeout):
		t.Fatalf("%s still running after %v; its output:\n%s", p.name, Timeout, p.Output())
	}
	var ee *exec.ExitError
	if err := p.err; err != nil && !errors.As(err, &ee) {
		t.Fatalf("%s: %v", p.name, err)
	}
	return p.Cmd.ProcessState.ExitCode()
}

// Output returns everything the process has written so far.
func (p *Proc) Output() string { return p.out.String() }

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
