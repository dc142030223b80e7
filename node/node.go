// Package node runs a baton server, a single server or a node of a
// cluster, from a Config: what 'baton serve' runs, as a library. It wires
// the lock server to its listeners, the ops and admin HTTP servers, the
// audit log, TLS and the ACL, and, with Config.NodeID, to the cluster
// runtime (Raft membership, routing, token epochs, self-stop). Start binds
// every listener and returns; Ready is closed once the node serves; Reload
// and Shutdown do what SIGHUP and SIGTERM do to 'baton serve', and Close
// stops at once. User docs: docs/cluster.md, "Embedding a node".
package node

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonlock/baton/admin"
	"github.com/batonlock/baton/admin/ui"
	"github.com/batonlock/baton/audit"
	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/internal/memberclient"
	"github.com/batonlock/baton/internal/serverhook"
	"github.com/batonlock/baton/internal/tlsfiles"
	"github.com/batonlock/baton/internal/tokenstore"
	"github.com/batonlock/baton/ops"
	"github.com/batonlock/baton/server"
)

// Config is everything a node is started from. Each field is a flag of
// 'baton serve' (in parentheses). A zero duration is the default of the
// package that uses it (server, audit, cluster); a zero limit or cap is
// none, not the flag's default: cmd/baton passes the flags' values.
// 'baton serve' checks the combination of flags before it starts a node;
// Start reports what fails to open (a listener, a file, Raft's data).
type Config struct {
	// Listen is the protocol address (-listen); "127.0.0.1:0" picks a port.
	Listen string
	// IOTimeout (-io-timeout) and MaxLease (-max-lease): see server.Server.
	IOTimeout, MaxLease time.Duration
	// The limits of server.Server (-max-session-claims, -max-waiters,
	// -max-sessions-per-client, -max-kept-sessions, -max-kept-claims,
	// -max-watch-backlog, -max-relayed-watches).
	MaxSessionClaims, MaxWaiters, MaxSessionsPerClient, MaxKeptSessions, MaxKeptClaims, MaxWatchBacklog int
	MaxRelayedWatches                                                                                   int
	// The range-lock caps (-range-waiting-per-session,
	// -range-waiting-per-owner, -range-owners-per-session); 0: no cap.
	RangeWaitingPerSession, RangeWaitingPerOwner, RangeOwnersPerSession int
	// OpsListen (-ops-listen) and AdminListen (-admin-listen); empty: off.
	OpsListen, AdminListen string
	// AdminAllowedHosts are the extra Host names the admin API answers
	// to (-admin-allowed-hosts).
	AdminAllowedHosts []string
	// HTTPMaxConns caps the open connections of each HTTP listener
	// (-http-max-connections).
	HTTPMaxConns int
	// AuditLog is the audit log file, "-" for AuditStdout (-audit-log);
	// empty: off. AuditStallTimeout is -audit-stall-timeout.
	AuditLog          string
	AuditStdout       io.Writer
	AuditStallTimeout time.Duration
	// TLS names the server's PEM files (-tls-cert, -tls-key,
	// -tls-client-ca); no Cert: TLS off.
	TLS tlsfiles.ServerFiles
	// ACLFile is the ACL (-acl-file); ACLRevokeHolders makes Reload end
	// holders the reloaded rules refuse, not only waiters
	// (-acl-revoke-holders).
	ACLFile          string
	ACLRevokeHolders bool
	// DataDir holds the token store, or a cluster node's Raft state
	// (-data-dir).
	DataDir string

	// NodeID makes the server a node of a cluster (-node-id); the other
	// cluster fields matter only with it.
	NodeID string
	// RaftListen is the inter-node address (-raft-listen).
	RaftListen string
	// Bootstrap forms a new cluster (-bootstrap); Join is the -join list.
	Bootstrap bool
	Join      string
	// ClusterIdentity is the glob a member's certificate identity
	// matches, with TLS (-cluster-identity).
	ClusterIdentity string
	// AdvertiseHost replaces the host of the addresses recorded for the
	// other members (-advertise-host).
	AdvertiseHost string
	// SelfStop (-cluster-self-stop) and RemoveAfter
	// (-cluster-remove-after): the failover timings; 0: the defaults.
	SelfStop, RemoveAfter time.Duration
	// ClusterSecretFile holds the member API's secret
	// (-cluster-secret-file).
	ClusterSecretFile string

	// Logger receives the logs; nil: slog.Default().
	Logger *slog.Logger
	// Version is reported by /metrics, /api/info and the start log.
	Version string
	// Settings is the effective configuration shown by /api/info.
	Settings map[string]string
	// Observer receives the server's events besides the audit log and
	// the metrics; may be nil.
	Observer server.Observer
	// TokensSince is when tokens from the wall clock may start (no
	// DataDir, no NodeID): a previous server on the same port had stopped
	// issuing tokens by then. Zero: now.
	TokensSince time.Time
}

// Addrs are a node's bound addresses; Ops and Admin are empty when off.
type Addrs struct{ Protocol, Ops, Admin string }

// Node is a running server. Its methods may be called from any
// goroutine.
type Node struct {
	cfg         Config
	logger      *slog.Logger
	srv         *server.Server
	cl          *clusterRuntime // nil for a single server
	sec         *security
	auditLog    *audit.Logger
	closeTokens func()
	ln          net.Listener
	listeners   []net.Listener
	httpServers []*http.Server
	addrs       Addrs

	ready, done chan struct{}
	err         error // why done closed; set before
	// startDone is closed when the start (the cluster's join and first
	// epoch) has ended, in success or failure.
	startDone   chan struct{}
	cancelStart context.CancelFunc
	serveErr    chan error // srv.Serve's result, once
	reopening   atomic.Bool
	stopOnce    sync.Once
	stopErr     error
}

// Start binds the node's listeners, opens its token source, TLS files,
// ACL and audit log, and starts it; it returns once every listener is
// bound (Addrs), before a cluster node has joined. ctx bounds the start
// only: ending it before Ready fails the start (Done); after, it does
// nothing. An error from Start has been logged and released everything.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.IOTimeout <= 0 {
		cfg.IOTimeout = server.DefaultIOTimeout // also bounds Shutdown
	}
	if cfg.TokensSince.IsZero() {
		cfg.TokensSince = time.Now()
	}
	logger := cfg.Logger
	n := &Node{cfg: cfg, logger: logger, closeTokens: func() {}, ready: make(chan struct{}), done: make(chan struct{}),
		startDone: make(chan struct{}), serveErr: make(chan error, 1)}
	if err := n.open(); err != nil {
		n.release()
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	n.cancelStart = cancel
	go n.run(sctx)
	return n, nil
}

// open does the part of Start that can fail at once; release undoes it.
func (n *Node) open() error {
	cfg, logger := &n.cfg, n.logger
	started := time.Now()
	srv := &server.Server{IOTimeout: cfg.IOTimeout, MaxLease: cfg.MaxLease, Logger: logger,
		RangeWaitingPerSession: rangeCap(cfg.RangeWaitingPerSession), RangeWaitingPerOwner: rangeCap(cfg.RangeWaitingPerOwner),
		RangeOwnersPerSession: rangeCap(cfg.RangeOwnersPerSession),
		MaxSessionClaims:      cfg.MaxSessionClaims, MaxWaiters: cfg.MaxWaiters, MaxSessionsPerClient: cfg.MaxSessionsPerClient,
		MaxKeptSessions: cfg.MaxKeptSessions, MaxKeptClaims: cfg.MaxKeptClaims, MaxWatchBacklog: cfg.MaxWatchBacklog,
		MaxRelayedWatches: cfg.MaxRelayedWatches}
	n.srv = srv
	var observers server.Observers

	var cl *clusterRuntime
	if cfg.NodeID != "" {
		// A cluster node's tokens come from epochs committed through
		// Raft (set once the node is open).
		cl = newClusterRuntime(logger)
		side := serverhook.Of(srv) // what only a cluster runtime calls
		cl.mover, cl.srv = side, side
		srv.Router, srv.TrustHop, srv.Tokens, srv.NodeID = cl, cl.trustHop, cl, cfg.NodeID
		n.cl = cl
	} else {
		tokens, closeTokens, err := openTokens(cfg.DataDir, cfg.TokensSince, logger)
		if err != nil {
			logger.Error("cannot start the fencing-token source", "data_dir", cfg.DataDir, "err", err)
			return err
		}
		n.closeTokens = closeTokens
		srv.Tokens = tokens
	}

	if err := n.openSecurity(); err != nil {
		return err
	}

	var err error
	if cfg.AuditLog != "" {
		acfg := audit.Config{Logger: logger, StallTimeout: cfg.AuditStallTimeout}
		if cfg.AuditLog == "-" {
			out := cfg.AuditStdout
			if out == nil {
				out = os.Stdout
			}
			n.auditLog = audit.New(out, acfg)
		} else if n.auditLog, err = audit.Open(cfg.AuditLog, acfg); err != nil {
			logger.Error("cannot open the audit log", "path", cfg.AuditLog, "err", err)
			return err
		}
		observers = append(observers, n.auditLog)
		if cl != nil {
			cl.audit = n.auditLog
		}
	}

	if n.ln, err = n.listen("protocol", cfg.Listen); err != nil {
		return err
	}
	n.addrs.Protocol = n.ln.Addr().String()
	if cfg.OpsListen != "" {
		metrics, err := n.serveOps()
		if err != nil {
			return err
		}
		observers = append(observers, metrics)
	}
	if cfg.AdminListen != "" {
		stats, err := n.serveAdmin(started)
		if err != nil {
			return err
		}
		observers = append(observers, stats)
	}
	if cfg.Observer != nil {
		observers = append(observers, cfg.Observer)
	}
	if len(observers) > 0 {
		srv.Observer = observers
	}
	return nil
}

// openSecurity loads the TLS files and the ACL into the server and, on a
// cluster node, the inter-node TLS and the cluster secret.
func (n *Node) openSecurity() error {
	cfg, logger, srv, cl := &n.cfg, n.logger, n.srv, n.cl
	sec, err := loadSecurity(cfg)
	if err != nil {
		logger.Error("cannot load TLS or ACL files", "err", err)
		return err
	}
	n.sec = sec
	if sec.tls != nil {
		srv.TLSConfig = sec.tls.Config()
	}
	if cl != nil {
		if cl.tls, err = newClusterTLS(sec, cfg.ClusterIdentity); err != nil {
			logger.Error("cannot set up mutual TLS between cluster nodes", "err", err)
			return err
		}
		if cl.tls != nil {
			// Hops to owners present this node's certificate; a hop
			// header is accepted only from a member's.
			srv.DialOwner, srv.TrustHopIdentity = cl.tls.dialOwner, cl.tls.isNode
		}
		if cfg.ClusterSecretFile != "" {
			if cl.secret, cl.oldSecrets, err = memberclient.ReadSecret(cfg.ClusterSecretFile); err != nil {
				logger.Error("cannot read the cluster secret", "err", err)
				return err
			}
		} else if cl.tls == nil {
			logger.Warn("no -cluster-secret-file: the member API takes writes (joins, removals, epochs) from anyone who reaches the admin listener; give every node the same secret file",
				"admin_listen", cfg.AdminListen)
		}
	}
	if sec.acl != nil {
		srv.Authorizer = sec.acl
		if sec.acl.Len() == 0 {
			logger.Warn("the ACL has no lock rules: every ACQUIRE is denied (add \"rules\" to the ACL file; see docs/security.md)",
				"acl_file", cfg.ACLFile)
		}
	}
	return nil
}

// listen binds a listener, closed by release.
func (n *Node) listen(what, addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		n.logger.Error("cannot listen", "listener", what, "addr", addr, "err", err)
		return nil, err
	}
	n.listeners = append(n.listeners, l)
	return l, nil
}

// startHTTP serves h on l. The HTTP servers have timeouts and a
// connection cap, so idle or slow HTTP clients can never take the
// descriptors the protocol port needs.
func (n *Node) startHTTP(l net.Listener, h http.Handler) {
	hs := ops.NewHTTPServer(h, n.logger)
	n.httpServers = append(n.httpServers, hs)
	go hs.Serve(l)
}

// serveOps serves /metrics and the health probes on the ops listener.
func (n *Node) serveOps() (server.Observer, error) {
	cfg, logger, srv, cl := &n.cfg, n.logger, n.srv, n.cl
	l, err := n.listen("ops", cfg.OpsListen)
	if err != nil {
		return nil, err
	}
	n.addrs.Ops = l.Addr().String()
	// A descriptor in reserve keeps the probes reachable when
	// protocol clients have taken all the others.
	if l, err = ops.ReserveListener(l); err != nil {
		logger.Error("cannot reserve a descriptor for the ops listener", "err", err)
		return nil, err
	}
	l = ops.LimitListener(l, cfg.HTTPMaxConns)
	mcfg := ops.MetricsConfig{Source: srv, Version: cfg.Version}
	var checks []ops.ReadinessCheck
	if n.auditLog != nil {
		mcfg.AuditDropped, mcfg.AuditWaiting = n.auditLog.Dropped, n.auditLog.Waiting
		checks = append(checks, n.auditLog.Stalled)
	}
	if cl != nil {
		checks = append(checks, cl.readiness)
	}
	metrics := ops.NewMetrics(mcfg)
	if cl != nil {
		cl.register(metrics.Registry(), cl.srv)
	}
	n.startHTTP(l, ops.Handler(metrics, srv, checks...))
	return metrics, nil
}

// serveAdmin serves the admin API, the dashboard and, on a cluster
// node, the member API on the admin listener.
func (n *Node) serveAdmin(started time.Time) (server.Observer, error) {
	cfg, logger, srv, cl, sec := &n.cfg, n.logger, n.srv, n.cl, n.sec
	l, err := n.listen("admin", cfg.AdminListen)
	if err != nil {
		return nil, err
	}
	n.addrs.Admin = l.Addr().String()
	l = ops.LimitListener(l, cfg.HTTPMaxConns)
	if sec.tls != nil {
		l = tls.NewListener(l, sec.tls.Config())
	}
	if tcp, ok := l.Addr().(*net.TCPAddr); (!ok || !tcp.IP.IsLoopback()) && sec.acl == nil {
		logger.Warn("the admin API has no authentication and is not bound to a loopback address; anyone who can reach it can release locks",
			"addr", n.addrs.Admin)
	}
	acfg := admin.Config{Server: srv, Version: cfg.Version, Started: started,
		Settings: cfg.Settings, Logger: logger, AllowedHosts: cfg.AdminAllowedHosts,
		UI: ui.Handler(), Stats: &admin.Stats{}} // the dashboard at /
	if cl != nil {
		acfg.Cluster = cl.dashboard(srv) // the dashboard's cluster view
	}
	if n.auditLog != nil {
		acfg.Observer = n.auditLog // refused admin requests
	}
	if sec.acl != nil {
		acfg.Authorizer = sec.acl
		if sec.acl.AdminLen() == 0 {
			logger.Warn("the ACL has no admin rules: the admin API refuses every request (add \"admin\" rules to the ACL file; see docs/security.md)",
				"acl_file", cfg.ACLFile)
		}
	}
	var h http.Handler = admin.Handler(acfg)
	if cl != nil {
		// The member API beside the admin API, on the same listener.
		mux := http.NewServeMux()
		// The admin API's Host check and cross-origin protection,
		// answering also to the name the other members use.
		hosts := append([]string(nil), cfg.AdminAllowedHosts...)
		if cfg.AdvertiseHost != "" {
			hosts = append(hosts, cfg.AdvertiseHost)
		}
		mux.Handle("/cluster/", admin.Guard(memberAPIGuard(cl.tls, sec.acl, cl), admin.GuardConfig{
			Logger: logger, AllowedHosts: hosts, OnRefused: cl.refused}))
		mux.Handle("/", h)
		h = mux
	}
	n.startHTTP(l, h)
	return acfg.Stats, nil
}

// run starts the cluster node, if any, then serves the protocol port.
func (n *Node) run(ctx context.Context) {
	defer close(n.startDone)
	defer n.cancelStart()
	cfg := &n.cfg
	if n.cl != nil {
		if err := n.cl.start(ctx, cfg, n.addrs); err != nil {
			n.logger.Error("cannot start the cluster node", "node_id", cfg.NodeID, "err", err)
			for _, hs := range n.httpServers {
				hs.Close()
			}
			n.release()
			n.err = err
			close(n.done)
			return
		}
	}
	go func() {
		err := n.srv.Serve(n.ln)
		n.serveErr <- err
		if !errors.Is(err, server.ErrServerClosed) {
			n.err = err
		}
		close(n.done)
	}()
	n.logger.Info("baton listening", "addr", n.addrs.Protocol, "ops_addr", n.addrs.Ops, "admin_addr", n.addrs.Admin,
		"audit_log", cfg.AuditLog, "version", cfg.Version, "io_timeout", cfg.IOTimeout,
		"tls", n.sec.mode(), "acl_file", cfg.ACLFile)
	close(n.ready)
}

// release closes what open opened, a cluster node's Raft included.
func (n *Node) release() {
	for _, l := range n.listeners {
		l.Close()
	}
	if n.cl != nil {
		n.cl.shutdown()
	}
	if n.auditLog != nil {
		if err := n.auditLog.Close(); err != nil {
			n.logger.Error("closing the audit log", "err", err)
		}
	}
	n.closeTokens()
}

// Addrs returns the bound addresses.
func (n *Node) Addrs() Addrs { return n.addrs }

// Ready is closed once the node serves: a cluster node once it has
// joined its cluster and committed its first token epoch.
func (n *Node) Ready() <-chan struct{} { return n.ready }

// Done is closed when the node has stopped serving: after Shutdown or
// Close, when its start failed, or when its protocol listener failed.
func (n *Node) Done() <-chan struct{} { return n.done }

// Err returns, once Done is closed, why the node stopped by itself (a
// failed start, a failed listener); nil after Shutdown or Close.
func (n *Node) Err() error {
	select {
	case <-n.done:
		return n.err
	default:
		return nil
	}
}

// Reload does what SIGHUP does to 'baton serve': it reopens the audit
// log file (for logrotate; beside the caller, one reopen at a time, so
// that a stalled sink holds nothing up), and reloads the TLS files, the
// ACL and the cluster secret; a file that fails to load keeps the
// previous one in force. Claims the reloaded ACL refuses end with 0x18.
func (n *Node) Reload() {
	cfg, logger := &n.cfg, n.logger
	if n.reopening.CompareAndSwap(false, true) {
		go func() {
			defer n.reopening.Store(false)
			reopen(logger, n.auditLog, cfg.AuditLog)
		}()
	} else {
		logger.Warn("SIGHUP: the previous audit log reopen has not finished; not starting another", "path", cfg.AuditLog)
	}
	n.sec.reload(logger)
	if n.cl != nil {
		n.cl.reloadSecret(cfg.ClusterSecretFile)
	}
	if n.sec.acl != nil {
		k := n.srv.Revoke(cfg.ACLRevokeHolders)
		logger.Info("SIGHUP: claims the ACL no longer allows ended with 0x18", "claims", k, "holders_too", cfg.ACLRevokeHolders)
	}
}

// Shutdown does what SIGTERM does to 'baton serve': a cluster node first
// hands its names to the other nodes and leaves the ring (it stays a
// member, and comes back into the ring when started again on its data
// directory); then the protocol side stops (the health probes answer 503
// at once), sessions still open after ctx ends or twice the I/O timeout
// are closed; then the HTTP servers, Raft, the audit log and the token
// store. A node still starting stops starting. Shutdown and Close act
// once; later calls return the first one's result.
func (n *Node) Shutdown(ctx context.Context) error {
	n.stopOnce.Do(func() { n.stopErr = n.stop(ctx, true) })
	return n.stopErr
}

// Close stops the node at once, without a planned leave: its open
// sessions are closed, and a cluster node stays in the ring, its names
// held until it comes back or is removed.
func (n *Node) Close() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	n.stopOnce.Do(func() { n.stopErr = n.stop(ctx, false) })
	return n.stopErr
}

func (n *Node) stop(ctx context.Context, planned bool) error {
	n.cancelStart()
	<-n.startDone
	select {
	case <-n.ready:
	default:
		return nil // the start failed, and released everything
	}
	logger := n.logger
	logger.Info("shutting down")
	if planned && n.cl != nil {
		n.cl.leave() // a planned leave: hand this node's names over first
	}
	shutdownCtx, cancel := context.WithTimeout(ctx, 2*n.cfg.IOTimeout)
	defer cancel()
	var err error
	if err = n.srv.Shutdown(shutdownCtx); err != nil {
		logger.Warn("shutdown: sessions still open at the deadline were closed", "err", err)
		if !planned {
			err = nil // Close closes them: that is no failure
		}
	}
	<-n.serveErr
	// The probes have answered 503 since Shutdown began; they stop only
	// now that the protocol side is fully closed.
	httpCtx, cancelHTTP := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelHTTP()
	if !planned {
		cancelHTTP()
	}
	for _, hs := range n.httpServers {
		if err := hs.Shutdown(httpCtx); err != nil {
			hs.Close()
		}
	}
	logger.Info("stopped")
	n.release()
	return err
}

// rangeCap is a range-lock cap of Config (0: none) as a Server field
// (negative: none).
func rangeCap(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// openTokens returns the fencing-token source: the durable store in
// dataDir, or the wall clock rule from since.
func openTokens(dataDir string, since time.Time, logger *slog.Logger) (locktable.TokenSource, func(), error) {
	if dataDir == "" {
		ct, err := locktable.NewClockTokens(since)
		return ct, func() {}, err
	}
	st, err := tokenstore.Open(dataDir, tokenstore.Options{
		OnError: func(err error) {
			logger.Error("cannot reserve fencing tokens ahead; retrying", "err", err)
		},
		Fatal: func(err error) {
			logger.Error("stopping: no fencing token can be issued safely", "err", err)
			os.Exit(1) // 'baton serve's runtime failure status
		},
	})
	if err != nil {
		return nil, nil, err
	}
	logger.Info("fencing tokens from the data directory", "path", st.Path())
	return st, func() { st.Close() }, nil
}

func reopen(logger *slog.Logger, l *audit.Logger, path string) {
	switch {
	case l == nil:
		logger.Info("SIGHUP: no audit log to reopen")
	case path == "-":
		logger.Info("SIGHUP: the audit log is standard output; nothing to reopen")
	default:
		if err := l.Reopen(); err != nil {
			logger.Error("SIGHUP: cannot reopen the audit log; still writing to the old file", "path", path, "err", err)
			return
		}
		logger.Info("SIGHUP: audit log reopened", "path", path)
	}
}
