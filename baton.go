// Package baton is the Go client of the baton lock service.
//
// With a Client, a claim on a named lock is one TCP (or TLS) connection
// to a baton server (protocol version 1; a Session, below, carries many).
// The client sends ACQUIRE with a lease of its choice, waits in the lock's
// FIFO queue if another client holds it, and keeps the claim alive with
// heartbeats. Closing the connection is the release.
//
// The lease is a failure detector, not a term: a lock is held as long as
// heartbeats flow. The client is the pessimist: it gives up 0.8 of a lease
// after the last heartbeat the server confirmed, before the server can
// give the lock to anyone else, and cancels the work it guards at once. It
// closes the connection only once that work has stopped, and one lease
// after the last confirmation at the latest, so the next holder cannot
// start while the work is still stopping.
//
// Most programs need only Do:
//
//	c := baton.New(baton.Config{Address: "locks.internal:7070"})
//	err := c.Do(ctx, "nightly-report", 2*time.Second, func(ctx context.Context, token uint64) error {
//		// Runs only while the lock is confirmed held. ctx is cancelled
//		// the moment that stops being true; pass token to any storage
//		// that can reject writes from stale holders (fencing).
//		return build(ctx, token)
//	})
//
// DoRetry adds reconnection with backoff for transient failures, and
// Acquire returns a *Lock for code that cannot be shaped as a callback.
//
// A Session (Client.OpenSession, protocol version 2) carries any number of
// claims on one connection, from many goroutines: exclusive, shared and
// semaphore locks, each claim and release one round trip, with one lease
// and one heartbeat for the whole session:
//
//	s, err := c.OpenSession(ctx, baton.SessionOptions{Lease: 5 * time.Second})
//	...
//	defer s.Close()
//	err = s.Do(ctx, "orders", baton.Shared, read)      // many readers
//	err = s.Do(ctx, "orders", baton.Exclusive, write)  // one writer
//	err = s.Do(ctx, "gpu", baton.Semaphore(4), train)  // at most four
//
// The wire protocol is specified in docs/protocol.md; package protocol holds its
// frames and error codes. Errors from the server are *ServerError values
// that unwrap to the protocol's sentinels, so
// errors.Is(err, protocol.ErrShuttingDown) works.
package baton
