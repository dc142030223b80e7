package node

// HopOwners implements server.HopOwners: the protocol addresses of the
// ring's other members, the only owners this node may relay to. The
// server closes its idle hop connections to any other address (a member
// that left the ring).
func (c *clusterRuntime) HopOwners() []string {
	n := c.node.Load()
	if n == nil {
		return nil
	}
	ring := n.Ring()
	var addrs []string
	for _, m := range n.Members() {
		if m.ID != n.ID() && ring.Has(m.ID) {
			addrs = append(addrs, m.ProtocolAddr)
		}
	}
	return addrs
}
