package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/admin"
	"github.com/batonlock/baton/internal/opstest"
	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

type fixture struct {
	srv    *server.Server
	rec    *opstest.Recorder
	addr   string // protocol
	url    string // admin API
	client *admin.Client
}

func start(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{rec: &opstest.Recorder{}}
	f.srv = &server.Server{Logger: slog.New(slog.DiscardHandler), Observer: f.rec}
	f.addr = opstest.StartServer(t, f.srv)
	hs := httptest.NewServer(admin.Handler(admin.Config{
		Server: f.srv, Version: "v-test", Started: time.Now().Add(-time.Minute),
		Settings: map[string]string{"listen": f.addr}, Logger: slog.New(slog.DiscardHandler),
	}))
	t.Cleanup(hs.Close)
	f.url = hs.URL
	c, err := admin.NewClient(strings.TrimPrefix(hs.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	f.client = c
	return f
}

// hold acquires name on a new connection and returns it.
func (f *fixture) hold(t *testing.T, name string) (*opstest.Conn, uint64) {
	t.Helper()
	c := opstest.Dial(t, f.addr)
	c.Acquire(name, 10*time.Second)
	return c, c.Expect(protocol.TypeAcquired, 0).Token
}

func (f *fixture) wait(t *testing.T, name string) *opstest.Conn {
	t.Helper()
	c := opstest.Dial(t, f.addr)
	c.Acquire(name, 10*time.Second)
	c.Expect(protocol.TypeWaiting, 0)
	return c
}

// call makes a raw request and decodes the JSON body into a generic value.
func call(t *testing.T, method, url string, hdr ...string) (int, http.Header, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q", method, url, ct)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s %s: body %q is not a JSON object: %v", method, url, b, err)
	}
	return resp.StatusCode, resp.Header, v
}

var timeRE = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)

// TestLockShape checks the exact JSON of one lock, fetched by a
// URL-encoded name containing '/'.
func TestLockShape(t *testing.T) {
	f := start(t)
	owner, tok := f.hold(t, "jobs/eu deploy")
	w1 := f.wait(t, "jobs/eu deploy")
	w2 := f.wait(t, "jobs/eu deploy")

	code, _, v := call(t, "GET", f.url+"/api/locks/jobs%2Feu%20deploy")
	if code != 200 {
		t.Fatalf("GET = %d %v", code, v)
	}
	if v["name"] != "jobs/eu deploy" || v["waiters_total"] != 2.0 || v["watchers"] != 0.0 || len(v) != 6 {
		t.Errorf("lock = %v", v)
	}
	h := v["holder"].(map[string]any)
	if h["remote_addr"] != owner.Addr() || h["identity"] != "" || h["lease_ms"] != 10000.0 || h["token"] != float64(tok) || len(h) != 9 ||
		h["protocol"] != 1.0 || h["claim"] != 0.0 || h["mode"] != "exclusive" || h["session"] == 0.0 {
		t.Errorf("holder = %v, want %s token %d", h, owner.Addr(), tok)
	}
	if hs := v["holders"].([]any); len(hs) != 1 || !reflect.DeepEqual(hs[0], v["holder"]) {
		t.Errorf("holders = %v, want [holder]", hs)
	}
	if s, _ := h["since"].(string); !timeRE.MatchString(s) {
		t.Errorf("since = %q, want RFC 3339 UTC with ms", h["since"])
	}
	ws := v["waiters"].([]any)
	if len(ws) != 2 {
		t.Fatalf("waiters = %v", ws)
	}
	for i, c := range []*opstest.Conn{w1, w2} {
		w := ws[i].(map[string]any)
		if w["remote_addr"] != c.Addr() || w["identity"] != "" || len(w) != 7 || w["protocol"] != 1.0 || w["mode"] != "exclusive" {
			t.Errorf("waiter %d = %v, want %s", i, w, c.Addr())
		}
		if s, _ := w["queued_at"].(string); !timeRE.MatchString(s) {
			t.Errorf("queued_at = %q", w["queued_at"])
		}
	}

	// The typed client agrees.
	l, err := f.client.Lock(context.Background(), "jobs/eu deploy")
	if err != nil {
		t.Fatal(err)
	}
	if l.Holder == nil || l.Holder.Token != tok || len(l.Waiters) != 2 || l.Waiters[1].RemoteAddr != w2.Addr() {
		t.Errorf("client Lock = %+v", l)
	}
	if d := time.Since(l.Holder.Since.Time); d < 0 || d > time.Minute {
		t.Errorf("since is %v ago", d)
	}
}

// TestNamesAndGlob: awkward names survive URL encoding, and ?match
// follows the glob rules.
func TestNamesAndGlob(t *testing.T) {
	f := start(t)
	names := []string{"jobs/nightly", "jobs/eu/deploy", "db", "é1", "a//b", "..", ".", "50%", "with space", "q?x", "JOBS/x", "a/"}
	for _, n := range names {
		f.hold(t, n)
	}
	ctx := context.Background()
	for _, n := range names {
		l, err := f.client.Lock(ctx, n)
		if err != nil || l.Name != n {
			t.Errorf("Lock(%q) = %q, %v", n, l.Name, err)
		}
	}
	for _, tt := range []struct {
		match string
		want  []string
	}{
		{"", slices.Sorted(slices.Values(names))},
		{"*", slices.Sorted(slices.Values(names))},
		{"jobs/*", []string{"jobs/eu/deploy", "jobs/nightly"}}, // '*' crosses '/', case sensitive
		{"*/deploy", []string{"jobs/eu/deploy"}},
		{"?1", []string{"é1"}}, // '?' is one rune, not one byte
		{"??", []string{"..", "a/", "db", "é1"}},
		{"jobs/?", nil},
		{"q?x", []string{"q?x"}},
		{"a/*", []string{"a/", "a//b"}},
		{"*%", []string{"50%"}},
		{"nothing*", nil},
	} {
		ls, err := f.client.Locks(ctx, tt.match)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, l := range ls {
			got = append(got, l.Name)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("match %q: got %q, want %q", tt.match, got, tt.want)
		}
	}
	// The raw shape: {"locks": [...]}, an empty list rather than null.
	code, _, v := call(t, "GET", f.url+"/api/locks?match=none")
	if code != 200 || v["locks"] == nil || len(v["locks"].([]any)) != 0 {
		t.Errorf("empty match: %d %v", code, v)
	}
	if code, _, v := call(t, "GET", f.url+"/api/locks?match=%FF"); code != 400 || v["error"] == "" {
		t.Errorf("invalid glob: %d %v", code, v)
	}
}

// TestReleaseAndKick: the owner and the kicked waiter see ERROR 0x02, the
// next waiter is promoted at once, the others keep their order.
func TestReleaseAndKick(t *testing.T) {
	f := start(t)
	ctx := context.Background()
	owner, tok := f.hold(t, "a/b")
	w1 := f.wait(t, "a/b")
	w2 := f.wait(t, "a/b")
	w3 := f.wait(t, "a/b")

	k, err := f.client.Kick(ctx, "a/b", w2.Addr())
	if err != nil {
		t.Fatal(err)
	}
	w2.Expect(protocol.TypeError, protocol.CodeClosedByAdmin)
	if k.Kicked != w2.Addr() || k.Lock == nil || len(k.Lock.Waiters) != 2 || k.Lock.Waiters[0].RemoteAddr != w1.Addr() || k.Lock.Waiters[1].RemoteAddr != w3.Addr() {
		t.Errorf("kick answer = %+v", k)
	}

	r, err := f.client.Release(ctx, "a/b")
	if err != nil {
		t.Fatal(err)
	}
	owner.Expect(protocol.TypeError, protocol.CodeClosedByAdmin)
	tok1 := w1.Expect(protocol.TypeAcquired, 0).Token
	if tok1 <= tok {
		t.Errorf("promoted with token %d after %d", tok1, tok)
	}
	if r.Released != "a/b" || r.Lock == nil || r.Lock.Holder.RemoteAddr != w1.Addr() || r.Lock.Holder.Token != tok1 || len(r.Lock.Waiters) != 1 {
		t.Errorf("release answer = %+v", r)
	}

	// Unknown lock and unknown waiter: 404, ErrNotFound.
	for _, err := range []error{
		func() error { _, err := f.client.Release(ctx, "nope"); return err }(),
		func() error { _, err := f.client.Kick(ctx, "nope", w3.Addr()); return err }(),
		func() error { _, err := f.client.Kick(ctx, "a/b", w2.Addr()); return err }(), // already gone
		func() error { _, err := f.client.Kick(ctx, "a/b", w1.Addr()); return err }(), // the owner is no waiter
		func() error { _, err := f.client.Lock(ctx, "nope"); return err }(),
	} {
		var ae *admin.Error
		if !errors.Is(err, admin.ErrNotFound) || !errors.As(err, &ae) || ae.Message == "" {
			t.Errorf("error = %v, want a 404 with a message", err)
		}
	}
	// Release of the last holder frees the lock: the answer's lock is null.
	w3.Close()
	f.rec.WaitCount(t, server.EventDequeued, 2)
	code, _, v := call(t, "POST", f.url+"/api/locks/a%2Fb/release")
	if code != 200 || v["lock"] != nil || v["released"] != "a/b" {
		t.Errorf("last release: %d %v", code, v)
	}
	w1.Expect(protocol.TypeError, protocol.CodeClosedByAdmin)
}

func TestErrors(t *testing.T) {
	f := start(t)
	f.hold(t, "x")
	for _, tt := range []struct {
		method, path string
		code         int
		allow        string
	}{
		{"GET", "/api/locks/x/release", 405, "POST"},
		{"POST", "/api/locks", 405, "GET, HEAD"},
		{"DELETE", "/api/locks/x", 405, "GET, HEAD"},
		{"PUT", "/api/info", 405, "GET, HEAD"},
		{"GET", "/api/locks/x/waiters/1.2.3.4:5", 405, "DELETE"},
		{"GET", "/api/nope", 404, ""},
		{"GET", "/", 404, ""},
		{"GET", "/api/locks/x/bogus", 404, ""},
		{"GET", "/api/locks/y", 404, ""},
		{"DELETE", "/api/locks/x/waiters/1.2.3.4:5", 404, ""},
	} {
		code, hdr, v := call(t, tt.method, f.url+tt.path)
		if code != tt.code || v["error"] == nil || v["error"] == "" {
			t.Errorf("%s %s = %d %v, want %d with an error", tt.method, tt.path, code, v, tt.code)
		}
		if hdr.Get("Allow") != tt.allow {
			t.Errorf("%s %s: Allow %q, want %q", tt.method, tt.path, hdr.Get("Allow"), tt.allow)
		}
	}
	// A browser page on another site cannot release locks.
	code, _, _ := call(t, "POST", f.url+"/api/locks/x/release", "Sec-Fetch-Site", "cross-site")
	if code != http.StatusForbidden {
		t.Errorf("cross-site POST = %d, want 403", code)
	}
	if _, err := f.client.Lock(context.Background(), "x"); err != nil {
		t.Errorf("lock x was released by a cross-site request: %v", err)
	}
}

func TestInfo(t *testing.T) {
	f := start(t)
	f.hold(t, "x")
	f.wait(t, "x")
	info, err := f.client.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.Version != "v-test" || info.UptimeMS < 60000 || info.ShuttingDown ||
		info.Counts != (admin.Counts{Connections: 2, Locks: 1, Waiters: 1}) || info.Config["listen"] != f.addr {
		t.Errorf("info = %+v", info)
	}
	code, _, v := call(t, "GET", f.url+"/api/info")
	for _, k := range []string{"version", "started_at", "uptime_ms", "shutting_down", "counts", "config"} {
		if _, ok := v[k]; !ok || code != 200 {
			t.Errorf("info lacks %q: %v", k, v)
		}
	}
}

func TestNewClient(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:7072":         "http://127.0.0.1:7072",
		"http://h:1/":            "http://h:1",
		"https://admin.example/": "https://admin.example",
	} {
		c, err := admin.NewClient(in)
		if err != nil || c.BaseURL != want {
			t.Errorf("NewClient(%q) = %v, %v; want %s", in, c, err, want)
		}
	}
	for _, bad := range []string{"", "ftp://h:1", "http://"} {
		if _, err := admin.NewClient(bad); err == nil {
			t.Errorf("NewClient(%q) accepted", bad)
		}
	}
	if got := admin.LockPath("a/b c", "waiters", "[::1]:5"); got != "/api/locks/a%2Fb%20c/waiters/%5B::1%5D:5" {
		t.Errorf("LockPath = %q", got)
	}
}

// TestNotTheAdminAPI: a 404 from some other server at the address (say
// the ops port) is an error, not "not found".
func TestNotTheAdminAPI(t *testing.T) {
	hs := httptest.NewServer(http.NotFoundHandler())
	defer hs.Close()
	c, _ := admin.NewClient(hs.URL)
	_, err := c.Lock(context.Background(), "x")
	var ae *admin.Error
	if !errors.As(err, &ae) || ae.StatusCode != 404 || errors.Is(err, admin.ErrNotFound) || !strings.Contains(err.Error(), "check the address") {
		t.Errorf("error = %v", err)
	}
}
