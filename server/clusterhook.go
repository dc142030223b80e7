package server

import (
	"encoding/json"
	"time"

	"github.com/batonlock/baton/internal/serverhook"
	"github.com/batonlock/baton/protocol"
)

// A cluster node reaches the methods only a cluster runtime calls through
// serverhook, so that they are not part of an embedder's API.
func init() { serverhook.Of = func(s any) serverhook.Cluster { return clusterSide{s.(*Server)} } }

type clusterSide struct{ srv *Server }

func (c clusterSide) Export(newOwner func(name string) string) (map[string]json.RawMessage, error) {
	return c.srv.exportNames(newOwner)
}
func (c clusterSide) Install(from string, state json.RawMessage) error {
	return c.srv.installState(from, state)
}
func (c clusterSide) Evict(gone func(name string) bool)        { c.srv.evictNames(gone) }
func (c clusterSide) SetLeaseCeiling(d time.Duration)          { c.srv.setLeaseCeiling(d) }
func (c clusterSide) LongestLease() time.Duration              { return c.srv.longestLease() }
func (c clusterSide) EndSessions(code protocol.Code) int       { return c.srv.endSessions(code) }
func (c clusterSide) RingChanged()                             { c.srv.ringChanged() }
func (c clusterSide) Relayed() (now, total int64)              { return c.srv.relayedConns() }
func (c clusterSide) RelayedClaims() (claims, upstreams int64) { return c.srv.relayedClaimCount() }
func (c clusterSide) RelayedWatches() int64                    { return c.srv.relayedWatchCount() }
func (c clusterSide) HopPoolIdle() int                         { return c.srv.hopPoolIdle() }
func (c clusterSide) OwnerDials() int64                        { return c.srv.ownerDialCount() }
