// Package rangelock is baton's table of POSIX advisory locks: fcntl
// byte-range locks and flock whole-file locks, per key (a file) and
// namespace, held by owners within sessions, with strict FIFO queues,
// push grants, fencing tokens and deadlock detection.
//
// Like package locktable it is pure: it does no I/O, starts no
// goroutines and reads time only from its callers. Each operation
// returns its effects as data (a Result: grants to push to waiting
// requests, waiting requests cancelled, held locks released, for the
// audit log), and fencing tokens come from an
// injected locktable.TokenSource, so a server can give named and range
// locks one token sequence.
//
// # Semantics
//
// fcntl locks behave as Linux's OFD and POSIX locks: an owner's ranges of
// one file never overlap; a new lock over the owner's own ranges replaces
// them over its bytes atomically (upgrade, downgrade, split) and merges
// with the owner's ranges of the same type that it overlaps or touches;
// unlocking part of a range splits it; a range of length 0 runs to the
// end of the file (MaxOffset). Query is F_GETLK: the first conflicting
// lock in the order of Linux's lock list. flock locks cover the whole
// file, one per owner (an open file description), shared (Read) or
// exclusive (Write); converting one drops the old lock first, as Linux
// does, so a conversion that must wait or fails has lost the old lock.
// The two namespaces never conflict. The randomized differential test
// against the running kernel (kernel_test.go) pins all of this.
//
// # Fairness
//
// A request is granted when it conflicts with no range held by another
// owner and with no earlier waiting request of another owner; two
// requests conflict when their owners differ, their ranges overlap and
// one of them is a write. A request that cannot be granted at once
// waits (or, without Wait, is answered Conflict); whenever locks are
// released the waiters that now meet the rule are granted in queue
// order, in the same operation, and their sessions are told by a Grant
// effect. So a reader never overtakes a conflicting queued writer, and a
// waiter starves only if a holder ahead of it never lets go. A request
// that only re-locks or downgrades bytes its owner already holds takes
// nothing a waiter could want and is granted at once.
//
// # Deadlock
//
// A waiting request that would close a cycle in the wait-for graph among
// owners (across keys, namespaces and sessions; see deadlock.go for the
// definition) is refused with ErrDeadlock. The graph is kept acyclic, so
// the check is complete for that definition, and sound as long as the
// search stays within its bound (Limits.SearchBound holders and waiting
// requests examined, DefaultSearchBound unless set): a search that
// reaches it refuses the request with ErrSearchBound, an ErrDeadlock,
// as Linux does after 10 steps, so that no request can make the search
// cost more than that.
//
// # Limits
//
// SetLimits caps the waiting requests of a session and of an owner, and
// the owners of a session: what one client could otherwise grow without
// bound. A request past a cap is refused with its own error and changes
// nothing.
//
// # Cost
//
// Each owner's ranges of one file are two sorted slices of disjoint
// ranges, one per type, and each file indexes every owner's ranges in
// two interval trees, one per type (index.go). With n ranges held on a
// file, a conflict check, a Query and the deadlock search's "who holds
// what conflicts with this" cost O(log n) plus about log n per
// conflicting range, whatever the number of owners; a grant or unlock
// adds O(log n) per range it makes or ends, plus moving the tail of the
// owner's own slice. A new request is checked against its file's earlier
// waiting requests (FIFO) once; only a release, a cancel or a downgrade
// re-checks the waiters of its file. A waiting request of an owner that
// holds or waits first checks the queues where it does for a request
// that conflicts with it, and runs the bounded deadlock search (above)
// only when one does. A waiter leaves its queue by a binary search, and
// a closing session's waiters leave each queue in one pass.
//
// A Table is not safe for concurrent use; callers serialize access.
package rangelock
