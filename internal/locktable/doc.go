// Package locktable is baton's lock state machine: locks, strict FIFO
// queues, fencing-token issue, lease bookkeeping, force-release, kick and
// shutdown.
//
// It is pure: it does no I/O, starts no goroutines and reads time only
// from its callers, who pass an explicit now to every operation. Each
// operation returns what must happen as data (a Result): frames to send
// to other claims and ownership events for observers. The server is a thin
// shell that turns sockets into calls and results into writes and closes;
// the model checker drives the same Table through every interleaving.
//
// The unit is a claim with an id the caller chooses, not a connection. A
// Table is not safe for concurrent use; callers serialize access.
package locktable
