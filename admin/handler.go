// Package admin is baton's administrative HTTP API and its Go client:
// introspection of locks and queues, force-release of an owner and
// removal ("kick") of a waiter.
//
//	GET    /api/info                                   version, uptime, configuration, counts
//	GET    /api/locks[?match=GLOB]                     every lock with an owner or a queue
//	GET    /api/locks/{name}                           one lock: holder and waiters in FIFO order
//	POST   /api/locks/{name}/release                   force-release: the owner gets ERROR 0x02
//	DELETE /api/locks/{name}/waiters/{remote_addr}     kick a waiter: it gets ERROR 0x02
//
// Path segments are URL-encoded, so a name containing '/' is written with
// %2F. Errors are JSON bodies {"error": "..."}: 404 for an unknown lock or
// waiter, 405 for a wrong method, 400 for a bad request.
//
// The API has no authentication of its own: serve it on a loopback
// address or behind something that authenticates. Cross-origin browser
// requests that change state are refused, so a web page cannot use a
// browser on the same host to release locks.
package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/batonlock/baton/internal/glob"
	"github.com/batonlock/baton/internal/locktable"
)

// Backend is the server the API inspects and steers. *server.Server is
// one.
type Backend interface {
	Snapshot(match func(name string) bool) []locktable.LockInfo
	Lock(name string) (locktable.LockInfo, bool)
	Counts() locktable.Counts
	Sessions() int
	ForceRelease(name string) error
	Kick(name, addr string) error
	ShuttingDown() bool
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
}

type handler struct{ Config }

// Handler returns the admin API.
func Handler(cfg Config) http.Handler {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Settings == nil {
		cfg.Settings = map[string]string{}
	}
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusForbidden, "cross-origin request refused")
	}))
	return cop.Handler(&handler{cfg})
}

// ServeHTTP routes on the escaped path, segment by segment, so that an
// encoded '/' (%2F) stays inside its segment and names like "a//b" or ".."
// are never cleaned into other paths.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	segs, ok := splitPath(r.URL.EscapedPath())
	if !ok || len(segs) < 2 || segs[0] != "api" {
		writeError(w, http.StatusNotFound, "no such endpoint")
		return
	}
	switch {
	case len(segs) == 2 && segs[1] == "info":
		if allow(w, r, http.MethodGet) {
			h.info(w)
		}
	case len(segs) == 2 && segs[1] == "locks":
		if allow(w, r, http.MethodGet) {
			h.locks(w, r)
		}
	case len(segs) == 3 && segs[1] == "locks":
		if allow(w, r, http.MethodGet) {
			h.lock(w, segs[2])
		}
	case len(segs) == 4 && segs[1] == "locks" && segs[3] == "release":
		if allow(w, r, http.MethodPost) {
			h.release(w, r, segs[2])
		}
	case len(segs) == 5 && segs[1] == "locks" && segs[3] == "waiters":
		if allow(w, r, http.MethodDelete) {
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
	list := LockList{Locks: []Lock{}}
	for _, l := range h.Server.Snapshot(match) {
		list.Locks = append(list.Locks, fromInfo(l))
	}
	writeJSON(w, http.StatusOK, list)
}

func (h *handler) lock(w http.ResponseWriter, name string) {
	l, ok := h.Server.Lock(name)
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("lock %q is not held", name))
		return
	}
	writeJSON(w, http.StatusOK, fromInfo(l))
}

func (h *handler) release(w http.ResponseWriter, r *http.Request, name string) {
	if err := h.Server.ForceRelease(name); err != nil {
		h.opError(w, err, name, "")
		return
	}
	h.Logger.Warn("admin: lock force-released", "lock", name, "admin_addr", r.RemoteAddr)
	writeJSON(w, http.StatusOK, Released{Released: name, Lock: h.current(name)})
}

func (h *handler) kick(w http.ResponseWriter, r *http.Request, name, addr string) {
	if err := h.Server.Kick(name, addr); err != nil {
		h.opError(w, err, name, addr)
		return
	}
	h.Logger.Warn("admin: waiter kicked", "lock", name, "remote_addr", addr, "admin_addr", r.RemoteAddr)
	writeJSON(w, http.StatusOK, Kicked{Kicked: addr, Lock: h.current(name)})
}

func (h *handler) current(name string) *Lock {
	if l, ok := h.Server.Lock(name); ok {
		out := fromInfo(l)
		return &out
	}
	return nil
}

func (h *handler) opError(w http.ResponseWriter, err error, name, addr string) {
	switch {
	case errors.Is(err, locktable.ErrNoLock):
		writeError(w, http.StatusNotFound, fmt.Sprintf("lock %q is not held", name))
	case errors.Is(err, locktable.ErrNoWaiter):
		writeError(w, http.StatusNotFound, fmt.Sprintf("lock %q has no waiter %s", name, addr))
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
