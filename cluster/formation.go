package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// Forming a cluster from a list of members, and noticing that this node
// now follows another cluster.
//
// A node's data directory cannot tell a first start from a lost disk:
// both are new Raft state. So a node started with a -join list (the same
// list on every node, its own admin address included, as Consul's
// retry_join with bootstrap_expect or etcd's initial-cluster) forms a
// cluster only when it is the first of the list and every other listed
// member answers that it belongs to no cluster; it joins through any
// listed member that belongs to one, and otherwise waits. A node that
// lost its data directory therefore never forms a second cluster while a
// member of its own is there, even out of reach: it waits. (The model:
// internal/modelcheck's cluster model, mutation wiped-forms.)

// pathCluster answers whether a node belongs to a cluster (GET,
// read-only; it needs the cluster's secret when there is one).
const pathCluster = "/cluster/v1/cluster"

// Belonging is a node's answer to GET /cluster/v1/cluster.
type Belonging struct {
	// ID is the answering node's id.
	ID string `json:"id"`
	// Member tells whether it belongs to a cluster: its data directory
	// held one when it opened, or it has formed or joined one since.
	Member bool `json:"member"`
	// ClusterID is that cluster's id ("" for none, or for a cluster
	// formed before cluster ids existed).
	ClusterID string `json:"cluster_id,omitempty"`
}

// Belongs returns this node's answer to GET /cluster/v1/cluster.
func (n *Node) Belongs() Belonging {
	md, _ := n.fsm.read()
	return Belonging{ID: n.cfg.ID, Member: n.existing || len(md.Members) > 0, ClusterID: md.ClusterID}
}

// ClusterID returns the id of the cluster whose state this node has
// applied ("" before it belongs to one, or for a cluster formed before
// cluster ids existed).
func (n *Node) ClusterID() string {
	n.fsm.mu.Lock()
	defer n.fsm.mu.Unlock()
	return n.fsm.md.ClusterID
}

// ClusterChange is what Config.OnClusterChanged receives: this node's
// applied state was replaced by another cluster's.
type ClusterChange struct {
	// Mixed tells that another cluster's log entries were applied on top
	// of this node's own, rather than a snapshot replacing them: its
	// state (members, ring) mixes both clusters, and it serves nothing
	// until it is started again on an empty data directory.
	Mixed bool
	// ClusterID is the cluster it follows now.
	ClusterID string
	// Reason is "cluster_id" (an entry or snapshot of another cluster)
	// or "epoch" (the applied record of this node's epoch fell below the
	// one it holds).
	Reason string
	// Epoch is the epoch this node held: it takes one above it.
	Epoch uint64
}

// checkIncarnation is the fsm's hook after each entry or snapshot
// (snapshot tells which), under its mutex. When this node's applied state was replaced by
// another cluster's (hashicorp/raft lets the leader of the cluster it
// belonged to overwrite the log of a node that formed one of its own),
// the epoch it holds and what it derived from its rings belong to a
// cluster that no longer exists: it stops serving at once and serves
// again only after a fresh epoch of the cluster it follows, above the
// one it held, and the warm-up of a node with new Raft state. When the
// other cluster's entries were applied on top of its own (its log was
// overwritten entry by entry, not by a snapshot), its members and ring
// mix both clusters: it serves nothing until it is started again on an
// empty data directory (Mixed).
func (n *Node) checkIncarnation(md *Metadata, foreign, snapshot bool) {
	held := n.tokens.Epoch()
	n.mu.Lock()
	rec := md.Epochs[n.cfg.ID]
	reason := ""
	switch {
	case foreign:
		reason = "cluster_id"
	case n.hasEpoch && rec != 0 && rec < held:
		// The log never lowers a member's epoch (a removal deletes it).
		reason = "epoch"
	}
	if reason == "" {
		n.mu.Unlock()
		return
	}
	n.usedEpoch = max(n.usedEpoch, held)
	n.hasEpoch, n.epochRing = false, 0
	n.formed, n.cameBack = false, false
	n.startedAt = time.Now()
	n.takeovers = nil
	n.handedOver = map[uint64]bool{}
	n.installedFrom = map[uint64]map[string]bool{}
	n.changes++
	n.mu.Unlock()
	ch := ClusterChange{ClusterID: md.ClusterID, Reason: reason, Epoch: held, Mixed: foreign && !snapshot}
	if ch.Mixed {
		n.mixed.Store(true)
		n.log.Error("another cluster's log entries were applied on top of this node's own: its state mixes both clusters, so it serves nothing; stop it and start it again on an empty data directory with the -join list of every member",
			"cluster_id", md.ClusterID)
	}
	n.log.Error("this node's state was replaced by another cluster's: serving nothing until it has a fresh epoch there and its names are warmed up",
		"cluster_id", md.ClusterID, "reason", reason, "held_epoch", held, "recorded_epoch", rec)
	if f := n.cfg.OnClusterChanged; f != nil {
		go f(ch)
	}
}

// Mixed reports whether another cluster's log entries were applied on
// top of this node's own: it serves nothing (InContact is false) until
// it is started again on an empty data directory.
func (n *Node) Mixed() bool { return n.mixed.Load() }

// ClusterChanges counts the times this node found its applied state
// replaced by another cluster's.
func (n *Node) ClusterChanges() uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.changes
}

// Waiting is what JoinList reports while it waits: the listed members
// that did not answer, and those that answered that they belong to no
// cluster.
type Waiting struct {
	Unreachable []string
	NoCluster   []string
}

// joinListProbe bounds one question to a listed member; joinListJoin
// one join through a member that belongs to a cluster.
const (
	joinListProbe = 2 * time.Second
	joinListJoin  = 30 * time.Second
	// joinListMaxWait is the longest pause between two rounds.
	joinListMaxWait = 2 * time.Second
)

// maxEpochCatchUp bounds the epochs AcquireEpoch asks for in a row to
// get above the one this node held before its state was replaced.
const maxEpochCatchUp = 1024

// JoinList brings a node with new Raft state into a cluster through the
// list of members' admin addresses addrs (this node's own included): it
// asks each listed member whether it belongs to a cluster, joins through
// the first that does (as a new incarnation: its names are warmed up),
// and forms a new cluster only when its own address is the first of the
// list and every other listed member answers that it belongs to none.
// Otherwise it asks again, with a growing pause up to 2 s, calling
// waiting after each round, until ctx ends. It returns whether it
// formed the cluster. A node whose data directory holds a cluster needs
// none of this (Rejoin).
func (n *Node) JoinList(ctx context.Context, addrs []string, waiting func(Waiting)) (formed bool, err error) {
	if n.existing {
		return false, ErrExistingState
	}
	if len(addrs) == 0 {
		return false, errors.New("cluster: an empty -join list")
	}
	for attempt := 0; ; attempt++ {
		if md, _ := n.fsm.read(); md.Members[n.cfg.ID].State == Serving {
			return false, nil // added meanwhile (a join that timed out here, then went through)
		}
		var w Waiting
		first := false
		for i, a := range addrs {
			if a == n.cfg.AdminAddr {
				first = first || i == 0
				continue
			}
			pctx, cancel := context.WithTimeout(ctx, joinListProbe)
			var b Belonging
			err := n.do(pctx, http.MethodGet, a, pathCluster, nil, false, &b)
			cancel()
			switch {
			case err != nil:
				w.Unreachable = append(w.Unreachable, a)
			case b.ID == n.cfg.ID:
				// This node under another spelling of its address.
				first = first || i == 0
			case b.Member:
				jctx, cancel := context.WithTimeout(ctx, joinListJoin)
				err := n.Join(jctx, a)
				cancel()
				if err == nil {
					return false, nil
				}
				n.log.Warn("join through a listed member failed; asking again", "via", a, "err", err)
				w.Unreachable = append(w.Unreachable, a)
			default:
				w.NoCluster = append(w.NoCluster, a)
			}
		}
		if first && len(w.Unreachable) == 0 {
			// Every other listed member is up and in no cluster: this is
			// a first start of the whole list (or every member lost its
			// data). Nobody held anything.
			if err := n.Bootstrap(ctx); err != nil {
				return false, err
			}
			return true, nil
		}
		if waiting != nil {
			waiting(w)
		}
		if err := sleepCtx(ctx, min(100*time.Millisecond<<min(attempt, 5), joinListMaxWait)); err != nil {
			return false, fmt.Errorf("cluster: waiting for the members of the -join list (%s): %w", describeWaiting(w), err)
		}
	}
}

// describeWaiting says what a JoinList round waits for.
func describeWaiting(w Waiting) string {
	var parts []string
	if len(w.Unreachable) > 0 {
		parts = append(parts, "no answer from "+strings.Join(w.Unreachable, ", "))
	}
	if len(w.NoCluster) > 0 {
		parts = append(parts, "in no cluster yet: "+strings.Join(w.NoCluster, ", "))
	}
	if len(parts) == 0 {
		return "the first of the list to form the cluster"
	}
	return strings.Join(parts, "; ")
}

// SplitJoinList splits a -join value: admin addresses separated by
// commas, spaces around them ignored. It refuses an empty entry and a
// repeated one.
func SplitJoinList(s string) ([]string, error) {
	var out []string
	for a := range strings.SplitSeq(s, ",") {
		a = strings.TrimSpace(a)
		if err := checkAddr("a -join address", a, false); err != nil {
			return nil, err
		}
		if slices.Contains(out, a) {
			return nil, fmt.Errorf("%s is in the -join list twice", a)
		}
		out = append(out, a)
	}
	return out, nil
}
