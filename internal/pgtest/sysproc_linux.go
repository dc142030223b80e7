package pgtest

import "syscall"

// sysProcAttr runs a PostgreSQL program as cred's user, and kills it if
// the test process dies first.
func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
}
