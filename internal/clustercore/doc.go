// Package clustercore holds the decisions of a cluster node that do not
// need I/O: how a claim reaches its owner through a relaying node, what
// is answered to the client and when (the pessimism rule), what a planned
// hand-off exports and installs, and the policies of hop pools and kept
// sessions.
//
// Like internal/locktable, it reads no clock, opens no socket, starts no
// goroutine and takes no lock. Each type takes events (a frame read, a
// connection lost, a timer fired) with the time passed in, and returns
// what to do as values (bytes for a connection, dials, timers, table
// calls). Package server keeps the sockets, goroutines and locking, and
// serialises the calls; the models and the simulator drive this very code.
//
// Files are named by role:
//
//   - relay_*: the relaying node's side of a version 2 session (its
//     ordered outbox, its upstream sessions to owners, its relayed claims
//     and watches); relay_v1.go: a relayed version 1 connection's, and
//     how the owner ends a claim that came through a hop.
//   - owner_*: the owner's side of a claim that comes back (re-assertion,
//     adoption from a kept session, a take-over's answer).
//   - handoff_*: the owner's side of a planned hand-off (export) and the
//     new owner's (install).
//   - hoppool.go, kept.go, tickets.go: the hop pools' sizing, when a kept
//     session may end, and which claims held during a warm-up enter the
//     table together (the table itself orders them by ticket).
//
// docs/cluster.md ("Where this lives in the code") maps these to the
// server's files.
package clustercore
