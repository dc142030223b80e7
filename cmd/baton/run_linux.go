package main

import "syscall"

// childSysProcAttr puts the command in its own process group, so that a
// lost lock can signal all of it, and kills it if baton run dies (even by
// SIGKILL), so that it cannot go on without the lock.
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
