package server

import "time"

// HopPoolSize is the most idle hop connections a server keeps per owner.
const HopPoolSize = hopPoolSize

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
