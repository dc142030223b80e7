// Package ops is baton's operational HTTP surface for monitoring systems:
// Prometheus metrics (/metrics), health probes (/healthz, /readyz), and
// the structured logger of 'baton serve'.
//
// Metrics attach to the server through its Observer hook; the lock table
// knows nothing of them.
package ops

import (
	"net/http"
)

// HealthChecker reports whether the server has begun shutting down.
// *server.Server is one.
type HealthChecker interface {
	ShuttingDown() bool
}

// ReadinessCheck returns an error while the server should not receive
// traffic, such as a stalled audit log (audit.Logger.Stalled).
type ReadinessCheck func() error

// Handler serves the ops endpoints:
//
//	GET /metrics   the metrics of m (omitted when m is nil)
//	GET /healthz   liveness: 200 "ok", 503 from the first moment of shutdown
//	GET /readyz    readiness: the same, and 503 while a check fails
//
// Both probes turn 503 together when shutdown begins, so load balancers
// and orchestrators stop sending clients at once, while the handler keeps
// answering until the caller closes the HTTP server after the protocol
// side has closed every session. Only /readyz consults checks: a stalled
// audit log is no reason to restart the process and drop every lock.
func Handler(m *Metrics, health HealthChecker, checks ...ReadinessCheck) http.Handler {
	mux := http.NewServeMux()
	if m != nil {
		mux.Handle("GET /metrics", m.Handler())
	}
	answer := func(w http.ResponseWriter, code int, msg string) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(code)
		w.Write([]byte(msg + "\n"))
	}
	probe := func(ready bool) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if health != nil && health.ShuttingDown() {
				answer(w, http.StatusServiceUnavailable, "shutting down")
				return
			}
			if ready {
				for _, c := range checks {
					if err := c(); err != nil {
						answer(w, http.StatusServiceUnavailable, err.Error())
						return
					}
				}
			}
			answer(w, http.StatusOK, "ok")
		}
	}
	mux.HandleFunc("GET /healthz", probe(false))
	mux.HandleFunc("GET /readyz", probe(true))
	return mux
}
