package server

import (
	"time"

	"github.com/batonlock/baton/internal/clustercore"
)

// HopPoolSize is the most idle hop connections a server keeps per owner.
const HopPoolSize = clustercore.HopPoolSize

// HopPoolLen reports how many idle hop connections srv keeps to addr.
func HopPoolLen(srv *Server, addr string) int { return srv.hopPoolLen(addr) }

// SetHopPoolIdle sets how long srv refills a pool after the last relay
// to its owner.
func SetHopPoolIdle(srv *Server, d time.Duration) {
	srv.hops.mu.Lock()
	srv.hops.idle = d
	srv.hops.mu.Unlock()
}

// HopsKept reports how many hops srv has put back in a pool after the
// owner acknowledged the end of their claim.
func HopsKept(srv *Server) int64 { return srv.hopsKept.Load() }

// HopPoolLow is the size at or below which a pool is refilled after a
// relay, and the least a sweep lowers its target to.
const HopPoolLow = clustercore.HopPoolLow

// HopPoolTarget reports how many idle hop connections srv fills its pool
// to addr to (0 without a pool).
func HopPoolTarget(srv *Server, addr string) int {
	p := &srv.hops
	p.mu.Lock()
	defer p.mu.Unlock()
	if pool := p.owners[addr]; pool != nil {
		return pool.core.Target()
	}
	return 0
}
