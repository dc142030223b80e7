// Package admin is baton's administrative HTTP API and its Go client:
// introspection of locks, queues, sessions and range locks, force-release
// of a holder and removal ("kick") of a waiter, one claim per request.
// Every other GET path is Config.UI, the web dashboard, when it is set.
// Without an Authorizer the API has no authentication of its own (serve it
// on loopback), but it refuses cross-origin requests that change state and
// any Host that is not its own (DNS rebinding). With one, every request is
// checked against the caller's certificate identity and the ACL's admin
// rules, and a refusal is a 403 passed to Config.Observer.
// The endpoints, their answers and errors: docs/admin-api.md.
package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/batonlock/baton/acl"
	"github.com/batonlock/baton/internal/glob"
	"github.com/batonlock/baton/server"
)

// Backend is the server the API inspects and steers. *server.Server is
// one.
type Backend interface {
	Snapshot(match func(name string) bool) []server.LockInfo
	Lock(name string) (server.LockInfo, bool)
	Counts() server.Counts
	Sessions() int
	ForceReleaseBy(name string, by server.Peer) error
	KickBy(name, addr string, by server.Peer) error
	ForceReleaseClaimBy(name string, ref server.ClaimRef, by server.Peer) error
	KickClaimBy(name string, ref server.ClaimRef, by server.Peer) error
	ShuttingDown() bool
}

// Authorizer decides which admin actions (acl.ActionRead,
// acl.ActionRelease, acl.ActionKick) a caller identity may take on which
// locks. *acl.ACL and *acl.Reloadable are ones.
type Authorizer interface {
	// AllowAdmin reports whether identity may take action on lock.
	AllowAdmin(identity, action, lock string) bool
	// AllowAdminAny reports whether identity may take action on some
	// lock.
	AllowAdminAny(identity, action string) bool
}

// Config configures Handler.
type Config struct {
	Server Backend
	// Version is reported by /api/info.
	Version string
	// Started is when the server started; /api/info reports the uptime
	// from it.
	Started time.Time
	// Settings is the effective configuration reported by /api/info, for
	// example flag name to value.
	Settings map[string]string
	// Logger records every administrative action; nil means
	// slog.Default().
	Logger *slog.Logger
	// AllowedHosts are further host names or addresses that requests
	// may name in their Host header, with any port (a port given here is
	// ignored); "*" allows any.
	AllowedHosts []string
	// Authorizer, when set, decides every request by the identity of the
	// caller's verified client certificate; nil allows everything to
	// everyone who reaches the API.
	Authorizer Authorizer
	// Observer receives an EventAdminDenied for every request the
	// Authorizer refused, for the audit log; nil: none.
	Observer server.Observer
	// UI, when set, serves every GET path outside /api/ (the web
	// dashboard) behind the same Host check, cross-origin protection and
	// "read" rule as the API; nil answers 404 there.
	UI http.Handler
	// Cluster, when set, serves GET /api/cluster and the paths below it
	// (ClusterHandler: the cluster's status and the owner of a name) and
	// /api/info reports "cluster": true, which shows the dashboard's
	// cluster view; nil: not clustered, 404.
	Cluster http.Handler
	// Stats, when set and installed among the server's observers, gives
	// /api/summary the grants since start.
	Stats *Stats
	// SnapshotMaxAge is how long paged listings, /api/sessions and
	// /api/summary share one snapshot of the lock table; zero means
	// DefaultSnapshotMaxAge.
	SnapshotMaxAge time.Duration
}

type handler struct {
	Config
	cache *snapCache
}

// Handler returns the admin API.
func Handler(cfg Config) http.Handler {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Settings == nil {
		cfg.Settings = map[string]string{}
	}
	if cfg.SnapshotMaxAge <= 0 {
		cfg.SnapshotMaxAge = DefaultSnapshotMaxAge
	}
	h := &handler{Config: cfg, cache: &snapCache{}}
	return Guard(h, GuardConfig{Logger: cfg.Logger, AllowedHosts: cfg.AllowedHosts})
}

// The reasons of a refusal by Guard, as GuardConfig.OnRefused receives
// them.
const (
	RefusedHost        = "host"
	RefusedCrossOrigin = "cross_origin"
)

// GuardConfig configures Guard.
type GuardConfig struct {
	// Logger records each request refused for its Host; nil means
	// slog.Default().
	Logger *slog.Logger
	// AllowedHosts as Config.AllowedHosts.
	AllowedHosts []string
	// OnRefused, when set, is called for each refused request with
	// RefusedHost or RefusedCrossOrigin (for a metric).
	OnRefused func(reason string)
}

// Guard wraps h with the admin API's protections against web pages
// (see the package comment): requests whose Host header names another
// host (DNS rebinding) and cross-origin requests that change state are
// refused with 403. Handler uses it; so does the cluster member API that
// shares the admin listener.
func Guard(h http.Handler, cfg GuardConfig) http.Handler {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	refused := func(reason string) {
		if cfg.OnRefused != nil {
			cfg.OnRefused(reason)
		}
	}
	hp := hostPolicy{allowed: map[string]bool{}}
	for _, a := range cfg.AllowedHosts {
		if a == "*" {
			hp.allowAny = true
		}
		if host, _, err := net.SplitHostPort(a); err == nil {
			a = host // any port: the check is about names
		}
		hp.allowed[normalizeHost(a)] = true
	}
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		refused(RefusedCrossOrigin)
		writeError(w, http.StatusForbidden, "cross-origin request refused")
	}))
	inner := cop.Handler(h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hp.hostAllowed(r) {
			refused(RefusedHost)
			cfg.Logger.Warn("admin: request refused: Host not allowed", "host", r.Host, "admin_addr", r.RemoteAddr)
			writeError(w, http.StatusForbidden, fmt.Sprintf("Host %q is not allowed: the admin API answers only to its own address, "+
				"loopback addresses and localhost (DNS rebinding protection); allow more names with "+
				"'baton serve -admin-allowed-hosts' (BATON_ADMIN_ALLOWED_HOSTS)", r.Host))
			return
		}
		inner.ServeHTTP(w, r)
	})
}

// hostPolicy is the Host check of Guard.
type hostPolicy struct {
	allowed  map[string]bool
	allowAny bool
}

// normalizeHost lower-cases a host name and drops brackets and a
// trailing dot.
func normalizeHost(h string) string {
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

// hostAllowed reports whether the Host header of r names this server.
func (h hostPolicy) hostAllowed(r *http.Request) bool {
	if h.allowAny {
		return true
	}
	host := r.Host
	if hh, _, err := net.SplitHostPort(host); err == nil {
		host = hh
	}
	host = normalizeHost(host)
	if host == "" {
		return false
	}
	if host == "localhost" || h.allowed[host] {
		return true
	}
	if ip := net.ParseIP(host); ip != nil {
		if ip.IsLoopback() {
			return true
		}
		if local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
			if tcp, ok := local.(*net.TCPAddr); ok && tcp.IP.Equal(ip) {
				return true
			}
		}
		return false
	}
	// Under TLS the client checked the certificate against the name it
	// asked for; a rebinding page's name would have failed that check.
	return r.TLS != nil && r.TLS.ServerName != "" && normalizeHost(r.TLS.ServerName) == host
}

// caller returns who made r: the identity of its verified client
// certificate (empty without one) and its address.
func caller(r *http.Request) server.Peer {
	p := server.Peer{Addr: r.RemoteAddr}
	if r.TLS != nil {
		p.Identity = server.Identity(*r.TLS)
	}
	return p
}

// authorize reports whether the caller of r may take action on lock (on
// some lock when lock is empty and any is true), and answers 403
// otherwise.
func (h *handler) authorize(w http.ResponseWriter, r *http.Request, action, lock string, anyLock bool) bool {
	if h.Authorizer == nil {
		return true
	}
	by := caller(r)
	ok := false
	if anyLock {
		ok = h.Authorizer.AllowAdminAny(by.Identity, action)
	} else {
		ok = h.Authorizer.AllowAdmin(by.Identity, action, lock)
	}
	if ok {
		return true
	}
	h.Logger.Warn("admin: request denied by the ACL's admin rules", "identity", by.Identity, "admin_addr", by.Addr,
		"action", action, "lock", lock, "path", r.URL.Path)
	if h.Observer != nil {
		h.Observer.Observe(server.Event{Kind: server.EventAdminDenied, Time: time.Now(), Lock: lock, Admin: by, Action: action})
	}
	what := fmt.Sprintf("lock %q", lock)
	if anyLock {
		what = "any lock"
	}
	writeError(w, http.StatusForbidden, fmt.Sprintf("identity %q may not %s %s: no admin rule of the ACL allows it", by.Identity, action, what))
	return false
}

// ServeHTTP routes on the escaped path, segment by segment, so that an
// encoded '/' (%2F) stays inside its segment and names like "a//b" or ".."
// are never cleaned into other paths.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	segs, ok := splitPath(r.URL.EscapedPath())
	if ok && h.UI != nil && (len(segs) == 0 || segs[0] != "api") {
		if allow(w, r, http.MethodGet) && h.authorize(w, r, acl.ActionRead, "", true) {
			// The dashboard's buttons change state: never inside a frame
			// of another page (clickjacking), and only its own scripts.
			w.Header().Set("X-Frame-Options", "DENY")
			w.Header().Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
			w.Header().Set("X-Content-Type-Options", "nosniff")
			h.UI.ServeHTTP(w, r)
		}
		return
	}
	if !ok || len(segs) < 2 || segs[0] != "api" {
		writeError(w, http.StatusNotFound, "no such endpoint")
		return
	}
	switch {
	case len(segs) == 2 && segs[1] == "info":
		if allow(w, r, http.MethodGet) && h.authorize(w, r, acl.ActionRead, "", true) {
			h.info(w)
		}
	case len(segs) == 2 && segs[1] == "locks":
		if allow(w, r, http.MethodGet) && h.authorize(w, r, acl.ActionRead, "", true) {
			h.locks(w, r)
		}
	case len(segs) == 2 && segs[1] == "sessions":
		if allow(w, r, http.MethodGet) && h.authorize(w, r, acl.ActionRead, "", true) {
			h.sessions(w, r)
		}
	case len(segs) == 2 && segs[1] == "summary":
		if allow(w, r, http.MethodGet) && h.authorize(w, r, acl.ActionRead, "", true) {
			h.summary(w, r)
		}
	case segs[1] == "cluster" && h.Cluster != nil: // /api/cluster and below
		if allow(w, r, http.MethodGet) && h.authorize(w, r, acl.ActionRead, "", true) {
			h.Cluster.ServeHTTP(w, r)
		}
	case len(segs) == 3 && segs[1] == "locks":
		if allow(w, r, http.MethodGet) && h.authorize(w, r, acl.ActionRead, segs[2], false) {
			h.lock(w, r, segs[2])
		}
	case len(segs) == 2 && segs[1] == "ranges":
		if rb, ok := h.Server.(RangeBackend); !ok {
			writeError(w, http.StatusNotFound, "no such endpoint")
		} else if allow(w, r, http.MethodGet) && h.authorize(w, r, acl.ActionRead, "", true) {
			h.ranges(w, r, rb)
		}
	case len(segs) == 4 && segs[1] == "ranges" && segs[3] == "release":
		if rb, ok := h.Server.(RangeBackend); !ok {
			writeError(w, http.StatusNotFound, "no such endpoint")
		} else if allow(w, r, http.MethodPost) && h.authorize(w, r, acl.ActionRelease, segs[2], false) {
			h.releaseRanges(w, r, rb, segs[2])
		}
	case len(segs) == 4 && segs[1] == "locks" && segs[3] == "release":
		if allow(w, r, http.MethodPost) && h.authorize(w, r, acl.ActionRelease, segs[2], false) {
			h.release(w, r, segs[2])
		}
	case len(segs) == 5 && segs[1] == "locks" && segs[3] == "waiters":
		if allow(w, r, http.MethodDelete) && h.authorize(w, r, acl.ActionKick, segs[2], false) {
			h.kick(w, r, segs[2], segs[4])
		}
	default:
		writeError(w, http.StatusNotFound, "no such endpoint")
	}
}

// splitPath splits an escaped path into unescaped segments.
func splitPath(p string) ([]string, bool) {
	if !strings.HasPrefix(p, "/") {
		return nil, false
	}
	segs := strings.Split(p[1:], "/")
	for i, s := range segs {
		u, err := url.PathUnescape(s)
		if err != nil {
			return nil, false
		}
		segs[i] = u
	}
	return segs, true
}

// allow reports whether r uses method (GET also admits HEAD), and answers
// 405 otherwise.
func allow(w http.ResponseWriter, r *http.Request, method string) bool {
	if r.Method == method || (method == http.MethodGet && r.Method == http.MethodHead) {
		return true
	}
	allowed := method
	if method == http.MethodGet {
		allowed += ", " + http.MethodHead
	}
	w.Header().Set("Allow", allowed)
	writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed; use %s", r.Method, method))
	return false
}

func (h *handler) info(w http.ResponseWriter) {
	c := h.Server.Counts()
	writeJSON(w, http.StatusOK, Info{
		Version:      h.Version,
		StartedAt:    Time{h.Started},
		UptimeMS:     time.Since(h.Started).Milliseconds(),
		ShuttingDown: h.Server.ShuttingDown(),
		Counts:       Counts{Connections: h.Server.Sessions(), Locks: c.Locks, Waiters: c.Waiters},
		Config:       h.Settings,
		Cluster:      h.Cluster != nil,
	})
}

func (h *handler) locks(w http.ResponseWriter, r *http.Request) {
	var match func(string) bool
	if q := r.URL.Query(); q.Has("match") {
		p, err := glob.Compile(q.Get("match"))
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("bad match pattern: %v (at most %d bytes and %d runs of '*')",
				err, glob.MaxLen, glob.MaxStars))
			return
		}
		match = p.Match
	}
	if h.Authorizer != nil { // show only the locks the caller may read
		id, pattern := caller(r).Identity, match
		match = func(name string) bool {
			return (pattern == nil || pattern(name)) && h.Authorizer.AllowAdmin(id, acl.ActionRead, name)
		}
	}
	limit, offset, ok := page(w, r)
	if !ok {
		return
	}
	waiters, _, ok := waiterPage(w, r)
	if !ok {
		return
	}
	if limit > 0 {
		h.pagedLocks(w, match, limit, offset, waiters)
		return
	}
	list := LockList{Locks: []Lock{}}
	var all []server.LockInfo
	if p, ok := h.Server.(Pager); ok {
		// Only each lock's page of waiters is copied under the mutex.
		names := p.LockNames()
		if match != nil {
			names = slices.DeleteFunc(names, func(n string) bool { return !match(n) })
		}
		slices.Sort(names)
		all = p.Locks(names, waiters)
	} else {
		all = h.Server.Snapshot(match)
	}
	for _, l := range all {
		list.Locks = append(list.Locks, fromInfo(l, 0, waiters))
	}
	writeJSON(w, http.StatusOK, list)
}

func (h *handler) lock(w http.ResponseWriter, r *http.Request, name string) {
	limit, offset, ok := waiterPage(w, r)
	if !ok {
		return
	}
	l := h.current(name, offset, limit)
	if l == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("lock %q is not held", name))
		return
	}
	writeJSON(w, http.StatusOK, l)
}

func (h *handler) release(w http.ResponseWriter, r *http.Request, name string) {
	by := caller(r)
	q := r.URL.Query()
	var ref server.ClaimRef
	var err error
	which := ""
	if t := q.Get("token"); t != "" {
		if ref.Token, err = strconv.ParseUint(t, 10, 64); err != nil || ref.Token == 0 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("token %q: want a positive decimal number", t))
			return
		}
		which = "token " + t
	}
	if c := q.Get("claim"); c != "" {
		sess, claim, perr := ParseClaimRef(c)
		if perr != nil {
			writeError(w, http.StatusBadRequest, perr.Error())
			return
		}
		ref.Session, ref.Claim = server.SessionID(sess), server.ClaimID(claim)
		which = strings.TrimPrefix(which+" claim "+c, " ")
	}
	if which == "" {
		err = h.Server.ForceReleaseBy(name, by)
	} else {
		err = h.Server.ForceReleaseClaimBy(name, ref, by)
	}
	if err != nil {
		h.opError(w, err, name, which)
		return
	}
	h.invalidate()
	h.Logger.Warn("admin: lock force-released", "lock", name, "holder", which, "admin_identity", by.Identity, "admin_addr", by.Addr)
	writeJSON(w, http.StatusOK, Released{Released: name, Lock: h.current(name, 0, DefaultWaiterPage)})
}

func (h *handler) kick(w http.ResponseWriter, r *http.Request, name, waiter string) {
	by := caller(r)
	var err error
	if sess, claim, perr := ParseClaimRef(waiter); perr == nil {
		err = h.Server.KickClaimBy(name, server.ClaimRef{Session: server.SessionID(sess), Claim: server.ClaimID(claim)}, by)
	} else {
		err = h.Server.KickBy(name, waiter, by)
	}
	if err != nil {
		h.opError(w, err, name, waiter)
		return
	}
	h.invalidate()
	h.Logger.Warn("admin: waiter kicked", "lock", name, "waiter", waiter, "admin_identity", by.Identity, "admin_addr", by.Addr)
	writeJSON(w, http.StatusOK, Kicked{Kicked: waiter, Lock: h.current(name, 0, DefaultWaiterPage)})
}

// current describes lock name with the waiters [offset, offset+limit)
// of its queue; nil when nobody holds or waits for it. A Pager copies
// only that page under the server's mutex.
func (h *handler) current(name string, offset, limit int) *Lock {
	var out Lock
	if p, ok := h.Server.(Pager); ok {
		l, ok := p.LockPage(name, offset, limit)
		if !ok {
			return nil
		}
		out = fromInfo(l, 0, limit)
	} else {
		l, ok := h.Server.Lock(name)
		if !ok {
			return nil
		}
		out = fromInfo(l, offset, limit)
	}
	out.WaitersOffset = offset
	return &out
}

func (h *handler) opError(w http.ResponseWriter, err error, name, addr string) {
	switch {
	case errors.Is(err, server.ErrNoLock):
		writeError(w, http.StatusNotFound, fmt.Sprintf("lock %q is not held", name))
	case errors.Is(err, server.ErrNoWaiter):
		writeError(w, http.StatusNotFound, fmt.Sprintf("lock %q has no waiter %s", name, addr))
	case errors.Is(err, server.ErrNoHolder):
		writeError(w, http.StatusNotFound, fmt.Sprintf("lock %q has no holder %s", name, addr))
	case errors.Is(err, server.ErrManyHolders):
		writeError(w, http.StatusConflict, fmt.Sprintf("lock %q has several holders: name one with ?token=T or ?claim=SESSION/CLAIM", name))
	default:
		writeError(w, http.StatusInternalServerError, err.Error())
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, ErrorBody{Error: msg})
}
