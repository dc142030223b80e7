package faultinject_test

import (
	"context"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/cluster"
	"github.com/batonlock/baton/internal/netlab"
)

// TestClusterCutTolerance measures what a cut of a node's cluster link,
// made in network namespaces, does to a cluster with the default
// timings (self-stop 5 s, removal after 6 s), against what
// docs/high-availability.md promises: a cut shorter than the self-stop
// time less two contact intervals and the kernel's neighbour
// (ARP) retransmit time, 1 s by default, never stops the node, and one
// shorter than the removal time less the same never gets it removed. The
// latest contact answered before the cut may be an interval old when it
// begins; after it heals, the kernel sends its next ARP probe for a
// neighbour it was still resolving up to 1 s later, and the first request
// that gets through was sent up to an interval after that. The chaos run
// that filed this saw nodes stopped after cuts of 3.5–3.9 s and removed
// after 5.3–5.7 s: the same bounds, measured then without them known.
func TestClusterCutTolerance(t *testing.T) {
	// Serial (no t.Parallel): it times cuts against the self-stop and the removal, to the second.
	if err := netlab.Available(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	const selfStop, removeAfter = cluster.DefaultSelfStop, cluster.DefaultRemoveAfter
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	h := &clusterHarness{
		harness: &harness{t: t, dir: t.TempDir(), killed: map[string]int64{}, changed: make(chan struct{})},
		ctx:     ctx, selfStop: selfStop, removeAfter: removeAfter, lease: clusterLease,
	}
	if err := h.build(ctx); err != nil {
		t.Fatal(err)
	}
	lab, err := netlab.New(ctx, clusterNodes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lab.Close(); err != nil {
			t.Errorf("netlab: %v", err)
		}
	})
	h.lab = lab
	tr := &http.Transport{DialContext: lab.DialContext(lab.Clients()), DisableKeepAlives: true}
	h.http = &http.Client{Transport: tr, Timeout: 500 * time.Millisecond}
	t.Cleanup(h.killNodes)
	t.Cleanup(h.killAll)
	h.nodes = make([]*node, clusterNodes)
	for i := range clusterNodes {
		join := ""
		if i > 0 {
			join = lab.ClusterIP(i-1) + ":" + adminPort
		}
		h.startNode(i, "", join)
	}
	h.waitRing("the first ring of three", func(st cluster.Status) bool { return len(st.Ring) == clusterNodes })

	const neighbour = time.Second // net.ipv4.neigh.*.retrans_time_ms
	margin := 2*cluster.ContactInterval(selfStop) + neighbour
	serveBound, removeBound := selfStop-margin, removeAfter-margin
	// A quarter of a second below each bound: the machine running the
	// suite is loaded, and a status read is not instantaneous.
	const slack = 250 * time.Millisecond
	for _, tc := range []struct {
		cut                     time.Duration
		mustServe, mustStayRing bool
	}{
		{cut: serveBound / 2, mustServe: true, mustStayRing: true},
		{cut: serveBound - slack, mustServe: true, mustStayRing: true},
		{cut: selfStop * 8 / 10},
		{cut: removeBound - slack, mustStayRing: true},
	} {
		slot := h.follower()
		n := h.nodes[slot]
		stopsBefore := selfStops(t, n)
		stopped, back := h.cutAndWatch(slot, tc.cut, selfStop)
		// The node's own log is the authority: a stop too short for a
		// status read to see is still logged.
		stopped = stopped || selfStops(t, n) > stopsBefore
		st, err := h.status(h.leaderSlot())
		if err != nil {
			t.Fatal(err)
		}
		removed := !slices.ContainsFunc(st.Members, func(m cluster.Member) bool { return m.ID == n.id })
		t.Logf("cut of %v (%.2f × self-stop %v): stopped serving %v; contact back %v after the heal; removed %v",
			tc.cut, tc.cut.Seconds()/selfStop.Seconds(), selfStop, stopped, back.Round(time.Millisecond), removed)
		if tc.mustServe && stopped {
			t.Errorf("a cut of %v, within the self-stop %v less %v, stopped %s", tc.cut, selfStop, margin, n.id)
		}
		if limit := margin + slack; back > limit {
			t.Errorf("contact came back %v after the heal, more than two contact intervals and the neighbour retransmit time (%v)", back.Round(time.Millisecond), limit)
		}
		if tc.mustStayRing && removed {
			t.Fatalf("a cut of %v, within the removal time %v less %v, got %s removed", tc.cut, removeAfter, margin, n.id)
		}
		// Contact back and any warm-up begun before the next cut.
		h.waitRing("the ring of three again", func(st cluster.Status) bool { return len(st.Ring) == clusterNodes && st.QuorumContact })
	}
}

// selfStops counts the self-stops in n's log.
func selfStops(t *testing.T, n *node) int {
	data, err := os.ReadFile(n.p.stderr)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(data), "no quorum contact for the self-stop timeout")
}

// follower is a slot whose node is neither the leader nor, preferably,
// anything else of note.
func (h *clusterHarness) follower() int {
	l := h.leaderSlot()
	for i := range h.nodes {
		if i != l && h.nodes[i] != nil {
			return i
		}
	}
	h.t.Fatal("no follower")
	return -1
}

// leaderSlot is the slot of the Raft leader, as the nodes see it.
func (h *clusterHarness) leaderSlot() int {
	deadline := time.Now().Add(waitMax)
	for time.Now().Before(deadline) {
		for i, n := range h.nodes {
			if n == nil {
				continue
			}
			if st, err := h.status(i); err == nil && st.IsLeader {
				return i
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	h.t.Fatal("no leader")
	return -1
}

// cutAndWatch cuts slot's cluster link for d, watching its status over
// its client link every 20 ms meanwhile and after the heal, until its
// quorum contact is back (or 3 s): whether it stopped serving at any
// read, and how long after the heal its contact age came back under two
// contact intervals.
func (h *clusterHarness) cutAndWatch(slot int, d, selfStop time.Duration) (stopped bool, back time.Duration) {
	interval := cluster.ContactInterval(selfStop)
	h.must(h.lab.CutCluster(h.ctx, slot))
	cutAt := time.Now()
	healAt := cutAt.Add(d)
	healed := false
	for {
		now := time.Now()
		if !healed && !now.Before(healAt) {
			h.must(h.lab.HealCluster(h.ctx, slot))
			healed, healAt = true, time.Now()
		}
		if st, err := h.status(slot); err == nil {
			if !st.QuorumContact {
				stopped = true
			}
			if age, err := time.ParseDuration(st.ContactAge); healed && err == nil && st.QuorumContact && age < 2*interval {
				return stopped, time.Since(healAt)
			}
		}
		if healed && time.Since(healAt) > 3*time.Second {
			return stopped, time.Since(healAt)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
