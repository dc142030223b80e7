//go:build unix && !linux

package main

import "syscall"

// childSysProcAttr puts the command in its own process group, so that a
// lost lock can signal all of it. Without Linux's parent-death signal, a
// command whose baton run is killed with SIGKILL keeps running.
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
