package node

import (
	"slices"
	"strings"

	"github.com/batonlock/baton/cluster"
	"github.com/batonlock/baton/server"
)

// RingView implements server.RingSource: the ring this node has applied,
// with every member's lock protocol address, for the RING frame
// (docs/protocol-v2-ring.md, "v2 ring"). Before the node is open it answers an
// empty ring, as a single server does: the client sends its claims here,
// and they are relayed.
func (c *clusterRuntime) RingView() server.RingView {
	n := c.node.Load()
	if n == nil {
		return server.RingView{}
	}
	r := n.Ring()
	view := server.RingView{Version: r.Version()}
	seen := map[string]bool{}
	for _, m := range n.Members() {
		view.Members = append(view.Members, server.RingMember{ID: m.ID, Addr: m.ProtocolAddr, InRing: r.Has(m.ID)})
		seen[m.ID] = true
	}
	// A ring member the membership read a moment later no longer lists
	// (a removal in between) still owns names in this ring version.
	for _, id := range r.Members() {
		if !seen[id] {
			view.Members = append(view.Members, server.RingMember{ID: id, InRing: true})
		}
	}
	slices.SortFunc(view.Members, func(a, b server.RingMember) int { return strings.Compare(a.ID, b.ID) })
	return view
}

// ringChanged pushes the ring to the sessions that watch it, off the
// Raft apply path: a push writes to clients.
func (c *clusterRuntime) ringChanged(e cluster.Event) {
	if e.Kind != cluster.EventRing {
		return
	}
	if srv, ok := c.mover.(interface{ RingChanged() }); ok {
		go srv.RingChanged()
	}
}
