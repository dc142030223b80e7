package ops

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// Source is what the gauges read at scrape time. *server.Server is one.
type Source interface {
	Counts() server.Counts
	Sessions() int
}

// MetricsConfig configures NewMetrics.
type MetricsConfig struct {
	// Source feeds the connection, lock and waiter gauges; nil reports 0.
	Source Source
	// AuditDropped returns the number of audit events dropped so far; nil
	// reports 0 (no audit log).
	AuditDropped func() uint64
	// AuditWaiting returns how long audit records have waited for a
	// successful write (audit.Logger.Waiting); nil reports 0.
	AuditWaiting func() time.Duration
	// Version is exported as the label of baton_build_info.
	Version string
}

// Metrics is the Prometheus instrumentation of a baton server. It is a
// server.Observer: install it in server.Server.Observer. Every update is
// an atomic operation, so Observe never blocks. Its metrics live in a
// private registry, not the global one.
type Metrics struct {
	reg *prometheus.Registry

	acquires       prometheus.Counter
	releases       *prometheus.CounterVec
	dequeues       *prometheus.CounterVec
	protocolErrors *prometheus.CounterVec
	refusals       *prometheus.CounterVec
	reassertions   *prometheus.CounterVec
	rangeRefusals  *prometheus.CounterVec
	rangeGrants    prometheus.Counter
	rangeReleases  *prometheus.CounterVec
	rangeRevoked   *prometheus.CounterVec
	limitRefusals  *prometheus.CounterVec
	sessionsKept   prometheus.Counter
	accepted       prometheus.Counter
	acceptErrors   prometheus.Counter
	heartbeats     prometheus.Counter
	aclDenials     prometheus.Counter
	tlsErrors      prometheus.Counter
	wait           prometheus.Histogram
	hold           prometheus.Histogram

	// The pre-created children, looked up without the vectors' locks.
	// Read-only after NewMetrics.
	releasesBy map[server.Reason]prometheus.Counter
	dequeuesBy map[server.Reason]prometheus.Counter
	errorsBy   map[protocol.Code]prometheus.Counter
}

// DurationBuckets are the buckets of baton_wait_seconds and
// baton_hold_seconds: 20 exponential steps from 100 µs to 1 h, rounded to
// 4 significant digits so that their le labels read as written
// ("3600", not "3600.0000000000023").
var DurationBuckets = roundBuckets(prometheus.ExponentialBucketsRange(0.0001, 3600, 20))

// roundBuckets rounds each bound to 4 significant digits.
func roundBuckets(b []float64) []float64 {
	for i, v := range b {
		b[i], _ = strconv.ParseFloat(strconv.FormatFloat(v, 'g', 4, 64), 64)
	}
	return b
}

// NewMetrics creates the metrics and registers them, with the standard Go
// runtime and process collectors, in a new private registry.
func NewMetrics(cfg MetricsConfig) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		acquires: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "baton_acquires_total",
			Help: "Locks granted (first grants and promotions); equals the fencing tokens issued.",
		}),
		releases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_releases_total",
			Help: "Locks that stopped being owned, by reason.",
		}, []string{"reason"}),
		dequeues: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_dequeues_total",
			Help: "Waiters that left a queue without being granted the lock, by reason.",
		}, []string{"reason"}),
		protocolErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_protocol_errors_total",
			Help: "ERROR frames with a client-error code (0x10 and above) sent, by code.",
		}, []string{"code"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_claims_refused_total",
			Help: "Version 2 CLAIMs answered REFUSED (claim level; the session lives on), by code.",
		}, []string{"code"}),
		reassertions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_reassertions_total",
			Help: "Version 2 re-assertions, by result: adopted (from a kept session), installed (on a name taken over, with its old token), requeued, refused (0x04), stale_ring (0x05), retry (0x03), relayed (to the name's owner).",
		}, []string{"result"}),
		rangeRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_range_refused_total",
			Help: "Version 2 RANGE sets refused by a limit, by reason: waiting_per_session, waiting_per_owner, owners_per_session (answered 0x0e), search_bound (the deadlock search reached its bound; answered 0x08).",
		}, []string{"reason"}),
		rangeGrants: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "baton_range_grants_total",
			Help: "Range locks (fcntl byte ranges and flock) granted, at once or after waiting.",
		}),
		rangeReleases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_range_releases_total",
			Help: "Range-lock releases (one per request, or per owner and key, never per byte), by reason: unlock, release (file closed), convert (flock conversion), session (session ended), force (administrator), revoked (ACL reload).",
		}, []string{"reason"}),
		rangeRevoked: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_range_revocations_total",
			Help: "Held range locks (per owner and key) and waiting range requests ended by an administrator (cause admin) or a reloaded ACL (cause acl).",
		}, []string{"cause"}),
		limitRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_limit_refusals_total",
			Help: "Requests refused by a server limit, by limit: session_claims and waiters (a CLAIM or ACQUIRE answered 0x07), client_sessions (a session answered ERROR 0x07), kept_sessions and kept_claims (a resumable session not kept after its connection broke).",
		}, []string{"limit"}),
		sessionsKept: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "baton_sessions_kept_total",
			Help: "Resumable version 2 sessions kept, with their claims, after their connection broke.",
		}),
		accepted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "baton_connections_accepted_total",
			Help: "Protocol connections accepted.",
		}),
		acceptErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "baton_accept_errors_total",
			Help: "Failed accepts on the protocol port (for example out of file descriptors); the server backs off and retries.",
		}),
		heartbeats: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "baton_heartbeats_total",
			Help: "Valid HEARTBEAT (version 1) and PING (version 2) frames received.",
		}),
		aclDenials: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "baton_acl_denials_total",
			Help: "ACQUIREs and version 2 CLAIMs refused by the access-control list.",
		}),
		tlsErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "baton_tls_handshake_errors_total",
			Help: "Failed TLS handshakes on the protocol port.",
		}),
		wait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "baton_wait_seconds",
			Help:    "Time from ACQUIRE to grant, observed at every grant (0 when granted at once).",
			Buckets: DurationBuckets,
		}),
		hold: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "baton_hold_seconds",
			Help:    "Time from grant to release, observed at every release.",
			Buckets: DurationBuckets,
		}),
	}
	// Pre-create every label value, so that rate() and alerts see a zero
	// series before the first event rather than no series at all.
	m.releasesBy = map[server.Reason]prometheus.Counter{}
	m.dequeuesBy = map[server.Reason]prometheus.Counter{}
	m.errorsBy = map[protocol.Code]prometheus.Counter{}
	for _, r := range server.Reasons {
		if r != server.ReasonKick { // a kick removes a waiter, never an owner
			m.releasesBy[r] = m.releases.WithLabelValues(r.String())
		}
		if r != server.ReasonForce { // a force-release removes an owner
			m.dequeuesBy[r] = m.dequeues.WithLabelValues(r.String())
		}
	}
	for _, c := range protocol.Codes {
		if !c.Temporary() {
			m.errorsBy[c] = m.protocolErrors.WithLabelValues(codeLabel(c))
		}
	}
	for _, r := range server.ReassertResults {
		m.reassertions.WithLabelValues(r)
	}
	for _, r := range server.RangeRefusals {
		m.rangeRefusals.WithLabelValues(r)
	}
	for _, r := range server.RangeReleaseReasons {
		m.rangeReleases.WithLabelValues(r)
	}
	for _, c := range server.RangeRevokeCauses {
		m.rangeRevoked.WithLabelValues(c)
	}
	for _, l := range server.Limits {
		m.limitRefusals.WithLabelValues(l)
	}

	src := cfg.Source
	gauge := func(name, help string, f func(Source) int) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 {
			if src == nil {
				return 0
			}
			return float64(f(src))
		})
	}
	auditDropped := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "baton_audit_dropped_total",
		Help: "Audit events lost because the audit buffer was full or the write failed.",
	}, func() float64 {
		if cfg.AuditDropped == nil {
			return 0
		}
		return float64(cfg.AuditDropped())
	})
	auditWaiting := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "baton_audit_waiting_seconds",
		Help: "How long the oldest unwritten audit record has waited for a successful write; 0 when none waits. Grows while the audit sink is stalled.",
	}, func() float64 {
		if cfg.AuditWaiting == nil {
			return 0
		}
		return cfg.AuditWaiting().Seconds()
	})
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "baton_build_info",
		Help:        "Always 1; the label carries the server version.",
		ConstLabels: prometheus.Labels{"version": cfg.Version},
	})
	buildInfo.Set(1)

	if ps, ok := src.(ProtocolSource); ok {
		m.reg.MustRegister(protocolCollector{ps})
	}
	if rs, ok := src.(RangeSource); ok {
		rangeGauge := func(name, help string, f func(server.RangeCount) int) prometheus.Collector {
			return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return float64(f(rs.RangeCounts())) })
		}
		m.reg.MustRegister(
			rangeGauge("baton_range_keys", "Range-lock keys (per namespace: fcntl or flock) with a holder or a waiting request.",
				func(c server.RangeCount) int { return c.Keys }),
			rangeGauge("baton_range_locks_held", "Held byte ranges of POSIX and flock locks, over every key and owner.",
				func(c server.RangeCount) int { return c.Held }),
			rangeGauge("baton_range_waiting", "Waiting range-lock requests.",
				func(c server.RangeCount) int { return c.Waiting }),
		)
	}
	if ws, ok := src.(WatchSource); ok {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "baton_watches",
			Help: "Watches of lock names by version 2 sessions (docs/election.md).",
		}, func() float64 { return float64(ws.Watches()) }))
	}
	if ks, ok := src.(KeptSource); ok {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "baton_sessions_kept",
			Help: "Resumable version 2 sessions whose connection broke, kept with their claims until their lease passes or a new session re-asserts them.",
		}, func() float64 { return float64(ks.KeptSessions()) }))
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildInfo,
		gauge("baton_connections_active", "Open protocol connections.", func(s Source) int { return s.Sessions() }),
		gauge("baton_locks_held", "Locks that have an owner.", func(s Source) int { return s.Counts().Locks }),
		gauge("baton_waiters", "Claims waiting in a queue.", func(s Source) int { return s.Counts().Waiters }),
		m.acquires, m.releases, m.dequeues, m.protocolErrors, m.refusals, m.reassertions, m.rangeRefusals, m.limitRefusals, m.sessionsKept,
		m.rangeGrants, m.rangeReleases, m.rangeRevoked,
		m.accepted, m.acceptErrors, m.heartbeats, m.aclDenials, m.tlsErrors,
		auditDropped, auditWaiting, m.wait, m.hold,
	)
	return m
}

func codeLabel(c protocol.Code) string { return fmt.Sprintf("0x%02x", uint8(c)) }

// Registry returns the private registry holding every metric.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in the Prometheus exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Observe updates the metrics for one server event. It only does atomic
// updates, so it is safe under the server's table lock.
func (m *Metrics) Observe(e server.Event) {
	switch e.Kind {
	case server.EventConnected:
		m.accepted.Inc()
	case server.EventAcceptError:
		m.acceptErrors.Inc()
	case server.EventTLSHandshakeError:
		m.tlsErrors.Inc()
	case server.EventHeartbeat:
		m.heartbeats.Inc()
	case server.EventDenied:
		m.aclDenials.Inc()
	case server.EventErrorSent:
		if !e.Code.Temporary() {
			child(m.errorsBy, e.Code, m.protocolErrors, codeLabel(e.Code)).Inc()
		}
	case server.EventGranted:
		m.acquires.Inc()
		m.wait.Observe(e.Waited.Seconds())
	case server.EventReleased:
		child(m.releasesBy, e.Reason, m.releases, e.Reason.String()).Inc()
		m.hold.Observe(e.Held.Seconds())
	case server.EventDequeued:
		child(m.dequeuesBy, e.Reason, m.dequeues, e.Reason.String()).Inc()
	case server.EventRefused:
		m.refusals.WithLabelValues(codeLabel(e.Code)).Inc()
	case server.EventReasserted:
		m.reassertions.WithLabelValues(e.Action).Inc()
	case server.EventSessionKept:
		m.sessionsKept.Inc()
	case server.EventRangeRefused:
		m.rangeRefusals.WithLabelValues(e.Action).Inc()
	case server.EventLimit:
		m.limitRefusals.WithLabelValues(e.Action).Inc()
	case server.EventRangeGranted:
		m.rangeGrants.Inc()
	case server.EventRangeReleased:
		m.rangeReleases.WithLabelValues(e.Action).Inc()
	case server.EventRangeRevoked:
		m.rangeRevoked.WithLabelValues(e.Action).Inc()
	}
}

// child returns the pre-created counter for k, or the vector's child for
// a value that was not foreseen.
func child[K comparable](pre map[K]prometheus.Counter, k K, vec *prometheus.CounterVec, label string) prometheus.Counter {
	if c, ok := pre[k]; ok {
		return c
	}
	return vec.WithLabelValues(label)
}

// RangeSource is a Source that also counts its range locks;
// *server.Server is one. With it the metrics include baton_range_keys,
// baton_range_locks_held and baton_range_waiting.
type RangeSource interface {
	RangeCounts() server.RangeCount
}

// WatchSource is a Source that also counts its watches; *server.Server
// is one. With it the metrics include baton_watches.
type WatchSource interface {
	Watches() int
}

// KeptSource is a Source that also counts the resumable sessions kept
// after their connection broke; *server.Server is one. With it the
// metrics include baton_sessions_kept.
type KeptSource interface {
	KeptSessions() int
}

// ProtocolSource is a Source that also counts sessions and claims by
// protocol version; *server.Server is one. With it the metrics include
// baton_sessions{protocol} and baton_claims{protocol,state}.
type ProtocolSource interface {
	ProtocolCounts() (v1, v2 server.ProtocolCount)
}

var (
	sessionsDesc = prometheus.NewDesc("baton_sessions",
		"Open protocol sessions by protocol version (a version 1 connection is a session with one claim).",
		[]string{"protocol"}, nil)
	claimsDesc = prometheus.NewDesc("baton_claims",
		"Claims by protocol version and state: held (holding a lock) or queued (in a lock's queue).",
		[]string{"protocol", "state"}, nil)
)

// protocolCollector reads both gauges from one ProtocolCounts call per
// scrape, so they are consistent with each other.
type protocolCollector struct{ src ProtocolSource }

func (c protocolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- sessionsDesc
	ch <- claimsDesc
}

func (c protocolCollector) Collect(ch chan<- prometheus.Metric) {
	v1, v2 := c.src.ProtocolCounts()
	for _, p := range []struct {
		label string
		n     server.ProtocolCount
	}{{"1", v1}, {"2", v2}} {
		ch <- prometheus.MustNewConstMetric(sessionsDesc, prometheus.GaugeValue, float64(p.n.Sessions), p.label)
		ch <- prometheus.MustNewConstMetric(claimsDesc, prometheus.GaugeValue, float64(p.n.Held), p.label, "held")
		ch <- prometheus.MustNewConstMetric(claimsDesc, prometheus.GaugeValue, float64(p.n.Queued), p.label, "queued")
	}
}
