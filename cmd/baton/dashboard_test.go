package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/admin"
	"github.com/batonlock/baton/internal/opstest"
	"github.com/batonlock/baton/protocol"
)

// TestServeDashboard: baton serve serves the embedded dashboard on the
// admin listener at /, and counts grants for its chart.
func TestServeDashboard(t *testing.T) {
	f := startServe(t, func(c *serveConfig) { c.adminListen = "127.0.0.1:0" })
	get := func(path string) (*http.Response, string) {
		t.Helper()
		resp, err := http.Get("http://" + f.addrs.admin + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	resp, body := get("/")
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") ||
		!strings.Contains(body, `<script src="app.js"`) || resp.Header.Get("X-Frame-Options") != "DENY" {
		t.Errorf("GET / = %d %v\n%s", resp.StatusCode, resp.Header, body)
	}
	for _, p := range []string{"/app.js", "/style.css"} {
		if resp, _ := get(p); resp.StatusCode != 200 {
			t.Errorf("GET %s = %d", p, resp.StatusCode)
		}
	}
	c := opstest.Dial(t, f.addrs.protocol)
	c.Acquire("x", 10*time.Second)
	c.Expect(protocol.TypeAcquired, 0)
	_, body = get("/api/summary")
	var s admin.Summary
	if err := json.Unmarshal([]byte(body), &s); err != nil || s.GrantsTotal == nil || *s.GrantsTotal != 1 || s.Locks != 1 {
		t.Errorf("summary %s: want 1 grant and 1 lock", body)
	}
}
