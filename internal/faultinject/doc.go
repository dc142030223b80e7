// Package faultinject runs baton against the faults a lock service exists
// to survive, with real processes: a `baton serve` binary, worker
// processes that take the lock with the Go client and write to a real
// PostgreSQL under it, and a TCP proxy between each worker and the server
// that adds delay, drops traffic (a blackhole that closes nothing) or
// resets connections. The test also freezes holders (SIGSTOP/SIGCONT),
// kills them (SIGKILL) and restarts the server, then checks the record
// the run leaves behind (see Check).
//
// The pieces are small and separate: Proxy (proxy.go), the worker
// (worker.go), the monotonic clock every process shares (clock.go),
// Freeze (stop.go) and the checker (check.go); internal/pgtest provides
// the private PostgreSQL. The scenario itself is TestFaultInjection;
// TestFreezeServerUnderQueue freezes the server under queued clients until
// the holder gives up, and checks that the next holder's work never starts
// before the previous holder's has stopped.
// docs/verification.md describes the suite and the figures it measured.
package faultinject
