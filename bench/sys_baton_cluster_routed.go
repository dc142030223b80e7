package main

import (
	"context"
	"math/rand/v2"
	"net"
	"time"

	"github.com/batonlock/baton"
)

// The cluster systems of baton's own ring-aware client (docs/client.md,
// "Clusters"), beside baton-cluster (a node picked at random, two claims
// in three relayed) and baton-cluster-owner (the harness computes each
// name's owner):
//
//   - baton-cluster-routed: version 1 locks of a Client given the three
//     nodes (Config.Nodes), which learns the ring and dials each name's
//     owner;
//   - baton-cluster-session: a version 2 Session per worker on a node
//     picked at random, without routing: two claims in three relayed;
//   - baton-cluster-session-routed: a routed version 2 Session per worker
//     (first node picked at random): each claim on a session with its
//     name's owner.
const (
	clusterRoutedName        = "baton-cluster-routed"
	clusterSessionName       = "baton-cluster-session"
	clusterSessionRoutedName = "baton-cluster-session-routed"
)

func batonClusterRoutedSystem() *system {
	s := batonClusterSystem(false)
	s.name = clusterRoutedName
	s.client = "github.com/batonlock/baton: Client.Acquire + Claim.Release, one TCP connection per claim, with Config.Nodes: the client learns the ring (RING) and dials each name's owner"
	s.dial = func(ctx context.Context, addr string, o clientOpts) (locker, error) {
		cfg, err := clusterConfig(addr, o, baton.RoutingAuto)
		if err != nil {
			return nil, err
		}
		return &batonLocker{c: baton.New(cfg), lease: v1Lease(o)}, nil
	}
	return s
}

func batonClusterSessionSystem(routed bool) *system {
	s := batonSessionSystem()
	s.name, s.start = clusterSessionName, startBatonCluster
	s.client = "github.com/batonlock/baton: Client.OpenSession once per worker on a node picked at random (Routing off), then Session.Acquire + Claim.Release: two claims in three relayed to the owner"
	routing := baton.RoutingOff
	if routed {
		s.name, routing = clusterSessionRoutedName, baton.RoutingAuto
		s.client = "github.com/batonlock/baton: Client.OpenSession once per worker with Config.Nodes (first node picked at random), then Session.Acquire + Claim.Release: each claim on a session with its name's owner"
	}
	s.dial = func(ctx context.Context, addr string, o clientOpts) (locker, error) {
		cfg, err := clusterConfig(addr, o, routing)
		if err != nil {
			return nil, err
		}
		ss, err := baton.New(cfg).OpenSession(ctx, baton.SessionOptions{Lease: sessionLease(o), Label: "bench", RefuseOldServer: true})
		if err != nil {
			return nil, err
		}
		return &sessionLocker{s: ss}, nil
	}
	s.capacityPool = nil
	s.skipCapacity = "a cluster of three processes: the capacity scenario is run on a single server"
	s.capacityNote = "not run (" + s.skipCapacity + ")"
	return s
}

// clusterConfig is the client configuration of a worker: the cluster's
// nodes, the first picked at random.
func clusterConfig(addr string, o clientOpts, routing baton.Routing) (baton.Config, error) {
	_, addrs, err := decodeCluster(addr)
	if err != nil {
		return baton.Config{}, err
	}
	first := rand.IntN(len(addrs))
	cfg := baton.DefaultConfig(addrs[first])
	for i, a := range addrs {
		if i != first {
			cfg.Nodes = append(cfg.Nodes, a)
		}
	}
	cfg.Routing = routing
	if o.dialer != nil {
		cfg.Dialer = o.dialer
	} else {
		cfg.Dialer = &net.Dialer{}
	}
	return cfg, nil
}

// v1Lease is the lease of a version 1 lock of the scenario.
func v1Lease(o clientOpts) (lease time.Duration) {
	switch {
	case o.lease != 0:
		return o.lease
	case o.capacity:
		return batonCapacityLease
	}
	return batonEverydayLease
}
