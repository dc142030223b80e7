// Package modelcheck explores, breadth first, every interleaving of a
// bounded configuration and checks baton's safety and liveness properties
// in every reachable state. It drives the real pure code where it can
// (internal/locktable, internal/rangelock, internal/clientrule,
// internal/clustercore, cluster.LeaseBound) and models the rest: the lock table, claims and watches, the
// client rules, the directory lock, cluster ownership, continuation,
// failover and range locks, each with mutations that show it catches the
// bug it is for. A violation is reported as the shortest counterexample
// (a lasso for liveness). Nothing in the server or the client imports it.
// The models: docs/design/2026-12-07-verification-models-single-server.md
// and docs/design/2026-12-07-verification-models-cluster.md.
package modelcheck
