//go:build !unix

package testkit

import "os/exec"

func ownGroup(cmd *exec.Cmd) {}

func kill(cmd *exec.Cmd) { cmd.Process.Kill() }
