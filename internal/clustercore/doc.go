// Package clustercore holds the decisions of a cluster node that need no
// I/O: how a claim reaches its owner through a relaying node, what is
// answered to the client and when (the pessimism rule), what a planned
// hand-off exports and installs, and the policies of hop pools and kept
// sessions. Like internal/locktable it reads no clock, opens no socket and
// starts no goroutine: each type takes events with the time passed in and
// returns what to do as values; package server does the I/O. Files are
// named by role: relay_*, relay1_* and relay2_* (the node a client is
// on, for version 1 and 2), upstream_* (its session to an owner),
// host_* (that node while a claim moves), owner_* and handoff_* (the
// owner, and the two ends of a hand-off), session_* (a session's end,
// lease and resumption), watch_* and ranges_* (relayed watches and
// range locks), and the policies hoppool, kept and tickets.
// Map to the server's files: docs/design/2026-12-08-cluster-code-map.md; the
// roles: docs/design/2026-12-07-cluster-relay.md#internalclustercoredocgo.
package clustercore
