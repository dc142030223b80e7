// Package locktable is baton's lock state machine: sessions and their
// claims, exclusive, shared and semaphore locks, strict FIFO queues,
// fencing-token issue, lease bookkeeping, force-release, kick, revoke and
// shutdown.
//
// It is pure: it does no I/O, starts no goroutines and reads time only
// from its callers, who pass an explicit now to every operation. Each
// operation returns what must happen as data (a Result): frames to send
// to claims and sessions, and ownership events for observers. The server
// is a thin shell that turns sockets into calls and results into writes
// and closes; the model checker drives the same Table through every
// interleaving.
//
// # Sessions and claims
//
// A session (a SessionID the caller chooses) is one connection: it has a
// lease, the failure detector of all its claims, a peer and a label. It
// holds any number of claims, each named by a ClaimID its client chooses,
// so the table keys a claim by Key{Session, Claim}. A claim names a lock,
// a Mode and whether it waits. A version 1 connection is a session with
// one exclusive, waiting claim (V1Claim), opened by Acquire; its claim's
// end ends the session. Version 2 sessions are opened by Open and claim
// with Claim; their claims end one by one (Release, ForceReleaseClaim,
// KickClaim, Revoke) while the session lives on, and all at once when the
// session is closed or expires (one lease of silence).
//
// # Values and watches
//
// A claim may carry a value its client chose (ClaimRequest.Value,
// SetValue). A version 2 session may watch a name (Watch): the table
// answers with the name's holders and then, in every later Result, sends
// the watch each grant, value change and end on that name, in the order
// it makes them (SendChange), so a watcher never sees holders in another
// order than they were granted. A watch's id is one of its session's
// claim ids; Release ends it.
//
// # Modes and fairness
//
// Exclusive conflicts with every other holder; Shared conflicts with
// Exclusive; a Semaphore with limit N admits N holders. A name is either
// a semaphore or an exclusive/shared lock while it has holders or
// waiters: a claim of the other kind (ErrModeConflict) or a semaphore
// claim with another limit (ErrLimitMismatch) is refused with a
// claim-level error that leaves the session as it was.
//
// Fairness is strict FIFO: a claim is granted only when it conflicts with
// no holder and no earlier waiter of its lock. So a new claim is granted
// at once only when nobody waits, readers never overtake a queued writer,
// and when a holder leaves, every waiter at the head of the queue that now
// fits is granted in the same operation, in queue order (several readers
// at once). The head of a queue always conflicts with a holder, so a lock
// with waiters always has a holder. Every grant, each shared holder's
// included, takes a new token from the table's one TokenSource.
//
// # Cost
//
// A held claim is one record in its session's claim map and in its lock's
// intrusive holder list; a lock is one record keyed by name; a version 1
// session and its claim are one allocation, with no map. With its lock
// and name, a held claim costs about 300 bytes of heap at a million
// claims (BenchmarkHeldClaims). Every operation is O(1) in the number of claims, apart from the
// grants a release makes, closing or expiring a session (its claims),
// version 1's Kick by address (the queue), and Revoke, Shutdown and
// Snapshot, which visit what they report on.
//
// A Table is not safe for concurrent use; callers serialize access.
package locktable
