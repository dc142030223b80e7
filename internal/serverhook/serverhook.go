// Package serverhook gives a cluster node (packages node and cluster) the
// methods of a server.Server that only a cluster runtime calls, so that
// package server's API is the one an embedder uses.
package serverhook

import (
	"encoding/json"
	"time"

	"github.com/batonlock/baton/protocol"
)

// Cluster is a server's cluster side. Package server documents each
// method where it implements it.
type Cluster interface {
	// Export, Install and Evict move lock state on a planned change
	// (cluster.Mover).
	Export(newOwner func(name string) string) (map[string]json.RawMessage, error)
	Install(from string, state json.RawMessage) error
	Evict(gone func(name string) bool)
	// SetLeaseCeiling and LongestLease serve a lowering of the largest
	// lease (cluster.LeaseSessions).
	SetLeaseCeiling(d time.Duration)
	LongestLease() time.Duration
	// EndSessions ends every session with ERROR(code) and says how many.
	EndSessions(code protocol.Code) int
	// RingChanged pushes the ring to the sessions that watch it.
	RingChanged()
	// The relay's numbers, for the cluster metrics.
	Relayed() (now, total int64)
	RelayedClaims() (claims, upstreams int64)
	RelayedWatches() int64
	HopPoolIdle() int
	OwnerDials() int64
}

// Of returns the cluster side of srv, a *server.Server (package server
// sets it when it is loaded; any other value panics).
var Of func(srv any) Cluster
