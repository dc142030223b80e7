//go:build linux

package faultinject_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/cluster"
	"github.com/batonlock/baton/internal/faultinject"
	"github.com/batonlock/baton/internal/netlab"
	"github.com/batonlock/baton/internal/pgtest"
)

// The cluster suite's parameters. The lease and the node settings are
// short so that a run sees many failovers: a dead owner is removed after
// clusterRemoveAfter, and its names are granted again after the warm-up
// of the largest lease plus 2 s (docs/high-availability.md).
const (
	clusterNodes   = 3
	clusterLease   = 2 * time.Second
	clusterWorkers = 6 // slot i talks to node i % 3; slots 0-2 version 1, 3-5 version 2
	clusterV1      = 3
	clusterGrants  = 6               // grants to wait for after each fault
	clusterHold    = 3 * time.Second // how long a client cut lasts, and a removed node is left running
	// The nodes' T_self and T (-cluster-self-stop, -cluster-remove-after):
	// short, so that a run sees many removals; T > 1.0202 T_self + a
	// tick of T_self/5, as the setting requires.
	clusterSelfStop    = 2 * time.Second
	clusterRemoveAfter = 3 * time.Second
	clusterBudget      = 3 * time.Minute
	// The node's ports, the same in every node's namespace.
	protoPort = "7070"
	adminPort = "7072"
	raftPort  = "7080"
)

// Faults of the cluster plan: "kind-role[-variant][-steered]", kind one
// of kill, stop, cut, client-cut, isolate, restart, term, partition (FaultNode*), role
// one of owner (of clusterLock), leader (Raft's), follower (neither).
// Variants: "brief" (a stop or cut shorter than the self-stop; a
// partition shorter than the lease),
// "removed" (a stop during which the operator removes the node),
// "join" (an isolation after which a new node joins at once). A
// "-steered" fault first pauses a holder between its check and its
// write (steerLate). See inject.
var (
	clusterPlanCI = []string{
		"kill-owner-steered", "stop-leader", "cut-follower", "client-cut-owner",
		"kill-leader", "stop-owner-brief", "cut-owner", "client-cut-follower",
		"kill-follower", "stop-follower", "cut-leader-brief", "stop-owner-removed",
		"restart-owner-steered", "restart-follower", "stop-owner", "kill-owner",
		"partition-owner-brief", "partition-owner", "term-owner", "term-leader",
	}
	clusterPlanShort = []string{"kill-owner-steered", "stop-leader", "cut-owner", "client-cut-follower", "stop-owner-removed"}
)

const clusterLock = "resource"

func clusterPlan() []string {
	if p := os.Getenv("BATON_FAULTINJECT_CLUSTER_PLAN"); p != "" {
		return strings.Split(p, ",")
	}
	if os.Getenv("CI") == "true" {
		return clusterPlanCI
	}
	return clusterPlanShort
}

// TestClusterFaultInjection runs a real three-node cluster, each node in
// its own network namespace, worker processes on every node (version 1
// clients and version 2 sessions, through the Go client) writing to a
// private PostgreSQL through the fence, and kills (SIGKILL), freezes
// (SIGSTOP) and cuts off (its cluster link or its client link down) the
// lock's owner, the Raft leader and a follower. Then
// faultinject.CheckCluster: no stale write accepted, no two confirmed
// owners at once. The operator's part after a kill ('baton cluster
// remove' of the dead node, then a new node in its place) is played by
// the test. Run it with -v for the figures.
func TestClusterFaultInjection(t *testing.T) {
	if testing.Short() {
		t.Skip("the cluster fault suite takes one to three minutes; not with -short")
	}
	t.Parallel()
	// A plan longer than clusterPartFaults (CI's) runs in parts side by
	// side, each on a cluster, workers and PostgreSQL of its own: one
	// cluster took its 20 faults one after another, about 3 minutes.
	parts := slices.Collect(slices.Chunk(clusterPlan(), clusterPartFaults))
	for i, plan := range parts {
		t.Run(fmt.Sprintf("part%d", i+1), func(t *testing.T) {
			if len(parts) > 1 {
				if !slices.ContainsFunc(plan, func(f string) bool { return strings.HasSuffix(f, "-steered") }) {
					t.Fatalf("part %v has no steered fault: the fence's refusal would go unchecked", plan)
				}
				t.Parallel()
			}
			rep, h := runClusterSuite(t, clusterSuite{plan: plan})
			requireSafe(t, rep, h)
			if h.steered > 0 && rep.Rejected == 0 {
				t.Errorf("%d steered faults, but the fence refused no write", h.steered)
			}
		})
	}
}

// clusterPartFaults is the most faults one cluster of
// TestClusterFaultInjection runs; CI's plan is cut so that every part
// has a steered fault.
const clusterPartFaults = 10

// requireSafe fails t for every violation and harness problem of a
// cluster run, and for a run that granted nothing.
func requireSafe(t *testing.T, rep *faultinject.ClusterReport, h *clusterHarness) {
	t.Helper()
	for _, v := range rep.Violations {
		t.Errorf("violation: %s", v)
	}
	for _, p := range h.problems {
		t.Errorf("%s", p)
	}
	if rep.Grants == 0 || rep.Accepted == 0 {
		t.Errorf("the run granted nothing")
	}
}

// TestClusterFaultInjectionRanges runs the cluster suite with range
// locks (fcntl's, through the Go client's ranges.Locker.Set) in the place
// of claims: every worker takes a write range lock over the whole of the
// key clusterLock, which the ring gives to the same owner as the name.
// With the suite's 2 s lease, range locks are too short-lived to be
// re-asserted after their owner's failure (docs/cluster.md, "Range
// locks"): a fault of their owner ends their sessions, and the key is
// granted again only after the holders' give-up; a replacement's join
// hands them over. The checks are the same, no stale write accepted and
// no overlap between confirmed holders.
func TestClusterFaultInjectionRanges(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the cluster fault suite; not with -short")
	}
	t.Parallel()
	// Short: it runs beside the other packages' cluster tests in CI, on
	// two cores, and the load of a longer plan is a suspect in their
	// flaky timings.
	plan := []string{"kill-owner", "partition-owner-brief", "cut-owner"}
	if p := os.Getenv("BATON_FAULTINJECT_CLUSTER_RANGES_PLAN"); p != "" {
		plan = strings.Split(p, ",")
	}
	rep, h := runClusterSuite(t, clusterSuite{plan: plan, ranges: true})
	requireSafe(t, rep, h)
}

// TestClusterFaultInjectionRangesLongLease runs the range suite with
// leases of 8 s, long enough (half of it is above the removal after 3 s)
// for a relaying node to re-assert its session's range lock at the key's
// next owner when the owner is killed or crashes and restarts: the
// holder then keeps its lock through the failover. Which worker holds
// at the fault is chance, so the re-assertions and hand-overs the nodes
// logged are reported, not required; the checks are the suite's.
func TestClusterFaultInjectionRangesLongLease(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the cluster fault suite; not with -short")
	}
	t.Parallel()
	rep, h := runClusterSuite(t, clusterSuite{plan: []string{"kill-owner", "restart-owner"}, ranges: true, lease: 8 * time.Second})
	requireSafe(t, rep, h)
	logs, _ := filepath.Glob(filepath.Join(h.dir, "*.stderr"))
	count := func(msg string) (n int) {
		for _, l := range logs {
			b, _ := os.ReadFile(l)
			n += strings.Count(string(b), msg)
		}
		return n
	}
	t.Logf("range locks re-asserted at a key's next owner: %d, let go by their client first: %d, given up: %d (of %d begun); planned hand-overs of range locks: %d",
		count("range locks re-asserted at the key's next owner"), count("range locks re-asserted no more"),
		count("not adopted in half the lease"), count("re-asserting its range locks"),
		count("range locks handed over; kept for their sessions"))
}

// TestClusterFaultInjectionRangesResumable runs the range suite with
// resumable sessions that may resume through every node, and leases of
// 8 s: a worker whose own node is killed or cut off (a follower's
// workers, and the owner's) resumes on another node and re-asserts its
// range lock there, at the key's owner that kept it or at the node that
// took the key over. The checks are the suite's; how often a session
// resumed is reported.
func TestClusterFaultInjectionRangesResumable(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the cluster fault suite; not with -short")
	}
	t.Parallel()
	plan := []string{"kill-follower", "kill-owner", "cut-follower"}
	if p := os.Getenv("BATON_FAULTINJECT_CLUSTER_RANGES_PLAN"); p != "" {
		plan = strings.Split(p, ",")
	}
	rep, h := runClusterSuite(t, clusterSuite{plan: plan, ranges: true, resumable: true, lease: 8 * time.Second})
	requireSafe(t, rep, h)
	moved := 0
	for _, r := range h.records {
		if r.Ev == "session-moved" {
			moved++
		}
	}
	t.Logf("sessions resumed on another node: %d; version 2 sessions lost: %d", moved, rep.SessionLosses)
}

// TestClusterFaultInjectionLongLease runs the cluster with leases of
// 6 s (and 10 s), longer than the removal after 3 s / 0.8: a holder whose owner is
// isolated (both its links down, so it hears nothing and can tell its
// clients nothing) still believes for up to 4.8 s after its last
// confirmed heartbeat, past the owner's removal, and only the new
// owner's warm-up keeps the next grant after its give-up. Its holder is
// steered to write after the failover; the fence must refuse it.
func TestClusterFaultInjectionLongLease(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the cluster fault suite; not with -short")
	}
	t.Parallel()
	for _, tc := range []struct {
		name, plan string
		lease      time.Duration
	}{
		{name: "isolate", plan: "isolate-owner-steered", lease: 6 * time.Second},
		// A node that joins while the names of a removed node are
		// warming up on their new owner must not serve them before the
		// warm-up ends: the isolated owner's holder may still believe
		// (with a lease of 10 s, for at least 5.5 s after the isolation;
		// the join comes about 3.5 s after it). The prior owner hands
		// over only after its warm-up (this case found the bug).
		{name: "join-during-warmup", plan: "isolate-owner-join-steered", lease: 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rep, h := runClusterSuite(t, clusterSuite{plan: strings.Split(tc.plan, ","), lease: tc.lease})
			requireSafe(t, rep, h)
			if rep.Rejected == 0 {
				t.Errorf("the fence refused no write: the steered holder's late write got in or was never sent")
			}
		})
	}
}

// TestClusterFaultInjectionUnsafe shows that the suite can fail: three
// independent single servers in the place of a cluster, and a cluster
// whose nodes stop serving only an hour after they lost their quorum
// (rule 2 of the failover design dropped) and whose owner the operator
// removes while it is frozen, each hand the lock to two workers at once,
// and CheckCluster must say so. The second is the plan's
// "stop-owner-removed" fault, which with the suite's settings is safe.
func TestClusterFaultInjectionUnsafe(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the cluster fault suite; not with -short")
	}
	t.Parallel()
	for _, tc := range []struct {
		name                  string
		independent, lateStop bool
		plan                  []string
	}{
		{"independent-servers", true, false, nil},
		// The overlap needs a claim that the old owner grants in the
		// moment between its thaw and its learning of the removal: a
		// chance per fault, which runs beside other packages in CI
		// missed in two runs of five even with four faults. So it runs
		// only when asked (BATON_FAULTINJECT_NO_SELF_STOP=1); the
		// independent servers show in every run that the check fails.
		{"no-self-stop", false, true, []string{"stop-owner-removed", "stop-owner-removed", "stop-owner-removed", "stop-owner-removed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.lateStop && os.Getenv("BATON_FAULTINJECT_NO_SELF_STOP") != "1" {
				t.Skip("a chance per fault, missed too often beside other packages; BATON_FAULTINJECT_NO_SELF_STOP=1 runs it")
			}
			t.Parallel()
			rep, h := runClusterSuite(t, clusterSuite{plan: tc.plan, independent: tc.independent, lateStop: tc.lateStop})
			found := false
			for _, v := range rep.Violations {
				found = found || strings.Contains(v, "OVERLAP")
			}
			if !found {
				t.Errorf("%s: no OVERLAP among the violations %q (problems %q)", tc.name, rep.Violations, h.problems)
			}
		})
	}
}

// clusterHarness runs the nodes in a netlab lab; the embedded harness
// runs the workers and keeps their records.
type clusterHarness struct {
	*harness
	lab         *netlab.Lab
	http        *http.Client // dials from the clients' namespace
	nodes       []*node      // by slot, the current node process
	all         []*node      // every node process started
	nodeGen     int
	procs       int  // node processes started
	independent bool // single servers, not a cluster
	ranges      bool // every worker takes range locks (TestClusterFaultInjectionRanges)
	// resumable: each version 2 worker's session is resumable through
	// every node, its own first (TestClusterFaultInjectionRangesResumable).
	resumable bool
	// selfStop and removeAfter are the nodes' settings, lease the
	// workers'.
	selfStop, removeAfter, lease time.Duration
	faults                       []faultinject.ClusterFault
	ctx                          context.Context
}

type node struct {
	slot int
	id   string
	p    *proc
}

// clusterSuite is what a run of the cluster suite does: its plan, and
// what differs from the default cluster. It is passed, not set in the
// environment, so that runs can go on side by side (t.Parallel).
type clusterSuite struct {
	plan []string
	// independent: three single servers; lateStop: a cluster whose
	// nodes stop serving only an hour after they lost their quorum.
	independent, lateStop bool
	// ranges and resumable: see clusterHarness.
	ranges, resumable bool
	// lease is the workers' lease; 0: BATON_FAULTINJECT_CLUSTER_LEASE,
	// or clusterLease without it.
	lease time.Duration
}

// runClusterSuite runs s.plan on a cluster, or on the servers s asks for.
func runClusterSuite(t *testing.T, s clusterSuite) (*faultinject.ClusterReport, *clusterHarness) {
	t.Helper()
	began := time.Now()
	if err := netlab.Available(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	h := &clusterHarness{
		harness:     &harness{t: t, dir: t.TempDir(), killed: map[string]int64{}, changed: make(chan struct{})},
		independent: s.independent, ctx: ctx, selfStop: clusterSelfStop, removeAfter: clusterRemoveAfter,
		lease: s.lease,
	}
	if l := os.Getenv("BATON_FAULTINJECT_CLUSTER_LEASE"); l != "" && h.lease == 0 {
		d, err := time.ParseDuration(l)
		if err != nil {
			t.Fatal(err)
		}
		h.lease = d
	}
	if h.lease == 0 {
		h.lease = clusterLease
	}
	if s.lateStop {
		h.selfStop, h.removeAfter = time.Hour, 2*time.Hour
	}
	// The variables run any of the suites with range locks, resumably.
	h.ranges = s.ranges || os.Getenv("BATON_FAULTINJECT_CLUSTER_RANGES") == "1"
	h.resumable = s.resumable || os.Getenv("BATON_FAULTINJECT_CLUSTER_RESUMABLE") == "1"
	building := make(chan error, 1)
	go func() { building <- h.build(ctx) }()
	pg := pgtest.New(t)
	h.pg = pg
	if err := <-building; err != nil {
		t.Fatal(err)
	}
	db := fenceDB(ctx, t, pg.DSN)
	if _, err := db.Exec(ctx, `INSERT INTO fence VALUES ($1, 0, 0)`, clusterLock); err != nil {
		t.Fatal(err)
	}
	// A spare namespace: a node that joins while the node it replaces
	// still runs ("-join" faults).
	lab, err := netlab.New(ctx, clusterNodes+1)
	if err != nil {
		t.Fatal(err)
	}
	h.lab = lab
	t.Cleanup(func() {
		if err := lab.Close(); err != nil {
			t.Errorf("netlab: %v", err)
		}
	})
	// A run that stops early (t.Fatal) still leaves its nodes' logs.
	if d := os.Getenv("BATON_FAULTINJECT_DUMP"); d != "" {
		t.Cleanup(func() {
			if t.Failed() {
				files, _ := filepath.Glob(filepath.Join(h.dir, "n*"))
				for _, f := range files {
					if data, err := os.ReadFile(f); err == nil {
						os.WriteFile(filepath.Join(d, "failed-"+filepath.Base(f)), data, 0o644)
					}
				}
			}
		})
	}
	tr := &http.Transport{DialContext: lab.DialContext(lab.Clients()), DisableKeepAlives: true}
	h.http = &http.Client{Transport: tr, Timeout: 3 * time.Second}
	t.Cleanup(tr.CloseIdleConnections)
	t.Cleanup(h.killNodes) // runs before the lab is closed
	t.Cleanup(h.killAll)
	if d := os.Getenv("BATON_FAULTINJECT_DUMP"); d != "" {
		// Runs first: what each live node and worker saw when it failed.
		t.Cleanup(func() {
			if t.Failed() {
				h.dumpState(d)
			}
		})
	}
	// Without a dump directory (CI), a short account in the test's own
	// output: a failure seen once under load must still be diagnosable.
	t.Cleanup(func() {
		if t.Failed() {
			h.logState()
		}
	})

	h.nodes = make([]*node, clusterNodes+1)
	for i := range clusterNodes {
		join := ""
		if i > 0 {
			join = lab.ClusterIP(i-1) + ":" + adminPort
		}
		h.startNode(i, "", join)
	}
	if !s.independent {
		h.waitRing("the first ring of three", func(st cluster.Status) bool { return len(st.Ring) == clusterNodes })
	}
	setup := time.Since(began)

	for i := range clusterWorkers {
		h.workers = append(h.workers, nil)
		h.spawnWorker(i)
	}
	h.deadline = time.Now().Add(clusterBudget)
	h.progress(clusterGrants)
	if s.independent {
		h.progress(4 * clusterGrants)
	}
	scenario := time.Now()
	for _, f := range s.plan {
		h.inject(f)
		h.progress(clusterGrants)
	}
	scenarioTime := time.Since(scenario)
	h.stopWorkers()
	h.killNodes()

	dbWrites, dbLog := readFence(ctx, t, db, clusterLock)
	in := faultinject.Input{Records: h.records, Killed: h.killed, DB: dbLog, DBWrites: dbWrites}
	rep := faultinject.CheckCluster(in, h.faults)
	if d := os.Getenv("BATON_FAULTINJECT_DUMP"); d != "" {
		h.dumpCluster(d, in)
	}
	what := fmt.Sprintf("a cluster of three nodes (self-stop %v, removal after %v)", h.selfStop, h.removeAfter)
	if s.independent {
		what = "three independent single servers"
	}
	t.Logf("cluster fault injection, %s, lease %v, plan %v: setup %.1fs, scenario %.1fs, total %.1fs\n%s\nsteered faults whose late write the fence refused: %d of %d",
		what, h.lease, s.plan, setup.Seconds(), scenarioTime.Seconds(), time.Since(began).Seconds(), rep, h.steeredRefused, h.steered)
	return rep, h
}

// startNode starts a node process in slot i (its namespace), joining
// through join (an admin address) or, empty, bootstrapping, and waits
// until its admin API answers. A replacement gets a new id and a new
// data directory: the operator's way back after a removal.
// With join "wait" it is started with neither -bootstrap nor -join: a
// node given its id (and data directory) again rejoins by itself, a new
// one waits until a member adds it (joinNode).
func (h *clusterHarness) startNode(i int, id, join string) *node {
	if id == "" {
		h.nodeGen++
		id = fmt.Sprintf("n%d", i)
		if h.nodeGen > clusterNodes {
			id = fmt.Sprintf("n%dr%d", i, h.nodeGen)
		}
	}
	args := []string{"serve", "-listen", "0.0.0.0:" + protoPort, "-io-timeout", "2s", "-log-format", "json"}
	if !h.independent {
		args = append(args, "-node-id", id, "-data-dir", filepath.Join(h.dir, id),
			"-raft-listen", h.lab.ClusterIP(i)+":"+raftPort, "-admin-listen", "0.0.0.0:"+adminPort,
			"-advertise-host", h.lab.ClusterIP(i),
			"-cluster-self-stop", h.selfStop.String(), "-cluster-remove-after", h.removeAfter.String())
		switch {
		case join == "wait": // rejoins, or waits to be added
		case join == "":
			args = append(args, "-bootstrap")
		default:
			args = append(args, "-join", join)
		}
	}
	h.procs++
	pid := fmt.Sprintf("%s.%d", id, h.procs)
	args = append(args, "-audit-log", filepath.Join(h.dir, pid+".audit.jsonl"))
	argv := h.lab.Exec(h.lab.Node(i), append([]string{h.bin}, args...)...)
	n := &node{slot: i, id: id, p: h.start(pid, -1, argv[0], nil, argv[1:]...)}
	h.nodes[i] = n
	h.all = append(h.all, n)
	deadline := time.Now().Add(waitMax)
	for {
		var err error
		if h.independent {
			err = h.dialNode(i)
		} else {
			_, err = h.status(i)
		}
		if err == nil {
			return n
		}
		select {
		case <-n.p.exited:
			h.t.Fatalf("%s exited at start: %v\n%s", id, n.p.cmd.ProcessState, tail(n.p.stderr))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%s does not answer after %v: %v\n%s", id, waitMax, err, tail(n.p.stderr))
		}
	}
}

func (h *clusterHarness) dialNode(i int) error {
	ctx, cancel := context.WithTimeout(h.ctx, time.Second)
	defer cancel()
	c, err := h.lab.DialContext(h.lab.Clients())(ctx, "tcp", h.lab.ClientIP(i)+":"+protoPort)
	if err == nil {
		c.Close()
	}
	return err
}

// status reads node i's view of the cluster through its client link.
func (h *clusterHarness) status(i int) (cluster.Status, error) {
	var st cluster.Status
	resp, err := h.http.Get("http://" + h.lab.ClientIP(i) + ":" + adminPort + "/cluster/v1/status")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("status %s", resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// waitRing waits until every live node's status satisfies cond and all
// have applied the same ring.
func (h *clusterHarness) waitRing(what string, cond func(cluster.Status) bool) cluster.Status {
	h.t.Helper()
	deadline := time.Now().Add(2 * waitMax)
	for {
		var sts []cluster.Status
		var err error
		var behind *node // the first node that does not answer, or not so
		for _, n := range h.nodes {
			if n == nil {
				continue
			}
			var st cluster.Status
			if st, err = h.status(n.slot); err != nil || !cond(st) {
				behind = n
				break
			}
			sts = append(sts, st)
		}
		if err == nil && len(sts) == h.live() && sts[0].AppliedRingVersion > 0 &&
			!slices.ContainsFunc(sts, func(st cluster.Status) bool { return st.AppliedRingVersion != sts[0].AppliedRingVersion }) {
			return sts[0]
		}
		if time.Now().After(deadline) {
			// What the node that holds it up said last: the suite's only
			// record of it when the run has no dump directory (CI).
			var last string
			if behind != nil {
				exited := "running"
				select {
				case <-behind.p.exited:
					exited = fmt.Sprintf("exited: %v", behind.p.cmd.ProcessState)
				default:
				}
				last = fmt.Sprintf("\n%s (%s), the end of its log:\n%s", behind.id, exited, tail(behind.p.stderr))
			}
			h.t.Fatalf("no %s within %v: %d of %d nodes (%v)%s", what, 2*waitMax, len(sts), h.live(), err, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (h *clusterHarness) live() int {
	n := 0
	for _, x := range h.nodes {
		if x != nil {
			n++
		}
	}
	return n
}

// roles returns the slot of the lock's owner and of the Raft leader, as
// the first node that knows a leader sees them.
func (h *clusterHarness) roles() (owner, leader int) {
	h.t.Helper()
	deadline := time.Now().Add(waitMax)
	for {
		for _, n := range h.nodes {
			if n == nil {
				continue
			}
			st, err := h.status(n.slot)
			if err != nil || st.Leader == "" {
				continue
			}
			ownerID := cluster.NewRing(st.AppliedRingVersion, st.Ring).Owner(clusterLock)
			owner, leader = -1, -1
			for _, m := range h.nodes {
				if m == nil {
					continue
				}
				if m.id == ownerID {
					owner = m.slot
				}
				if m.id == st.Leader {
					leader = m.slot
				}
			}
			if owner >= 0 && leader >= 0 {
				return owner, leader
			}
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("no owner of %q and leader known within %v", clusterLock, waitMax)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pick returns the slot of the node in role.
func (h *clusterHarness) pick(role string) (slot int, ownerLost bool) {
	owner, leader := h.roles()
	switch role {
	case "owner":
		return owner, true
	case "leader":
		return leader, leader == owner
	case "follower":
		for i, n := range h.nodes {
			if n != nil && i != owner && i != leader {
				return i, false
			}
		}
	}
	h.t.Fatalf("no node in role %q (owner %d, leader %d)", role, owner, leader)
	return -1, false
}

// spawnWorker starts a worker in slot i, in the clients' namespace,
// talking to node i % 3.
func (h *clusterHarness) spawnWorker(i int) {
	h.gen++
	wc := faultinject.WorkerConfig{
		ID:   fmt.Sprintf("w%d.%d", i, h.gen),
		Addr: h.lab.ClientIP(i%clusterNodes) + ":" + protoPort, Lock: clusterLock, Lease: h.lease,
		DSN: h.pg.DSN, Writes: writes, Step: step,
	}
	switch {
	case h.ranges: // range locks on the key clusterLock, every worker
		wc.ID, wc.Modes = fmt.Sprintf("r%d.%d", i, h.gen), []string{"range"}
	case i >= clusterV1:
		wc.ID, wc.Modes = fmt.Sprintf("s%d.%d", i, h.gen), v2Modes
	}
	if h.resumable && len(wc.Modes) > 0 {
		for k := range clusterNodes {
			wc.Addrs = append(wc.Addrs, h.lab.ClientIP((i+k)%clusterNodes)+":"+protoPort)
		}
	}
	cfg, _ := json.Marshal(wc)
	self, err := os.Executable()
	if err != nil {
		h.t.Fatal(err)
	}
	argv := h.lab.Exec(h.lab.Clients(), self)
	h.workers[i] = h.start(wc.ID, i, argv[0], []string{workerEnv + "=" + string(cfg)}, argv[1:]...)
}

// inject applies one fault of the plan.
func (h *clusterHarness) inject(f string) {
	h.t.Helper()
	h.lastFault = f
	kind, role, ok := strings.Cut(f, "-")
	if kind == "client" {
		var rest string
		rest, role, ok = strings.Cut(role, "-")
		kind = "client-" + rest
	}
	if !ok {
		panic("fault " + f)
	}
	// "owner-join-steered": the owner; join and steered.
	base, variants, _ := strings.Cut(role, "-")
	variant := strings.TrimSuffix(variants, "-steered")
	slot, ownerLost := h.pick(base)
	if strings.HasSuffix(role, "-steered") {
		defer h.steerLate(slot)()
	}
	n := h.nodes[slot]
	fault := faultinject.ClusterFault{Kind: kind, Role: role, Node: n.id, OwnerLost: ownerLost, Start: faultinject.Mono()}
	for _, w := range h.workers {
		if w.slot%clusterNodes == slot {
			fault.Workers = append(fault.Workers, w.id)
		}
	}
	defer func() {
		fault.End = faultinject.Mono()
		h.faults = append(h.faults, fault)
	}()
	switch kind {
	case faultinject.FaultNodeKill:
		h.kill(n)
		fault.Died = faultinject.Mono()
		fault.Removed = h.awaitRemoval(n)
		h.progress(clusterGrants / 2) // the lock moves on before the replacement
		h.replace(slot)

	case faultinject.FaultNodeRestart:
		// A crash and a restart on the same data directory, at once,
		// with no removal: the node comes back without its memory, or,
		// if the cluster removed it meanwhile, is replaced.
		h.kill(n)
		fault.Died = faultinject.Mono()
		h.startNode(slot, n.id, "wait")
		if !h.settle(slot) {
			fault.Removed = faultinject.Mono()
		}

	case faultinject.FaultNodeTerm:
		// A planned stop and a start at once on the same data
		// directory: the node's names go to the others and come back
		// by planned changes, the claims of its own plain sessions
		// kept at their new owners meanwhile.
		n.p.signal(syscall.SIGTERM)
		if !n.p.wait(waitMax) {
			h.t.Fatalf("%s did not stop after SIGTERM", n.id)
		}
		h.nodes[n.slot] = nil
		fault.Died = faultinject.Mono()
		h.startNode(slot, n.id, "wait")
		if !h.settle(slot) {
			fault.Removed = faultinject.Mono()
		}

	case faultinject.FaultNodeStop, faultinject.FaultNodeCut:
		stop := func() {
			if kind == faultinject.FaultNodeStop {
				h.must(faultinject.Freeze(n.p.cmd.Process.Pid, waitMax))
			} else {
				h.must(h.lab.CutCluster(h.ctx, slot))
			}
		}
		resume := func() {
			if kind == faultinject.FaultNodeStop {
				n.p.signal(syscall.SIGCONT)
			} else {
				h.must(h.lab.HealCluster(h.ctx, slot))
			}
		}
		stop()
		switch variant {
		case "brief": // shorter than the self-stop: nothing moves
			time.Sleep(clusterSelfStop / 2)
			resume()
			if !h.settle(slot) {
				fault.Removed = faultinject.Mono()
			}
			return
		case "removed": // the operator removes it at once (stop only)
			h.nodes[slot] = nil
			from := h.mark()
			h.operatorRemove(n.id)
			fault.Removed = faultinject.Mono()
			h.waitFor(from, "a grant by the new owner", func(r faultinject.Record) bool { return r.Ev == "acquired" })
		default: // until the cluster removes it
			fault.Removed = h.awaitRemoval(n)
		}
		// Back, out of the ring: it must serve nothing (its own clients
		// try it meanwhile) while the lock moves on, after the new
		// owner's warm-up; then the operator replaces it. (A node that
		// joins takes its names over at once: replacing it earlier would
		// cut the warm-up short.)
		resume()
		if variant != "removed" {
			h.progress(clusterGrants / 2)
		}
		time.Sleep(clusterHold)
		h.kill(n)
		h.replace(slot)

	case faultinject.FaultNodeIsolate:
		// Both links down: neither the cluster nor the node's own
		// clients hear from it, and it cannot tell them anything. With
		// "join", a new node that owns the lock in the ring without the
		// isolated one is added as soon as the others have removed it.
		var joiner *node
		if variant == "join" {
			joiner = h.prestart(n)
		}
		h.must(h.lab.CutCluster(h.ctx, slot))
		h.must(h.lab.CutClient(h.ctx, slot))
		fault.Removed = h.awaitRemoval(n)
		h.nodes[slot] = nil // out of reach, and out of the ring
		from := h.mark()
		if joiner != nil {
			h.joinNode(joiner)
		}
		// Isolated until the lock has moved on.
		h.waitFor(from, "a grant by the new owner", func(r faultinject.Record) bool { return r.Ev == "acquired" })
		h.must(h.lab.HealCluster(h.ctx, slot))
		h.must(h.lab.HealClient(h.ctx, slot))
		h.progress(clusterGrants / 2)
		h.kill(n)
		if joiner == nil {
			h.replace(slot)
		}

	case faultinject.FaultNodeClientCut:
		h.must(h.lab.CutClient(h.ctx, slot))
		time.Sleep(clusterHold)
		h.must(h.lab.HealClient(h.ctx, slot))

	case faultinject.FaultNodePartition:
		// The node and one other lose each other alone: the other
		// relays its workers' claims to the lock's owner over that
		// link. A follower that is not the leader when there is one, so
		// that both keep their quorum contact. "brief": past the relay's
		// patience (L/2), healed before the lease ends: the relayed
		// claims are re-asserted at the same owner. Otherwise longer
		// than the lease, and shorter than the removal (T), as the other
		// node may be a follower cut from the leader: the relayed claims
		// are lost, the owner expires them, nobody is removed.
		_, leader := h.roles()
		other := -1
		for i, m := range h.nodes {
			if m != nil && i != slot && (other < 0 || i != leader) {
				other = i
			}
		}
		hold := (h.lease + h.removeAfter) / 2
		if variant == "brief" {
			hold = h.lease/2 + 200*time.Millisecond
		}
		h.must(h.lab.CutBetween(h.ctx, slot, other))
		time.Sleep(hold)
		h.must(h.lab.HealBetween(h.ctx, slot, other))
		for _, i := range []int{slot, other} {
			if !h.settle(i) && i == slot {
				fault.Removed = faultinject.Mono()
			}
		}

	default:
		panic("unknown fault kind " + kind)
	}
}

// prestart starts a node in a free slot that waits to be added, with
// an id that owns the lock in the ring of the live nodes other than n
// and itself.
func (h *clusterHarness) prestart(n *node) *node {
	h.t.Helper()
	slot := slices.Index(h.nodes, nil)
	if slot < 0 {
		h.t.Fatalf("no free slot for a new node")
	}
	var ids []string
	for _, m := range h.nodes {
		if m != nil && m != n {
			ids = append(ids, m.id)
		}
	}
	for k := range 1000 {
		id := fmt.Sprintf("n%dj%d", slot, k)
		if cluster.NewRing(0, append(slices.Clone(ids), id)).Owner(clusterLock) == id {
			j := h.startNode(slot, id, "wait")
			h.nodes[slot] = nil // not a member yet
			return j
		}
	}
	h.t.Fatalf("no id owns %q among %v", clusterLock, ids)
	return nil
}

// joinNode has a live member add the waiting node j ('baton cluster
// join': j's own record posted to a member), and waits until every
// node has it in its ring.
func (h *clusterHarness) joinNode(j *node) {
	h.t.Helper()
	st, err := h.status(j.slot)
	h.must(err)
	body, _ := json.Marshal(st.Self)
	h.nodes[j.slot] = j
	deadline := time.Now().Add(waitMax)
	for joined := false; !joined; {
		for _, m := range h.nodes {
			if m == nil || m == j {
				continue
			}
			resp, err := h.http.Post("http://"+h.lab.ClientIP(m.slot)+":"+adminPort+"/cluster/v1/join", "application/json", bytes.NewReader(body))
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode/100 == 2 {
					joined = true
					break
				}
			}
		}
		if !joined {
			if time.Now().After(deadline) {
				h.t.Fatalf("no live node added %s within %v", j.id, waitMax)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	h.waitRing("a ring with "+j.id, func(st cluster.Status) bool { return slices.Contains(st.Ring, j.id) })
}

// kill kills node n (SIGKILL; SIGCONT for a frozen one) and empties its
// slot.
func (h *clusterHarness) kill(n *node) {
	h.t.Helper()
	n.p.signal(syscall.SIGKILL)
	n.p.signal(syscall.SIGCONT)
	if !n.p.wait(waitMax) {
		h.t.Fatalf("%s did not die of SIGKILL", n.id)
	}
	h.nodes[n.slot] = nil
}

// awaitRemoval waits until the other nodes have applied a ring without
// n, which the Raft leader commits once it has not heard from n for
// -cluster-remove-after, and returns when they had. n's slot is empty
// meanwhile (a frozen or cut-off node's view is not waited for) and
// restored after, unless n was dead.
func (h *clusterHarness) awaitRemoval(n *node) int64 {
	h.t.Helper()
	h.nodes[n.slot] = nil
	h.waitRing("a ring without "+n.id, func(st cluster.Status) bool { return removedFrom(st, n.id) })
	at := faultinject.Mono()
	select {
	case <-n.p.exited:
	default:
		h.nodes[n.slot] = n
	}
	return at
}

// settle waits until node slot is back in the ring (every live node,
// itself included, has applied the same ring with it) and returns true,
// or until the others have removed it: then it is replaced and settle
// returns false.
func (h *clusterHarness) settle(slot int) bool {
	h.t.Helper()
	n := h.nodes[slot]
	deadline := time.Now().Add(2 * waitMax)
	var views []string // each live node's last view, for the failure
	for time.Now().Before(deadline) {
		back, removed := true, false
		var version uint64
		views = views[:0]
		sts := map[*node]cluster.Status{}
		for _, m := range h.nodes {
			if m == nil {
				continue
			}
			st, err := h.status(m.slot)
			if err == nil {
				sts[m] = st
			}
			if err != nil {
				views = append(views, fmt.Sprintf("%s: %v", m.id, err))
			} else {
				pending := "none"
				if st.Pending != nil {
					pending = fmt.Sprintf("%+v", *st.Pending)
				}
				views = append(views, fmt.Sprintf("%s: ring %v applied %d, leader %q, pending %s", m.id, st.Ring, st.AppliedRingVersion, st.Leader, pending))
			}
			switch {
			case err != nil:
				back = false
			case m != n && removedFrom(st, n.id):
				removed = true
			case !slices.Contains(st.Ring, n.id) || (version != 0 && st.AppliedRingVersion != version):
				back = false
			}
			version = max(version, st.AppliedRingVersion)
		}
		select {
		case <-n.p.exited:
			if removed {
				h.nodes[slot] = nil
				h.replace(slot)
				return false
			}
			// Nothing here stops it: it crashed.
			h.t.Fatalf("%s exited while it settled (%v); the nodes' views:\n%s\nthe end of its log:\n%s",
				n.id, n.p.cmd.ProcessState, strings.Join(views, "\n"), tail(n.p.stderr))
		default:
		}
		if removed {
			h.kill(n)
			h.replace(slot)
			return false
		}
		if back {
			return true
		}
		if x := removedOther(n, sts, version); x != nil {
			// The fault cut another node off too (a partition between
			// two nodes cuts both ways) and the leader removed that one:
			// it never applies the rings that follow. Replace it, as a
			// removed node is.
			h.t.Logf("%s was removed while %s settled; replacing it", x.id, n.id)
			h.kill(x)
			h.replace(x.slot)
		}
		time.Sleep(50 * time.Millisecond)
	}
	exited := "running"
	select {
	case <-n.p.exited:
		exited = fmt.Sprintf("exited: %v", n.p.cmd.ProcessState)
	default:
	}
	h.t.Fatalf("%s neither back in the ring nor removed within %v; the nodes' views:\n%s\n%s (%s), the end of its log:\n%s",
		n.id, 2*waitMax, strings.Join(views, "\n"), n.id, exited, tail(n.p.stderr))
	return false
}

// removedFrom reports whether the node whose status is st has applied
// the removal of member id: id is neither in its ring nor among its
// members. A member out of the ring alone is not removed: a node that
// restarts on its data directory leaves the ring while it warms up and
// comes back by a planned change, and a node started in its place would
// find its Raft address still in the configuration.
func removedFrom(st cluster.Status, id string) bool {
	return !slices.Contains(st.Ring, id) && !slices.ContainsFunc(st.Members, func(m cluster.Member) bool { return m.ID == id })
}

// removedOther returns a live node other than n that the latest ring
// (version, as the nodes with sts applied it) leaves out and that is no
// longer a member, seen by a node that has applied it: the leader
// removed it. Nil when there is none.
func removedOther(n *node, sts map[*node]cluster.Status, version uint64) *node {
	for x := range sts {
		if x == n {
			continue
		}
		for m, st := range sts {
			if m != x && st.AppliedRingVersion == version && removedFrom(st, x.id) {
				return x
			}
		}
	}
	return nil
}

// steerLate makes the fault that follows hit a holder between the check
// of its context and its write: the holder is told to pause there and,
// once it has, the fault is injected. The function it returns waits for
// the lock to move on (a write with a higher token accepted), lets the
// holder go on with its write, and requires the fence to refuse it. The
// holder is not frozen: its client gives up on time, and the write is
// one it sends after that (Late), as a program whose check-then-act gap
// spans the failover would.
//
// It prefers, for up to 10 s, a holder connected to the node in slot
// (the node about to be hit), which cannot be told of anything once the
// node is isolated.
func (h *clusterHarness) steerLate(slot int) func() {
	h.t.Helper()
	h.steered++
	from := h.mark()
	deadline := time.Now().Add(10 * time.Second)
	w, _ := h.holder()
	for w.slot%clusterNodes != slot && time.Now().Before(deadline) {
		h.mu.Lock()
		changed := h.changed
		h.mu.Unlock()
		select {
		case <-changed:
		case <-time.After(time.Until(deadline)):
		}
		w, _ = h.holder()
	}
	w.command("pause")
	chk := h.waitFor(from, w.id+" pausing after its check", func(r faultinject.Record) bool {
		return faultinject.Proc(r.W) == w.id && r.Ev == "check" && r.Paused
	})
	return func() {
		h.t.Helper()
		h.waitFor(from, fmt.Sprintf("accepted write with a token above %s's %d", chk.W, chk.Tok), func(r faultinject.Record) bool {
			return r.Ev == "write" && r.OK && r.Tok > chk.Tok && (!chk.Shared || !r.Shared)
		})
		w.command("resume")
		late := h.waitFor(from, chk.W+"'s late write", func(r faultinject.Record) bool {
			return r.W == chk.W && r.Ev == "write" && r.Tok == chk.Tok && r.T0 > chk.T
		})
		if !late.OK && late.Err == "" {
			h.steeredRefused++
		} else {
			h.problem("%s's write (shared %v) with token %d after the lock moved on: accepted %v, error %q; want refused by the fence",
				chk.W, chk.Shared, chk.Tok, late.OK, late.Err)
		}
	}
}

func (h *clusterHarness) must(err error) {
	h.t.Helper()
	if err != nil {
		h.t.Fatal(err)
	}
}

// operatorRemove is the operator's 'baton cluster remove ID' (what
// "stop-ROLE-removed" does to a frozen node before the cluster would).
// It retries through any live node until one accepts (the remaining
// nodes may first have to elect a leader), then waits until the live
// nodes have applied a ring without it.
func (h *clusterHarness) operatorRemove(id string) {
	h.t.Helper()
	deadline := time.Now().Add(waitMax)
	body, _ := json.Marshal(map[string]string{"id": id})
	for done := false; !done; {
		for _, n := range h.nodes {
			if n == nil || n.id == id {
				continue
			}
			resp, err := h.http.Post("http://"+h.lab.ClientIP(n.slot)+":"+adminPort+"/cluster/v1/remove", "application/json", bytes.NewReader(body))
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusNoContent {
					done = true
					break
				}
			}
		}
		if !done {
			if time.Now().After(deadline) {
				h.t.Fatalf("no live node removed %s within %v", id, waitMax)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	h.waitRing("a ring without "+id, func(st cluster.Status) bool { return removedFrom(st, id) })
}

// replace starts a new node in slot, joining through a live node, and
// waits until every node has it in its ring.
func (h *clusterHarness) replace(slot int) {
	h.t.Helper()
	join := ""
	for _, n := range h.nodes {
		if n != nil {
			join = h.lab.ClusterIP(n.slot) + ":" + adminPort
			break
		}
	}
	n := h.startNode(slot, "", join)
	h.waitRing("a ring with "+n.id, func(st cluster.Status) bool { return slices.Contains(st.Ring, n.id) })
}

// dumpCluster is dump, with the faults of the cluster suite and every
// node process's log and audit log.
func (h *clusterHarness) dumpCluster(dir string, in faultinject.Input) {
	h.dump(dir, in)
	b, _ := json.Marshal(h.faults)
	files, _ := filepath.Glob(filepath.Join(h.dir, "n*"))
	for _, f := range files {
		if data, err := os.ReadFile(f); err == nil {
			os.WriteFile(filepath.Join(dir, filepath.Base(f)), data, 0o644)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "cluster_faults.json"), b, 0o644); err != nil {
		h.t.Errorf("dump: %v", err)
	}
}

// dumpState writes, for a run that failed, the workers' records and
// what each live node's admin API says about the lock, its sessions and
// the cluster, before the nodes are killed.
func (h *clusterHarness) dumpState(dir string) {
	h.mu.Lock()
	var b []byte
	for _, r := range h.records {
		line, _ := json.Marshal(r)
		b = append(append(b, line...), '\n')
	}
	h.mu.Unlock()
	os.WriteFile(filepath.Join(dir, "failed-records.jsonl"), b, 0o644)
	for _, n := range h.nodes {
		if n == nil {
			continue
		}
		for _, path := range []string{"/api/locks/" + clusterLock, "/api/sessions", "/api/cluster"} {
			body, err := h.get(n, path)
			if err != nil {
				body = []byte(err.Error())
			}
			name := fmt.Sprintf("failed-state-%s%s.json", n.id, strings.ReplaceAll(path, "/", "_"))
			os.WriteFile(filepath.Join(dir, name), body, 0o644)
		}
	}
}

// logState logs the lock's state on each live node and the workers'
// last records.
func (h *clusterHarness) logState() {
	for _, n := range h.nodes {
		if n == nil {
			continue
		}
		body, err := h.get(n, "/api/locks/"+clusterLock)
		h.t.Logf("%s (slot %d) /api/locks/%s: %s %v", n.id, n.slot, clusterLock, body, err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.records[max(len(h.records)-40, 0):] {
		line, _ := json.Marshal(r)
		h.t.Logf("record %s", line)
	}
}

// get returns the body of an admin API GET on node n.
func (h *clusterHarness) get(n *node, path string) ([]byte, error) {
	resp, err := h.http.Get("http://" + h.lab.ClientIP(n.slot) + ":" + adminPort + path)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// killNodes kills every node process still running (nodes are not
// under test at the end: a planned stop would only hand the names
// around).
func (h *clusterHarness) killNodes() {
	for _, n := range h.all {
		select {
		case <-n.p.exited:
		default:
			n.p.cmd.Process.Kill()
			n.p.cmd.Process.Signal(syscall.SIGCONT)
			n.p.wait(waitMax)
		}
	}
	clear(h.nodes)
}

// TestRemovedOther: settle replaces a node that the latest ring leaves
// out and that is no longer a member, as a node that has applied that
// ring sees it, and no other: not the node it waits for, nor one a
// lagging node has not seen join, nor a member warming up after a
// restart.
func TestRemovedOther(t *testing.T) {
	n, a, b := &node{id: "n1"}, &node{id: "n0r13"}, &node{id: "n2r11"}
	sts := map[*node]cluster.Status{
		n: {Ring: []string{"n0r13", "n1"}, AppliedRingVersion: 24},
		a: {Ring: []string{"n0r13", "n1"}, AppliedRingVersion: 24},
		b: {Ring: []string{"n0r13", "n1", "n2r11"}, AppliedRingVersion: 23},
	}
	if x := removedOther(n, sts, 24); x != b {
		t.Errorf("removedOther = %v, want n2r11, which ring 24 leaves out", x)
	}
	// A node that joined in ring 24, which a lagging node has not
	// applied: not removed.
	sts = map[*node]cluster.Status{
		n: {Ring: []string{"n0r13", "n1", "n2r11"}, AppliedRingVersion: 24},
		a: {Ring: []string{"n0r13", "n1", "n2r11"}, AppliedRingVersion: 24},
		b: {Ring: []string{"n1", "n2r11"}, AppliedRingVersion: 23},
	}
	if x := removedOther(n, sts, 24); x != nil {
		t.Errorf("removedOther = %s, want none (n0r13 joined in ring 24)", x.id)
	}
	// The node settle waits for is its own case.
	sts = map[*node]cluster.Status{
		n: {Ring: []string{"n0r13", "n1", "n2r11"}, AppliedRingVersion: 23},
		a: {Ring: []string{"n0r13", "n2r11"}, AppliedRingVersion: 24},
		b: {Ring: []string{"n0r13", "n2r11"}, AppliedRingVersion: 24},
	}
	if x := removedOther(n, sts, 24); x != nil {
		t.Errorf("removedOther = %s, want none", x.id)
	}
	// A node that restarted on its data directory is out of the ring
	// while it warms up, and still a member: not removed. (Replacing it
	// then started a node on its Raft address while that address was
	// still in the configuration, and the replacement's join failed.)
	members := func(ids ...string) []cluster.Member {
		var ms []cluster.Member
		for _, id := range ids {
			ms = append(ms, cluster.Member{ID: id})
		}
		return ms
	}
	sts = map[*node]cluster.Status{
		n: {Ring: []string{"n0r13", "n1"}, Members: members("n0r13", "n1", "n2r11"), AppliedRingVersion: 24},
		a: {Ring: []string{"n0r13", "n1"}, Members: members("n0r13", "n1", "n2r11"), AppliedRingVersion: 24},
		b: {Ring: []string{"n0r13", "n1"}, Members: members("n0r13", "n1", "n2r11"), AppliedRingVersion: 24},
	}
	if x := removedOther(n, sts, 24); x != nil {
		t.Errorf("removedOther = %s, want none (n2r11 is still a member)", x.id)
	}
	if removedFrom(sts[a], "n2r11") || !removedFrom(sts[a], "n9") {
		t.Error("removedFrom: a member out of the ring counts as removed, or a stranger does not")
	}
}
