//go:build unix

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/tlsfiles"
	"golang.org/x/sys/unix"
)

// Exit codes of 'baton run' besides the command's own. The sysexits(3)
// codes say why no command ran; 76 is baton's own.
const (
	exitUnavailable = 69  // EX_UNAVAILABLE: server unreachable, connection lost or claim refused before COMMAND started
	exitTempFail    = 75  // EX_TEMPFAIL: lock busy (--no-wait) or not acquired within --wait
	exitLost        = 76  // lock lost while COMMAND ran
	exitTimeout     = 124 // COMMAND ran longer than --timeout (as timeout(1))
	exitCannotExec  = 126 // COMMAND found but could not be executed
	exitNotFound    = 127 // COMMAND not found
)

const runSynopsis = "baton run [flags] NAME -- COMMAND [ARGS...]"

const runHelp = `
Runs COMMAND while holding the lock NAME on a baton server: waits in the
lock's queue, starts COMMAND in its own process group with BATON_LOCK and
BATON_TOKEN (the fencing token) added to its environment, and releases the
lock when COMMAND exits. Flags go before or after NAME, before --.

The lock is exclusive unless --shared (any number of shared holders at
once, none beside an exclusive one; a queued exclusive claim is never
overtaken by later shared ones) or --semaphore N (at most N holders, all
giving the same N). Both take their claim on a protocol version 2 session;
BATON_TOKEN is that claim's own fencing token.

With --resumable the claim (in any mode) is held on a resumable version 2
session: if the connection breaks, or in a cluster the node dies, baton
run reconnects and re-asserts the claim with its token, and COMMAND runs
on undisturbed if that succeeds within 0.8 of --lease after the last
confirmed heartbeat; otherwise the lock is lost as usual. The server
keeps the claim for a lease after the connection breaks, so the death of
baton run releases the lock at once without --resumable, and only a
lease later with it.

If the lock is lost while COMMAND runs, its process group gets SIGTERM,
then SIGKILL after --grace. After a heartbeat timeout the claim is kept
until COMMAND has exited, and at most until one lease after the last
confirmed heartbeat, so that the next holder cannot start while COMMAND
is stopping. SIGINT, SIGTERM and SIGHUP sent to baton run are forwarded
to COMMAND's process group; a second SIGINT, or any of them --grace after
the first, sends SIGKILL instead. Before COMMAND starts they stop the
wait. When stdin is the terminal baton run runs in the foreground of,
COMMAND gets the terminal's foreground (it can prompt; Ctrl-C reaches it
directly), and baton run takes it back when COMMAND exits.

On Linux, COMMAND runs under a small baton process that keeps every
process COMMAND starts in its tree (--isolate): if baton run dies, even by
SIGKILL, and when COMMAND exits, it kills them all, so that none outlives
the lock; see docs/cli-run.md for limits.

Exit status:
  N        COMMAND's own status, when it ran with the lock held throughout
           (128+S if it was killed by signal S)
  2        usage error (bad flag, NAME, lease or --server; --wait with
           --no-wait); never retried
  69       EX_UNAVAILABLE: server unreachable (also when --wait ends while
           --retry waits for it), connection lost, or claim refused by
           the server before COMMAND started
  75       EX_TEMPFAIL: lock busy (--no-wait), or not acquired within --wait
           (--conflict-exit-code changes it)
  76       lock lost while COMMAND ran, whatever COMMAND's own status
  124      COMMAND ran longer than --timeout and was stopped
  126      COMMAND could not be executed
  127      COMMAND not found
  128+S    baton run got signal S before COMMAND started
`

type runConfig struct {
	server  string
	lease   time.Duration
	wait    time.Duration
	noWait  bool
	retry   bool
	grace   time.Duration
	isolate bool
	verbose bool
	// conflict is the exit status for a busy lock (--no-wait) or an
	// expired --wait, 75 unless --conflict-exit-code says otherwise.
	conflict int
	timeout  time.Duration // --timeout: stop COMMAND after this long; 0: never
	tls      *tlsfiles.ClientFiles
	dialer   baton.Dialer // nil: plain TCP
	dir      string       // --dir: the shared-directory lock instead of a server (rundir.go)
	// shared and semaphore (--shared, --semaphore N) take a version 2
	// claim on a session (runsession.go); neither: a version 1 claim.
	shared    bool
	semaphore int
	// resumable (--resumable) takes the claim, in any mode, on a
	// resumable version 2 session (runsession.go).
	resumable bool
	// admin (--admin): the admin API to ask, while waiting, who holds
	// the lock and how long its queue is; empty: do not ask.
	admin string
	// elect (baton elect) campaigns with value instead of claiming
	// (elect.go); prog names the command in messages ("" is baton run).
	elect *string
	prog  string
}

// progName is the command's name in messages.
func (cfg *runConfig) progName() string {
	if cfg.prog == "" {
		return "baton run"
	}
	return cfg.prog
}

func runFlags(stderr io.Writer) (*flagSet, *runConfig) {
	cfg := &runConfig{}
	fs := newFlagSet("baton run", runSynopsis, stderr)
	fs.StringVar(&cfg.server, "server", "BATON_SERVER", "127.0.0.1:7070", "lock server address (host:port)")
	fs.DurationVar(&cfg.lease, "lease", "BATON_LEASE", 2*time.Second, "lease: silence after which the server frees the lock (heartbeats every lease/4)")
	fs.DurationVar(&cfg.wait, "wait", "BATON_WAIT", 0, "give up (exit 75) if the lock is not held within this time; 0 waits forever")
	fs.BoolVar(&cfg.noWait, "no-wait", "BATON_NO_WAIT", false, "exit 75 at once if another client holds the lock")
	fs.BoolVar(&cfg.retry, "retry", "BATON_RETRY", false, "retry an unreachable or restarting server with backoff until the lock is held")
	fs.IntVar(&cfg.conflict, "conflict-exit-code", "BATON_CONFLICT_EXIT_CODE", exitTempFail, "exit status when the lock is busy (--no-wait) or not held within --wait, as flock -E")
	fs.DurationVar(&cfg.timeout, "timeout", "BATON_TIMEOUT", 0, "stop COMMAND (SIGTERM, SIGKILL after --grace) if it runs longer than this, and exit 124; 0: no limit")
	fs.DurationVar(&cfg.grace, "grace", "BATON_GRACE", 10*time.Second, "after a lost lock, time from SIGTERM to SIGKILL of COMMAND's process group")
	fs.BoolVar(&cfg.verbose, "v", "BATON_VERBOSE", false, "say on stderr when waiting, each retry and its cause, and the time waited (on by default when stderr is a terminal)")
	fs.BoolVar(&cfg.isolate, "isolate", "BATON_ISOLATE", true, "kill every process COMMAND started when it exits or baton run dies, even by SIGKILL (Linux; false: only COMMAND dies with baton run)")
	fs.BoolVar(&cfg.shared, "shared", "BATON_SHARED", false, "take a shared (read) lock: any number of shared holders at once, none with an exclusive one (protocol v2)")
	fs.StringVar(&cfg.admin, "admin", "BATON_ADMIN_ADDRESS", "", "admin API to ask, when waiting, who holds the lock and how many queue (as 'baton show'; the same --tls-* files); empty: do not ask")
	fs.IntVar(&cfg.semaphore, "semaphore", "BATON_SEMAPHORE", 0, "take one of N places of a semaphore: at most N holders at once, every holder giving the same N (protocol v2); 0: exclusive")
	fs.BoolVar(&cfg.resumable, "resumable", "BATON_RESUMABLE", false, "hold the lock on a resumable session (protocol v2): a broken connection, or in a cluster the death of the node, does not interrupt COMMAND if the session is resumed within 0.8 of --lease; off: baton run's death releases the lock at once")
	cfg.tls = clientTLSFlags(fs)
	fs.StringVar(&cfg.dir, "dir", "BATON_DIR", "", "take the lock kept in this shared directory instead of a server's (no NAME; see docs/dirlock.md)")
	return fs, cfg
}

func runRun(args []string, stdout, stderr io.Writer) int {
	fs, cfg := runFlags(stderr)
	if code := fs.parseOrExit(args, stdout, stderr); code >= 0 {
		if code == exitOK {
			fmt.Fprint(stdout, runHelp)
		}
		return code
	}
	if cfg.dir != "" {
		if cfg.shared || cfg.semaphore != 0 || cfg.resumable {
			fmt.Fprintf(stderr, "baton run: --shared, --semaphore and --resumable take a server's lock, not --dir's\nRun 'baton run -h' for usage.\n")
			return exitUsage
		}
		return runDir(fs, cfg, args, stdout, stderr)
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "baton run: "+format+"\n", a...)
		fmt.Fprintf(stderr, "Usage: %s\nRun 'baton run -h' for more.\n", runSynopsis)
		return exitUsage
	}
	name, argv, code := nameAndCommand(fs, usage)
	if code >= 0 {
		return code
	}
	return runHeld(fs, cfg, name, argv, usage, stdout, stderr)
}

// runHeld checks the flags of a lock on a server, takes the lock and
// runs argv while it is held (baton run, baton elect).
func runHeld(fs *flagSet, cfg *runConfig, name string, argv []string, usage func(format string, a ...any) int, stdout, stderr io.Writer) int {
	waitSet := false
	fs.Visit(func(f *flag.Flag) { waitSet = waitSet || f.Name == "wait" })
	switch {
	case cfg.noWait && waitSet:
		return usage("--wait and --no-wait exclude each other")
	case cfg.wait < 0:
		return usage("--wait must not be negative, got %v", cfg.wait)
	case cfg.grace < 0:
		return usage("--grace must not be negative, got %v", cfg.grace)
	case cfg.timeout < 0:
		return usage("--timeout must not be negative, got %v", cfg.timeout)
	case cfg.conflict < 0 || cfg.conflict > 255:
		return usage("--conflict-exit-code must be from 0 to 255, got %d", cfg.conflict)
	case cfg.shared && cfg.semaphore != 0:
		return usage("--shared and --semaphore exclude each other")
	case cfg.semaphore < 0 || int64(cfg.semaphore) > math.MaxUint32:
		return usage("--semaphore must be from 1 to %d (0: exclusive), got %d", uint32(math.MaxUint32), cfg.semaphore)
	}
	dialer, code := checkTarget(name, cfg.lease, cfg.server, cfg.tls, usage)
	if code >= 0 {
		return code
	}
	cfg.dialer = dialer

	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)

	lock, code := runAcquire(cfg, name, sigs, stderr)
	if lock == nil {
		return code
	}
	return runCommand(cfg, lock.held, argv, sigs, stdout, stderr)
}

// nameAndCommand returns NAME and COMMAND of 'NAME -- COMMAND [ARGS...]'
// after fs's flags, with flags allowed after NAME too; code is the exit
// code of a usage error, else -1.
func nameAndCommand(fs *flagSet, usage func(format string, a ...any) int) (name string, argv []string, code int) {
	rest := fs.Args()
	if len(rest) > 1 && rest[1] != "--" && strings.HasPrefix(rest[1], "-") {
		// Flags after NAME, as the admin commands take them.
		in := rest[1:]
		fs.SetOutput(io.Discard)
		err := fs.FlagSet.Parse(in)
		fs.SetOutput(nil)
		if err != nil {
			return "", nil, usage("%v", strings.TrimSpace(err.Error()))
		}
		if after := fs.Args(); terminated(in, after) {
			rest = append([]string{rest[0], "--"}, after...)
		} else {
			rest = append([]string{rest[0]}, after...)
		}
	}
	switch {
	case len(rest) == 0:
		return "", nil, usage("missing NAME")
	case len(rest) == 1 || rest[1] != "--":
		return "", nil, usage("missing -- between NAME and COMMAND")
	case len(rest) == 2:
		return "", nil, usage("missing COMMAND")
	}
	return rest[0], rest[2:], -1
}

// waitContext is the context of the wait for a lock: it ends at --wait,
// or when one of sigs arrives. stop ends the watch for signals and
// returns the signal that ended the wait, if any, which decides the exit
// code.
func waitContext(cfg *runConfig, sigs <-chan os.Signal) (ctx context.Context, stop func() os.Signal) {
	ctx, cancel := context.WithCancel(context.Background())
	if cfg.wait > 0 {
		ctx, cancel = context.WithTimeout(context.Background(), cfg.wait)
	}
	var sig os.Signal
	done, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case sig = <-sigs:
			cancel()
		case <-done:
		}
	}()
	return ctx, func() os.Signal {
		close(done)
		<-watched
		cancel()
		return sig
	}
}

// runAcquire takes the lock, honouring --wait, --no-wait and --retry; a
// signal stops it. It returns the lock, or nil and the exit code.
func runAcquire(cfg *runConfig, name string, sigs <-chan os.Signal, stderr io.Writer) (*takenLock, int) {
	ctx, stopWaiting := waitContext(cfg, sigs)

	c := baton.New(baton.Config{Address: cfg.server, Dialer: cfg.dialer})
	verbose := cfg.verbose || isTerminal(stderr)
	start := time.Now()
	// The lock protocol does not say who holds the lock or how many wait
	// ahead: say that we still wait once the lock was not granted at
	// once, and ask the admin API who holds it when --admin says where.
	var saidWaiting atomic.Bool
	waiting := time.AfterFunc(runWaitingAfter, func() {
		if verbose && !cfg.noWait {
			saidWaiting.Store(true)
			fmt.Fprintf(stderr, cfg.progName()+": waiting for lock %q on %s (%s)\n", name, cfg.server, whoHolds(ctx, cfg, name))
		}
	})
	defer waiting.Stop()
	var lock *takenLock
	var last error // the last attempt's own error
	attempts := 0
	attempt := func() (err error) {
		attempts++
		lock, err = takeLock(ctx, cfg, c, name)
		last = err
		if err != nil && verbose && cfg.retry && baton.Temporary(err) && ctx.Err() == nil {
			fmt.Fprintf(stderr, cfg.progName()+": attempt %d for lock %q failed: %v; retrying with backoff\n", attempts, name, err)
		}
		return err
	}
	var err error
	if cfg.retry {
		err = baton.Retry(ctx, attempt)
	} else {
		err = attempt()
	}
	sig := stopWaiting()

	switch {
	case sig != nil:
		if lock != nil {
			lock.drop()
		}
		fmt.Fprintf(stderr, cfg.progName()+": %v while waiting for lock %q\n", sig, name)
		return nil, 128 + int(sig.(syscall.Signal))
	case err == nil:
		if cfg.verbose || saidWaiting.Load() { // on a terminal, only after a wait
			got := "acquired lock"
			if cfg.elect != nil {
				got = "leading" // an election is won, not a lock taken
			}
			fmt.Fprintf(stderr, cfg.progName()+": %s %q after %v (token %d)\n", got, name, time.Since(start).Round(time.Millisecond), lock.token)
		}
		return lock, 0
	case errors.Is(err, baton.ErrBusy):
		fmt.Fprintf(stderr, cfg.progName()+": lock %q is busy\n", name)
		return nil, cfg.conflict
	case errors.Is(err, context.DeadlineExceeded) && unreachedAtDeadline(last):
		// --wait ended between retries: the server was not reachable, so
		// nobody can say the lock was busy.
		fmt.Fprintf(stderr, cfg.progName()+": lock %q: server still unavailable when --wait %v ended: %v\n", name, cfg.wait, last)
		return nil, exitUnavailable
	case errors.Is(err, context.DeadlineExceeded):
		fmt.Fprintf(stderr, cfg.progName()+": lock %q not acquired within %v: %v\n", name, cfg.wait, err)
		return nil, cfg.conflict
	}
	fmt.Fprintf(stderr, cfg.progName()+": lock %q: %v\n", name, err)
	return nil, exitUnavailable
}

// unreachedAtDeadline reports whether the last attempt before --wait
// ended never reached the server: it failed on its own, or the deadline
// cut its dial short (a loaded machine may not finish a refused dial in
// time). An attempt the deadline ended while queued at the server says
// the lock was busy.
func unreachedAtDeadline(last error) bool {
	var op *net.OpError
	switch {
	case last == nil:
		return false
	case errors.As(last, &op) && op.Op == "dial":
		return true
	}
	return !errors.Is(last, context.DeadlineExceeded)
}

// heldLock is what runCommand needs of a held lock, whichever kind.
type heldLock struct {
	what string          // how messages name it: `lock "NAME"`, `lock in DIR`
	env  []string        // BATON_* variables for the command
	lost <-chan struct{} // closed when the lock is lost
	// cause says why the lock was lost, once lost is closed.
	cause func() string
	// release gives the lock up once the command has exited; its error
	// reports a loss, even one noticed only now.
	release func() error
}

// takenLock is a lock runAcquire took: a claim of Client.Acquire, or a
// claim on a session (runsession.go).
type takenLock struct {
	held  heldLock
	token uint64
	drop  func() // gives the lock up before the command started
}

// takeLock makes one attempt at the lock, in the mode of cfg.
func takeLock(ctx context.Context, cfg *runConfig, c *baton.Client, name string) (*takenLock, error) {
	if cfg.elect != nil {
		return takeElection(ctx, cfg, c, name)
	}
	if cfg.shared || cfg.semaphore > 0 || cfg.resumable {
		return takeSessionLock(ctx, cfg, c, name)
	}
	var lock *baton.Claim
	var err error
	if cfg.noWait {
		lock, err = c.TryAcquire(ctx, name, cfg.lease)
	} else {
		lock, err = c.Acquire(ctx, name, cfg.lease)
	}
	if err != nil {
		return nil, err
	}
	return &takenLock{held: serverLock(lock), token: lock.Token(), drop: func() { lock.Release(context.Background()) }}, nil
}

// serverLock is a claim of Client.Acquire as runCommand needs it.
func serverLock(lock *baton.Claim) heldLock {
	return heldLock{
		what: fmt.Sprintf("lock %q", lock.Name()),
		env: []string{"BATON_LOCK=" + lock.Name(),
			"BATON_TOKEN=" + strconv.FormatUint(lock.Token(), 10)},
		lost:  lock.Lost(),
		cause: func() string { return lock.Err().Error() },
		// Release closes the connection. After a heartbeat timeout, or
		// an ERROR 0x01 (a cluster moving the name), the claim kept it
		// open while the command stopped, so the next holder could not
		// start before the command had exited (or the claim's CloseBy
		// passed).
		release: func() error { return lock.Release(context.Background()) },
	}
}

// runCommand runs argv while l is held, stops it if the lock is lost,
// releases the lock once the command has exited, and returns the exit
// code.
func runCommand(cfg *runConfig, l heldLock, argv []string, sigs <-chan os.Signal, stdout, stderr io.Writer) int {
	released := false
	defer func() {
		if !released {
			l.release()
		}
	}()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	env := []string{}
	for _, kv := range os.Environ() { // none inherited from an outer baton run
		if !strings.HasPrefix(kv, "BATON_TOKEN=") && !strings.HasPrefix(kv, "BATON_LOCK=") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, l.env...)
	// The child's parent-death signal (Linux) is tied to the thread that
	// forked it: keep that thread ours for the child's whole life.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// In a terminal, COMMAND gets the terminal's foreground, as with
	// flock(1): a COMMAND that prompts would otherwise stop on SIGTTIN.
	tty := foregroundTTY(os.Stdin)
	cmd, killAll, err := startCommand(cmd, cfg.isolate, tty >= 0, stderr)
	if err != nil {
		fmt.Fprintf(stderr, cfg.progName()+": %v\n", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return exitNotFound
		}
		return exitCannotExec
	}
	pgid := cmd.Process.Pid // Setpgid: the child leads its own group
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()

	lost := l.lost
	var kill <-chan time.Time
	var deadline <-chan time.Time
	timedOut := false
	if cfg.timeout > 0 {
		t := time.NewTimer(cfg.timeout)
		defer t.Stop()
		deadline = t.C
	}
	var forwarded time.Time // when the first signal was forwarded
	var last syscall.Signal
	for running := true; running; {
		select {
		case s := <-sigs:
			sig := s.(syscall.Signal)
			switch {
			case forwarded.IsZero():
				forwarded = time.Now()
				fmt.Fprintf(stderr, cfg.progName()+": forwarded %s to the command (process group %d); a second SIGINT, or any signal after %v, sends SIGKILL\n", signalName(sig), pgid, cfg.grace)
				syscall.Kill(-pgid, sig)
			case sig == syscall.SIGINT && last == syscall.SIGINT, time.Since(forwarded) >= cfg.grace:
				fmt.Fprintf(stderr, cfg.progName()+": got %s again; sending SIGKILL to the command (process group %d)\n", signalName(sig), pgid)
				killAll()
			default:
				fmt.Fprintf(stderr, cfg.progName()+": forwarded %s to the command (process group %d)\n", signalName(sig), pgid)
				syscall.Kill(-pgid, sig)
			}
			last = sig
		case <-deadline:
			deadline, timedOut = nil, true
			fmt.Fprintf(stderr, cfg.progName()+": command still running after --timeout %v; sending SIGTERM\n", cfg.timeout)
			syscall.Kill(-pgid, syscall.SIGTERM)
			if kill == nil {
				kill = time.After(cfg.grace)
			}
		case <-lost:
			lost = nil
			fmt.Fprintf(stderr, cfg.progName()+": %s lost: %s; sending SIGTERM to the command\n", l.what, l.cause())
			syscall.Kill(-pgid, syscall.SIGTERM)
			if kill == nil {
				kill = time.After(cfg.grace)
			}
		case <-kill:
			kill = nil
			fmt.Fprintf(stderr, cfg.progName()+": command still running %v after SIGTERM; sending SIGKILL\n", cfg.grace)
			killAll()
		case <-exited:
			running = false
		}
	}
	if tty >= 0 {
		takeForeground(tty)
	}
	released = true
	if err := l.release(); err != nil {
		if lost != nil {
			fmt.Fprintf(stderr, cfg.progName()+": %s lost: %v\n", l.what, err)
		}
		return exitLost
	}
	if timedOut {
		return exitTimeout
	}
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// signalName is the SIGNAME of sig, as people type it.
func signalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	}
	return sig.String()
}

// foregroundTTY returns f's descriptor if f is a terminal whose
// foreground process group is ours (baton run runs in the foreground),
// and -1 otherwise.
func foregroundTTY(f *os.File) int {
	fd := int(f.Fd())
	pgrp, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
	if err != nil || pgrp != syscall.Getpgrp() {
		return -1
	}
	return fd
}

// takeForeground makes our process group the terminal's foreground
// again, once COMMAND has exited. A background group that sets the
// foreground gets SIGTTOU unless it ignores it.
func takeForeground(fd int) {
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, syscall.Getpgrp())
}

// runWaitingAfter is how long baton run waits for a grant before it says
// that it is waiting (a variable for tests).
var runWaitingAfter = 500 * time.Millisecond

// isTerminal reports whether w is our controlling terminal (the only
// kind that has a foreground process group to ask for).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetInt(int(f.Fd()), unix.TIOCGPGRP)
	return err == nil
}
