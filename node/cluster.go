package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonlock/baton/audit"
	"github.com/batonlock/baton/cluster"
	"github.com/batonlock/baton/internal/memberclient"
	"github.com/batonlock/baton/internal/serverhook"
	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
	"github.com/prometheus/client_golang/prometheus"
)

// clusterDir is the subdirectory of -data-dir that holds a cluster node's
// Raft log, stable store and snapshots, apart from the token store's
// DIR/tokens (which a cluster node does not use: its tokens come from
// epochs committed through Raft).
const clusterDir = "cluster"

// ErrBootstrapKept is returned by Start for a node given Bootstrap
// (-bootstrap) whose data directory holds a cluster that others have
// joined: kept in its configuration, it would form a second cluster
// after losing that directory.
var ErrBootstrapKept = errors.New("node: -bootstrap is still set on a member of a running cluster")

// startupEpochTimeout bounds a node's wait, at start, for its first token
// epoch (which needs a leader).
const startupEpochTimeout = time.Minute

// clusterRuntime is what makes a server a cluster node: the member
// API on the admin listener, the Router of the server, the readiness
// check and the metrics. Its node is set once the listeners are bound.
type clusterRuntime struct {
	logger  *slog.Logger
	node    atomic.Pointer[cluster.Node]
	handler atomic.Pointer[http.Handler]
	// ready is set once the node has committed its first epoch.
	ready atomic.Bool
	// leaseMu makes one raise of the cluster's largest lease at a time.
	leaseMu sync.Mutex
	// epochBusy makes one background AcquireEpoch at a time.
	epochBusy atomic.Bool
	done      chan struct{}
	// tls is the inter-node mutual TLS; nil without TLS.
	tls *clusterTLS
	// audit receives the membership and ring changes; may be nil.
	audit *audit.Logger
	// changes counts the membership and ring events applied, by kind.
	changes *prometheus.CounterVec
	// mover is the server, which hands lock state over on planned
	// changes (cluster.Mover).
	mover cluster.Mover
	// srv is the server whose sessions a node without quorum contact
	// ends (selfStopLoop); nil in tests of the runtime alone.
	srv serverhook.Cluster
	// selfStops counts the lapses of quorum contact (self-stops);
	// autoRemovals the silent members this node removed as leader.
	selfStops, autoRemovals prometheus.Counter
	// secret is the cluster's shared secret (-cluster-secret-file), nil
	// for none; oldSecrets are accepted too.
	secret     []byte
	oldSecrets [][]byte
	// refusals counts the member API requests refused, by reason.
	refusals *prometheus.CounterVec
}

func newClusterRuntime(logger *slog.Logger) *clusterRuntime {
	return &clusterRuntime{logger: logger, done: make(chan struct{}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_cluster_membership_changes_total",
			Help: "Membership and ring changes this node has applied from the Raft log, by kind (join, leave, remove, ring); replays at start included.",
		}, []string{"kind"}),
		selfStops: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "baton_cluster_self_stops_total",
			Help: "Times this node lost its quorum contact for the self-stop timeout and stopped serving (its sessions ended with ERROR 0x03).",
		}),
		autoRemovals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "baton_cluster_auto_removals_total",
			Help: "Silent members this node, as Raft leader, removed from the cluster after the removal timeout.",
		}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_cluster_member_api_refused_total",
			Help: "Member API requests this node refused, by reason: host (Host header not this node's), cross_origin (a browser's cross-site write), secret (no or wrong cluster secret), content_type (a write not application/json), invalid (not a valid operation).",
		}, []string{"reason"})}
}

// refused counts a member API request refused for reason.
func (c *clusterRuntime) refused(reason string) { c.refusals.WithLabelValues(reason).Inc() }

// reloadSecret re-reads -cluster-secret-file on SIGHUP; a file that
// fails to load keeps the secrets in force.
func (c *clusterRuntime) reloadSecret(path string) {
	n := c.node.Load()
	if path == "" || n == nil {
		return
	}
	secret, old, err := memberclient.ReadSecret(path)
	if err != nil {
		c.logger.Error("SIGHUP: cannot reload the cluster secret; keeping the previous one", "err", err)
		return
	}
	n.SetSecret(secret, old...)
	c.logger.Info("SIGHUP: cluster secret reloaded", "also_accepted", len(old))
}

// advertised returns the address recorded for the other members: the
// bound address, with its host replaced by -advertise-host when set.
func advertised(bound, host string) string {
	if host == "" {
		return bound
	}
	_, port, err := net.SplitHostPort(bound)
	if err != nil {
		return bound
	}
	return net.JoinHostPort(host, port)
}

// event records a membership or ring change in the audit log and the
// metrics.
func (c *clusterRuntime) event(e cluster.Event) {
	c.changes.WithLabelValues(string(e.Kind)).Inc()
	c.ringChanged(e)
	if e.Kind != cluster.EventRing { // the node logs the rings it applies
		c.logger.Info("cluster membership", "change", string(e.Kind), "member", e.Member.ID, "member_state", e.Member.State,
			"log_index", e.Index, "replayed", e.Replayed)
	}
	if c.audit == nil {
		return
	}
	ae := audit.ClusterEvent{Time: time.Now(), RingVersion: e.RingVersion, Ring: e.Ring, CommittedAt: e.CommittedAt,
		LogIndex: e.Index, Replayed: e.Replayed}
	switch e.Kind {
	case cluster.EventJoin:
		ae.Event = audit.ClusterJoin
	case cluster.EventLeave:
		ae.Event = audit.ClusterLeave
	case cluster.EventRemove:
		ae.Event = audit.ClusterRemove
	default:
		ae.Event = audit.ClusterRing
	}
	if e.Kind != cluster.EventRing {
		m := e.Member
		ae.Member = &audit.ClusterMember{ID: m.ID, State: string(m.State), RaftAddr: m.RaftAddr, ProtocolAddr: m.ProtocolAddr, AdminAddr: m.AdminAddr}
	}
	c.audit.Cluster(ae)
}

// ServeHTTP serves the member API (cluster.Node.Handler) once the node
// is open; 503 before, so a peer retries.
func (c *clusterRuntime) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := c.handler.Load()
	if h == nil {
		http.Error(w, `{"error":"cluster node starting"}`, http.StatusServiceUnavailable)
		return
	}
	(*h).ServeHTTP(w, r)
}

// start opens the node (rejoining by itself from its data directory),
// bootstraps or joins as asked, and commits the node's first epoch.
func (c *clusterRuntime) start(ctx context.Context, cfg *Config, addrs Addrs) error {
	hc, scheme := c.tls.httpClient()
	ncfg := cluster.Config{
		ID:               cfg.NodeID,
		RaftAddr:         cfg.RaftListen,
		ProtocolAddr:     advertised(addrs.Protocol, cfg.AdvertiseHost),
		AdminAddr:        advertised(addrs.Admin, cfg.AdvertiseHost),
		DataDir:          filepath.Join(cfg.DataDir, clusterDir),
		Logger:           c.logger,
		HTTPClient:       hc,
		Scheme:           scheme,
		OnEvent:          c.event,
		SelfStop:         cfg.SelfStop,
		RemoveAfter:      cfg.RemoveAfter,
		OnAutoRemove:     c.autoRemoved,
		Secret:           c.secret,
		OldSecrets:       c.oldSecrets,
		OnRefused:        c.refused,
		OnClusterChanged: c.clusterChanged,
	}
	if cfg.AdvertiseHost != "" {
		ncfg.RaftAdvertise = advertised(cfg.RaftListen, cfg.AdvertiseHost)
	}
	if c.tls != nil {
		ncfg.ServerTLS, ncfg.ClientTLS = c.tls.server, c.tls.client
	}
	n, err := cluster.Open(ncfg)
	if err != nil {
		return err
	}
	if c.mover != nil {
		n.SetMover(c.mover)
	}
	if c.srv != nil {
		n.SetLeaseSessions(c.srv)
	}
	c.node.Store(n)
	h := n.Handler()
	c.handler.Store(&h)
	// -join naming this node's own advertised admin address forms the
	// cluster on a new data directory: the first node of a set that
	// shares one configuration. A list of several addresses forms only
	// when every other listed member says it is in no cluster
	// (cluster.Node.JoinList).
	joins, err := cluster.SplitJoinList(cfg.Join)
	if cfg.Join == "" {
		joins, err = nil, nil
	}
	if err != nil {
		return fmt.Errorf("-join: %w", err)
	}
	joinSelf := len(joins) == 1 && joins[0] == ncfg.AdminAddr
	if cfg.Bootstrap && n.Restarted() {
		// A node cannot tell a first start from a lost data directory:
		// kept in its configuration once others have joined, -bootstrap
		// would one day form a second cluster beside them. Refused now,
		// while the fix is a change of flags, not a split cluster.
		if voters, err := n.Voters(); err == nil && len(voters) > 1 {
			return fmt.Errorf("%w: the data directory holds a cluster of %d voters (%s); remove -bootstrap from this node's configuration and give it -join with every member's admin address, as the other nodes have (docs/operations.md, \"A node that lost its data directory\"): on a lost data directory, -bootstrap would form a second cluster beside them",
				ErrBootstrapKept, len(voters), strings.Join(voters, ", "))
		}
		c.logger.Warn("-bootstrap is ignored: the data directory holds a cluster already; remove -bootstrap (or give every node the same -join list): started on a lost data directory, -bootstrap forms a second cluster",
			"dir", filepath.Join(cfg.DataDir, clusterDir))
	}
	switch {
	case len(joins) > 1 && !n.Restarted():
		formed, err := n.JoinList(ctx, joins, c.waitingLogger(joins))
		if err != nil {
			return err
		}
		if formed {
			c.logger.Info("formed a new cluster: every other member of the -join list answered that it is in no cluster",
				"node_id", cfg.NodeID, "cluster_id", n.ClusterID(), "join", joins)
		} else {
			c.logger.Info("joined the cluster through the -join list", "cluster_id", n.ClusterID(), "new_raft_state", true)
		}
	case len(joins) > 1:
		// A restarted node records its addresses through the leader
		// (Rejoin below).
		c.logger.Info("rejoining the cluster from the data directory", "dir", filepath.Join(cfg.DataDir, clusterDir))
	case (cfg.Bootstrap || joinSelf) && !n.Restarted():
		if err := n.Bootstrap(ctx); err != nil {
			return err
		}
		c.logger.Info("formed a new cluster", "node_id", cfg.NodeID, "cluster_id", n.ClusterID(), "join_self", joinSelf,
			"if_data_lost", "if this node was a member of a running cluster and lost its data directory, stop it now: see 'A node that lost its data directory' in docs/operations.md")
	case cfg.Join != "":
		// A restarted node joins again only to record its addresses,
		// which may have changed; its place in the ring stays.
		if err := n.Join(ctx, cfg.Join); err != nil {
			return err
		}
		c.logger.Info("joined the cluster", "via", cfg.Join, "restarted", n.Restarted())
	case n.Restarted():
		c.logger.Info("rejoining the cluster from the data directory", "dir", filepath.Join(cfg.DataDir, clusterDir))
	default:
		// Neither -bootstrap nor -join on a new data directory: wait
		// until an operator has a member add this node.
		c.logger.Info("waiting to be added to a cluster: run 'baton cluster join --admin THIS_NODE_ADMIN MEMBER_ADMIN'",
			"node_id", cfg.NodeID, "admin_addr", ncfg.AdminAddr, "ops_addr", addrs.Ops)
		if err := n.WaitAdded(ctx); err != nil {
			return fmt.Errorf("waiting to be added to a cluster: %w", err)
		}
		c.logger.Info("added to the cluster", "ring_version", n.AppliedRingVersion())
	}
	ectx, cancel := context.WithTimeout(ctx, startupEpochTimeout)
	defer cancel()
	if n.Restarted() {
		// Back into the ring if it left it when it stopped (SIGTERM): the
		// other members hand its names back first.
		if err := n.Rejoin(ectx); err != nil {
			return err
		}
	}
	epoch, err := n.AcquireEpoch(ectx)
	if err != nil {
		return fmt.Errorf("committing the first token epoch: %w", err)
	}
	rejoin := n.Rejoin
	if len(joins) == 1 && !joinSelf {
		rejoin = func(ctx context.Context) error { return n.Join(ctx, cfg.Join) }
	}
	if err := n.WaitServing(ectx, rejoin); err != nil {
		return err
	}
	c.ready.Store(true)
	go c.selfStopLoop(n)
	c.logger.Info("cluster node serving", "node_id", cfg.NodeID, "epoch", epoch, "ring_version", n.AppliedRingVersion())
	return nil
}

// WaitingLogEvery bounds how often a node waiting for the members of its
// -join list says so.
const WaitingLogEvery = 10 * time.Second

// waitingLogger returns JoinList's report of a round without a cluster
// to join or form: logged at once, then at most every WaitingLogEvery.
func (c *clusterRuntime) waitingLogger(joins []string) func(cluster.Waiting) {
	var last time.Time
	return func(w cluster.Waiting) {
		if !last.IsZero() && time.Since(last) < WaitingLogEvery {
			return
		}
		last = time.Now()
		c.logger.Warn("waiting for the members of the -join list: this node has new Raft state and forms a cluster only as the first of the list, once every other member answers that it is in no cluster",
			"no_answer", w.Unreachable, "in_no_cluster", w.NoCluster, "join", joins)
	}
}

// clusterChanged is the node's report that its applied state was
// replaced by another cluster's: it ends every session (their claims
// belong to a cluster that no longer exists) and serves again after a
// fresh epoch and the warm-up.
func (c *clusterRuntime) clusterChanged(ch cluster.ClusterChange) {
	c.logger.Error("this node now follows another cluster: it had formed one of its own (a -bootstrap or a -join of itself on a lost data directory?); sessions ended, serving again after a fresh epoch and the warm-up",
		"cluster_id", ch.ClusterID, "reason", ch.Reason, "held_epoch", ch.Epoch, "mixed_state", ch.Mixed)
	// The largest lease is read from the applied state at each grant
	// (recordLease), so it is this cluster's from now on.
	if c.srv != nil {
		c.srv.EndSessions(protocol.CodeNotOwner)
	}
}

// StopTimeout bounds a stopping node's planned leave of the ring.
const StopTimeout = 20 * time.Second

// LeaderlessStopWait is how long a stopping node waits for a leader
// before it gives up its planned leave: when every node is stopped at
// once, the last ones have no quorum, and a leave that cannot be
// committed would only delay their shutdown to StopTimeout. It covers
// an election at Raft's default timeouts (1 s) with room to spare.
const LeaderlessStopWait = 3 * time.Second

// leave is the planned part of a SIGTERM: the node hands its names over
// and leaves the ring, staying a Raft voter (cluster.Node.Stop); started
// again on its data directory it comes back into the ring. If that fails
// (no leader), the node stops in the ring: its names are held until it
// comes back or is removed (fail closed).
func (c *clusterRuntime) leave() {
	n := c.node.Load()
	if n == nil || !c.ready.Load() {
		return
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), StopTimeout)
	defer cancel()
	go cancelWithoutLeader(ctx, cancel, n.Leader)
	if err := n.Stop(ctx); err != nil {
		c.logger.Warn("could not hand this node's names over before stopping; they are held until it comes back or is removed", "err", err)
		return
	}
	c.logger.Info("names handed over; left the ring until this node starts again", "took", time.Since(start).Round(time.Millisecond))
}

// cancelWithoutLeader calls cancel once leader has reported no leader
// for LeaderlessStopWait without a break, or returns when ctx ends.
func cancelWithoutLeader(ctx context.Context, cancel context.CancelFunc, leader func() (cluster.Member, bool)) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var since time.Time // when the node was last seen without a leader, from the start of the gap
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			if _, ok := leader(); ok {
				since = time.Time{}
				continue
			}
			if since.IsZero() {
				since = now
			}
			if now.Sub(since) >= LeaderlessStopWait {
				cancel()
				return
			}
		}
	}
}

// shutdown stops Raft (the node stays a member: restarted with its data
// directory it rejoins by itself).
func (c *clusterRuntime) shutdown() {
	close(c.done)
	if n := c.node.Load(); n != nil {
		if err := n.Shutdown(); err != nil {
			c.logger.Warn("cluster node shutdown", "err", err)
		}
	}
}

// autoRemoved records, on the leader, the removal of a silent member:
// log, metric and audit record (every node also records the removal it
// applies, cluster_remove).
func (c *clusterRuntime) autoRemoved(id string, silent time.Duration) {
	c.autoRemovals.Inc()
	c.logger.Warn("removed a silent member: its names go to the other nodes after the warm-up", "member", id,
		"silent", silent.Round(time.Millisecond))
	if c.audit != nil {
		c.audit.Cluster(audit.ClusterEvent{Event: audit.ClusterAutoRemove, Time: time.Now(), Member: &audit.ClusterMember{ID: id}})
	}
}

// InContact implements server.QuorumContact: the server answers nothing
// while the node has no quorum contact (cluster.Node.InContact). Before
// the node is ready the Router holds every claim, and the server does not
// serve yet.
func (c *clusterRuntime) InContact() bool {
	n := c.node.Load()
	return n == nil || !c.ready.Load() || n.InContact(time.Now())
}

// selfStopLoop ends every session of the server with ERROR 0x03 while the
// node has no quorum contact, and logs each lapse and return, until
// shutdown. (A session that writes meanwhile is ended at its write:
// server.QuorumContact.)
func (c *clusterRuntime) selfStopLoop(n *cluster.Node) {
	t := time.NewTicker(cluster.ContactInterval(n.SelfStop()) / 2)
	defer t.Stop()
	in := true
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
		}
		switch now := n.InContact(time.Now()); {
		case !now:
			if in {
				in = false
				c.selfStops.Inc()
				c.logger.Warn("no quorum contact for the self-stop timeout: serving nothing, sessions ended with ERROR 0x03",
					"self_stop", n.SelfStop(), "contact_age", n.ContactAge().Round(time.Millisecond), "removed", n.Removed())
			}
			if c.srv != nil {
				if k := c.srv.EndSessions(protocol.CodeNotOwner); k > 0 {
					c.logger.Info("sessions ended: no quorum contact", "sessions", k)
				}
			}
		case !in:
			in = true
			c.logger.Warn("quorum contact back: serving again after the warm-up", "warmup", n.Warmup())
		}
	}
}

// Next implements locktable.TokenSource: the node's epoch tokens. The
// server asks for one only when Route said serve, which it says only
// once the node is open and has committed an epoch.
func (c *clusterRuntime) Next() uint64 { return c.node.Load().Tokens().Next() }

// NextTicket implements locktable.TicketSource: queue tickets under the
// node's epoch, so that a later owner's are above its predecessor's
// (docs/design/2026-12-01-ha-failover-design.md, rule 5). 0 before the node is open.
func (c *clusterRuntime) NextTicket() uint64 {
	if n := c.node.Load(); n != nil {
		return n.Tokens().NextTicket()
	}
	return 0
}

// Route implements server.Router on cluster.Node.Route.
func (c *clusterRuntime) Route(name string, lease time.Duration, forwarded bool) server.Route {
	n := c.node.Load()
	if n == nil || !c.ready.Load() {
		return server.Route{Action: server.RouteHold}
	}
	d := n.Route(name, forwarded, time.Now())
	switch d.Action {
	case cluster.NoContact:
		return server.Route{Action: server.RouteNotOwner}
	case cluster.Serve:
		if !c.recordLease(n, lease) {
			return server.Route{Action: server.RouteHold}
		}
		return server.Route{Action: server.RouteServe}
	case cluster.Forward:
		return server.Route{Action: server.RouteForward, Addr: d.Owner.ProtocolAddr}
	case cluster.NotOwner:
		return server.Route{Action: server.RouteNotOwner}
	case cluster.Frozen:
		return server.Route{Action: server.RouteMoving}
	case cluster.NotReady:
		c.renewEpoch(n)
	case cluster.Queue:
		// Warming up after a take-over or a restart: a re-assertion is
		// answered here (server/resume.go).
		return server.Route{Action: server.RouteHold, Gated: true, Since: d.Since}
	}
	// NotReady, NoOwner: nothing is granted here now.
	return server.Route{Action: server.RouteHold}
}

// RingVersion is the ring version this node has applied, for the WELCOME
// of a resumable session.
func (c *clusterRuntime) RingVersion() uint64 {
	if n := c.node.Load(); n != nil {
		return n.Ring().Version()
	}
	return 0
}

// RecordLease implements server.Router for a version 2 session's lease.
func (c *clusterRuntime) RecordLease(lease time.Duration) bool {
	n := c.node.Load()
	return n != nil && n.InContact(time.Now()) && c.recordLease(n, lease)
}

// recordLease raises the cluster's largest lease before a grant that
// exceeds it (the bound of a take-over's warm-up). It is a Raft write
// only when a client asks for a longer lease than any before.
func (c *clusterRuntime) recordLease(n *cluster.Node, lease time.Duration) bool {
	// Read from the applied state each time, not cached: an operator's
	// lowering (SetLeaseCeiling) brings it down.
	if lease <= n.MaxLease() {
		return true
	}
	c.leaseMu.Lock()
	defer c.leaseMu.Unlock()
	if lease <= n.MaxLease() {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := n.RaiseLease(ctx, lease); err != nil {
		c.logger.Warn("cannot record a longer lease in the cluster; holding the claim", "lease", lease, "err", err)
		return false
	}
	return true
}

// renewEpoch commits a fresh epoch in the background (a ring change gave
// this node names), one at a time.
func (c *clusterRuntime) renewEpoch(n *cluster.Node) {
	if !c.epochBusy.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer c.epochBusy.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		go func() {
			select {
			case <-c.done:
				cancel()
			case <-ctx.Done():
			}
		}()
		if e, err := n.AcquireEpoch(ctx); err != nil {
			c.logger.Warn("cannot commit a fresh token epoch; names gained stay held", "err", err)
		} else {
			c.logger.Info("fresh token epoch for names gained", "epoch", e)
		}
	}()
}

// trustHop lets a connection without TLS open with a hop header only
// from the host of a member's protocol or Raft address: weak, since any
// process on a member's host passes it (docs/cluster.md, "Security").
// With TLS the certificate identity decides (clusterTLS.isNode).
func (c *clusterRuntime) trustHop(addr net.Addr) bool {
	n := c.node.Load()
	tcp, ok := addr.(*net.TCPAddr)
	if n == nil || !ok {
		return false
	}
	for _, m := range n.Members() {
		for _, a := range []string{m.ProtocolAddr, m.RaftAddr} {
			host, _, err := net.SplitHostPort(a)
			if err != nil {
				continue
			}
			if ip := net.ParseIP(host); ip != nil && ip.Equal(tcp.IP) {
				return true
			}
		}
	}
	return false
}

// errNotReady is the readiness check's answer before the first epoch.
var errNotReady = errors.New("cluster node has not committed its token epoch (no ring applied yet)")

// readinessTimeout bounds the question a follower's /readyz asks the
// leader.
const readinessTimeout = time.Second

// readiness is a /readyz check: not ready before the node has committed
// its first epoch, nor while it knows no leader, nor while it has not
// applied the ring the leader has applied (asked of the leader: a
// follower that falls behind is not ready).
func (c *clusterRuntime) readiness() error {
	n := c.node.Load()
	if n == nil || !c.ready.Load() {
		return errNotReady
	}
	if n.Removed() {
		return errors.New("cluster node was removed from the cluster: restart it to join again")
	}
	if n.Mixed() {
		return errors.New("cluster node applied another cluster's log on top of its own: serving nothing; start it again on an empty data directory with the -join list")
	}
	if !n.InContact(time.Now()) {
		return fmt.Errorf("cluster node has had no quorum contact for %v (self-stop %v): serving nothing", n.ContactAge().Round(time.Millisecond), n.SelfStop())
	}
	ctx, cancel := context.WithTimeout(context.Background(), readinessTimeout)
	defer cancel()
	if err := n.CaughtUp(ctx); err != nil {
		if errors.Is(err, cluster.ErrNoLeader) {
			return errors.New("cluster node knows no leader")
		}
		return err
	}
	return nil
}

// raftStates are the values of baton_cluster_raft_state's state label.
var raftStates = []string{"Follower", "Candidate", "Leader", "Shutdown"}

// register adds the cluster metrics to reg.
func (c *clusterRuntime) register(reg *prometheus.Registry, srv serverhook.Cluster) {
	status := func() (cluster.Status, bool) {
		n := c.node.Load()
		if n == nil {
			return cluster.Status{}, false
		}
		return n.Status(), true
	}
	for _, s := range raftStates {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "baton_cluster_raft_state",
			Help:        "1 for this node's current Raft state, 0 for the others.",
			ConstLabels: prometheus.Labels{"state": s},
		}, func() float64 {
			if st, ok := status(); ok && st.RaftState == s {
				return 1
			}
			return 0
		}))
	}
	reg.MustRegister(c.changes, c.selfStops, c.autoRemovals, c.refusals)
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "baton_cluster_quorum_contact",
		Help: "1 while this node is in contact with its Raft quorum and serves, 0 while it has stopped serving (no contact for the self-stop timeout, or removed).",
	}, func() float64 {
		if n := c.node.Load(); n != nil && n.InContact(time.Now()) {
			return 1
		}
		return 0
	}))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "baton_cluster_state_replaced_total",
		Help: "Times this node found its applied state replaced by another cluster's (it had formed one of its own): it stopped serving until a fresh epoch and the warm-up.",
	}, func() float64 {
		if n := c.node.Load(); n != nil {
			return float64(n.ClusterChanges())
		}
		return 0
	}))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "baton_cluster_ring_version",
		Help: "The version of the ring this node has applied.",
	}, func() float64 {
		if n := c.node.Load(); n != nil {
			return float64(n.AppliedRingVersion())
		}
		return 0
	}))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "baton_cluster_members",
		Help: "Members of the cluster in this node's applied state.",
	}, func() float64 {
		if st, ok := status(); ok {
			return float64(len(st.Members))
		}
		return 0
	}))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "baton_cluster_relayed_connections",
		Help: "Version 1 connections this node relays to the owner of their lock now.",
	}, func() float64 { n, _ := srv.Relayed(); return float64(n) }))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "baton_cluster_relayed_connections_total",
		Help: "Version 1 connections this node has relayed to the owner of their lock.",
	}, func() float64 { _, t := srv.Relayed(); return float64(t) }))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "baton_cluster_relayed_claims",
		Help: "Version 2 claims this node relays to the owner of their lock now (waiting for an answer, held or queued there).",
	}, func() float64 { n, _ := srv.RelayedClaims(); return float64(n) }))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "baton_cluster_relayed_watches",
		Help: "Watches this node relays to the owner of their name now, one upstream connection each.",
	}, func() float64 { return float64(srv.RelayedWatches()) }))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "baton_cluster_hop_pool_connections",
		Help: "Idle connections this node keeps open to other nodes for the version 1 connections it relays.",
	}, func() float64 { return float64(srv.HopPoolIdle()) }))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "baton_cluster_owner_dials_total",
		Help: "Connections this node has opened to other nodes' protocol ports: version 1 hops and version 2 upstream sessions.",
	}, func() float64 { return float64(srv.OwnerDials()) }))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "baton_cluster_upstream_sessions",
		Help: "Upstream version 2 sessions this node holds open to other nodes, one per client session and owner.",
	}, func() float64 { _, n := srv.RelayedClaims(); return float64(n) }))
}
