package cluster

import (
	"context"
	"time"
)

// LeaseSessions is the lock server as the lease ceiling sees it.
type LeaseSessions interface {
	// SetLeaseCeiling makes the server refuse sessions whose lease is
	// above d (0: no ceiling), checked again where a session is
	// registered so that none slips in once LongestLease has been read.
	SetLeaseCeiling(d time.Duration)
	// LongestLease is the longest lease of the server's sessions, open
	// or kept for re-assertion.
	LongestLease() time.Duration
}

// leaseCheckEvery is how often a node looks whether it can acknowledge a
// lowering of the largest lease.
const leaseCheckEvery = 250 * time.Millisecond

// SetLeaseSessions gives the node the server whose sessions a lowering of
// the largest lease waits for. Until it is set, the node never
// acknowledges a lowering.
func (n *Node) SetLeaseSessions(s LeaseSessions) {
	n.fsm.mu.Lock()
	defer n.fsm.mu.Unlock()
	n.leaseSessions.Store(&s)
	s.SetLeaseCeiling(n.fsm.md.Ceiling)
}

// applyCeiling is the fsm's hook: it gives the server the ceiling as soon
// as it is applied, before the entries after it (a restarted node catches
// up on its log before it serves).
func (n *Node) applyCeiling(d time.Duration) {
	if sp := n.leaseSessions.Load(); sp != nil {
		(*sp).SetLeaseCeiling(d)
	}
}

// MaxLease is the largest lease the cluster has recorded, as this node
// has applied it: a grant with a longer one needs RaiseLease first.
func (n *Node) MaxLease() time.Duration { return n.fsm.maxLease() }

// SetLeaseCeiling asks the cluster to refuse leases above d (0: none).
// Below the largest lease granted, it also starts lowering that largest
// lease, the bound of every take-over's warm-up: MaxLease comes down once
// every member has acknowledged (leasebound.go).
func (n *Node) SetLeaseCeiling(ctx context.Context, d time.Duration) error {
	_, err := n.propose(ctx, pathLeaseCeiling, leaseCeilingRequest{LeaseMS: uint64(d / time.Millisecond)})
	return err
}

// leaseLoop acknowledges a lowering when AckDue says so.
func (n *Node) leaseLoop() {
	defer n.renewWG.Done()
	ctx, cancel := n.untilShutdown()
	defer cancel()
	t := time.NewTicker(leaseCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-n.done:
			return
		case <-t.C:
		}
		n.checkLease(ctx)
	}
}

func (n *Node) checkLease(ctx context.Context) {
	sp := n.leaseSessions.Load()
	if sp == nil {
		return
	}
	s := *sp
	// The server has the ceiling already (applyCeiling): a session above
	// it that registers after the read below is refused.
	md, _ := n.fsm.read()
	l := md.Lowering
	if l == nil || md.Acked(n.cfg.ID) || !n.InContact(time.Now()) {
		return
	}
	if _, member := md.Members[n.cfg.ID]; !member {
		return
	}
	now := time.Now()
	if !AckDue(l.Target, s.LongestLease(), n.gatedUntil(now).After(now)) {
		return
	}
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := n.propose(actx, pathLeaseAck, leaseAckRequest{ID: n.cfg.ID, TargetMS: uint64(l.Target / time.Millisecond)}); err != nil {
		n.log.Warn("cannot acknowledge the lowering of the largest lease", "target", l.Target, "err", err)
		return
	}
	n.log.Info("acknowledged the lowering of the largest lease", "target", l.Target)
}
