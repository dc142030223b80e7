package ops_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/opstest"
	"github.com/batonlock/baton/ops"
	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// scrape fetches /metrics and returns every sample keyed by its series as
// the text format prints it, for example `baton_releases_total{reason="force"}`.
func scrape(t *testing.T, base string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("bad sample line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func checkSamples(t *testing.T, got map[string]float64, want map[string]float64) {
	t.Helper()
	for series, v := range want {
		g, ok := got[series]
		if !ok {
			t.Errorf("%s: missing from /metrics", series)
		} else if g != v {
			t.Errorf("%s = %v, want %v", series, g, v)
		}
	}
}

type fixture struct {
	srv     *server.Server
	rec     *opstest.Recorder
	addr    string // protocol
	opsURL  string
	metrics *ops.Metrics
}

func start(t *testing.T) *fixture {
	f := &fixture{srv: &server.Server{Logger: slog.New(slog.DiscardHandler)}, rec: &opstest.Recorder{}}
	f.metrics = ops.NewMetrics(ops.MetricsConfig{Source: f.srv, Version: "test"})
	f.srv.Observer = server.Observers{f.metrics, f.rec}
	f.addr = opstest.StartServer(t, f.srv)
	hs := httptest.NewServer(ops.Handler(f.metrics, f.srv))
	t.Cleanup(hs.Close)
	f.opsURL = hs.URL
	return f
}

// TestMetricsScenario drives a scripted scenario over raw protocol bytes
// and checks the exact value of every baton counter afterwards.
func TestMetricsScenario(t *testing.T) {
	f := start(t)
	lease := 10 * time.Second

	a := opstest.Dial(t, f.addr)
	a.Acquire("a", lease)
	a.Expect(protocol.TypeAcquired, 0)
	b := opstest.Dial(t, f.addr)
	b.Acquire("a", lease)
	b.Expect(protocol.TypeWaiting, 0)
	a.Heartbeat()
	a.Expect(protocol.TypeAcquired, 0)
	a.Heartbeat()
	a.Expect(protocol.TypeAcquired, 0)
	b.Heartbeat()
	b.Expect(protocol.TypeWaiting, 0)

	c := opstest.Dial(t, f.addr) // HEARTBEAT first
	c.Heartbeat()
	c.Expect(protocol.TypeError, protocol.CodeFirstNotAcquire)
	c.Close()
	d := opstest.Dial(t, f.addr) // wrong version
	d.Send(protocol.AppendAcquire(nil, protocol.Acquire{Version: 2, LeaseMS: 1000, Name: "x"}))
	d.Expect(protocol.TypeError, protocol.CodeUnsupportedVersion)
	d.Close()
	e := opstest.Dial(t, f.addr) // owner of "b", then a duplicate ACQUIRE
	e.Acquire("b", lease)
	e.Expect(protocol.TypeAcquired, 0)
	e.Acquire("b", lease)
	e.Expect(protocol.TypeError, protocol.CodeDuplicateAcquire)
	e.Close()

	a.Close() // B is promoted
	b.Expect(protocol.TypeAcquired, 0)
	g := opstest.Dial(t, f.addr) // waits, then gives up
	g.Acquire("a", lease)
	g.Expect(protocol.TypeWaiting, 0)
	g.Close()

	// A, C, D, E and G are gone; B holds "a".
	f.rec.WaitCount(t, server.EventDisconnected, 5)
	f.rec.WaitCount(t, server.EventErrorSent, 3)
	checkSamples(t, scrape(t, f.opsURL), map[string]float64{
		"baton_connections_active": 1,
		"baton_locks_held":         1,
		"baton_waiters":            0,
	})

	b.Close()
	f.rec.WaitCount(t, server.EventDisconnected, 6)
	got := scrape(t, f.opsURL)
	checkSamples(t, got, map[string]float64{
		"baton_connections_active":                      0,
		"baton_locks_held":                              0,
		"baton_waiters":                                 0,
		"baton_connections_accepted_total":              6,
		"baton_acquires_total":                          3, // A, E, B
		`baton_releases_total{reason="graceful"}`:       2, // A, B
		`baton_releases_total{reason="protocol_error"}`: 1, // E
		`baton_releases_total{reason="expired"}`:        0,
		`baton_releases_total{reason="io_timeout"}`:     0,
		`baton_releases_total{reason="force"}`:          0,
		`baton_releases_total{reason="shutdown"}`:       0,
		`baton_dequeues_total{reason="graceful"}`:       1, // G
		`baton_dequeues_total{reason="kick"}`:           0,
		`baton_protocol_errors_total{code="0x10"}`:      1,
		`baton_protocol_errors_total{code="0x11"}`:      1,
		`baton_protocol_errors_total{code="0x12"}`:      1,
		`baton_protocol_errors_total{code="0x18"}`:      0,
		"baton_heartbeats_total":                        3,
		"baton_accept_errors_total":                     0,
		"baton_acl_denials_total":                       0,
		"baton_tls_handshake_errors_total":              0,
		"baton_audit_dropped_total":                     0,
		"baton_wait_seconds_count":                      3, // one per grant
		"baton_hold_seconds_count":                      3, // one per release
		`baton_wait_seconds_bucket{le="+Inf"}`:          3,
		`baton_build_info{version="test"}`:              1,
	})
	if _, ok := got[`baton_releases_total{reason="kick"}`]; ok {
		t.Error(`baton_releases_total has a "kick" series; a kick never releases a lock`)
	}
	if _, ok := got[`baton_protocol_errors_total{code="0x01"}`]; ok {
		t.Error("server conditions (0x01) must not count as protocol errors")
	}
	// B waited from its ACQUIRE until A closed: a positive wait is recorded.
	if got["baton_wait_seconds_sum"] <= 0 {
		t.Errorf("baton_wait_seconds_sum = %v, want > 0", got["baton_wait_seconds_sum"])
	}
	for _, name := range []string{"go_goroutines", "process_open_fds"} {
		if _, ok := got[name]; !ok {
			t.Errorf("%s missing: standard collectors not registered", name)
		}
	}
}

func TestBuckets(t *testing.T) {
	b := ops.DurationBuckets
	if len(b) != 20 || b[0] != 0.0001 || b[len(b)-1] < 3599.99 || b[len(b)-1] > 3600.01 {
		t.Fatalf("buckets = %v, want 20 from 100µs to 1h", b)
	}
	// The le labels read as written: no float noise such as
	// 3600.0000000000023.
	for i, v := range b {
		if l := strconv.FormatFloat(v, 'f', -1, 64); len(strings.TrimLeft(strings.Replace(l, ".", "", 1), "0")) > 4 {
			t.Errorf("bucket %d has the label le=%q", i, l)
		}
		if i > 0 && v <= b[i-1] {
			t.Errorf("buckets not increasing at %d: %v", i, b)
		}
	}
}

// TestProbesDuringShutdown: both probes turn 503 at the first moment of
// shutdown, while sessions are still being closed and the ops endpoints
// still answer.
func TestProbesDuringShutdown(t *testing.T) {
	f := start(t)
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, body := get(t, f.opsURL+p); code != 200 || body != "ok\n" {
			t.Fatalf("GET %s = %d %q before shutdown, want 200 ok", p, code, body)
		}
	}
	owner := opstest.Dial(t, f.addr)
	owner.Acquire("x", 10*time.Second)
	owner.Expect(protocol.TypeAcquired, 0)
	waiter := opstest.Dial(t, f.addr)
	waiter.Acquire("x", 10*time.Second)
	waiter.Expect(protocol.TypeWaiting, 0)

	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- f.srv.Shutdown(context.Background()) }()
	owner.Expect(protocol.TypeError, protocol.CodeShuttingDown)
	waiter.Expect(protocol.TypeError, protocol.CodeShuttingDown)

	// Neither client hangs up, so the protocol side stays open for the
	// linger period: Shutdown has not returned yet.
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, _ := get(t, f.opsURL+p); code != http.StatusServiceUnavailable {
			t.Errorf("GET %s = %d during shutdown, want 503", p, code)
		}
	}
	m := scrape(t, f.opsURL)
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned (%v) after %v, before the clients hung up; the check above did not run during shutdown", err, time.Since(start))
	default:
	}
	if m["baton_connections_active"] != 2 {
		t.Errorf("baton_connections_active = %v during shutdown, want 2", m["baton_connections_active"])
	}
	owner.Close()
	waiter.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	checkSamples(t, scrape(t, f.opsURL), map[string]float64{
		"baton_acquires_total":                    1, // the waiter was never promoted
		`baton_releases_total{reason="shutdown"}`: 1,
		`baton_dequeues_total{reason="shutdown"}`: 1,
		"baton_connections_active":                0,
	})
	if code, _ := get(t, f.opsURL+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("GET /readyz = %d after shutdown, want 503", code)
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestProbeMethod(t *testing.T) {
	hs := httptest.NewServer(ops.Handler(nil, nil))
	defer hs.Close()
	resp, err := http.Post(hs.URL+"/readyz", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /readyz = %d, want 405", resp.StatusCode)
	}
	if code, _ := get(t, hs.URL+"/metrics"); code != http.StatusNotFound {
		t.Errorf("GET /metrics without metrics = %d, want 404", code)
	}
}

func TestNewLogger(t *testing.T) {
	var buf bytes.Buffer
	l, err := ops.NewLogger(&buf, "warn", "json")
	if err != nil {
		t.Fatal(err)
	}
	l.Info("hidden")
	l.Warn("shown", "k", 1)
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("one JSON line expected, got %q: %v", buf.String(), err)
	}
	if rec["msg"] != "shown" || rec["level"] != "WARN" {
		t.Errorf("record = %v", rec)
	}
	ts, _ := rec["time"].(string)
	if tm, err := time.Parse(time.RFC3339Nano, ts); err != nil || !strings.HasSuffix(ts, "Z") || tm.IsZero() {
		t.Errorf("time = %q, want RFC 3339 in UTC (Z)", ts)
	}

	buf.Reset()
	l, _ = ops.NewLogger(&buf, "debug", "text")
	l.Debug("hello")
	if !strings.Contains(buf.String(), "Z level=DEBUG msg=hello") {
		t.Errorf("text record = %q", buf.String())
	}
	for _, bad := range [][2]string{{"verbose", "text"}, {"info", "yaml"}, {"INFO", "text"}} {
		if _, err := ops.NewLogger(&buf, bad[0], bad[1]); err == nil {
			t.Errorf("NewLogger(%q, %q) accepted", bad[0], bad[1])
		}
	}
}

// TestObserveRareEvents feeds events a loopback test cannot easily cause
// (accept failures, TLS handshakes, ACL refusals) straight to Observe.
func TestObserveRareEvents(t *testing.T) {
	var dropped uint64 = 5
	m := ops.NewMetrics(ops.MetricsConfig{AuditDropped: func() uint64 { return dropped }})
	hs := httptest.NewServer(ops.Handler(m, nil))
	defer hs.Close()
	for _, e := range []server.Event{
		{Kind: server.EventAcceptError},
		{Kind: server.EventAcceptError},
		{Kind: server.EventTLSHandshakeError},
		{Kind: server.EventDenied},
		{Kind: server.EventErrorSent, Code: protocol.CodeNotAuthorized},
		{Kind: server.EventErrorSent, Code: protocol.CodeClosedByAdmin}, // a server condition: not counted
		{Kind: server.EventErrorSent, Code: 0x7f},                       // unknown client error: its own series
		{Kind: server.EventReleased, Reason: server.ReasonIOTimeout, Held: 2 * time.Second},
		{Kind: server.EventDequeued, Reason: server.ReasonExpired},
		{Kind: server.EventShutdown},
		{Kind: server.EventDisconnected},
		{Kind: server.EventLimit, Action: server.LimitWaiters},
		{Kind: server.EventLimit, Action: server.LimitWaiters},
		{Kind: server.EventLimit, Action: server.LimitKeptClaims},
	} {
		m.Observe(e)
	}
	checkSamples(t, scrape(t, hs.URL), map[string]float64{
		"baton_accept_errors_total":                           2,
		"baton_tls_handshake_errors_total":                    1,
		"baton_acl_denials_total":                             1,
		`baton_protocol_errors_total{code="0x18"}`:            1,
		`baton_protocol_errors_total{code="0x7f"}`:            1,
		`baton_releases_total{reason="io_timeout"}`:           1,
		`baton_dequeues_total{reason="expired"}`:              1,
		"baton_hold_seconds_sum":                              2,
		`baton_hold_seconds_bucket{le="2.37"}`:                1,
		"baton_audit_dropped_total":                           5,
		"baton_connections_active":                            0, // no Source
		"baton_acquires_total":                                0,
		`baton_limit_refusals_total{limit="waiters"}`:         2,
		`baton_limit_refusals_total{limit="kept_claims"}`:     1,
		`baton_limit_refusals_total{limit="session_claims"}`:  0, // pre-created
		`baton_limit_refusals_total{limit="client_sessions"}`: 0,
	})
}

// TestReadinessChecks: a failing check turns /readyz to 503 with its
// message and leaves /healthz alone; /readyz recovers with the check.
func TestReadinessChecks(t *testing.T) {
	var mu sync.Mutex
	var failure error
	check := func() error {
		mu.Lock()
		defer mu.Unlock()
		return failure
	}
	hs := httptest.NewServer(ops.Handler(nil, nil, check))
	defer hs.Close()
	if code, body := get(t, hs.URL+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz = %d %q with the check passing", code, body)
	}
	mu.Lock()
	failure = errors.New("audit log stalled: records have waited 12s")
	mu.Unlock()
	if code, body := get(t, hs.URL+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "audit log stalled") {
		t.Errorf("/readyz = %d %q, want 503 with the check's message", code, body)
	}
	if code, body := get(t, hs.URL+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d %q: readiness checks must not fail liveness", code, body)
	}
	mu.Lock()
	failure = nil
	mu.Unlock()
	if code, _ := get(t, hs.URL+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz = %d after the check recovered", code)
	}
}
