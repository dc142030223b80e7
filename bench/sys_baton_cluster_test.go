package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// relayedTotal sums baton_cluster_relayed_connections_total over the
// nodes' metrics.
func relayedTotal(t *testing.T, nodes []clusterNode) float64 {
	t.Helper()
	return metricSum(t, nodes, "baton_cluster_relayed_connections_total")
}

// metricSum sums the unlabelled metric over the nodes' metrics.
func metricSum(t *testing.T, nodes []clusterNode, metric string) float64 {
	t.Helper()
	var sum float64
	for _, n := range nodes {
		resp, err := http.Get("http://" + n.ops + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(resp.Body)
		found := false
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), metric+" "); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatal(err)
				}
				sum, found = sum+f, true
			}
		}
		resp.Body.Close()
		if !found {
			t.Fatalf("%s: no %s in its metrics", n.id, metric)
		}
	}
	return sum
}

// The three-node cluster of the harness: the owner-aware client computes
// the same owner as the cluster for every name (no acquire of it is
// relayed), and the random-node client is relayed about two times in
// three.
func TestBatonCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three baton processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tmp := t.TempDir()
	bin, version, err := buildBaton(ctx, "", tmp)
	if err != nil {
		t.Fatal(err)
	}
	nodes, _, stop, err := startClusterNodes(ctx, &env{tmp: tmp, batonBin: bin, batonVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	addr := encodeCluster(nodes)
	start := time.Now()
	if err := warmCluster(ctx, addr); err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster formed and warmed up; warm-up %v", time.Since(start))

	run := func(ownerAware bool, n int) float64 {
		l, err := dialBatonCluster(ctx, addr, clientOpts{}, ownerAware)
		if err != nil {
			t.Fatal(err)
		}
		return runLocker(t, ctx, nodes, l, fmt.Sprint(ownerAware), n)
	}
	if got := run(true, 30); got != 0 {
		t.Fatalf("owner-aware client: %v of 30 acquires relayed, want 0", got)
	}
	got := run(false, 60)
	t.Logf("random-node client: %v of 60 acquires relayed", got)
	if got < 20 || got > 58 {
		t.Fatalf("random-node client: %v of 60 acquires relayed, want about 40", got)
	}

	// baton's own ring-aware client: version 1 locks dial the owner;
	// version 2 claims, held together, are none of them relayed.
	l, err := batonClusterRoutedSystem().dial(ctx, addr, clientOpts{})
	if err != nil {
		t.Fatal(err)
	}
	if got := runLocker(t, ctx, nodes, l, "routed", 30); got != 0 {
		t.Fatalf("ring-aware client: %v of 30 acquires relayed, want 0", got)
	}
	for _, routed := range []bool{true, false} {
		sl, err := batonClusterSessionSystem(routed).dial(ctx, addr, clientOpts{})
		if err != nil {
			t.Fatal(err)
		}
		var held []unlocker
		for i := range 30 {
			h, err := sl.lock(ctx, fmt.Sprintf("session-%v-%d", routed, i))
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, h)
		}
		relayed := metricSum(t, nodes, "baton_cluster_relayed_claims")
		for _, h := range held {
			if err := h.unlock(); err != nil {
				t.Fatal(err)
			}
		}
		sl.close()
		t.Logf("session (routed %v): %v of 30 held claims relayed", routed, relayed)
		if routed && relayed != 0 || !routed && (relayed < 8 || relayed > 29) {
			t.Errorf("session (routed %v): %v of 30 held claims relayed; want 0 routed, about 20 not", routed, relayed)
		}
	}
}

// runLocker takes and releases n names with l and returns how many of its
// acquires the nodes relayed.
func runLocker(t *testing.T, ctx context.Context, nodes []clusterNode, l locker, prefix string, n int) float64 {
	t.Helper()
	defer l.close()
	before := relayedTotal(t, nodes)
	for i := range n {
		h, err := l.lock(ctx, fmt.Sprintf("name-%s-%d", prefix, i))
		if err != nil {
			t.Fatal(err)
		}
		if err := h.unlock(); err != nil {
			t.Fatal(err)
		}
	}
	return relayedTotal(t, nodes) - before
}
