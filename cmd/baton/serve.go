package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/batonlock/baton/admin"
	"github.com/batonlock/baton/admin/ui"
	"github.com/batonlock/baton/audit"
	"github.com/batonlock/baton/cluster"
	"github.com/batonlock/baton/internal/glob"
	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/internal/tlsfiles"
	"github.com/batonlock/baton/internal/tokenstore"
	"github.com/batonlock/baton/ops"
	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// Addresses the documentation tells operators to use for the ops and
// admin listeners; both are off unless set. defaultAdminAddr is also
// where the admin subcommands look by default.
const (
	suggestedOpsAddr = "127.0.0.1:7071"
	defaultAdminAddr = "127.0.0.1:7072"
)

const serveHelp = `
Runs the lock server. Besides the protocol port it can serve, each on its
own address: Prometheus metrics and health probes (-ops-listen), the admin
API used by 'baton locks', 'baton lock', 'baton release', 'baton kick' and
'baton info' (-admin-listen; no authentication unless mutual TLS and an
ACL with "admin" rules decide who may do what: keep it on loopback), and
a JSON audit log of every ownership change and admin action (-audit-log).
The admin API answers only to requests whose Host header is its own
address, a loopback address or localhost (-admin-allowed-hosts adds more).
The admin listener also serves a web dashboard at / (docs/dashboard.md),
under the same rules; its actions go through the admin API.

Logs go to standard error; standard output is left to '-audit-log -'.

Signals: SIGINT or SIGTERM shut down gracefully (a second one kills);
SIGHUP reopens the audit log file (for logrotate) and reloads the TLS
certificate, key, client CA, ACL and cluster secret; a file that fails to load keeps the
previous one in force. Waiters the reloaded ACL refuses are removed with
ERROR 0x18 (a version 2 claim: REVOKED 0x18, its session lives on);
holders keep their locks unless -acl-revoke-holders is set.

Fencing tokens increase across restarts. Without -data-dir they come from
the wall clock: in its first second a new process delays grants until the
next second, and tokens stay increasing over any restart provided the
clock does not step back. With -data-dir they come from a high-water mark
synced to DIR/tokens before use and need no clock; a corrupt or unreadable
file stops the server from starting.

With -node-id the server is a node of a cluster (docs/cluster.md): give
every node the same -join list of every member's admin address (the
first of the list forms the cluster once every other listed member
answers that it is in no cluster, the others join; a node that lost its
data directory joins again, never forms), or form it with -bootstrap on
the first node's first start and -join any member's address (or, started
with neither, wait for 'baton cluster join');
each lock name has one owner node, and a node relays a version 1
connection or a version 2 claim for a name it does not own to the owner.
Raft's state lives in DIR/cluster; tokens come from epochs committed
through Raft; the member API shares the admin listener. SIGTERM of a
cluster node is a planned stop: its names are handed to the other nodes
and it leaves the ring (it stays a member); restarted with its data
directory it comes back into the ring by itself. With TLS (-tls-cert,
-tls-key, -tls-client-ca and -cluster-identity) nodes talk to each other
over mutual TLS with their own certificates: Raft, the member API and
relay hops accept only a peer whose certificate identity matches
-cluster-identity. With -cluster-secret-file (the same file on every
node) the member API takes writes only from requests that carry the
secret; it always takes only typed JSON operations, behind the admin
API's Host check and cross-origin protection. /readyz answers 503 until the node has applied the
ring the leader has. A node with no contact with its Raft quorum for
-cluster-self-stop serves nothing and ends its sessions with ERROR 0x03;
the leader removes a member silent for -cluster-remove-after (not one
stopped by SIGTERM), and its names are granted elsewhere after the
warm-up (docs/high-availability.md).

Exit status: 0 after a graceful shutdown, 1 on a runtime failure (for
example an address in use), 2 on a bad flag or environment variable.

See docs/operations.md.
`

// serveConfig is everything 'baton serve' reads from flags and env.
type serveConfig struct {
	listen    string
	ioTimeout time.Duration
	maxLease  time.Duration
	// limits (server.Server's Max* fields)
	maxSessionClaims, maxWaiters, maxClientSessions, maxKeptSessions, maxKeptClaims int
	opsListen                                                                       string
	adminListen                                                                     string
	auditLog                                                                        string
	logLevel                                                                        string
	logFormat                                                                       string
	tls                                                                             tlsfiles.ServerFiles
	aclFile                                                                         string
	dataDir                                                                         string
	// aclRevokeHolders makes an ACL reload end holders the new rules
	// refuse, not only waiters.
	aclRevokeHolders bool
	// adminHosts is the comma-separated list of extra Host names the
	// admin API answers to.
	adminHosts string
	// httpMaxConns caps the open connections of each HTTP listener.
	httpMaxConns int
	// rangeWaitingPerSession, rangeWaitingPerOwner and
	// rangeOwnersPerSession are the range-lock caps (0: none).
	rangeWaitingPerSession, rangeWaitingPerOwner, rangeOwnersPerSession int
	// auditStall bounds every wait for the audit writer.
	auditStall time.Duration
	// Cluster mode (docs/cluster.md): on when nodeID is set.
	nodeID     string
	raftListen string
	bootstrap  bool
	join       string
	// clusterIdentity is the glob a certificate identity must match to
	// be a member node's (with TLS).
	clusterIdentity string
	// advertiseHost replaces the host of the addresses recorded for the
	// other members.
	advertiseHost string
	// selfStop (T_self) and removeAfter (T): the failover timings
	// (cluster.ValidateFailover).
	selfStop, removeAfter time.Duration
	// clusterSecretFile holds the secret every member API write carries.
	clusterSecretFile string
}

func serveFlags(stderr io.Writer) (*flagSet, *serveConfig) {
	cfg := &serveConfig{}
	fs := newFlagSet("baton serve", "baton serve [flags]", stderr)
	fs.StringVar(&cfg.listen, "listen", "BATON_LISTEN_ADDRESS", server.DefaultAddr, "protocol address to listen on (host:port)")
	fs.DurationVar(&cfg.ioTimeout, "io-timeout", "BATON_IO_TIMEOUT", server.DefaultIOTimeout, "bound on the handshake and first ACQUIRE (version 2: preamble and HELLO), a started frame, and the total blocked time of a session's writes")
	fs.DurationVar(&cfg.maxLease, "max-lease", "BATON_MAX_LEASE", server.DefaultMaxLease, "longest lease a client may ask for; a longer one is refused with ERROR 0x17 (on a cluster it bounds every take-over's warm-up); 0: no limit")
	fs.IntVar(&cfg.maxSessionClaims, "max-session-claims", "BATON_MAX_SESSION_CLAIMS", server.DefaultMaxSessionClaims, "most claims, held and queued, of one version 2 session; more are refused 0x07; 0: no limit")
	fs.IntVar(&cfg.maxWaiters, "max-waiters", "BATON_MAX_WAITERS", server.DefaultMaxWaiters, "most claims waiting in one lock's queue; more are refused 0x07 (version 1: ERROR 0x07 and close); 0: no limit")
	fs.IntVar(&cfg.maxClientSessions, "max-sessions-per-client", "BATON_MAX_SESSIONS_PER_CLIENT", server.DefaultMaxSessionsPerClient, "most open sessions of one client (certificate identity under mutual TLS, else IP address); more are answered ERROR 0x07; 0: no limit")
	fs.IntVar(&cfg.maxKeptSessions, "max-kept-sessions", "BATON_MAX_KEPT_SESSIONS", server.DefaultMaxKeptSessions, "most resumable sessions kept after their connection broke; past it a broken session's claims end at once; 0: no limit")
	fs.IntVar(&cfg.maxKeptClaims, "max-kept-claims", "BATON_MAX_KEPT_CLAIMS", server.DefaultMaxKeptClaims, "most claims the kept resumable sessions keep together; past it a broken session's claims end at once; 0: no limit")
	fs.StringVar(&cfg.opsListen, "ops-listen", "BATON_OPS_LISTEN_ADDRESS", "", "address for /metrics, /healthz and /readyz (host:port); empty: off")
	fs.StringVar(&cfg.adminListen, "admin-listen", "BATON_ADMIN_LISTEN_ADDRESS", "", "address for the admin API (host:port); unauthenticated unless mutual TLS and the ACL's admin rules: keep it on loopback; empty: off")
	fs.StringVar(&cfg.adminHosts, "admin-allowed-hosts", "BATON_ADMIN_ALLOWED_HOSTS", "", "comma-separated host names the admin API also answers to in the Host header, besides its own address, loopback and localhost ('*': any)")
	fs.IntVar(&cfg.httpMaxConns, "http-max-connections", "BATON_HTTP_MAX_CONNECTIONS", ops.DefaultMaxConns, "most open connections on each of the ops and admin listeners; more wait in the listen backlog")
	fs.IntVar(&cfg.rangeWaitingPerSession, "range-waiting-per-session", "BATON_RANGE_WAITING_PER_SESSION", server.DefaultRangeWaitingPerSession, "most waiting range-lock requests of one version 2 session; more are refused (0x0e); 0: no cap")
	fs.IntVar(&cfg.rangeWaitingPerOwner, "range-waiting-per-owner", "BATON_RANGE_WAITING_PER_OWNER", server.DefaultRangeWaitingPerOwner, "most waiting range-lock requests of one lock owner of a session; more are refused (0x0e); 0: no cap")
	fs.IntVar(&cfg.rangeOwnersPerSession, "range-owners-per-session", "BATON_RANGE_OWNERS_PER_SESSION", server.DefaultRangeOwnersPerSession, "most range-lock owners (holding or waiting) of one version 2 session; more are refused (0x0e); 0: no cap")
	fs.StringVar(&cfg.auditLog, "audit-log", "BATON_AUDIT_LOG", "", "append JSON audit lines to this file ('-': standard output); empty: off")
	fs.DurationVar(&cfg.auditStall, "audit-stall-timeout", "BATON_AUDIT_STALL_TIMEOUT", audit.DefaultStallTimeout, "audit records waiting this long for a write make /readyz answer 503; also bounds every wait for the audit writer (reopen, shutdown)")
	fs.StringVar(&cfg.logLevel, "log-level", "BATON_LOG_LEVEL", "info", "log level: "+strings.Join(ops.LogLevels, ", "))
	fs.StringVar(&cfg.logFormat, "log-format", "BATON_LOG_FORMAT", "text", "log format on standard error: "+strings.Join(ops.LogFormats, ", "))
	fs.StringVar(&cfg.tls.Cert, "tls-cert", "BATON_TLS_CERT", "", "server certificate (PEM); with -tls-key turns on TLS for the protocol and admin ports")
	fs.StringVar(&cfg.tls.Key, "tls-key", "BATON_TLS_KEY", "", "server private key (PEM)")
	fs.StringVar(&cfg.tls.ClientCA, "tls-client-ca", "BATON_TLS_CLIENT_CA", "", "CA bundle (PEM); requires every client to present a certificate it signed (mutual TLS)")
	fs.StringVar(&cfg.aclFile, "acl-file", "BATON_ACL_FILE", "", "access-control list (JSON) from client identities to lock names; requires -tls-client-ca")
	fs.BoolVar(&cfg.aclRevokeHolders, "acl-revoke-holders", "BATON_ACL_REVOKE_HOLDERS", false, "on an ACL reload, also end holders the new rules refuse (waiters they refuse are always removed)")
	fs.StringVar(&cfg.dataDir, "data-dir", "BATON_DATA_DIR", "", "directory for durable state (the fencing-token high-water mark, DIR/tokens; a cluster node's Raft state, DIR/cluster); empty: tokens from the wall clock")
	fs.StringVar(&cfg.nodeID, "node-id", "BATON_NODE_ID", "", "run as a cluster node with this stable id (needs -data-dir, -raft-listen, -admin-listen; the first time -bootstrap, -join, or neither to wait for 'baton cluster join'; with TLS also -tls-client-ca and -cluster-identity); empty: a single server")
	fs.StringVar(&cfg.raftListen, "raft-listen", "BATON_RAFT_LISTEN_ADDRESS", "", "a cluster node's inter-node (Raft) address (host:port); keep it stable across restarts")
	fs.BoolVar(&cfg.bootstrap, "bootstrap", "BATON_BOOTSTRAP", false, "form a new cluster of this node, for its first start only: ignored (with a warning) when the data directory holds one, but started on a lost data directory it forms a second cluster; prefer a -join list")
	fs.StringVar(&cfg.join, "join", "BATON_JOIN", "", "join the cluster through the admin address (host:port) of any member, or, safe when a node loses its data directory, the comma-separated admin addresses of every member, the same list on every node: a node with new Raft state joins through a listed member in a cluster, and forms one only as the first of the list once every other listed member answers that it is in no cluster; a node restarted from its data directory rejoins by itself; without -bootstrap or -join a new node waits for 'baton cluster join'")
	fs.StringVar(&cfg.advertiseHost, "advertise-host", "BATON_ADVERTISE_HOST", "", "a cluster node's host name or IP as the other members and clients reach it, recorded with its listeners' ports; needed when a listener binds every interface; empty: the bound addresses")
	fs.DurationVar(&cfg.selfStop, "cluster-self-stop", "BATON_CLUSTER_SELF_STOP", cluster.DefaultSelfStop, "a cluster node with no contact with its Raft quorum for this long serves nothing: it confirms no heartbeat, grants nothing and ends its sessions with ERROR 0x03")
	fs.DurationVar(&cfg.removeAfter, "cluster-remove-after", "BATON_CLUSTER_REMOVE_AFTER", cluster.DefaultRemoveAfter, "the Raft leader removes a member it has not heard from for this long (not one stopped by SIGTERM); its names go to the other nodes after their warm-up; must exceed 1.0202 times -cluster-self-stop plus a tick of min(self-stop/5, 250ms) (clock drift up to 1%)")
	fs.StringVar(&cfg.clusterSecretFile, "cluster-secret-file", "BATON_CLUSTER_SECRET_FILE", "", "file holding the cluster's shared secret (at least 16 bytes, the same on every node): the member API refuses a write that does not carry it, and this node sends it with its own; further lines are secrets also accepted (to change it); reloaded on SIGHUP; empty: writes carry no secret (a warning without TLS)")
	fs.StringVar(&cfg.clusterIdentity, "cluster-identity", "BATON_CLUSTER_IDENTITY", "", "with TLS, a glob the certificate identity of every member node matches (and no client's): Raft, member API calls and relay hops are mutual TLS and accepted only from it")
	return fs, cfg
}

// validate checks the values; fs names each flag's environment variable
// in the message, since the bad value may have come from either.
func (c *serveConfig) validate(fs *flagSet) error {
	opt := func(name string) string { return "-" + name + " (" + fs.env[name] + ")" }
	if c.ioTimeout <= 0 {
		return fmt.Errorf("%s must be positive, got %v", opt("io-timeout"), c.ioTimeout)
	}
	if c.maxLease < 0 || (c.maxLease > 0 && protocol.ValidateLease(c.maxLease) != nil) {
		return fmt.Errorf("%s must be 0 (no limit) or a lease from 1ms to 49 days, got %v", opt("max-lease"), c.maxLease)
	}
	for _, l := range []struct {
		flag string
		n    int
	}{
		{"max-session-claims", c.maxSessionClaims}, {"max-waiters", c.maxWaiters},
		{"max-sessions-per-client", c.maxClientSessions}, {"max-kept-sessions", c.maxKeptSessions},
		{"max-kept-claims", c.maxKeptClaims},
	} {
		if l.n < 0 {
			return fmt.Errorf("%s must be 0 (no limit) or positive, got %d", opt(l.flag), l.n)
		}
	}
	for _, a := range []struct{ flag, addr string }{
		{"listen", c.listen}, {"ops-listen", c.opsListen}, {"admin-listen", c.adminListen},
	} {
		if a.addr == "" && a.flag != "listen" {
			continue
		}
		_, port, err := net.SplitHostPort(a.addr)
		if err != nil {
			return fmt.Errorf("%s %q: want host:port: %v", opt(a.flag), a.addr, err)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			return fmt.Errorf("%s %q: port %q is not a number from 0 to 65535", opt(a.flag), a.addr, port)
		}
	}
	if c.auditStall <= 0 {
		return fmt.Errorf("%s must be positive, got %v", opt("audit-stall-timeout"), c.auditStall)
	}
	for _, r := range []struct {
		name string
		v    int
	}{{"range-waiting-per-session", c.rangeWaitingPerSession}, {"range-waiting-per-owner", c.rangeWaitingPerOwner}, {"range-owners-per-session", c.rangeOwnersPerSession}} {
		if r.v < 0 {
			return fmt.Errorf("%s must not be negative, got %d", opt(r.name), r.v)
		}
	}
	if c.httpMaxConns <= 0 {
		return fmt.Errorf("%s must be positive, got %d", opt("http-max-connections"), c.httpMaxConns)
	}
	if c.opsListen != "" && c.opsListen == c.adminListen && !strings.HasSuffix(c.opsListen, ":0") {
		return fmt.Errorf("%s and %s must differ, both are %q", opt("ops-listen"), opt("admin-listen"), c.opsListen)
	}
	switch {
	case (c.tls.Cert == "") != (c.tls.Key == ""):
		return fmt.Errorf("%s and %s go together: give both or neither", opt("tls-cert"), opt("tls-key"))
	case c.tls.ClientCA != "" && c.tls.Cert == "":
		return fmt.Errorf("%s needs TLS: also give %s and %s", opt("tls-client-ca"), opt("tls-cert"), opt("tls-key"))
	case c.aclFile != "" && c.tls.ClientCA == "":
		return fmt.Errorf("%s needs client identities: also give %s (mutual TLS)", opt("acl-file"), opt("tls-client-ca"))
	}
	if err := c.validateCluster(opt); err != nil {
		return err
	}
	if _, err := ops.ParseLogLevel(c.logLevel); err != nil {
		return fmt.Errorf("%s: %v", opt("log-level"), err)
	}
	if !slices.Contains(ops.LogFormats, c.logFormat) {
		return fmt.Errorf("%s: unknown log format %q (want one of %s)", opt("log-format"), c.logFormat, strings.Join(ops.LogFormats, ", "))
	}
	return nil
}

// validateCluster checks the cluster flags.
func (c *serveConfig) validateCluster(opt func(string) string) error {
	if c.nodeID == "" {
		for _, f := range []struct {
			name string
			set  bool
		}{{"raft-listen", c.raftListen != ""}, {"bootstrap", c.bootstrap}, {"join", c.join != ""},
			{"cluster-identity", c.clusterIdentity != ""}, {"advertise-host", c.advertiseHost != ""},
			{"cluster-secret-file", c.clusterSecretFile != ""}} {
			if f.set {
				return fmt.Errorf("%s is for a cluster node: also give %s", opt(f.name), opt("node-id"))
			}
		}
		return nil
	}
	switch {
	case c.dataDir == "":
		return fmt.Errorf("%s needs %s (the node's Raft state)", opt("node-id"), opt("data-dir"))
	case c.raftListen == "":
		return fmt.Errorf("%s needs %s (the inter-node address)", opt("node-id"), opt("raft-listen"))
	case c.adminListen == "":
		return fmt.Errorf("%s needs %s (members reach each other's member API there)", opt("node-id"), opt("admin-listen"))
	case c.bootstrap && c.join != "":
		return fmt.Errorf("%s and %s exclude each other", opt("bootstrap"), opt("join"))
	case c.tls.Cert != "" && c.tls.ClientCA == "":
		return fmt.Errorf("%s with TLS needs %s: nodes talk to each other over mutual TLS with that CA", opt("node-id"), opt("tls-client-ca"))
	case c.tls.Cert != "" && c.clusterIdentity == "":
		return fmt.Errorf("%s with TLS needs %s: the certificate identity that makes a peer a member node", opt("node-id"), opt("cluster-identity"))
	case c.tls.Cert == "" && c.clusterIdentity != "":
		return fmt.Errorf("%s needs TLS: also give %s, %s and %s", opt("cluster-identity"), opt("tls-cert"), opt("tls-key"), opt("tls-client-ca"))
	}
	if err := cluster.ValidateFailover(c.selfStop, c.removeAfter); err != nil {
		return fmt.Errorf("%s %v and %s %v: %v", opt("cluster-self-stop"), c.selfStop, opt("cluster-remove-after"), c.removeAfter, err)
	}
	if c.clusterIdentity != "" {
		if _, err := glob.Compile(c.clusterIdentity); err != nil {
			return fmt.Errorf("%s %q: %v", opt("cluster-identity"), c.clusterIdentity, err)
		}
	}
	if _, _, err := net.SplitHostPort(c.raftListen); err != nil {
		return fmt.Errorf("%s %q: want host:port: %v", opt("raft-listen"), c.raftListen, err)
	}
	if c.advertiseHost == "" {
		for _, a := range []struct{ flag, addr string }{{"listen", c.listen}, {"admin-listen", c.adminListen}, {"raft-listen", c.raftListen}} {
			if host, _, _ := net.SplitHostPort(a.addr); host == "" || net.ParseIP(host) != nil && net.ParseIP(host).IsUnspecified() {
				return fmt.Errorf("%s %q binds every interface: give %s, the host name or IP the other members reach this node by", opt(a.flag), a.addr, opt("advertise-host"))
			}
		}
	} else if strings.ContainsAny(c.advertiseHost, ":/ ") && net.ParseIP(c.advertiseHost) == nil {
		return fmt.Errorf("%s %q: want a host name or IP, without a port", opt("advertise-host"), c.advertiseHost)
	}
	if c.join != "" {
		if _, err := cluster.SplitJoinList(c.join); err != nil {
			return fmt.Errorf("%s %q: want host:port, or a comma-separated list of them: %v", opt("join"), c.join, err)
		}
	}
	return nil
}

// allowedHosts splits -admin-allowed-hosts.
func (c *serveConfig) allowedHosts() []string {
	var out []string
	for _, h := range strings.Split(c.adminHosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			out = append(out, h)
		}
	}
	return out
}

// settings returns the effective value of every flag, for /api/info.
func (fs *flagSet) settings() map[string]string {
	m := map[string]string{}
	for _, name := range fs.order {
		m[name] = fs.Lookup(name).Value.String()
	}
	return m
}

func runServe(args []string, stdout, stderr io.Writer) int {
	fs, cfg := serveFlags(stderr)
	if code := fs.parseOrExit(args, stdout, stderr); code >= 0 {
		if code == exitOK {
			fmt.Fprint(stdout, serveHelp)
		}
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "baton serve: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	if err := cfg.validate(fs); err != nil {
		fmt.Fprintf(stderr, "baton serve: %v\n", err)
		return exitUsage
	}
	logger, err := ops.NewLogger(stderr, cfg.logLevel, cfg.logFormat)
	if err != nil { // validate checked the values
		fmt.Fprintf(stderr, "baton serve: %v\n", err)
		return exitUsage
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	return serve(ctx, cfg, serveEnv{
		logger:   logger,
		stdout:   stdout,
		hup:      hup,
		settings: fs.settings(),
		stopped:  stop, // a second signal kills the process the default way
	})
}

// serveEnv is what serve needs besides the configuration; tests supply
// their own.
type serveEnv struct {
	logger   *slog.Logger
	stdout   io.Writer         // where '-audit-log -' writes
	hup      <-chan os.Signal  // SIGHUP: reopen the audit log, reload TLS and ACL
	settings map[string]string // the effective configuration, for /api/info
	stopped  func()            // called once shutdown begins; may be nil
	ready    func(serveAddrs)  // called once every listener is bound; may be nil
	observer server.Observer   // an extra observer, for tests; may be nil
}

// serveAddrs are the bound addresses; ops and admin are empty when off.
type serveAddrs struct{ protocol, ops, admin string }

// rangeCapFlag is a range-lock cap flag (0: none) as a Server field
// (negative: none).
func rangeCapFlag(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// serve runs the server until ctx ends, then shuts down: the protocol
// side first (health probes turn 503 at once), then, once every session
// has closed, the ops and admin HTTP servers, then the audit log.
func serve(ctx context.Context, cfg *serveConfig, env serveEnv) int {
	logger := env.logger
	started := time.Now()
	srv := &server.Server{IOTimeout: cfg.ioTimeout, MaxLease: cfg.maxLease, Logger: logger,
		RangeWaitingPerSession: rangeCapFlag(cfg.rangeWaitingPerSession), RangeWaitingPerOwner: rangeCapFlag(cfg.rangeWaitingPerOwner),
		RangeOwnersPerSession: rangeCapFlag(cfg.rangeOwnersPerSession),
		MaxSessionClaims:      cfg.maxSessionClaims, MaxWaiters: cfg.maxWaiters, MaxSessionsPerClient: cfg.maxClientSessions,
		MaxKeptSessions: cfg.maxKeptSessions, MaxKeptClaims: cfg.maxKeptClaims}
	var observers server.Observers

	var cl *clusterRuntime
	if cfg.nodeID != "" {
		// A cluster node's tokens come from epochs committed through
		// Raft (set below, once the node is open).
		cl = newClusterRuntime(logger)
		cl.mover, cl.srv = srv, srv
		srv.Router, srv.TrustHop, srv.Tokens, srv.NodeID = cl, cl.trustHop, cl, cfg.nodeID
	} else {
		tokens, closeTokens, err := openTokens(cfg.dataDir, logger)
		if err != nil {
			logger.Error("cannot start the fencing-token source", "data_dir", cfg.dataDir, "err", err)
			return exitError
		}
		defer closeTokens()
		srv.Tokens = tokens
	}

	sec, err := loadSecurity(cfg)
	if err != nil {
		logger.Error("cannot load TLS or ACL files", "err", err)
		return exitError
	}
	if sec.tls != nil {
		srv.TLSConfig = sec.tls.Config()
	}
	if cl != nil {
		if cl.tls, err = newClusterTLS(sec, cfg.clusterIdentity); err != nil {
			logger.Error("cannot set up mutual TLS between cluster nodes", "err", err)
			return exitError
		}
		if cl.tls != nil {
			// Hops to owners present this node's certificate; a hop
			// header is accepted only from a member's.
			srv.DialOwner, srv.TrustHopIdentity = cl.tls.dialOwner, cl.tls.isNode
		}
		if cfg.clusterSecretFile != "" {
			if cl.secret, cl.oldSecrets, err = readClusterSecret(cfg.clusterSecretFile); err != nil {
				logger.Error("cannot read the cluster secret", "err", err)
				return exitError
			}
		} else if cl.tls == nil {
			logger.Warn("no -cluster-secret-file: the member API takes writes (joins, removals, epochs) from anyone who reaches the admin listener; give every node the same secret file",
				"admin_listen", cfg.adminListen)
		}
	}
	if sec.acl != nil {
		srv.Authorizer = sec.acl
		if sec.acl.Len() == 0 {
			logger.Warn("the ACL has no lock rules: every ACQUIRE is denied (add \"rules\" to the ACL file; see docs/security.md)",
				"acl_file", cfg.aclFile)
		}
	}

	var auditLog *audit.Logger
	if cfg.auditLog != "" {
		var err error
		acfg := audit.Config{Logger: logger, StallTimeout: cfg.auditStall}
		if cfg.auditLog == "-" {
			auditLog = audit.New(env.stdout, acfg)
		} else {
			auditLog, err = audit.Open(cfg.auditLog, acfg)
		}
		if err != nil {
			logger.Error("cannot open the audit log", "path", cfg.auditLog, "err", err)
			return exitError
		}
		defer func() {
			if err := auditLog.Close(); err != nil {
				logger.Error("closing the audit log", "err", err)
			}
		}()
		observers = append(observers, auditLog)
		if cl != nil {
			cl.audit = auditLog
		}
	}

	var listeners []net.Listener
	closeListeners := func() {
		for _, l := range listeners {
			l.Close()
		}
	}
	listen := func(what, addr string) (net.Listener, bool) {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			logger.Error("cannot listen", "listener", what, "addr", addr, "err", err)
			closeListeners()
			return nil, false
		}
		listeners = append(listeners, l)
		return l, true
	}
	var addrs serveAddrs
	ln, ok := listen("protocol", cfg.listen)
	if !ok {
		return exitError
	}
	addrs.protocol = ln.Addr().String()

	// The HTTP servers have timeouts and a connection cap, so idle or
	// slow HTTP clients can never take the descriptors the protocol
	// port needs.
	var httpServers []*http.Server
	startHTTP := func(l net.Listener, h http.Handler) {
		hs := ops.NewHTTPServer(h, logger)
		httpServers = append(httpServers, hs)
		go hs.Serve(l)
	}
	if cfg.opsListen != "" {
		l, ok := listen("ops", cfg.opsListen)
		if !ok {
			return exitError
		}
		addrs.ops = l.Addr().String()
		// A descriptor in reserve keeps the probes reachable when
		// protocol clients have taken all the others.
		if l, err = ops.ReserveListener(l); err != nil {
			logger.Error("cannot reserve a descriptor for the ops listener", "err", err)
			closeListeners()
			return exitError
		}
		l = ops.LimitListener(l, cfg.httpMaxConns)
		mcfg := ops.MetricsConfig{Source: srv, Version: version}
		var checks []ops.ReadinessCheck
		if auditLog != nil {
			mcfg.AuditDropped, mcfg.AuditWaiting = auditLog.Dropped, auditLog.Waiting
			checks = append(checks, auditLog.Stalled)
		}
		if cl != nil {
			checks = append(checks, cl.readiness)
		}
		metrics := ops.NewMetrics(mcfg)
		if cl != nil {
			cl.register(metrics.Registry(), srv)
		}
		observers = append(observers, metrics)
		startHTTP(l, ops.Handler(metrics, srv, checks...))
	}
	if cfg.adminListen != "" {
		l, ok := listen("admin", cfg.adminListen)
		if !ok {
			return exitError
		}
		addrs.admin = l.Addr().String()
		l = ops.LimitListener(l, cfg.httpMaxConns)
		if sec.tls != nil {
			l = tls.NewListener(l, sec.tls.Config())
		}
		if tcp, ok := l.Addr().(*net.TCPAddr); (!ok || !tcp.IP.IsLoopback()) && sec.acl == nil {
			logger.Warn("the admin API has no authentication and is not bound to a loopback address; anyone who can reach it can release locks",
				"addr", addrs.admin)
		}
		acfg := admin.Config{Server: srv, Version: version, Started: started,
			Settings: env.settings, Logger: logger, AllowedHosts: cfg.allowedHosts(),
			UI: ui.Handler(), Stats: &admin.Stats{}} // the dashboard at /
		observers = append(observers, acfg.Stats)
		if cl != nil {
			acfg.Cluster = cl.dashboard(srv) // the dashboard's cluster view
		}
		if auditLog != nil {
			acfg.Observer = auditLog // refused admin requests
		}
		if sec.acl != nil {
			acfg.Authorizer = sec.acl
			if sec.acl.AdminLen() == 0 {
				logger.Warn("the ACL has no admin rules: the admin API refuses every request (add \"admin\" rules to the ACL file; see docs/security.md)",
					"acl_file", cfg.aclFile)
			}
		}
		var h http.Handler = admin.Handler(acfg)
		if cl != nil {
			// The member API beside the admin API, on the same listener.
			mux := http.NewServeMux()
			// The admin API's Host check and cross-origin protection,
			// answering also to the name the other members use.
			hosts := cfg.allowedHosts()
			if cfg.advertiseHost != "" {
				hosts = append(hosts, cfg.advertiseHost)
			}
			mux.Handle("/cluster/", admin.Guard(memberAPIGuard(cl.tls, sec.acl, cl), admin.GuardConfig{
				Logger: logger, AllowedHosts: hosts, OnRefused: cl.refused}))
			mux.Handle("/", h)
			h = mux
		}
		startHTTP(l, h)
	}
	if env.observer != nil {
		observers = append(observers, env.observer)
	}
	if len(observers) > 0 {
		srv.Observer = observers
	}

	if cl != nil {
		defer cl.shutdown()
		if err := cl.start(ctx, cfg, addrs); err != nil {
			logger.Error("cannot start the cluster node", "node_id", cfg.nodeID, "err", err)
			closeListeners()
			return exitError
		}
	}

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	logger.Info("baton listening", "addr", addrs.protocol, "ops_addr", addrs.ops, "admin_addr", addrs.admin,
		"audit_log", cfg.auditLog, "version", version, "io_timeout", cfg.ioTimeout,
		"tls", sec.mode(), "acl_file", cfg.aclFile)
	if env.ready != nil {
		env.ready(addrs)
	}

	// The audit reopen runs beside the loop: a stalled sink must never
	// hold up signals, reloads or shutdown. One at a time.
	var reopening atomic.Bool
	code := exitOK
wait:
	for {
		select {
		case err := <-serveErr:
			logger.Error("server stopped", "err", err)
			serveErr <- err
			code = exitError
			break wait
		case <-env.hup:
			if reopening.CompareAndSwap(false, true) {
				go func() {
					defer reopening.Store(false)
					reopen(logger, auditLog, cfg.auditLog)
				}()
			} else {
				logger.Warn("SIGHUP: the previous audit log reopen has not finished; not starting another", "path", cfg.auditLog)
			}
			sec.reload(logger)
			if cl != nil {
				cl.reloadSecret(cfg.clusterSecretFile)
			}
			if sec.acl != nil {
				n := srv.Revoke(cfg.aclRevokeHolders)
				logger.Info("SIGHUP: claims the ACL no longer allows ended with 0x18", "claims", n, "holders_too", cfg.aclRevokeHolders)
			}
		case <-ctx.Done():
			break wait
		}
	}
	if env.stopped != nil {
		env.stopped()
	}
	logger.Info("shutting down")
	if cl != nil {
		cl.leave() // a planned leave: hand this node's names over first
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 2*cfg.ioTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		logger.Warn("shutdown: sessions still open at the deadline were closed", "err", err)
	}
	<-serveErr
	// The probes have answered 503 since Shutdown began; they stop only
	// now that the protocol side is fully closed.
	httpCtx, cancelHTTP := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelHTTP()
	for _, hs := range httpServers {
		if err := hs.Shutdown(httpCtx); err != nil {
			hs.Close()
		}
	}
	logger.Info("stopped")
	return code
}

// openTokens returns the fencing-token source: the durable store in
// dataDir, or the wall clock rule from the start of the process.
func openTokens(dataDir string, logger *slog.Logger) (locktable.TokenSource, func(), error) {
	if dataDir == "" {
		ct, err := locktable.NewClockTokens(processStart)
		return ct, func() {}, err
	}
	st, err := tokenstore.Open(dataDir, tokenstore.Options{
		OnError: func(err error) {
			logger.Error("cannot reserve fencing tokens ahead; retrying", "err", err)
		},
		Fatal: func(err error) {
			logger.Error("stopping: no fencing token can be issued safely", "err", err)
			os.Exit(exitError)
		},
	})
	if err != nil {
		return nil, nil, err
	}
	logger.Info("fencing tokens from the data directory", "path", st.Path())
	return st, func() { st.Close() }, nil
}

// processStart is when this process started: a previous server on the
// same port had stopped issuing tokens by then.
var processStart = time.Now()

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
