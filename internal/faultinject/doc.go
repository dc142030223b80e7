// Package faultinject runs baton against the faults a lock service exists
// to survive, with real processes: a `baton serve` binary, worker
// processes that take the lock with the Go client (version 1 clients, and
// version 2 sessions whose exclusive writers and shared readers hold
// several claims at once) and write to or read from a real PostgreSQL
// under it, fenced by the W and M rule of docs/protocol.md, and a TCP
// proxy between each worker and the server
// that adds delay, drops traffic (a blackhole that closes nothing) or
// resets connections. The test also freezes holders (SIGSTOP/SIGCONT),
// kills them (SIGKILL) and restarts the server, then checks the record
// the run leaves behind (see Check).
//
// The pieces are small and separate: Proxy (proxy.go), the worker
// (worker.go), the monotonic clock every process shares (clock.go),
// Freeze (stop.go) and the checker (check.go); internal/pgtest provides
// the private PostgreSQL. The scenario itself is TestFaultInjection;
// TestFaultInjectionMutants breaks the read fence or the workers' loss
// handling on purpose and requires Check to say so;
// TestFreezeServerUnderQueue freezes the server under queued clients until
// the holder gives up, and checks that the next holder's work never starts
// before the previous holder's has stopped.
//
// TestClusterFaultInjection runs the same workers against a real
// three-node cluster, each node in its own network namespace
// (internal/netlab), and kills, freezes and cuts off (its cluster link or
// its client link, or only its link to one other node) the lock's owner,
// the Raft leader and a follower; CheckCluster (checkcluster.go) then
// allows no overlap at all, since no worker is ever frozen or cut off
// there. TestClusterFaultInjectionUnsafe runs it on setups that must
// fail: three independent servers, and nodes that do not stop serving
// when they lose their quorum, whose owner is removed while frozen, then
// thawed. TestClusterFaultInjectionRanges runs the cluster with range
// locks in the place of claims. TestClusterFaultInjectionLongLease
// isolates the owner under leases longer than the removal time, where
// only the warm-up keeps the next grant after the cut-off holder's
// give-up.
// docs/verification.md describes the suites and the figures they measured.
package faultinject
