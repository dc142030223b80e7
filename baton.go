// Package baton is the Go client of the baton lock service. The lease is
// a failure detector, not a term: a claim is held while heartbeats flow,
// and the client gives up 0.8 of a lease after the last confirmed one,
// before the server can grant the lock to anyone else, and cancels the
// work it guards at once. Most programs need only Do, which runs fn only
// while the lock is held and passes it the fencing token for storage:
//
//	err := baton.New(cfg).Do(ctx, "nightly-report", 2*time.Second, build)
//
// Sessions, modes, retries, resuming and errors: docs/client.md.
package baton
