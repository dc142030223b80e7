package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// runInitKill is the signal that baton run sends to its 'baton
// __run-init' (to it alone, not to the group) where it would send SIGKILL
// to the command's process group: the init then kills the command and
// every process it started, which SIGKILL of the group would miss once
// they left it, and exits. A realtime signal that commands do not use.
const runInitKill = syscall.Signal(40)

// startCommand starts cmd, or the command that runs it, and returns the
// one it started and how to kill cmd with everything it started; with
// foreground, in the foreground of the terminal on its stdin. With
// isolate, it runs cmd under 'baton __run-init', a child subreaper that
// gets SIGTERM when baton run dies, even by SIGKILL: every process that
// cmd starts stays in the init's tree (an orphan is reparented to the
// init), and the init kills that whole tree when cmd exits or when baton
// run dies. Without isolate, only cmd itself gets a parent-death SIGKILL.
func startCommand(cmd *exec.Cmd, isolate, foreground bool, stderr io.Writer) (*exec.Cmd, func(), error) {
	if !isolate || cmd.Err != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Foreground: foreground}
		err := cmd.Start()
		return cmd, func() { killGroup(cmd) }, err
	}
	init := &exec.Cmd{
		Path:   runInitPath,
		Args:   append([]string{"baton", runInitName, strconv.Itoa(os.Getpid()), cmd.Path}, cmd.Args...),
		Env:    cmd.Env,
		Stdin:  cmd.Stdin,
		Stdout: cmd.Stdout,
		Stderr: cmd.Stderr,
		// The init handles SIGTERM, unlike SIGKILL: it kills the tree.
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM, Foreground: foreground},
	}
	err := init.Start()
	return init, func() { go askKill(init.Process) }, err
}

// askKill sends runInitKill to the init until it has exited: an init that
// has only just started ignores the signal until its handler is set.
func askKill(p *os.Process) {
	for range 100 {
		if p.Signal(runInitKill) != nil { // exited and waited for
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// killGroup sends SIGKILL to the process group that cmd leads.
func killGroup(cmd *exec.Cmd) { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }

// runInitPath is the baton binary that startCommand runs as the init (a
// variable for the tests, whose own binary is not baton).
var runInitPath = "/proc/self/exe"

// runInit is 'baton __run-init PPID PATH ARGV0 ARGS...', which
// startCommand starts. It makes itself a child subreaper, so that every
// orphan of the command's tree is reparented to it, starts the command in
// its own process group (so baton run's signals to the group reach both),
// and reaps. When the command exits, it kills whatever the command left
// behind and exits with the command's status (128+S if a signal S killed
// it): nothing of the command outlives its claim on the lock. When baton
// run (PPID) dies, or asks with runInitKill, it kills the whole tree at
// once.
func runInit(args []string, stderr io.Writer) int {
	if len(args) < 3 {
		fmt.Fprintf(stderr, "baton: %s is internal to baton run\n", runInitName)
		return exitUsage
	}
	ppid, err := strconv.Atoi(args[0])
	if err != nil {
		fmt.Fprintf(stderr, "baton: %s is internal to baton run\n", runInitName)
		return exitUsage
	}
	// Signals to the group are for the command: the init only looks
	// whether its parent died (the parent-death SIGTERM) or asks for
	// the tree's end.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, runInitKill)
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintf(stderr, "baton run: warning: cannot become the subreaper of the command (%v); "+
			"if baton run is killed with SIGKILL, processes the command started can outlive the lock\n", err)
	}
	if os.Getppid() != ppid { // baton run died before the handler was set
		return 128 + int(syscall.SIGTERM)
	}
	p, err := os.StartProcess(args[1], args[2:], &os.ProcAttr{
		Env:   os.Environ(),
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
	})
	if err != nil {
		fmt.Fprintf(stderr, "baton run: %v\n", err)
		if errors.Is(err, os.ErrNotExist) {
			return exitNotFound
		}
		return exitCannotExec
	}
	go func() {
		for s := range sigs {
			if s == runInitKill || os.Getppid() != ppid {
				// The main loop may be reaping the command at the
				// same time: leave the reaping to it.
				killTree(os.Getpid(), false)
				os.Exit(128 + int(syscall.SIGKILL))
			}
		}
	}()
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil:
			fmt.Fprintf(stderr, "baton run: waiting for the command: %v\n", err)
			killTree(os.Getpid(), true)
			return exitError
		case pid != p.Pid:
			continue // an orphan, reparented to the init
		}
		killTree(os.Getpid(), true)
		if ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ws.ExitStatus()
	}
}

// Bounds of killTree: a fork bomb cannot keep it forever.
const (
	killTreeRounds = 1000
	killTreeTime   = 5 * time.Second
)

// killTree sends SIGKILL to every live descendant of pid, as /proc shows
// them, and with reap reaps its children, until none is left or its
// bounds end.
func killTree(pid int, reap bool) {
	deadline := time.Now().Add(killTreeTime)
	for range killTreeRounds {
		live := descendants(pid)
		for _, d := range live {
			syscall.Kill(d, syscall.SIGKILL)
		}
		for reap { // reap what is dead, without waiting
			var ws syscall.WaitStatus
			if r, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); r <= 0 && !errors.Is(err, syscall.EINTR) {
				break
			}
		}
		if len(live) == 0 || time.Now().After(deadline) {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// descendants returns the processes below pid in the process tree that
// are not zombies, read from each /proc/PID/stat.
func descendants(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	children := map[int][]int{}
	zombie := map[int]bool{}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// "PID (COMM) STATE PPID ...", where COMM may hold ") ".
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(stat[i+1:])
		if len(f) < 2 {
			continue
		}
		pp, err := strconv.Atoi(string(f[1]))
		if err != nil {
			continue
		}
		children[pp] = append(children[pp], p)
		zombie[p] = string(f[0]) == "Z" || string(f[0]) == "X"
	}
	var live []int
	queue := children[pid]
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if !zombie[p] {
			live = append(live, p)
		}
		queue = append(queue, children[p]...)
	}
	return live
}

func setRunInitPath(p string) { runInitPath = p }
