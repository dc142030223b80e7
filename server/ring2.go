package server

import (
	"github.com/batonlock/baton/internal/clustercore"
	"github.com/batonlock/baton/protocol"
)

// Learning the ring (docs/protocol-v2-ring.md, "v2 ring"): a version 2 session
// sends RING and the server answers the cluster's members, one MEMBER
// frame each, and a RINGEND with the ring's version; a session that asked
// with the watch flag gets the ring again, pushed, whenever the node
// applies a new one (Server.RingChanged). A client computes each name's
// owner from it (package cluster/ring) and sends the claim there; the
// view is advice only: a node that is sent a claim it does not own
// relays it as for any client.

// RingMember is one member of a cluster as a RING answer gives it.
type RingMember struct {
	// ID is the member's node id.
	ID string
	// Addr is the member's lock protocol address (host:port) as it
	// advertised it.
	Addr string
	// InRing is true for a member that owns names: the owner of a name
	// is computed over these members only.
	InRing bool
}

// RingView is the ring a node has applied: its version and every member.
// The zero view (version 0, no member) is what a node that is not a
// cluster's answers.
type RingView struct {
	Version uint64
	Members []RingMember
}

// core is the view as clustercore writes it on the wire.
func (v RingView) core() clustercore.RingView {
	out := clustercore.RingView{Version: v.Version, Members: make([]clustercore.RingMember, len(v.Members))}
	for i, m := range v.Members {
		out.Members[i] = clustercore.RingMember(m)
	}
	return out
}

// RingSource is an optional interface of a Router: the ring that a RING
// frame is answered with. A server without a Router, or whose Router does
// not implement it, answers an empty ring of version 0: not a cluster.
type RingSource interface {
	RingView() RingView
}

// ringView returns the ring to answer RING with.
func (srv *Server) ringView() clustercore.RingView {
	if rs, ok := srv.Router.(RingSource); ok {
		return rs.RingView().core()
	}
	return clustercore.RingView{}
}

// answerRing answers RING frame f in the session's answer order, and
// records a watch.
func (s *session) answerRing(f protocol.Frame) {
	view := s.srv.ringView()
	if clustercore.RingWatches(f) {
		s.v2.ringWatch.Store(true)
	}
	s.v2.appendOut(s, func(b []byte) []byte { return view.Append(b, false) })
}

// ringChanged pushes the ring to every version 2 session that watches it.
// A cluster node calls it when it applies a new ring version. A session
// whose write fails is ended, as for any push.
func (srv *Server) ringChanged() {
	srv.init() // a node may apply a ring before it serves
	view := srv.ringView()
	srv.mu.Lock()
	var ds []delivery
	for _, s := range srv.claims {
		if s.v2 != nil && s.v2.ringWatch.Load() {
			s.v2.appendPushOut(s, func(b []byte) []byte { return view.Append(b, true) })
			ds = append(ds, delivery{to: s, flush: true})
		}
	}
	srv.mu.Unlock()
	srv.deliverAll(ds)
}
