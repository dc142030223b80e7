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

// Handler serves the ops endpoints:
//
//	GET /metrics   the metrics of m (omitted when m is nil)
//	GET /healthz   liveness: 200 "ok", 503 from the first moment of shutdown
//	GET /readyz    readiness: the same
//
// Both probes turn 503 together when shutdown begins, so load balancers
// and orchestrators stop sending clients at once, while the handler keeps
// answering until the caller closes the HTTP server after the protocol
// side has closed every session.
func Handler(m *Metrics, health HealthChecker) http.Handler {
	mux := http.NewServeMux()
	if m != nil {
		mux.Handle("GET /metrics", m.Handler())
	}
	probe := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if health != nil && health.ShuttingDown() {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte("shutting down\n"))
			return
		}
		w.Write([]byte("ok\n"))
	}
	mux.HandleFunc("GET /healthz", probe)
	mux.HandleFunc("GET /readyz", probe)
	return mux
}
