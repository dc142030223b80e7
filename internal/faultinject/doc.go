// Package faultinject runs baton against the faults a lock service exists
// to survive, with real processes: a `baton serve` binary, Go-client
// workers that write to or read from a real PostgreSQL under the lock,
// fenced by the W and M rule of docs/protocol.md, and a TCP proxy per
// worker that delays, blackholes or resets. Holders are frozen and
// killed, the server restarted, and Check then reads the run's record.
// The cluster tests run the same workers against three nodes in network
// namespaces (internal/netlab) and allow no overlap at all (CheckCluster).
// The tests and what each breaks on purpose:
// docs/design/2026-12-07-fault-injection-suite.md#internalfaultinjectdocgo.
package faultinject
