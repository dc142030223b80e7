package admin

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/batonlock/baton/protocol"
)

// The dashboard's cluster view, served by ClusterHandler as
// Config.Cluster:
//
//	GET /api/cluster                 this node's view of the cluster, with each member's health
//	GET /api/cluster/owner?name=X    the member that owns lock name X in this node's ring
//
// The status probes every other member over its admin address, so
// ClusterHandler shares one status among all callers for MaxAge: any
// number of open dashboards cost each member at most one probe per
// period. The owner lookup reads this node's ring and asks no one.

// ClusterSource is a cluster node as the cluster view reads it.
type ClusterSource interface {
	// ClusterStatus returns this node's view of the cluster with every
	// member's health; ctx bounds the probes of the other members. An
	// error means the node cannot answer at all (it is starting).
	ClusterStatus(ctx context.Context) (ClusterStatus, error)
	// ClusterOwner returns the member that owns name in this node's
	// applied ring and that ring's version; false when no ring is applied
	// yet.
	ClusterOwner(name string) (ClusterMember, uint64, bool)
}

// ClusterStatus is the answer of GET /api/cluster: the cluster as the
// node that answers sees it.
type ClusterStatus struct {
	Node      string `json:"node"`       // the node that answers
	RaftState string `json:"raft_state"` // its Raft state: Leader, Follower, Candidate
	Epoch     uint64 `json:"epoch"`      // its current token epoch
	// Leader is the leader's id, empty when this node knows none.
	Leader string `json:"leader"`
	// RingVersion is the version of the ring this node has applied, Ring
	// its members and RingCommittedAt when the leader proposed it.
	RingVersion     uint64   `json:"ring_version"`
	RingCommittedAt Time     `json:"ring_committed_at"`
	Ring            []string `json:"ring"`
	// MaxLeaseMS is the largest lease the cluster has recorded (the bound
	// of a take-over's warm-up).
	MaxLeaseMS int64           `json:"max_lease_ms"`
	Members    []ClusterMember `json:"members"` // every member, by id
	// CheckedAt is when the members were asked for their health.
	CheckedAt Time `json:"checked_at"`
}

// How the leader sees a member (ClusterMember.LeaderView).
const (
	MemberReachable   = "reachable"   // the leader heartbeats it
	MemberUnreachable = "unreachable" // the leader fails to heartbeat it
	MemberUnknown     = "unknown"     // no leader is known, or it did not answer
)

// ClusterMember is one member of the cluster.
type ClusterMember struct {
	ID           string `json:"id"`
	State        string `json:"state"` // joining, serving or leaving
	ProtocolAddr string `json:"protocol_addr"`
	AdminAddr    string `json:"admin_addr"`
	RaftAddr     string `json:"raft_addr"`
	Leader       bool   `json:"leader,omitempty"`
	Self         bool   `json:"self,omitempty"` // the node that answers
	// Epoch is the member's token epoch as this node applied it.
	Epoch uint64 `json:"epoch,omitempty"`
	// LeaderView is how the leader sees it: MemberReachable,
	// MemberUnreachable or MemberUnknown. LastContact, when the answering node is the leader and
	// cannot reach the member, is when it last heard from it.
	LeaderView  string `json:"leader_view,omitempty"`
	LastContact *Time  `json:"last_contact,omitempty"`
	// Health is what the member says of itself when asked over its admin
	// address; nil when it did not answer, and Error says why.
	Health *MemberHealth `json:"health,omitempty"`
	Error  string        `json:"error,omitempty"`
}

// MemberHealth is a member's own account of itself.
type MemberHealth struct {
	RaftState   string `json:"raft_state"`
	Leader      string `json:"leader"`       // the leader it knows
	RingVersion uint64 `json:"ring_version"` // the ring it has applied
	Connections int    `json:"connections"`
	Locks       int    `json:"locks"` // locks held at it (the names it owns)
	Waiters     int    `json:"waiters"`
}

// ClusterOwner is the answer of GET /api/cluster/owner?name=X.
type ClusterOwner struct {
	Name string `json:"name"`
	// Owner is the member that owns the name; null before this node has
	// applied a ring.
	Owner       *ClusterMember `json:"owner"`
	RingVersion uint64         `json:"ring_version"`
}

// DefaultClusterMaxAge is how long ClusterHandler shares one status
// when its maxAge is zero.
const DefaultClusterMaxAge = time.Second

// ClusterHandler serves GET /api/cluster and /api/cluster/owner from
// src, for Config.Cluster. Callers share one status for maxAge (zero:
// DefaultClusterMaxAge); concurrent callers wait for one probe.
func ClusterHandler(src ClusterSource, maxAge time.Duration) http.Handler {
	if maxAge <= 0 {
		maxAge = DefaultClusterMaxAge
	}
	return &clusterHandler{src: src, maxAge: maxAge}
}

type clusterHandler struct {
	src    ClusterSource
	maxAge time.Duration
	mu     sync.Mutex
	at     time.Time
	last   *ClusterStatus
}

func (c *clusterHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet) {
		return
	}
	switch r.URL.Path {
	case "/api/cluster":
		st, err := c.status(r.Context())
		if err != nil {
			writeError(w, http.StatusServiceUnavailable, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, st)
	case "/api/cluster/owner":
		name := r.URL.Query().Get("name")
		if err := protocol.ValidateName(name); err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("name %q: %v", name, err))
			return
		}
		out := ClusterOwner{Name: name}
		if m, v, ok := c.src.ClusterOwner(name); ok {
			out.Owner, out.RingVersion = &m, v
		}
		writeJSON(w, http.StatusOK, out)
	default:
		writeError(w, http.StatusNotFound, "no such endpoint")
	}
}

// status returns the shared status, asking the source when it is older
// than maxAge. The probe outlives a caller that goes away: the others
// waiting for it still want it.
func (c *clusterHandler) status(ctx context.Context) (*ClusterStatus, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last != nil && time.Since(c.at) < c.maxAge {
		return c.last, nil
	}
	st, err := c.src.ClusterStatus(context.WithoutCancel(ctx))
	if err != nil {
		return nil, err
	}
	if st.Members == nil {
		st.Members = []ClusterMember{}
	}
	c.last, c.at = &st, time.Now()
	return c.last, nil
}
