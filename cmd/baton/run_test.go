//go:build unix

package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/opstest"
	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// batonBin is the baton binary, built once by TestMain: 'baton run' is
// about real processes, signals and process groups.
var batonBin string

// testParallel is how many tests that call t.Parallel run at once when
// go test is given no -parallel (whose default is GOMAXPROCS, 2 on CI's
// machine). This package's cluster tests mostly wait, on Raft elections,
// warm-ups, leases and removals, not on the CPU; those that bound a
// latency stay serial and so run alone.
const testParallel = 4

func TestMain(m *testing.M) {
	flag.Parse()
	parallelSet := false
	flag.Visit(func(f *flag.Flag) { parallelSet = parallelSet || f.Name == "test.parallel" })
	if !parallelSet {
		flag.Set("test.parallel", strconv.Itoa(testParallel))
	}
	dir, err := os.MkdirTemp("", "baton-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	batonBin = filepath.Join(dir, "baton")
	build := exec.Command("go", "build", "-o", batonBin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building baton:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	setRunInitPath(batonBin) // for baton run called in-process
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

const testTimeout = 10 * time.Second // bound on any wait for an event

// testServer is an in-process server that tells when some claim that is
// not an owner heartbeats: proof that a second 'baton run' is queued.
type testServer struct {
	addr   string
	srv    *server.Server
	mu     sync.Mutex
	owners map[string]bool // peer address -> has been granted
	queued chan struct{}
}

func startServer(t *testing.T) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{addr: ln.Addr().String(), owners: map[string]bool{}, queued: make(chan struct{}, 1)}
	ts.srv = &server.Server{
		Logger: slog.New(slog.DiscardHandler),
		Observer: server.ObserverFunc(func(e server.Event) {
			ts.mu.Lock()
			defer ts.mu.Unlock()
			switch e.Kind {
			case server.EventGranted:
				ts.owners[e.Peer.Addr] = true
			case server.EventHeartbeat:
				if !ts.owners[e.Peer.Addr] {
					select {
					case ts.queued <- struct{}{}:
					default:
					}
				}
			}
		}),
	}
	served := make(chan struct{})
	go func() { defer close(served); ts.srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ts.srv.Shutdown(ctx)
		<-served
	})
	return ts
}

// waitQueued waits until a claim that was never granted heartbeats.
func (ts *testServer) waitQueued(t *testing.T) {
	t.Helper()
	select {
	case <-ts.queued:
	case <-time.After(testTimeout):
		t.Fatal("no claim was queued")
	}
}

// runProc is a running 'baton run' with its output read line by line.
type runProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr *syncBuffer
	exited chan struct{}
	code   int
	end    time.Time
}

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

func startRun(t *testing.T, args ...string) *runProc {
	t.Helper()
	return startRunEnv(t, nil, args...)
}

// startRunEnv is startRun with env added to the clean environment.
func startRunEnv(t *testing.T, env []string, args ...string) *runProc {
	t.Helper()
	return startCLI(t, env, append([]string{"run"}, args...)...)
}

// startCLI starts the baton binary with args (a command and its
// arguments) and env added to the clean environment.
func startCLI(t *testing.T, env []string, args ...string) *runProc {
	t.Helper()
	p := &runProc{t: t, lines: make(chan string, 64), stderr: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(batonBin, args...)
	p.cmd.Env = append(cleanEnv(), env...)
	p.cmd.Stderr = p.stderr
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		p.cmd.Wait() // after the output is read, as exec requires
		p.end = time.Now()
		p.code = p.cmd.ProcessState.ExitCode()
		if ws := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ws.Signaled() {
			p.code = 128 + int(ws.Signal())
		}
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.exited
	})
	return p
}

// cleanEnv is the test's environment without BATON_* settings, so that a
// developer's own environment cannot change the tests.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BATON_") {
			env = append(env, kv)
		}
	}
	return env
}

// line waits for the next line of stdout.
func (p *runProc) line() string {
	p.t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			p.t.Fatalf("baton run exited before printing a line; stderr:\n%s", p.stderr)
		}
		return l
	case <-time.After(testTimeout):
		p.t.Fatalf("no output from baton run; stderr:\n%s", p.stderr)
		return ""
	}
}

// wait waits for baton run to exit and returns its exit code; the rest of
// its stdout is returned too.
func (p *runProc) wait() (int, string) {
	p.t.Helper()
	var rest []string
	timeout := time.After(testTimeout)
	for {
		select {
		case l, ok := <-p.lines:
			if ok {
				rest = append(rest, l)
				continue
			}
			<-p.exited
			return p.code, strings.Join(rest, "\n")
		case <-timeout:
			p.t.Fatalf("baton run did not exit; stderr:\n%s", p.stderr)
		}
	}
}

func (p *runProc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// tokenOf parses "WORD TOKEN" lines printed by the test commands.
func tokenOf(t *testing.T, line, word string) uint64 {
	t.Helper()
	f := strings.Fields(line)
	if len(f) < 2 || f[0] != word {
		t.Fatalf("line %q, want %q and a token", line, word)
	}
	n, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil || n == 0 {
		t.Fatalf("line %q: bad token", line)
	}
	return n
}

// unreachableAddr is a loopback address that nothing listens on.
func unreachableAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// A holder whose command waits for a line on stdin.
const holdScript = `echo held $BATON_TOKEN; read x`

func TestRunUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{},
		{"job"},
		{"job", "true"},
		{"job", "--"},
		{"--no-wait", "--wait", "1s", "job", "--", "true"},
		{"--wait", "0", "--no-wait", "job", "--", "true"},
		{"--lease", "0s", "job", "--", "true"},
		{"--lease", "500us", "job", "--", "true"},
		{"--wait", "-1s", "job", "--", "true"},
		{"--grace", "-1s", "job", "--", "true"},
		{"--bogus", "job", "--", "true"},
		{strings.Repeat("x", 256), "--", "true"},
		{"bad\xffname", "--", "true"},
		{"--server", "127.0.0.1", "job", "--", "true"},
		{"--server", "127.0.0.1:99999", "job", "--", "true"},
		{"--retry", "--server", "localhost:http", "job", "--", "true"},
		{"job", "--bogus", "--", "true"},
		{"job", "--no-wait", "true"},
	} {
		var out, errb bytes.Buffer
		if code := runRun(args, &out, &errb); code != exitUsage {
			t.Errorf("baton run %q: exit %d, want %d; stderr: %s", args, code, exitUsage, errb.String())
		}
	}
}

func TestRunHelp(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	if code := runRun([]string{"-h"}, &out, &errb); code != exitOK {
		t.Fatalf("baton run -h: exit %d", code)
	}
	for _, want := range []string{"BATON_SERVER", "BATON_LEASE", "BATON_WAIT", "BATON_NO_WAIT", "BATON_RETRY", "BATON_GRACE", "Exit status", "69", "75", "76", "126", "127"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("baton run -h does not mention %s:\n%s", want, out.String())
		}
	}
}

func TestRunExitCodes(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	unreachable := unreachableAddr(t)
	for _, tc := range []struct {
		name string
		args []string
		want int
	}{
		{"exit status", []string{"job", "--", "sh", "-c", "exit 3"}, 3},
		{"success", []string{"job", "--", "true"}, 0},
		{"killed by a signal", []string{"job", "--", "sh", "-c", "kill -KILL $$"}, 128 + 9},
		{"environment", []string{"env-job", "--", "sh", "-c", `test "$BATON_LOCK" = env-job && test "$BATON_TOKEN" -gt 0`}, 0},
		{"not found", []string{"job", "--", "/nonexistent/command"}, exitNotFound},
		{"not executable", []string{"job", "--", "/"}, exitCannotExec},
		{"server unreachable", []string{"--server", unreachable, "job", "--", "true"}, exitUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := tc.args
			if args[0] != "--server" {
				args = append([]string{"--server", ts.addr}, args...)
			}
			p := startRun(t, args...)
			if code, _ := p.wait(); code != tc.want {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tc.want, p.stderr)
			}
		})
	}
}

// A second run waits while the first holds the lock, then runs.
func TestRunWaitsThenRuns(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	first := startRun(t, "--server", ts.addr, "job", "--", "sh", "-c", holdScript)
	t1 := tokenOf(t, first.line(), "held")
	second := startRun(t, "--server", ts.addr, "--lease", "400ms", "job", "--", "sh", "-c", "echo second $BATON_TOKEN")
	ts.waitQueued(t)
	if !second.running() {
		t.Fatalf("second run exited while the first held the lock; stderr:\n%s", second.stderr)
	}
	select {
	case l := <-second.lines:
		t.Fatalf("second command ran while the first held the lock: %q", l)
	default:
	}
	io.WriteString(first.stdin, "done\n")
	if code, _ := first.wait(); code != 0 {
		t.Fatalf("first run: exit %d; stderr:\n%s", code, first.stderr)
	}
	t2 := tokenOf(t, second.line(), "second")
	if code, _ := second.wait(); code != 0 {
		t.Fatalf("second run: exit %d; stderr:\n%s", code, second.stderr)
	}
	if t2 <= t1 {
		t.Errorf("tokens %d then %d: not increasing", t1, t2)
	}
}

// --no-wait exits busy at once; --wait gives up after its time.
func TestRunBusy(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	first := startRun(t, "--server", ts.addr, "job", "--", "sh", "-c", holdScript)
	first.line()

	start := time.Now()
	p := startRun(t, "--server", ts.addr, "--no-wait", "job", "--", "sh", "-c", "echo ran")
	code, out := p.wait()
	if code != exitTempFail || out != "" {
		t.Errorf("--no-wait: exit %d, output %q; want %d and no command run; stderr:\n%s", code, out, exitTempFail, p.stderr)
	}
	t.Logf("--no-wait returned after %v", time.Since(start))

	const wait = 300 * time.Millisecond
	start = time.Now()
	p = startRun(t, "--server", ts.addr, "--wait", wait.String(), "job", "--", "sh", "-c", "echo ran")
	code, out = p.wait()
	took := time.Since(start)
	if code != exitTempFail || out != "" {
		t.Errorf("--wait: exit %d, output %q; want %d and no command run; stderr:\n%s", code, out, exitTempFail, p.stderr)
	}
	if took < wait {
		t.Errorf("--wait %v gave up after %v", wait, took)
	}
	io.WriteString(first.stdin, "done\n")
	first.wait()
}

// SIGKILL of a holding 'baton run' frees the lock at once (its kernel
// closes the connection), and its command dies with it: the whole tree,
// including a child that left the process group in a session of its own,
// is dead (or has SIGKILL pending, which it cannot outrun) when the next
// holder's command starts.
func TestRunHolderKilled(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	marker := fmt.Sprintf("BATON_TEST_TREE=%d", time.Now().UnixNano())
	first := startRunEnv(t, []string{marker}, "--server", ts.addr, "--lease", "10s", "job", "--",
		"sh", "-c", "sleep 300 & setsid sleep 300 & echo held $BATON_TOKEN; read x; wait")
	t.Cleanup(func() { // before first's cleanup, which waits for its stdout to close
		// Again while any is found: a process caught in its exec may
		// not show its environment for a moment.
		for range 50 {
			pids := treeProcs(marker)
			for _, pid := range pids {
				syscall.Kill(pid, syscall.SIGKILL)
			}
			if len(pids) == 0 {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	tokenOf(t, first.line(), "held")
	// baton's init, sh and its two sleeps (and baton run); under load a
	// process in the middle of its exec may show no environment yet.
	var before []int
	for deadline := time.Now().Add(5 * time.Second); len(before) < 4 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		before = treeProcs(marker)
	}
	if len(before) < 4 {
		t.Fatalf("found %d processes of the command's tree (%v), want at least 4", len(before), before)
	}
	var inits []int
	for _, pid := range before {
		if cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); bytes.Contains(cmdline, []byte(runInitName)) {
			inits = append(inits, pid)
		}
	}
	if len(inits) != 1 {
		t.Fatalf("found %d baton %s among %v, want 1", len(inits), runInitName, before)
	}
	second := startRun(t, "--server", ts.addr, "--lease", "400ms", "job", "--", "sh", "-c", "echo second $BATON_TOKEN; read x")
	ts.waitQueued(t)
	killed := time.Now()
	first.cmd.Process.Signal(syscall.SIGKILL)
	tokenOf(t, second.line(), "second")
	// The baton init may still be making sure of the kill (it runs
	// nothing of the command's); every other process must be gone.
	left := slices.DeleteFunc(treeProcs(marker), func(pid int) bool { return slices.Contains(inits, pid) })
	if len(left) > 0 {
		t.Errorf("when the next holder started, processes %v of the killed run's command (of %v) were still alive", left, before)
	}
	if d := time.Since(killed); d > 2*time.Second {
		t.Errorf("second ran %v after SIGKILL of the first; want at once (lease 10s)", d)
	} else {
		t.Logf("second ran %v after SIGKILL of the first", d)
	}
	io.WriteString(second.stdin, "done\n")
	if code, _ := second.wait(); code != 0 {
		t.Errorf("second run: exit %d; stderr:\n%s", code, second.stderr)
	}
}

// The command runs in the host's namespaces: procps ps works in it, and
// $$ is its pid in the host's /proc.
func TestRunCommandSeesHost(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("ps"); err != nil {
		t.Skip("no ps here")
	}
	ts := startServer(t)
	marker := fmt.Sprintf("BATON_TEST_HOST=%d", time.Now().UnixNano())
	p := startRunEnv(t, []string{marker}, "--server", ts.addr, "host", "--",
		"sh", "-c", "ps -p $$ >/dev/null || exit 9; echo pid $$; read x")
	pid := int(tokenOf(t, p.line(), "pid"))
	if tree := treeProcs(marker); !slices.Contains(tree, pid) {
		t.Errorf("$$ of the command is %d, not one of the host's processes %v with its environment", pid, tree)
	}
	io.WriteString(p.stdin, "done\n")
	if code, _ := p.wait(); code != 0 {
		t.Errorf("exit %d, want 0 (ps -p $$ works); stderr:\n%s", code, p.stderr)
	}
}

// Where baton run would send SIGKILL to the command's process group (here
// after --timeout and --grace, for a command that ignores SIGTERM), the
// processes the command started outside that group die too: none
// outlives baton run.
func TestRunKillReachesWholeTree(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	marker := fmt.Sprintf("BATON_TEST_KILL=%d", time.Now().UnixNano())
	p := startRunEnv(t, []string{marker}, "--server", ts.addr, "--timeout", "300ms", "--grace", "100ms", "tree", "--",
		"sh", "-c", "trap '' TERM; setsid sleep 300 & sleep 300 & echo ready; wait")
	t.Cleanup(func() {
		for _, pid := range treeProcs(marker) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	if l := p.line(); l != "ready" {
		t.Fatalf("command said %q", l)
	}
	if code, _ := p.wait(); code != exitTimeout {
		t.Errorf("exit %d, want %d; stderr:\n%s", code, exitTimeout, p.stderr)
	}
	if left := treeProcs(marker); len(left) > 0 {
		t.Errorf("after baton run exited, processes %v of its command were still alive; stderr:\n%s", left, p.stderr)
	}
}

// treeProcs lists the live processes whose environment holds marker: a
// process that is a zombie or has SIGKILL pending does not count, since it
// runs no more code.
func treeProcs(marker string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil || !bytes.Contains(append(append([]byte{0}, env...), 0), []byte("\x00"+marker+"\x00")) {
			continue
		}
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil || dying(string(status)) || exiting(pid) {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

// exiting reports whether the kernel has begun pid's exit (PF_EXITING in
// /proc/PID/stat's flags): a killed process that has taken its SIGKILL
// is no longer pending it, but runs no more code either.
func exiting(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return false
	}
	// After "(COMM)": state, ppid, pgrp, session, tty_nr, tpgid, flags.
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 7 {
		return false
	}
	flags, err := strconv.ParseUint(f[6], 10, 64)
	return err == nil && flags&0x4 != 0 // PF_EXITING
}

// dying reports whether /proc/PID/status says a zombie, or SIGKILL
// pending for the thread or its process.
func dying(status string) bool {
	for _, l := range strings.Split(status, "\n") {
		k, v, _ := strings.Cut(l, ":")
		v = strings.TrimSpace(v)
		switch k {
		case "State":
			if strings.HasPrefix(v, "Z") || strings.HasPrefix(v, "X") {
				return true
			}
		case "SigPnd", "ShdPnd":
			if mask, err := strconv.ParseUint(v, 16, 64); err == nil && mask&(1<<(uint(syscall.SIGKILL)-1)) != 0 {
				return true
			}
		}
	}
	return false
}

// A lost lock (server shutdown) sends SIGTERM to the command's group,
// then SIGKILL after --grace; baton run exits 76.
func TestRunLockLost(t *testing.T) {
	t.Parallel()
	const grace = 300 * time.Millisecond
	for _, tc := range []struct {
		name   string
		script string
		slow   bool // ignores SIGTERM: needs the SIGKILL
	}{
		{"command ignores SIGTERM", `trap '' TERM; echo ready; while :; do sleep 0.05; done`, true},
		{"command stops on SIGTERM", `trap 'exit 0' TERM; echo ready; while :; do sleep 0.05; done`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ts := startServer(t)
			p := startRun(t, "--server", ts.addr, "--grace", grace.String(), "job", "--", "sh", "-c", tc.script)
			if l := p.line(); l != "ready" {
				t.Fatalf("command said %q", l)
			}
			lostAt := time.Now()
			go ts.srv.Shutdown(context.Background())
			code, _ := p.wait()
			took := p.end.Sub(lostAt)
			if code != exitLost {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, exitLost, p.stderr)
			}
			stderr := p.stderr.String()
			if !strings.Contains(stderr, "SIGTERM") {
				t.Errorf("stderr does not report the SIGTERM:\n%s", stderr)
			}
			if tc.slow {
				if took < grace || took > grace+3*time.Second || !strings.Contains(stderr, "SIGKILL") {
					t.Errorf("exited %v after the loss, want just after --grace %v and a SIGKILL; stderr:\n%s", took, grace, stderr)
				}
			} else if took >= grace || strings.Contains(stderr, "SIGKILL") {
				t.Errorf("exited %v after the loss, want before --grace %v without SIGKILL; stderr:\n%s", took, grace, stderr)
			}
			t.Logf("exited %v after the loss", took)
		})
	}
}

// SIGTERM to baton run goes to the command, whose status baton run
// returns; before the command starts, a signal stops the wait.
func TestRunSignals(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	p := startRun(t, "--server", ts.addr, "job", "--", "sh", "-c",
		`trap 'echo forwarded; exit 7' TERM; echo ready; while :; do sleep 0.05; done`)
	if l := p.line(); l != "ready" {
		t.Fatalf("command said %q", l)
	}
	waiter := startRun(t, "--server", ts.addr, "--lease", "400ms", "job", "--", "sh", "-c", "echo ran")
	ts.waitQueued(t)
	waiter.cmd.Process.Signal(syscall.SIGINT)
	if code, out := waiter.wait(); code != 128+int(syscall.SIGINT) || out != "" {
		t.Errorf("SIGINT while waiting: exit %d, output %q; want %d; stderr:\n%s", code, out, 128+int(syscall.SIGINT), waiter.stderr)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	code, out := p.wait()
	if code != 7 || out != "forwarded" {
		t.Errorf("SIGTERM: exit %d, output %q; want 7 and %q; stderr:\n%s", code, out, "forwarded", p.stderr)
	}
}

// Signals to baton run escalate: a second SIGINT, or any signal --grace
// after the first, kills the command's group; stderr says what went where.
func TestRunSignalEscalation(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	const script = `trap 'echo got' INT TERM HUP; echo ready; while :; do sleep 0.05; done`
	t.Run("second SIGINT", func(t *testing.T) {
		t.Parallel()
		p := startRun(t, "--server", ts.addr, "second-int", "--", "sh", "-c", script)
		if l := p.line(); l != "ready" {
			t.Fatalf("command said %q", l)
		}
		for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGTERM, syscall.SIGINT} {
			p.cmd.Process.Signal(sig)
			if l := p.line(); l != "got" {
				t.Fatalf("after %v the command said %q; stderr:\n%s", sig, l, p.stderr)
			}
		}
		p.cmd.Process.Signal(syscall.SIGINT)
		code, _ := p.wait()
		if code != 128+int(syscall.SIGKILL) {
			t.Errorf("exit %d, want %d (killed); stderr:\n%s", code, 128+int(syscall.SIGKILL), p.stderr)
		}
		stderr := p.stderr.String()
		for _, want := range []string{"forwarded SIGTERM to the command (process group", "forwarded SIGINT", "got SIGINT again; sending SIGKILL"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("stderr does not say %q:\n%s", want, stderr)
			}
		}
	})
	t.Run("signal after grace", func(t *testing.T) {
		t.Parallel()
		const grace = 200 * time.Millisecond
		p := startRun(t, "--server", ts.addr, "--grace", grace.String(), "after-grace", "--", "sh", "-c", script)
		if l := p.line(); l != "ready" {
			t.Fatalf("command said %q", l)
		}
		first := time.Now()
		p.cmd.Process.Signal(syscall.SIGTERM)
		if l := p.line(); l != "got" {
			t.Fatalf("command said %q", l)
		}
		time.Sleep(grace - time.Since(first) + 50*time.Millisecond) // the point is that --grace has passed
		p.cmd.Process.Signal(syscall.SIGTERM)
		if code, _ := p.wait(); code != 128+int(syscall.SIGKILL) {
			t.Errorf("exit %d, want %d (killed); stderr:\n%s", code, 128+int(syscall.SIGKILL), p.stderr)
		}
		if !strings.Contains(p.stderr.String(), "got SIGTERM again; sending SIGKILL") {
			t.Errorf("stderr does not report the SIGKILL:\n%s", p.stderr)
		}
	})
}

// Messages that name the real problem: the lease's minimum, and flags
// after NAME are flags, not a missing "--".
func TestRunUsageMessages(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--lease", "500us", "job", "--", "true"}, "must be from 1ms"},
		{[]string{"--server", "127.0.0.1", "job", "--", "true"}, "want host:port"},
		{[]string{"job", "--no-wait", "true"}, "missing -- between NAME and COMMAND"},
	} {
		var out, errb bytes.Buffer
		runRun(tc.args, &out, &errb)
		if !strings.Contains(errb.String(), tc.want) {
			t.Errorf("baton run %q: stderr %q, want it to say %q", tc.args, errb.String(), tc.want)
		}
	}
}

// Flags may follow NAME, as with the admin commands.
func TestRunFlagsAfterName(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	first := startRun(t, "--server", ts.addr, "job", "--", "sh", "-c", holdScript)
	first.line()
	p := startRun(t, "job", "--server", ts.addr, "--no-wait", "--", "sh", "-c", "echo ran")
	if code, out := p.wait(); code != exitTempFail || out != "" {
		t.Errorf("NAME --no-wait --: exit %d, output %q; want %d; stderr:\n%s", code, out, exitTempFail, p.stderr)
	}
	io.WriteString(first.stdin, "done\n")
	first.wait()
}

// --retry against a server that never answers, until --wait ends: 69, the
// server is unavailable, not 75, the lock is busy.
func TestRunWaitEndsUnreachable(t *testing.T) {
	t.Parallel()
	unreachable := unreachableAddr(t)
	p := startRun(t, "--server", unreachable, "--retry", "--wait", "300ms", "job", "--", "true")
	if code, _ := p.wait(); code != exitUnavailable {
		t.Errorf("exit %d, want %d; stderr:\n%s", code, exitUnavailable, p.stderr)
	}
	if !strings.Contains(p.stderr.String(), "unavailable") {
		t.Errorf("stderr does not say the server is unavailable:\n%s", p.stderr)
	}
}

// -v says that the run waits, logs each retry with its cause, and reports
// the time waited.
func TestRunVerbose(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	first := startRun(t, "--server", ts.addr, "job", "--", "sh", "-c", holdScript)
	first.line()
	second := startRun(t, "-v", "--server", ts.addr, "job", "--", "true")
	ts.waitQueued(t)
	deadline := time.Now().Add(testTimeout)
	for !strings.Contains(second.stderr.String(), "waiting for lock \"job\"") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // polling stderr: the message comes after runWaitingAfter
	}
	io.WriteString(first.stdin, "done\n")
	first.wait()
	if code, _ := second.wait(); code != 0 {
		t.Fatalf("second: exit %d; stderr:\n%s", code, second.stderr)
	}
	for _, want := range []string{`waiting for lock "job"`, `acquired lock "job" after`} {
		if !strings.Contains(second.stderr.String(), want) {
			t.Errorf("-v: stderr does not say %q:\n%s", want, second.stderr)
		}
	}

	unreachable := unreachableAddr(t)
	p := startRun(t, "-v", "--retry", "--wait", "500ms", "--server", unreachable, "job", "--", "true")
	p.wait()
	if !strings.Contains(p.stderr.String(), "attempt 1 for lock \"job\" failed") || !strings.Contains(p.stderr.String(), "retrying") {
		t.Errorf("-v --retry: stderr does not log the retries:\n%s", p.stderr)
	}
}

// --conflict-exit-code replaces 75 for a busy lock, as flock -E does;
// --timeout stops a command that runs too long and exits 124.
func TestRunConflictCodeAndTimeout(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	first := startRun(t, "--server", ts.addr, "job", "--", "sh", "-c", holdScript)
	first.line()
	p := startRun(t, "--server", ts.addr, "--no-wait", "--conflict-exit-code", "3", "job", "--", "echo", "ran")
	if code, out := p.wait(); code != 3 || out != "" {
		t.Errorf("--no-wait --conflict-exit-code 3: exit %d, output %q; want 3; stderr:\n%s", code, out, p.stderr)
	}
	io.WriteString(first.stdin, "done\n")
	first.wait()

	const timeout = 300 * time.Millisecond
	start := time.Now()
	p = startRun(t, "--server", ts.addr, "--timeout", timeout.String(), "--grace", "5s", "job", "--",
		"sh", "-c", "echo ready; sleep 30; echo finished")
	if l := p.line(); l != "ready" {
		t.Fatalf("command said %q", l)
	}
	code, out := p.wait()
	if took := p.end.Sub(start); took < timeout || took > 4*time.Second {
		t.Errorf("--timeout %v: exited after %v, want just after the timeout (before --grace 5s)", timeout, took)
	} else {
		t.Logf("--timeout %v: exited after %v", timeout, took)
	}
	if code != exitTimeout || out != "" {
		t.Errorf("--timeout: exit %d, output %q; want %d; stderr:\n%s", code, out, exitTimeout, p.stderr)
	}
	if !strings.Contains(p.stderr.String(), "--timeout") {
		t.Errorf("stderr does not name --timeout:\n%s", p.stderr)
	}
	for _, args := range [][]string{{"--timeout", "-1s", "job", "--", "true"}, {"--conflict-exit-code", "256", "job", "--", "true"}} {
		var o, e bytes.Buffer
		if code := runRun(args, &o, &e); code != exitUsage {
			t.Errorf("baton run %q: exit %d, want %d", args, code, exitUsage)
		}
	}
}

// --wait and --no-wait exclude each other from any source.
func TestRunUsageEnv(t *testing.T) {
	t.Setenv("BATON_NO_WAIT", "true")
	var out, errb bytes.Buffer
	if code := runRun([]string{"--wait", "1s", "job", "--", "true"}, &out, &errb); code != exitUsage {
		t.Errorf("BATON_NO_WAIT=true with --wait: exit %d, want %d", code, exitUsage)
	}
	t.Setenv("BATON_NO_WAIT", "false")
	t.Setenv("BATON_LEASE", "0s")
	if code := runRun([]string{"job", "--", "true"}, &out, &errb); code != exitUsage {
		t.Errorf("BATON_LEASE=0s: exit %d, want %d", code, exitUsage)
	}
}

// silentServer grants the first claim and then answers nothing, so that
// the client gives up; it reports when the ACQUIRE arrived and when the
// client closed the connection.
type silentServer struct {
	addr     string
	acquired chan time.Time
	closedAt chan time.Time
}

func startSilentServer(t *testing.T) *silentServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &silentServer{addr: ln.Addr().String(), acquired: make(chan time.Time, 1), closedAt: make(chan time.Time, 1)}
	done := make(chan struct{})
	var conn net.Conn
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		conn = c
		var typ [1]byte
		if _, err := io.ReadFull(c, typ[:]); err != nil || protocol.Type(typ[0]) != protocol.TypeAcquire {
			t.Errorf("silent server: first frame %v, %v", typ, err)
			return
		}
		if _, err := protocol.ReadAcquireBody(c); err != nil {
			t.Errorf("silent server: %v", err)
			return
		}
		s.acquired <- time.Now()
		c.Write(protocol.AppendAcquired(nil, 1))
		io.Copy(io.Discard, c) // heartbeats, unanswered, until the client closes
		s.closedAt <- time.Now()
	}()
	t.Cleanup(func() {
		ln.Close()
		if conn != nil {
			conn.Close()
		}
		<-done
	})
	return s
}

// After a heartbeat timeout, baton run keeps the connection (and so the
// claim) until COMMAND has exited, or until anchor + lease if it takes
// longer: the server cannot hand the lock on while COMMAND is stopping.
func TestRunKeepsClaimUntilCommandExits(t *testing.T) {
	// Not beside other tests (no t.Parallel; its two cases run side by
	// side): it bounds the close to 100 ms after anchor + lease, as read
	// by the fake server, and in the parallel phase under CI's load that
	// read came 300 ms late.
	const lease = 2 * time.Second // gives up at 1.6s, closes by 2s
	const stop = 150 * time.Millisecond
	for _, tc := range []struct {
		name   string
		script string
		exits  bool // COMMAND exits within the lease's last fifth
	}{
		{"command stops soon after SIGTERM", fmt.Sprintf(`trap 'sleep %g; echo stopped; exit 0' TERM; echo ready; while :; do sleep 0.05; done`, stop.Seconds()), true},
		{"command ignores SIGTERM", `trap '' TERM; echo ready; while :; do sleep 0.05; done`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := startSilentServer(t)
			p := startRun(t, "--server", s.addr, "--lease", lease.String(), "--grace", "1500ms", "job", "--", "sh", "-c", tc.script)
			if l := p.line(); l != "ready" {
				t.Fatalf("command said %q", l)
			}
			acq := <-s.acquired
			if tc.exits {
				if l := p.line(); l != "stopped" {
					t.Fatalf("command said %q, want stopped", l)
				}
			}
			var closed time.Time
			select {
			case closed = <-s.closedAt:
			case <-time.After(testTimeout):
				t.Fatalf("baton run did not close its connection; stderr:\n%s", p.stderr)
			}
			if code, _ := p.wait(); code != exitLost {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, exitLost, p.stderr)
			}
			d := closed.Sub(acq)
			if tc.exits {
				// The give-up comes at 0.8·lease after ACQUIRE's send, a
				// moment before the fake read it; COMMAND exits stop later.
				if earliest := lease*4/5 + stop - 50*time.Millisecond; d < earliest {
					t.Errorf("connection closed %v after ACQUIRE, before COMMAND can have stopped (%v after the give-up)", d, stop)
				}
				if d > lease+100*time.Millisecond {
					t.Errorf("connection closed %v after ACQUIRE, after anchor + lease", d)
				}
			} else if d < lease-150*time.Millisecond || d > lease+500*time.Millisecond {
				t.Errorf("connection closed %v after ACQUIRE; want at anchor + lease, about %v", d, lease)
			}
			t.Logf("connection closed %v after ACQUIRE (give-up at 0.8·lease = %v)", d, lease*4/5)
		})
	}
}

// -v with --admin names who holds the lock and how many wait, from the
// admin API; without --admin it says how to get that.
func TestRunVerboseNamesHolder(t *testing.T) {
	t.Parallel()
	f := startServe(t, func(c *serveConfig) { c.adminListen = "127.0.0.1:0" })
	holder := opstest.DialV2(t, f.addrs.protocol, 10*time.Second, "deploy pid 81")
	holder.Claim(1, protocol.ModeExclusive, 0, "job")
	tok := holder.ExpectV2(protocol.TypeGranted, 1, 0).Token
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--admin", f.addrs.admin}, []string{fmt.Sprintf(`held by %s ("deploy pid 81") for `, holder.Addr()), fmt.Sprintf("token %d; 1 waiting", tok)}},
		{nil, []string{"held by another client, or the server is slow; --admin names the admin API"}},
	} {
		args := append([]string{"-v", "--wait", "1500ms", "--server", f.addrs.protocol}, tc.args...)
		p := startRun(t, append(args, "job", "--", "true")...)
		if code, _ := p.wait(); code != exitTempFail {
			t.Fatalf("%q: exit %d, want %d; stderr:\n%s", tc.args, code, exitTempFail, p.stderr)
		}
		for _, want := range tc.want {
			if !strings.Contains(p.stderr.String(), want) {
				t.Errorf("%q: stderr does not say %q:\n%s", tc.args, want, p.stderr)
			}
		}
	}
}

// unreachedAtDeadline: --wait ending during a dial says the server was
// unavailable, as a refused dial before it does; only a wait in the
// server's queue says the lock was busy. (CI saw exit 75 under load: the
// deadline came while the first dial was still under way.)
func TestRunUnreachedAtDeadline(t *testing.T) {
	dialCut := &net.OpError{Op: "dial", Net: "tcp", Err: context.DeadlineExceeded}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, tc := range []struct {
		last error
		want bool
	}{
		{nil, false},
		{refused, true},
		{fmt.Errorf("baton: %w", dialCut), true},
		{context.DeadlineExceeded, false}, // queued when --wait ended
		{fmt.Errorf("waiting: %w", context.DeadlineExceeded), false},
	} {
		if got := unreachedAtDeadline(tc.last); got != tc.want {
			t.Errorf("unreachedAtDeadline(%v) = %v, want %v", tc.last, got, tc.want)
		}
	}
}
