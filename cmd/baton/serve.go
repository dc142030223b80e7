package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/batonlock/baton/audit"
	"github.com/batonlock/baton/cluster"
	"github.com/batonlock/baton/internal/glob"
	"github.com/batonlock/baton/internal/tlsfiles"
	"github.com/batonlock/baton/node"
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
	maxWatchBacklog, maxRelayedWatches                                              int
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
	fs.IntVar(&cfg.maxWatchBacklog, "max-watch-backlog", "BATON_MAX_WATCH_BACKLOG", server.DefaultMaxWatchBacklog, "most bytes a session with watches may leave unsent when a change is due; past it its watches end with REVOKED 0x08 (its claims live on); 0: no limit")
	fs.IntVar(&cfg.maxRelayedWatches, "max-relayed-watches", "BATON_MAX_RELAYED_WATCHES", server.DefaultMaxRelayedWatches, "most watches a cluster node relays to the names' owners at once, each over a connection of its own; more are refused 0x07; 0: no limit")
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
		{"max-kept-claims", c.maxKeptClaims}, {"max-watch-backlog", c.maxWatchBacklog},
		{"max-relayed-watches", c.maxRelayedWatches},
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

// nodeConfig is the node configuration of the flags.
func (c *serveConfig) nodeConfig(env serveEnv) node.Config {
	return node.Config{Listen: c.listen, IOTimeout: c.ioTimeout, MaxLease: c.maxLease,
		MaxSessionClaims: c.maxSessionClaims, MaxWaiters: c.maxWaiters, MaxSessionsPerClient: c.maxClientSessions,
		MaxKeptSessions: c.maxKeptSessions, MaxKeptClaims: c.maxKeptClaims, MaxWatchBacklog: c.maxWatchBacklog, MaxRelayedWatches: c.maxRelayedWatches,
		RangeWaitingPerSession: c.rangeWaitingPerSession, RangeWaitingPerOwner: c.rangeWaitingPerOwner,
		RangeOwnersPerSession: c.rangeOwnersPerSession,
		OpsListen:             c.opsListen, AdminListen: c.adminListen, AdminAllowedHosts: c.allowedHosts(), HTTPMaxConns: c.httpMaxConns,
		AuditLog: c.auditLog, AuditStdout: env.stdout, AuditStallTimeout: c.auditStall,
		TLS: c.tls, ACLFile: c.aclFile, ACLRevokeHolders: c.aclRevokeHolders, DataDir: c.dataDir,
		NodeID: c.nodeID, RaftListen: c.raftListen, Bootstrap: c.bootstrap, Join: c.join,
		ClusterIdentity: c.clusterIdentity, AdvertiseHost: c.advertiseHost,
		SelfStop: c.selfStop, RemoveAfter: c.removeAfter, ClusterSecretFile: c.clusterSecretFile,
		Logger: env.logger, Version: version, Settings: env.settings, Observer: env.observer, TokensSince: processStart}
}

// serve runs a node (package node) until ctx ends, then shuts it down
// gracefully; SIGHUP (env.hup) reloads it once it serves.
func serve(ctx context.Context, cfg *serveConfig, env serveEnv) int {
	n, err := node.Start(ctx, cfg.nodeConfig(env))
	if err != nil {
		return exitError // logged by Start
	}
	ready := n.Ready()
	var hup <-chan os.Signal // SIGHUP waits until the node serves
	code := exitOK
wait:
	for {
		select {
		case <-ready:
			ready, hup = nil, env.hup
			if env.ready != nil {
				a := n.Addrs()
				env.ready(serveAddrs{protocol: a.Protocol, ops: a.Ops, admin: a.Admin})
			}
		case <-n.Done():
			if !isClosed(n.Ready()) {
				return exitError // the start failed (logged)
			}
			code = exitError // the protocol listener failed (logged)
			break wait
		case <-hup:
			n.Reload()
		case <-ctx.Done():
			if ready != nil {
				// Still starting: the start ends with ctx.
				select {
				case <-n.Ready():
				case <-n.Done():
					return exitError
				}
			}
			break wait
		}
	}
	if env.stopped != nil {
		env.stopped()
	}
	n.Shutdown(context.Background())
	return code
}

// isClosed reports whether c is closed.
func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// processStart is when this process started: a previous server on the
// same port had stopped issuing tokens by then.
var processStart = time.Now()
