// Package locktable is baton's lock state machine: sessions and their
// claims, exclusive, shared and semaphore locks, strict FIFO queues,
// fencing-token issue, lease bookkeeping, force-release, kick, revoke and
// shutdown. It is pure: no I/O, no goroutines, and time only from the
// caller's explicit now; each operation returns what must happen as data
// (a Result). A claim is granted only when it conflicts with no holder and
// no earlier waiter of its lock, so readers never overtake a queued writer.
// A Table is not safe for concurrent use; callers serialize access.
// Sessions, values and watches, modes and cost are described in
// docs/design/2026-12-07-lock-table.md#internallocktabledocgo.
package locktable
