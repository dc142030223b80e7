//go:build unix

package testkit

import (
	"os/exec"
	"syscall"
)

// ownGroup starts the adapter in a process group of its own, so that
// kill reaches what it started too (a shell, an interpreter's children).
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// kill ends the adapter's process group.
func kill(cmd *exec.Cmd) {
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
		cmd.Process.Kill()
	}
}
