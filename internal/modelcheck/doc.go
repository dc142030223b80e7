// Package modelcheck explores, breadth first, every interleaving of a
// bounded configuration and checks baton's safety and liveness properties
// in every reachable state, reporting the shortest counterexample. It
// drives the real pure code (internal/locktable, rangelock, clientrule,
// clustercore, cluster.LeaseBound) and models the rest: the client rules,
// the directory lock, the cluster, failover and range locks, each with
// mutations that show it catches its bug. No server or client code
// imports it. The models are described in
// docs/design/2026-12-07-verification-models-single-server.md and
// docs/design/2026-12-07-verification-models-cluster.md.
package modelcheck
