package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

// startCommand starts cmd, or the command that runs it, and returns the
// one it started; with foreground, in the foreground of the terminal on
// its stdin. With isolate, it runs cmd under 'baton
// __run-init' as the first process of a new PID namespace, with a
// parent-death SIGKILL: when baton run dies, even by SIGKILL, the kernel
// kills that init and with it every process of the namespace, however far
// it detached (new process group, new session, double fork). It tries a
// PID namespace alone (needs CAP_SYS_ADMIN, such as root's), then one
// inside a new user namespace (unprivileged users, where the kernel allows
// it); when neither works it warns and starts cmd as before, where only
// cmd itself gets the parent-death signal.
func startCommand(cmd *exec.Cmd, isolate, foreground bool, stderr io.Writer) (*exec.Cmd, error) {
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Foreground: foreground}
	if !isolate || cmd.Err != nil {
		cmd.SysProcAttr = attr
		return cmd, cmd.Start()
	}
	uid, gid := os.Getuid(), os.Getgid()
	var errs []error
	for _, ns := range []*syscall.SysProcAttr{
		{Setpgid: true, Pdeathsig: syscall.SIGKILL, Cloneflags: syscall.CLONE_NEWPID},
		{Setpgid: true, Pdeathsig: syscall.SIGKILL, Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}},
	} {
		ns.Foreground = foreground
		init := &exec.Cmd{
			Path:        runInitPath,
			Args:        append([]string{"baton", runInitName, cmd.Path}, cmd.Args...),
			Env:         cmd.Env,
			Stdin:       cmd.Stdin,
			Stdout:      cmd.Stdout,
			Stderr:      cmd.Stderr,
			SysProcAttr: ns,
		}
		err := init.Start()
		if err == nil {
			return init, nil
		}
		errs = append(errs, err)
	}
	fmt.Fprintf(stderr, "baton run: warning: cannot run the command in a PID namespace of its own (%v); "+
		"if baton run is killed with SIGKILL, processes the command started can outlive the lock (--isolate=false silences this)\n",
		errors.Join(errs...))
	cmd.SysProcAttr = attr
	return cmd, cmd.Start()
}

// runInitPath is the baton binary that startCommand runs as the init (a
// variable for the tests, whose own binary is not baton).
var runInitPath = "/proc/self/exe"

// runInit is 'baton __run-init PATH ARGV0 ARGS...': the init of the PID
// namespace that startCommand makes. It starts the command in its own
// process group (so baton run's signals to the group reach both), reaps
// every orphan of the namespace, and exits with the command's status
// (128+S if a signal S killed it). Its exit kills whatever the command
// left behind: nothing of the command outlives its claim on the lock.
func runInit(args []string, stderr io.Writer) int {
	if len(args) < 2 || os.Getpid() != 1 {
		fmt.Fprintf(stderr, "baton: %s is internal to baton run\n", runInitName)
		return exitUsage
	}
	// Signals reach the command through its process group; init only
	// needs handlers, since the kernel drops a signal that init does not
	// handle (and Go's default would exit).
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	go func() {
		for range sigs {
		}
	}()
	p, err := os.StartProcess(args[0], args[1:], &os.ProcAttr{
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
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil:
			fmt.Fprintf(stderr, "baton run: waiting for the command: %v\n", err)
			return exitError
		case pid != p.Pid:
			continue // an orphan, reparented to init
		case ws.Signaled():
			return 128 + int(ws.Signal())
		}
		return ws.ExitStatus()
	}
}

func setRunInitPath(p string) { runInitPath = p }
