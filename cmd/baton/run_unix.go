//go:build unix && !linux

package main

import (
	"fmt"
	"io"
	"os/exec"
	"syscall"
)

// startCommand starts cmd in its own process group, so that a lost lock
// can signal all of it, and returns it with how to kill it. Without
// Linux's child subreaper and parent-death signal, a command whose baton
// run is killed with SIGKILL keeps running: say so unless isolation was
// turned off.
func startCommand(cmd *exec.Cmd, isolate, foreground bool, stderr io.Writer) (*exec.Cmd, func(), error) {
	if isolate && cmd.Err == nil {
		fmt.Fprintln(stderr, "baton run: warning: on this system the command is not killed if baton run is killed with SIGKILL, and can outlive the lock (--isolate=false silences this)")
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Foreground: foreground}
	err := cmd.Start()
	return cmd, func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }, err
}

// runInit exists on Linux only.
func runInit(_ []string, stderr io.Writer) int {
	fmt.Fprintf(stderr, "baton: %s is internal to baton run on Linux\n", runInitName)
	return exitUsage
}

func setRunInitPath(string) {}
