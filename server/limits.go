package server

import (
	"net"
	"time"

	"github.com/batonlock/baton/internal/clustercore"
	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

// Defaults of the limits that baton serve applies unless told otherwise
// (docs/capacity.md sizes them). The Server's zero values mean no limit,
// as for MaxLease.
const (
	// DefaultMaxSessionClaims: a version 2 session's claims, held and
	// queued, cost about 300–400 bytes each, so a full session holds
	// about 4 MB.
	DefaultMaxSessionClaims = 10_000
	// DefaultMaxWaiters bounds one lock's queue: ten thousand processes
	// waiting for one name is far beyond a busy fleet's job lock.
	DefaultMaxWaiters = 10_000
	// DefaultMaxSessionsPerClient: a version 1 client opens one
	// connection per claim, and many hosts may share one address behind
	// NAT, so this is generous; a session costs about 6–7 KiB.
	DefaultMaxSessionsPerClient = 4_096
	// DefaultMaxKeptSessions and DefaultMaxKeptClaims bound what resumable
	// sessions whose connection broke keep without a socket: a network
	// blip of a large fleet fits, a client that hangs up on purpose
	// does not pile up claims.
	DefaultMaxKeptSessions = 10_000
	DefaultMaxKeptClaims   = 200_000
	// DefaultMaxWatchBacklog bounds what a session with watches lets pile
	// up unsent: thousands of changes, far more than a reader that keeps
	// up ever has waiting.
	DefaultMaxWatchBacklog = 256 << 10
	// DefaultMaxRelayedWatches bounds the watches a cluster node relays
	// to other nodes, each over a connection of its own: a fifth of the
	// open files a process may have here (20,000).
	DefaultMaxRelayedWatches = 4_096
)

// The limits, as the label of EventLimit's Action and of the metric
// baton_limit_refusals_total.
const (
	LimitSessionClaims  = "session_claims"
	LimitWaiters        = "waiters"
	LimitClientSession  = "client_sessions"
	LimitKeptSessions   = "kept_sessions"
	LimitKeptClaims     = "kept_claims"
	LimitWatchBacklog   = "watch_backlog"
	LimitRelayedWatches = "relayed_watches"
)

// Limits lists every limit name, for metrics that pre-create their labels.
var Limits = []string{LimitSessionClaims, LimitWaiters, LimitClientSession, LimitKeptSessions, LimitKeptClaims, LimitWatchBacklog, LimitRelayedWatches}

// tableLimits are the limits the lock table enforces.
func (srv *Server) tableLimits() locktable.Limits {
	return locktable.Limits{Claims: max(srv.MaxSessionClaims, 0), Waiters: max(srv.MaxWaiters, 0)}
}

// tableLimit names the limit a table error hit; empty for another error.
func tableLimit(err error) string {
	switch err {
	case locktable.ErrTooManyClaims:
		return LimitSessionClaims
	case locktable.ErrTooManyWaiters:
		return LimitWaiters
	}
	return ""
}

// limitHit reports that limit refused something of peer (on lock, when
// one is involved). It only observes and logs at debug level: under an
// attack a line per refusal would flood the log; the metric counts them.
func (srv *Server) limitHit(limit string, peer locktable.Peer, lock string, sid locktable.SessionID) {
	srv.observe(Event{Kind: EventLimit, Time: time.Now(), Action: limit, Peer: Peer(peer), Lock: lock, Session: SessionID(sid), Code: protocol.CodeLimitReached})
	srv.Logger.Debug("limit reached", "limit", limit, "lock", lock, "identity", peer.Identity, "remote_addr", peer.Addr)
}

// clientKey is who a session counts against for MaxSessionsPerClient:
// its certificate identity under mutual TLS, else its address's host.
func clientKey(p locktable.Peer) string {
	if p.Identity != "" {
		return "id:" + p.Identity
	}
	host, _, err := net.SplitHostPort(p.Addr)
	if err != nil {
		host = p.Addr
	}
	return "ip:" + host
}

// admitClient counts session s against its client's open sessions; it
// reports false, counting nothing, when the client has
// MaxSessionsPerClient already. A connection relayed by another cluster
// node is that node's to count.
func (s *session) admitClient() bool {
	srv := s.srv
	if srv.MaxSessionsPerClient <= 0 || s.forwarded {
		return true
	}
	key := clientKey(s.peer)
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.perClient[key] >= srv.MaxSessionsPerClient {
		return false
	}
	if srv.perClient == nil {
		srv.perClient = map[string]int{}
	}
	srv.perClient[key]++
	s.client = key
	return true
}

// leaveClientLocked stops counting session s against its client; called
// with srv.mu held when s ends.
func (srv *Server) leaveClientLocked(s *session) {
	if s.client == "" {
		return
	}
	if srv.perClient[s.client]--; srv.perClient[s.client] <= 0 {
		delete(srv.perClient, s.client)
	}
	s.client = ""
}

// keepAllowedLocked reports whether the server may keep one more
// resumable session with n claims (clustercore.KeptLimits); called with
// srv.mu held.
func (srv *Server) keepAllowedLocked(s *session, n int) bool {
	limits := clustercore.KeptLimits{MaxSessions: srv.MaxKeptSessions, MaxClaims: srv.MaxKeptClaims}
	limit := ""
	switch limits.Allow(len(srv.resume.byID), srv.resume.keptClaims, n) {
	case clustercore.KeptTooManySessions:
		limit = LimitKeptSessions
	case clustercore.KeptTooManyClaims:
		limit = LimitKeptClaims
	default:
		return true
	}
	srv.notify(Event{Kind: EventLimit, Time: time.Now(), Action: limit, Peer: Peer(s.peer), Session: SessionID(s.id)})
	srv.Logger.Debug("limit reached: a resumable session's claims end with its connection", "limit", limit, "session", s.id, "claims", n, "remote_addr", s.peer.Addr)
	return false
}
