package node

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/batonlock/baton/admin"
	"github.com/batonlock/baton/cluster"
	"github.com/batonlock/baton/internal/memberclient"
	"github.com/batonlock/baton/server"
)

// dashboard returns the cluster view's API for admin.Config.Cluster
// (GET /api/cluster and /api/cluster/owner).
func (c *clusterRuntime) dashboard(srv *server.Server) http.Handler {
	hc, scheme := c.tls.httpClient()
	return admin.ClusterHandler(clusterView{c: c, members: &memberclient.Client{HTTP: hc, Scheme: scheme}, self: func() admin.Counts {
		n := srv.Counts()
		return admin.Counts{Connections: srv.Sessions(), Locks: n.Locks, Waiters: n.Waiters}
	}}, 0)
}

// clusterView is a cluster node as the dashboard's cluster view reads it
// (admin.ClusterSource): this node's status from its Raft state, each
// other member's health asked of it over its admin address as 'baton
// cluster status' asks it, and how the leader sees each member.
type clusterView struct {
	c *clusterRuntime
	// members asks other members, as this node (its member client).
	members *memberclient.Client
	// self returns this node's own counts, which it does not ask itself
	// over HTTP for.
	self func() admin.Counts
}

// errNodeStarting is the cluster view's answer before the node is open.
var errNodeStarting = errors.New("cluster node starting")

// ClusterStatus implements admin.ClusterSource.
func (v clusterView) ClusterStatus(ctx context.Context) (admin.ClusterStatus, error) {
	n := v.c.node.Load()
	if n == nil {
		return admin.ClusterStatus{}, errNodeStarting
	}
	st := n.Status()
	out := admin.ClusterStatus{Node: st.ID, RaftState: st.RaftState, Epoch: st.Epochs[st.ID], Leader: st.Leader,
		RingVersion: st.AppliedRingVersion, RingCommittedAt: admin.Time{Time: st.RingCommittedAt}, Ring: st.Ring,
		MaxLeaseMS: n.Metadata().MaxLease.Milliseconds()}
	var others []cluster.Member
	for _, m := range st.Members {
		if m.ID != st.ID {
			others = append(others, m)
		}
	}
	probes := memberclient.ProbeMembers(ctx, v.members, others, true)
	out.CheckedAt.Time = time.Now()

	// The leader's view: this node's own when it leads, else what the
	// leader answered to the probe.
	var unreachable map[string]admin.Time
	leaderKnows := false
	switch {
	case st.IsLeader:
		leaderKnows = true
		unreachable = map[string]admin.Time{}
		for id, t := range n.Unreachable() {
			unreachable[id] = admin.Time{Time: t}
		}
	case st.Leader != "":
		if p, ok := probes[st.Leader]; ok && p.Err == nil && p.Status.IsLeader {
			leaderKnows = true
			unreachable = map[string]admin.Time{}
			for _, id := range p.Status.Unreachable {
				unreachable[id] = admin.Time{}
			}
		}
	}
	for _, m := range st.Members {
		cm := memberOf(m)
		cm.Leader, cm.Self, cm.Epoch = m.ID == st.Leader, m.ID == st.ID, st.Epochs[m.ID]
		cm.LeaderView = admin.MemberUnknown
		if leaderKnows {
			cm.LeaderView = admin.MemberReachable
			if t, ok := unreachable[m.ID]; ok {
				cm.LeaderView = admin.MemberUnreachable
				if !t.IsZero() {
					cm.LastContact = &t
				}
			}
		}
		if cm.Self {
			c := v.self()
			cm.Health = &admin.MemberHealth{RaftState: st.RaftState, Leader: st.Leader, RingVersion: st.AppliedRingVersion,
				Connections: c.Connections, Locks: c.Locks, Waiters: c.Waiters}
		} else if p := probes[m.ID]; p.Err != nil {
			cm.Error = p.Err.Error()
		} else {
			cm.Health = &admin.MemberHealth{RaftState: p.Status.RaftState, Leader: p.Status.Leader, RingVersion: p.Status.AppliedRingVersion,
				Connections: p.Info.Counts.Connections, Locks: p.Info.Counts.Locks, Waiters: p.Info.Counts.Waiters}
		}
		out.Members = append(out.Members, cm)
	}
	slices.SortFunc(out.Members, func(a, b admin.ClusterMember) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// ClusterOwner implements admin.ClusterSource with cluster.Node.Owner.
func (v clusterView) ClusterOwner(name string) (admin.ClusterMember, uint64, bool) {
	n := v.c.node.Load()
	if n == nil {
		return admin.ClusterMember{}, 0, false
	}
	// The ring first: the owner is looked up in a ring at least as new
	// as the version reported.
	ver := n.AppliedRingVersion()
	m, ok := n.Owner(name)
	if !ok {
		return admin.ClusterMember{}, 0, false
	}
	cm := memberOf(m)
	cm.Self = m.ID == n.ID()
	return cm, ver, true
}

func memberOf(m cluster.Member) admin.ClusterMember {
	return admin.ClusterMember{ID: m.ID, State: string(m.State), ProtocolAddr: m.ProtocolAddr, AdminAddr: m.AdminAddr, RaftAddr: m.RaftAddr}
}
