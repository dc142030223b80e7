package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/opstest"
	"github.com/batonlock/baton/protocol"
)

// Tests of 'baton mount' with programs no one here wrote (flock(1),
// Python's fcntl.lockf, sqlite3) through two mounts of one directory
// against one real 'baton serve'. They need root and FUSE; outside CI
// they skip without them, under CI=true they fail.

// needFUSE skips (fails under CI=true) unless the test can mount FUSE.
func needFUSE(t *testing.T) {
	t.Helper()
	var why string
	switch _, err := os.Stat("/dev/fuse"); {
	case os.Geteuid() != 0:
		why = "baton mount needs root"
	case err != nil:
		if out, err := exec.Command("modprobe", "fuse").CombinedOutput(); err != nil {
			why = fmt.Sprintf("no /dev/fuse, modprobe fuse: %v %s", err, out)
		}
	}
	if why == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal(why)
	}
	t.Skip(why)
}

// mountPair starts 'baton serve' and two 'baton mount's of one new
// directory; it returns the directory and the two mount points.
type mountPair struct {
	addr, src, a, b string
	procA, procB    *exec.Cmd
}

func startMountPair(t *testing.T) *mountPair {
	t.Helper()
	needFUSE(t)
	srv := startBaton(t, "-listen", "127.0.0.1:0")
	addr, _ := srv.waitLog(t, "baton listening")["addr"].(string)
	dir := t.TempDir()
	p := &mountPair{addr: addr, src: filepath.Join(dir, "shared"), a: filepath.Join(dir, "a"), b: filepath.Join(dir, "b")}
	for _, d := range []string{p.src, p.a, p.b} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	p.procA = startMount(t, addr, p.src, p.a, "host-a")
	p.procB = startMount(t, addr, p.src, p.b, "host-b")
	return p
}

// startMount runs 'baton mount' and waits until it says it is mounted.
// Cleanup unmounts with SIGTERM, or detaches a mount whose process died.
func startMount(t *testing.T, addr, src, mnt, label string, flags ...string) *exec.Cmd {
	t.Helper()
	args := append([]string{"mount", "--server", addr, "--label", label, "--namespace", "test"}, flags...)
	cmd := exec.Command(batonBin, append(args, src, mnt)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	mounted := make(chan bool, 1)
	var log strings.Builder
	logDone := make(chan struct{})
	go func() {
		defer close(logDone)
		sc := bufio.NewScanner(stderr)
		said := false
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
			if !said && strings.Contains(sc.Text(), "mounted on") {
				said = true
				mounted <- true
			}
		}
		if !said {
			mounted <- false
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		select {
		case <-exited:
		case <-time.After(testTimeout):
			cmd.Process.Kill()
			<-exited
		}
		syscall.Unmount(mnt, syscall.MNT_DETACH) // a killed mount stays until detached
		<-logDone
		if t.Failed() {
			t.Logf("baton mount %s:\n%s", label, log.String())
		}
	})
	select {
	case ok := <-mounted:
		if !ok {
			<-logDone
			t.Fatalf("baton mount %s failed:\n%s", label, log.String())
		}
	case <-time.After(testTimeout):
		t.Fatalf("baton mount %s: not mounted within %v", label, testTimeout)
	}
	return cmd
}

// holder runs cmd, which prints a line once it holds its lock and then
// holds it until its stdin closes.
type holder struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
}

func startHolder(t *testing.T, name string, args ...string) *holder {
	t.Helper()
	h := &holder{cmd: exec.Command(name, args...), lines: make(chan string, 16)}
	var err error
	if h.in, err = h.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := h.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	h.cmd.Stderr = os.Stderr
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
		close(h.lines)
	}()
	t.Cleanup(func() {
		h.in.Close()
		h.cmd.Process.Kill()
		// A process blocked in a lock request of a mount cannot die
		// until it is answered; a later cleanup may be what answers it.
		exited := make(chan struct{})
		go func() { h.cmd.Wait(); close(exited) }()
		select {
		case <-exited:
		case <-time.After(testTimeout):
		}
	})
	return h
}

// line waits for the holder's next line of output.
func (h *holder) line(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-h.lines:
		if !ok {
			t.Fatalf("%v exited", h.cmd.Args)
		}
		return l
	case <-time.After(testTimeout):
		t.Fatalf("%v: no output within %v", h.cmd.Args, testTimeout)
	}
	return ""
}

// waitBlocked waits until process pid sleeps in a FUSE request (its lock
// request is on its way to the server, or queued there).
func waitBlocked(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for time.Now().Before(deadline) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", pid))
		if w := string(b); strings.Contains(w, "fuse") || strings.Contains(w, "request_wait_answer") {
			return
		}
		time.Sleep(time.Millisecond)
	}
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", pid))
	t.Fatalf("process %d not blocked in FUSE within %v (wchan %q)", pid, testTimeout, b)
}

// TestMountFlock: flock(1) through one mount excludes flock(1) through
// the other, and a blocked flock proceeds once the holder lets go.
func TestMountFlock(t *testing.T) {
	t.Parallel()
	flock := needTool(t, "flock")
	p := startMountPair(t)
	if err := os.WriteFile(filepath.Join(p.a, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	h := startHolder(t, flock, filepath.Join(p.a, "f"), "sh", "-c", "echo held; read x")
	h.line(t)
	if err := exec.Command(flock, "-n", filepath.Join(p.b, "f"), "true").Run(); err == nil {
		t.Fatal("flock -n through mount b succeeded while mount a's flock holds the file")
	}
	w := startHolder(t, flock, filepath.Join(p.b, "f"), "echo", "got")
	waitBlocked(t, w.cmd.Process.Pid)
	released := time.Now()
	h.in.Close()
	if l := w.line(t); l != "got" {
		t.Fatalf("waiter printed %q", l)
	}
	t.Logf("blocked flock(1) through mount b proceeded %v after the holder let go", time.Since(released))
	// Shared locks coexist across mounts.
	s1 := startHolder(t, flock, "-s", filepath.Join(p.a, "f"), "sh", "-c", "echo held; read x")
	s1.line(t)
	if out, err := exec.Command(flock, "-s", "-n", filepath.Join(p.b, "f"), "echo", "shared").CombinedOutput(); err != nil {
		t.Fatalf("a second shared flock through mount b: %v %s", err, out)
	}
}

// TestMountInterruptedWait: a lock wait that a signal interrupts is
// withdrawn, not left queued. flock(1) -w gives up after its timeout
// (SIGALRM interrupts flock(2): the kernel sends FUSE_INTERRUPT, the
// mount cancels the request and withdraws the wait); then the holder
// lets go, and the file is free at once through either mount. A wait
// left queued would be granted to the mount of the process that gave
// up, which holds the file open no more: the later flock -n would fail.
// The same for a blocked flock(1) killed with SIGKILL, and for a POSIX
// range, with Python's fcntl.lockf and a signal handler that raises.
func TestMountInterruptedWait(t *testing.T) {
	t.Parallel()
	flock := needTool(t, "flock")
	python := needTool(t, "python3")
	p := startMountPair(t)
	if err := os.WriteFile(filepath.Join(p.src, "f"), make([]byte, 100), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Run("flock", func(t *testing.T) {
		h := startHolder(t, flock, filepath.Join(p.a, "f"), "sh", "-c", "echo held; read x")
		h.line(t)
		start := time.Now()
		err := exec.Command(flock, "-w", "1", "-E", "75", filepath.Join(p.b, "f"), "echo", "got").Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 75 {
			t.Fatalf("flock -w 1 through mount b while mount a's flock holds the file: %v, want exit 75 (timed out)", err)
		}
		if took := time.Since(start); took < 900*time.Millisecond {
			t.Fatalf("flock -w 1 gave up after %v, before its timeout", took)
		}
		h.in.Close()
		h.cmd.Wait() // its read fails at the end of input: exit status 1
		for _, mnt := range []string{p.b, p.a} {
			if out, err := exec.Command(flock, "-n", filepath.Join(mnt, "f"), "true").CombinedOutput(); err != nil {
				t.Fatalf("flock -n through %s after the holder let go and the interrupted wait gave up: %v %s", mnt, err, out)
			}
		}
	})
	t.Run("kill-9", func(t *testing.T) {
		// A blocked flock(1) killed with SIGKILL: the kernel interrupts
		// the request it waits in, and the process dies once the mount
		// has answered it.
		h := startHolder(t, flock, filepath.Join(p.a, "f"), "sh", "-c", "echo held; read x")
		h.line(t)
		w := startHolder(t, flock, filepath.Join(p.b, "f"), "echo", "got")
		waitBlocked(t, w.cmd.Process.Pid)
		w.cmd.Process.Kill()
		exited := make(chan error, 1)
		go func() { exited <- w.cmd.Wait() }()
		select {
		case <-exited:
		case <-time.After(testTimeout):
			t.Fatalf("a flock(1) killed while blocked through mount b did not exit within %v", testTimeout)
		}
		h.in.Close()
		h.cmd.Wait()
		for _, mnt := range []string{p.b, p.a} {
			if out, err := exec.Command(flock, "-n", filepath.Join(mnt, "f"), "true").CombinedOutput(); err != nil {
				t.Fatalf("flock -n through %s after the holder let go and the blocked waiter was killed: %v %s", mnt, err, out)
			}
		}
	})
	t.Run("lockf", func(t *testing.T) {
		h := startHolder(t, python, "-c", lockfHold, filepath.Join(p.a, "f"))
		h.line(t)
		w := startHolder(t, python, "-c", lockfInterrupted, filepath.Join(p.b, "f"))
		if l := w.line(t); l != "interrupted" {
			t.Fatalf("lockf interrupted by SIGALRM: %s", l)
		}
		h.in.Close()
		if err := h.cmd.Wait(); err != nil {
			t.Fatalf("holder: %v", err)
		}
		// The process whose wait was interrupted still has the file open:
		// a wait left queued would now be granted to it.
		n := startHolder(t, python, "-c", lockfTry, filepath.Join(p.a, "f"))
		if l := n.line(t); l != "granted" {
			t.Fatalf("non-blocking lockf through mount a after the holder let go: %s", l)
		}
		w.in.Close()
	})
}

// lockfInterrupted waits for bytes 5..14 until SIGALRM, a second later,
// interrupts the wait; it then keeps the file open until stdin closes.
const lockfInterrupted = `
import fcntl, signal, sys
class Alarm(Exception): pass
def alarm(signum, frame): raise Alarm()
signal.signal(signal.SIGALRM, alarm)
f = open(sys.argv[1], "r+")
signal.alarm(1)
try:
    fcntl.lockf(f, fcntl.LOCK_EX, 10, 5)
    print("granted", flush=True)
except Alarm:
    print("interrupted", flush=True)
sys.stdin.read()
`

// lockfTry takes bytes 0..99 without waiting and says whether it got them.
const lockfTry = `
import errno, fcntl, sys
f = open(sys.argv[1], "r+")
try:
    fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB, 100, 0)
    print("granted", flush=True)
except OSError as e:
    print("refused" if e.errno in (errno.EAGAIN, errno.EACCES) else "error %d" % e.errno, flush=True)
`

// lockfScript holds bytes 0..9 of a file with fcntl.lockf (F_SETLKW on a
// POSIX byte range) until stdin closes.
const lockfHold = `
import fcntl, sys
f = open(sys.argv[1], "r+")
fcntl.lockf(f, fcntl.LOCK_EX, 10, 0)
print("held", flush=True)
sys.stdin.read()
`

// lockfWait tries bytes 5..14 without waiting (refused), takes 20..29,
// then waits for 5..14.
const lockfWait = `
import errno, fcntl, sys
f = open(sys.argv[1], "r+")
try:
    fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 5)
    print("nb-granted", flush=True)
except OSError as e:
    print("nb-refused" if e.errno in (errno.EAGAIN, errno.EACCES) else "nb-error %d" % e.errno, flush=True)
fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 20)
print("other-range", flush=True)
fcntl.lockf(f, fcntl.LOCK_EX, 10, 5)
print("promoted", flush=True)
`

// TestMountLockf: Python's fcntl.lockf on byte ranges: an overlapping
// range is refused across mounts, a disjoint one granted, and a waiting
// one promoted when the holder's process ends (its close releases).
func TestMountLockf(t *testing.T) {
	t.Parallel()
	python := needTool(t, "python3")
	p := startMountPair(t)
	if err := os.WriteFile(filepath.Join(p.src, "r"), make([]byte, 100), 0o644); err != nil {
		t.Fatal(err)
	}
	h := startHolder(t, python, "-c", lockfHold, filepath.Join(p.a, "r"))
	h.line(t)
	w := startHolder(t, python, "-c", lockfWait, filepath.Join(p.b, "r"))
	if l := w.line(t); l != "nb-refused" {
		t.Fatalf("non-blocking lockf of an overlapping range through mount b: %s", l)
	}
	if l := w.line(t); l != "other-range" {
		t.Fatalf("disjoint range: %s", l)
	}
	waitBlocked(t, w.cmd.Process.Pid)
	released := time.Now()
	h.in.Close() // the holder exits: closing its file releases its locks
	if l := w.line(t); l != "promoted" {
		t.Fatalf("waiting lockf: %s", l)
	}
	t.Logf("waiting lockf through mount b promoted %v after the holder's stdin closed", time.Since(released))
}

// TestMountSQLite: two sqlite3 processes, each inserting N rows in
// separate transactions into one database through different mounts,
// finish with 2N rows and a sound database.
//
// Without baton's locking (a plain passthrough of the same directory on
// each side, whose fcntl locks stay in each mount's own kernel inode) the
// same run is unsafe: SQLite's locks on one mount are invisible to the
// other, so both processes believe they hold the RESERVED and EXCLUSIVE
// locks at once; each writes its journal and pages over the other's,
// and the run loses rows or ends with "database disk image is malformed"
// from integrity_check.
func TestMountSQLite(t *testing.T) {
	t.Parallel()
	sqlite := needTool(t, "sqlite3")
	p := startMountPair(t)
	const n = 200
	if out, err := exec.Command(sqlite, filepath.Join(p.a, "t.db"), "CREATE TABLE t(side TEXT, i INTEGER)").CombinedOutput(); err != nil {
		t.Fatalf("create: %v %s", err, out)
	}
	script := func(side string) string {
		var b strings.Builder
		b.WriteString(".timeout 30000\n")
		for i := range n {
			fmt.Fprintf(&b, "BEGIN IMMEDIATE; INSERT INTO t VALUES('%s', %d); COMMIT;\n", side, i)
		}
		return b.String()
	}
	errs := make(chan error, 2)
	start := time.Now()
	for _, side := range []string{"a", "b"} {
		mnt := p.a
		if side == "b" {
			mnt = p.b
		}
		cmd := exec.Command(sqlite, "-bail", filepath.Join(mnt, "t.db"))
		cmd.Stdin = strings.NewReader(script(side))
		go func() {
			out, err := cmd.CombinedOutput()
			if err != nil {
				err = fmt.Errorf("sqlite3 through mount %s: %v %s", side, err, out)
			}
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	took := time.Since(start)
	out, err := exec.Command(sqlite, filepath.Join(p.b, "t.db"), "SELECT count(*), count(DISTINCT side||i) FROM t; PRAGMA integrity_check;").CombinedOutput()
	if err != nil {
		t.Fatalf("check: %v %s", err, out)
	}
	if got, want := strings.TrimSpace(string(out)), fmt.Sprintf("%d|%d\nok", 2*n, 2*n); got != want {
		t.Fatalf("after two writers of %d rows: %q, want %q", n, got, want)
	}
	t.Logf("two sqlite3 writers, %d transactions each through different mounts: %v", n, took)
}

// TestMountKill9: kill -9 of the mount process under a flock holder: the
// mount's session closes with its process, and the other mount's blocked
// flock(1) proceeds at once.
func TestMountKill9(t *testing.T) {
	flock := needTool(t, "flock")
	p := startMountPair(t)
	if err := os.WriteFile(filepath.Join(p.src, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	h := startHolder(t, flock, filepath.Join(p.a, "f"), "sh", "-c", "echo held; read x")
	h.line(t)
	w := startHolder(t, flock, filepath.Join(p.b, "f"), "echo", "got")
	waitBlocked(t, w.cmd.Process.Pid)
	killed := time.Now()
	if err := p.procA.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if l := w.line(t); l != "got" {
		t.Fatalf("waiter printed %q", l)
	}
	took := time.Since(killed)
	t.Logf("blocked flock(1) through mount b proceeded %v after kill -9 of mount a", took)
	if took > 100*time.Millisecond {
		t.Errorf("took %v, more than 100ms", took)
	}
}

// BenchmarkMountFlock: one flock(1) run (start, take the lock, run true,
// exit) on a file through 'baton mount' against the same on the plain
// local directory, interleaved; it reports each one's p50 and the ratio.
func BenchmarkMountFlock(b *testing.B) {
	flock, err := exec.LookPath("flock")
	if err != nil {
		b.Skip(err)
	}
	if os.Geteuid() != 0 {
		b.Skip("baton mount needs root")
	}
	srv := startBatonB(b)
	dir := b.TempDir()
	src, mnt := filepath.Join(dir, "src"), filepath.Join(dir, "mnt")
	os.Mkdir(src, 0o755)
	os.Mkdir(mnt, 0o755)
	os.WriteFile(filepath.Join(src, "f"), nil, 0o644)
	m := exec.Command(batonBin, "mount", "--server", srv, src, mnt)
	if err := m.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		m.Process.Signal(syscall.SIGTERM)
		m.Wait()
		syscall.Unmount(mnt, syscall.MNT_DETACH)
	}()
	for i := 0; ; i++ {
		var st syscall.Statfs_t
		if syscall.Statfs(mnt, &st) == nil && st.Type == 0x65735546 { // FUSE_SUPER_MAGIC
			break
		}
		if i == 1000 {
			b.Fatal("not mounted within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var viaMount, local []time.Duration
	run := func(path string) time.Duration {
		t0 := time.Now()
		if out, err := exec.Command(flock, "-n", path, "true").CombinedOutput(); err != nil {
			b.Fatalf("flock %s: %v %s", path, err, out)
		}
		return time.Since(t0)
	}
	for b.Loop() {
		viaMount = append(viaMount, run(filepath.Join(mnt, "f")))
		local = append(local, run(filepath.Join(src, "f")))
	}
	p50 := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Nanoseconds()) / 1e3
	}
	mp, lp := p50(viaMount), p50(local)
	b.ReportMetric(mp, "mount-p50-µs")
	b.ReportMetric(lp, "local-p50-µs")
	b.ReportMetric(mp/lp, "mount/local")
}

// startBatonB runs 'baton serve' on a free port for a benchmark and
// returns its address.
func startBatonB(b *testing.B) string {
	b.Helper()
	cmd := exec.Command(batonBin, "serve", "-log-format", "json", "-listen", "127.0.0.1:0")
	pipe, err := cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(pipe)
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec["msg"] == "baton listening" {
			go io.Copy(io.Discard, pipe)
			return rec["addr"].(string)
		}
	}
	b.Fatal("baton serve exited before listening")
	return ""
}

// lostHold locks bytes 0..9 of argv[1], then, for each line on stdin,
// writes through that descriptor and through an unlocked one of
// argv[2], and says how each went.
const lostHold = `
import errno, fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
other = os.open(sys.argv[2], os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX, 10, 0)
print("held", flush=True)
def attempt(f):
    try:
        os.pwrite(f, b"x", 0)
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
for line in sys.stdin:
    print("locked-" + attempt(fd) + " other-" + attempt(other), flush=True)
`

// startBatonPastGate starts 'baton serve' and waits out its token gate:
// the server's first grant waits for it (up to a second after it
// started; a claim is QUEUED until then), and a range request is
// answered only then, so a mount with a short lease would spend it
// there.
func startBatonPastGate(t *testing.T) (*batonProc, string) {
	t.Helper()
	srv := startBaton(t, "-listen", "127.0.0.1:0")
	addr, _ := srv.waitLog(t, "baton listening")["addr"].(string)
	first := opstest.DialV2(t, addr, 10*time.Second, "gate")
	first.Claim(1, protocol.ModeExclusive, 0, "gate")
	if f := first.ReadV2(); f.Type == protocol.TypeQueued && f.Claim == 1 {
		first.ExpectV2(protocol.TypePromoted, 1, 0)
	} else if f.Type != protocol.TypeGranted || f.Claim != 1 {
		t.Fatalf("CLAIM 1 answered %v, want GRANTED, or QUEUED before the gate", f)
	}
	return srv, addr
}

// dbAndLogDirs makes a source directory holding the files db and log
// (10 bytes each) and an empty mount point beside it.
func dbAndLogDirs(t *testing.T) (src, mnt string) {
	t.Helper()
	dir := t.TempDir()
	src, mnt = filepath.Join(dir, "shared"), filepath.Join(dir, "a")
	for _, d := range []string{src, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"db", "log"} {
		if err := os.WriteFile(filepath.Join(src, f), make([]byte, 10), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return src, mnt
}

// TestMountLostLocksFailIO: when the mount's session is lost (here the
// server is frozen for longer than the mount's lease), its locks are gone
// on the server, so a program that held one must not go on writing as if
// it still did: I/O through the descriptor that held the lock fails with
// EIO (as Linux's NFS client answers for a lost lock), while files
// without locks stay usable.
func TestMountLostLocksFailIO(t *testing.T) {
	t.Parallel()
	python := needTool(t, "python3")
	needFUSE(t)
	srv, addr := startBatonPastGate(t)
	src, mnt := dbAndLogDirs(t)
	startMount(t, addr, src, mnt, "host-a", "--lease", "1s")
	h := startHolder(t, python, "-c", lostHold, filepath.Join(mnt, "db"), filepath.Join(mnt, "log"))
	if l := h.line(t); l != "held" {
		t.Fatalf("holder: %s", l)
	}
	io.WriteString(h.in, "\n")
	if l := h.line(t); l != "locked-ok other-ok" {
		t.Fatalf("before the session is lost: %s", l)
	}
	srv.cmd.Process.Signal(syscall.SIGSTOP)
	defer srv.cmd.Process.Signal(syscall.SIGCONT)
	stopped := time.Now()
	for {
		io.WriteString(h.in, "\n")
		l := h.line(t)
		if l == "locked-EIO other-ok" {
			t.Logf("writes under the lost lock fail with EIO %v after the server froze (lease 1s)", time.Since(stopped).Round(time.Millisecond))
			break
		}
		if l != "locked-ok other-ok" || time.Since(stopped) > testTimeout {
			t.Fatalf("%v after the server froze: %s", time.Since(stopped), l)
		}
		time.Sleep(50 * time.Millisecond)
	}
	srv.cmd.Process.Signal(syscall.SIGCONT)
	io.WriteString(h.in, "\n")
	if l := h.line(t); l != "locked-EIO other-ok" {
		t.Fatalf("after the server is back, the lost lock's descriptor: %s", l)
	}
}

// 'baton mount --server' takes a list of nodes only for a --resumable
// mount, and checks each address: a usage error (exit 2) otherwise,
// before anything is mounted.
func TestMountServerList(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--server", "127.0.0.1:1,127.0.0.1:2"}, "only a --resumable mount"},
		{[]string{"--resumable", "--server", "127.0.0.1:1,nope"}, `address "nope"`},
		{[]string{"--resumable", "--server", "127.0.0.1:1,"}, `address ""`},
	} {
		args := append(append([]string{"mount"}, tc.args...), t.TempDir(), t.TempDir())
		code, _, errOut := cli(args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("baton %q = %d, %q; want %d and %q", args, code, errOut, exitUsage, tc.want)
		}
	}
}

// lostWriter opens argv[1] and argv[2] itself, then, for each line on
// stdin, writes through both and says how each went.
const lostWriter = `
import errno, os, sys
fds = [os.open(p, os.O_RDWR) for p in sys.argv[1:3]]
print("open", flush=True)
def attempt(f):
    try:
        os.pwrite(f, b"y", 1)
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
for line in sys.stdin:
    print("locked-" + attempt(fds[0]) + " other-" + attempt(fds[1]), flush=True)
`

// TestMountLostLockFailsIOOfItsChildren: 'flock FILE cmd' locks FILE
// and runs cmd, which writes to FILE through its own descriptor. When the
// mount's session is lost, cmd's writes to FILE fail with EIO too: I/O
// fails on every descriptor of the file opened through the mount by the
// process that set the lock or a process it started. A process outside
// that tree, with the file open but no lock, writes on, as does cmd to
// a file it did not lock.
func TestMountLostLockFailsIOOfItsChildren(t *testing.T) {
	t.Parallel()
	flock := needTool(t, "flock")
	python := needTool(t, "python3")
	needFUSE(t)
	srv, addr := startBatonPastGate(t)
	src, mnt := dbAndLogDirs(t)
	startMount(t, addr, src, mnt, "host-a", "--lease", "1s")
	db, log := filepath.Join(mnt, "db"), filepath.Join(mnt, "log")
	child := startHolder(t, flock, db, python, "-c", lostWriter, db, log)
	outsider := startHolder(t, python, "-c", lostWriter, db, log)
	for _, h := range []*holder{child, outsider} {
		if l := h.line(t); l != "open" {
			t.Fatalf("%v: %s", h.cmd.Args[:2], l)
		}
		io.WriteString(h.in, "\n")
		if l := h.line(t); l != "locked-ok other-ok" {
			t.Fatalf("before the session is lost, %v: %s", h.cmd.Args[:2], l)
		}
	}
	srv.cmd.Process.Signal(syscall.SIGSTOP)
	defer srv.cmd.Process.Signal(syscall.SIGCONT)
	stopped := time.Now()
	for {
		io.WriteString(child.in, "\n")
		l := child.line(t)
		if l == "locked-EIO other-ok" {
			t.Logf("the child's writes to the lost lock's file fail with EIO %v after the server froze (lease 1s)", time.Since(stopped).Round(time.Millisecond))
			break
		}
		if l != "locked-ok other-ok" || time.Since(stopped) > testTimeout {
			t.Fatalf("%v after the server froze, flock's child: %s", time.Since(stopped), l)
		}
		time.Sleep(50 * time.Millisecond)
	}
	io.WriteString(outsider.in, "\n")
	if l := outsider.line(t); l != "locked-ok other-ok" {
		t.Fatalf("after the lock was lost, a process outside the holder's tree: %s", l)
	}
	srv.cmd.Process.Signal(syscall.SIGCONT)
	io.WriteString(child.in, "\n")
	if l := child.line(t); l != "locked-EIO other-ok" {
		t.Fatalf("after the server is back, flock's child: %s", l)
	}
}
