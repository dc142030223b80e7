package audit

import (
	"time"

	"github.com/batonlock/baton/server"
)

// Cluster event names, the "event" field of the records of a cluster
// node's membership and ring changes. Every node writes the changes it
// applies from the Raft log, in log order.
const (
	ClusterJoin   = "cluster_join"   // a node was recorded as a member: member
	ClusterLeave  = "cluster_leave"  // a member was marked leaving (a planned leave): member
	ClusterRemove = "cluster_remove" // a member was taken out of the cluster: member
	ClusterRing   = "cluster_ring"   // this node applied a ring version: ring_version, ring, committed_at
	// ClusterAutoRemove is written by the leader that removed a member it
	// had not heard from for the removal timeout: member (id only).
	ClusterAutoRemove = "cluster_auto_remove"
)

// ClusterMember is a member as a cluster record shows it.
type ClusterMember struct {
	ID           string `json:"id"`
	State        string `json:"state"`
	RaftAddr     string `json:"raft_addr"`
	ProtocolAddr string `json:"protocol_addr"`
	AdminAddr    string `json:"admin_addr"`
}

// ClusterEvent is a membership or ring change a cluster node applied.
type ClusterEvent struct {
	Event       string // ClusterJoin, ClusterLeave, ClusterRemove or ClusterRing
	Time        time.Time
	Member      *ClusterMember // join, leave, remove
	RingVersion uint64         // ring: the version applied
	Ring        []string       // ring: its members
	CommittedAt time.Time      // ring: the leader's clock when the change was proposed
	LogIndex    uint64         // the Raft log index of the change (0: from a snapshot)
	Replayed    bool           // already in the node's data directory when it started: applied again
}

// Cluster queues the record of a cluster node's membership or ring
// change. It never blocks: when the buffer is full the record is dropped
// and counted.
func (l *Logger) Cluster(e ClusterEvent) {
	select {
	case l.ch <- entry{event: e.Event, e: server.Event{Time: e.Time}, cluster: &e}:
	default:
		l.overflow.Add(1)
	}
}

// clusterRecord fills the cluster fields of r.
func clusterRecord(r *Record, e *ClusterEvent) {
	r.Member = e.Member
	if e.Event == ClusterRing {
		v := e.RingVersion
		r.RingVersion = &v
		r.Ring = e.Ring
		if !e.CommittedAt.IsZero() {
			r.CommittedAt = e.CommittedAt.UTC().Format(TimeFormat)
		}
	}
	r.LogIndex = e.LogIndex
	r.Replayed = e.Replayed
}
