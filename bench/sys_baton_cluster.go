package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/cluster"
)

// The cluster systems: three 'baton serve' cluster nodes on loopback
// (docs/cluster.md), formed with -bootstrap and -join, each with its own
// data directory, and the version 1 client of the baton system. They are
// reported two ways:
//
//   - baton-cluster: every acquire goes to a node picked at random, so two
//     in three are relayed by a node that does not own the name;
//   - baton-cluster-owner: every acquire goes to the owner of its name,
//     computed with the cluster's ring from the member list the harness
//     formed, as a ring-aware client would.
const (
	clusterName      = "baton-cluster"
	clusterOwnerName = "baton-cluster-owner"
)

// clusterNodes are the node ids of the harness's cluster, in the order
// they are formed (n1 bootstraps, n2 and n3 join).
var clusterNodes = []string{"n1", "n2", "n3"}

func batonClusterSystem(ownerAware bool) *system {
	s := batonSystem()
	s.name, s.start = clusterName, startBatonCluster
	s.client = "github.com/batonlock/baton: Client.Acquire + Claim.Release, one TCP connection per claim, each acquire to a node picked at random (2 of 3 relayed to the owner)"
	s.dial = func(ctx context.Context, addr string, o clientOpts) (locker, error) {
		return dialBatonCluster(ctx, addr, o, ownerAware)
	}
	if ownerAware {
		s.name = clusterOwnerName
		s.client = "github.com/batonlock/baton: Client.Acquire + Claim.Release, one TCP connection per claim, each acquire to the owner of its name (cluster.Ring over the member list)"
	}
	s.skipCapacity = "a cluster of three processes: the capacity scenario is run on a single server"
	s.capacityNote = "not run (" + s.skipCapacity + ")"
	return s
}

// clusterNode is one node's addresses.
type clusterNode struct {
	id, addr, raft, admin, ops string
}

// encodeCluster writes the node list as the system's address:
// "n1=127.0.0.1:p1,n2=...": the holder subprocess gets it like any other
// address.
func encodeCluster(nodes []clusterNode) string {
	var parts []string
	for _, n := range nodes {
		parts = append(parts, n.id+"="+n.addr)
	}
	return strings.Join(parts, ",")
}

func decodeCluster(addr string) (ids, addrs []string, err error) {
	for part := range strings.SplitSeq(addr, ",") {
		id, a, ok := strings.Cut(part, "=")
		if !ok {
			return nil, nil, fmt.Errorf("cluster address %q: want id=host:port,...", addr)
		}
		ids, addrs = append(ids, id), append(addrs, a)
	}
	return ids, addrs, nil
}

func startBatonCluster(ctx context.Context, e *env) (*server, error) {
	nodes, procs, stop, err := startClusterNodes(ctx, e)
	if err != nil {
		return nil, err
	}
	addr := encodeCluster(nodes)
	if err := warmCluster(ctx, addr); err != nil {
		stop()
		return nil, err
	}
	return &server{
		addr:    addr,
		proc:    procs[0],
		version: e.batonVersion + ", 3 nodes",
		memory: func() (int64, string, error) {
			var sum int64
			for _, p := range procs {
				kib, err := procStatusKiB(p.pid(), "VmRSS")
				if err != nil {
					return 0, "", err
				}
				sum += kib
			}
			return sum, "VmRSS of the three node processes", nil
		},
		stop: stop,
	}, nil
}

// startClusterNodes forms the cluster: n1 bootstraps, the others join
// through it, one at a time; it returns once every node has a ring of
// all of them.
func startClusterNodes(ctx context.Context, e *env) ([]clusterNode, []*process, func(), error) {
	dir, err := os.MkdirTemp(e.tmp, "baton-cluster-")
	if err != nil {
		return nil, nil, nil, err
	}
	var (
		nodes []clusterNode
		procs []*process
	)
	stop := func() {
		for _, p := range procs {
			p.stop(5 * time.Second)
		}
		os.RemoveAll(dir)
	}
	for i, id := range clusterNodes {
		n := clusterNode{id: id}
		for _, a := range []*string{&n.addr, &n.raft, &n.admin, &n.ops} {
			port, err := freePort()
			if err != nil {
				stop()
				return nil, nil, nil, err
			}
			*a = fmt.Sprintf("127.0.0.1:%d", port)
		}
		argv := []string{e.batonBin, "serve", "-node-id", id, "-listen", n.addr, "-raft-listen", n.raft,
			"-admin-listen", n.admin, "-ops-listen", n.ops, "-data-dir", filepath.Join(dir, id), "-log-level", "warn"}
		argv = append(argv, benchLimits...)
		if i == 0 {
			argv = append(argv, "-bootstrap")
		} else {
			argv = append(argv, "-join", nodes[0].admin)
		}
		p, err := startProcess("baton "+id, "", 0, 0, argv, nil)
		if err != nil {
			stop()
			return nil, nil, nil, err
		}
		procs, nodes = append(procs, p), append(nodes, n)
		// The next node joins once this one is in the ring.
		if err := waitRing(ctx, n, p, i+1); err != nil {
			stop()
			return nil, nil, nil, err
		}
	}
	for i, n := range nodes {
		if err := waitRing(ctx, n, procs[i], len(nodes)); err != nil {
			stop()
			return nil, nil, nil, err
		}
	}
	return nodes, procs, stop, nil
}

// waitRing waits until node n's status shows a ring of size members.
func waitRing(ctx context.Context, n clusterNode, p *process, size int) error {
	deadline := time.Now().Add(60 * time.Second)
	var last string
	for {
		st, err := clusterStatus(ctx, n.admin)
		if err == nil && len(st.Ring) == size {
			return nil
		}
		if err != nil {
			last = err.Error()
		} else {
			last = fmt.Sprintf("ring %v", st.Ring)
		}
		if p.exited() {
			return fmt.Errorf("%s exited: %s", p.name, p.tail())
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s: no ring of %d within 60s (%s): %s", n.id, size, last, p.tail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func clusterStatus(ctx context.Context, admin string) (cluster.Status, error) {
	var st cluster.Status
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+"/cluster/v1/status", nil)
	if err != nil {
		return st, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("status %d", resp.StatusCode)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// warmCluster waits out the warm-up of a new cluster (a node gates the
// names it gained without their state for the largest lease plus a
// slack; docs/cluster.md): it takes and releases a name of every node,
// at the owner and relayed, with the everyday lease, which also records
// that lease in the cluster before the first measured acquire.
func warmCluster(ctx context.Context, addr string) error {
	ids, addrs, err := decodeCluster(addr)
	if err != nil {
		return err
	}
	ring := cluster.NewRing(0, ids)
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for _, owner := range ids {
		name := ""
		for i := 0; name == "" && i < 1000; i++ {
			if n := fmt.Sprintf("warm-%d", i); ring.Owner(n) == owner {
				name = n
			}
		}
		for _, a := range addrs {
			c := baton.New(withDialer(baton.DefaultConfig(a)))
			l, err := c.Acquire(ctx, name, batonEverydayLease)
			if err != nil {
				return fmt.Errorf("warm-up: %s at %s: %w", name, a, err)
			}
			if err := l.Release(context.Background()); err != nil {
				return fmt.Errorf("warm-up: releasing %s: %w", name, err)
			}
		}
	}
	return nil
}

func withDialer(cfg baton.Config) baton.Config {
	cfg.Dialer = &net.Dialer{}
	return cfg
}

// clusterLocker sends each acquire to one node: the owner of the name, or
// one picked at random.
type clusterLocker struct {
	clients []*baton.Client // by node, in ids order
	ring    *cluster.Ring
	index   map[string]int
	owner   bool
	lease   time.Duration
}

func dialBatonCluster(ctx context.Context, addr string, o clientOpts, ownerAware bool) (locker, error) {
	ids, addrs, err := decodeCluster(addr)
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, errors.New("cluster address without nodes")
	}
	l := &clusterLocker{ring: cluster.NewRing(0, ids), index: map[string]int{}, owner: ownerAware}
	for i, a := range addrs {
		b, err := dialBaton(ctx, a, o)
		if err != nil {
			return nil, err
		}
		bl := b.(*batonLocker)
		l.clients, l.lease = append(l.clients, bl.c), bl.lease
		l.index[ids[i]] = i
	}
	return l, nil
}

func (l *clusterLocker) lock(ctx context.Context, name string) (unlocker, error) {
	i := rand.IntN(len(l.clients))
	if l.owner {
		i = l.index[l.ring.Owner(name)]
	}
	h, err := l.clients[i].Acquire(ctx, name, l.lease)
	if err != nil {
		return nil, err
	}
	return batonHeld{h}, nil
}

func (l *clusterLocker) close() {}
