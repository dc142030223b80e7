package admin_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/acl"
	"github.com/batonlock/baton/admin"
	"github.com/batonlock/baton/internal/opstest"
	"github.com/batonlock/baton/internal/testpki"
	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// rawRequest sends one HTTP/1.1 request with the given Host header over
// a fresh connection to addr and returns the status and the error body.
func rawRequest(t *testing.T, addr, method, path, host string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(opstest.Timeout))
	io.WriteString(c, method+" "+path+" HTTP/1.1\r\nHost: "+host+"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var eb admin.ErrorBody
	json.NewDecoder(resp.Body).Decode(&eb)
	return resp.StatusCode, eb.Error
}

// TestHostHeaderDNSRebinding: a request naming another host (a page of
// evil.example whose name resolves to 127.0.0.1) is refused with a clear
// 403 and releases nothing; the listener's own address, loopback
// literals, localhost and configured hosts are accepted.
func TestHostHeaderDNSRebinding(t *testing.T) {
	f := start(t)
	owner, _ := f.hold(t, "deploy/prod")
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(f.url, "http://"))
	addr := strings.TrimPrefix(f.url, "http://")

	for _, host := range []string{"evil.example:" + port, "evil.example", "127.0.0.1.evil.example:" + port, "10.1.2.3:" + port, ""} {
		code, msg := rawRequest(t, addr, "POST", "/api/locks/deploy%2Fprod/release", host)
		if code != http.StatusForbidden || !strings.Contains(msg, "not allowed") || !strings.Contains(msg, "-admin-allowed-hosts") {
			t.Errorf("Host %q: %d %q, want 403 naming the protection", host, code, msg)
		}
		if code, _ := rawRequest(t, addr, "GET", "/api/locks", host); code != http.StatusForbidden {
			t.Errorf("GET with Host %q = %d, want 403", host, code)
		}
	}
	if _, ok := f.srv.Lock("deploy/prod"); !ok {
		t.Fatal("a request with a foreign Host released the lock")
	}
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "LOCALHOST", "[::1]:" + port, "127.0.0.2", "localhost."} {
		if code, msg := rawRequest(t, addr, "GET", "/api/locks", host); code != http.StatusOK {
			t.Errorf("Host %q = %d %q, want 200", host, code, msg)
		}
	}

	// The operator's list.
	hs := httptest.NewServer(admin.Handler(admin.Config{Server: f.srv, Logger: slog.New(slog.DiscardHandler),
		AllowedHosts: []string{"baton.internal", "proxy.internal:8443", "[fd00::7]"}}))
	t.Cleanup(hs.Close)
	other := strings.TrimPrefix(hs.URL, "http://")
	if code, msg := rawRequest(t, other, "GET", "/api/locks", "Baton.Internal:7072"); code != http.StatusOK {
		t.Errorf("configured host: %d %q", code, msg)
	}
	for _, host := range []string{"proxy.internal", "proxy.internal:443", "[fd00::7]:7072"} {
		if code, msg := rawRequest(t, other, "GET", "/api/locks", host); code != http.StatusOK {
			t.Errorf("configured host %q: %d %q", host, code, msg)
		}
	}
	if code, _ := rawRequest(t, other, "GET", "/api/locks", "evil.example"); code != http.StatusForbidden {
		t.Errorf("evil.example with a configured list = %d", code)
	}
	code, msg := rawRequest(t, other, "POST", "/api/locks/deploy%2Fprod/release", "localhost")
	if code != http.StatusOK {
		t.Fatalf("release via localhost: %d %q", code, msg)
	}
	owner.Expect(protocol.TypeError, protocol.CodeClosedByAdmin)
}

// mtlsAdmin serves the admin API over mutual TLS with authz.
type mtlsAdmin struct {
	*fixture
	ca   *testpki.CA
	addr string
}

func startMTLS(t *testing.T, authz admin.Authorizer) *mtlsAdmin {
	t.Helper()
	f := start(t)
	ca, err := testpki.NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	srvPair, err := ca.Issue(testpki.Localhost("server"))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(admin.Handler(admin.Config{Server: f.srv, Logger: slog.New(slog.DiscardHandler),
		Authorizer: authz, Observer: f.rec}))
	hs.TLS = &tls.Config{Certificates: []tls.Certificate{srvPair.TLS}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool()}
	hs.StartTLS()
	t.Cleanup(hs.Close)
	return &mtlsAdmin{fixture: f, ca: ca, addr: strings.TrimPrefix(hs.URL, "https://")}
}

// as returns an admin client presenting a certificate for uri.
func (m *mtlsAdmin) as(t *testing.T, uri string) *admin.Client {
	t.Helper()
	pair, err := m.ca.Issue(testpki.Leaf{CommonName: "client", URIs: []string{uri}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := admin.NewClient("https://" + m.addr)
	if err != nil {
		t.Fatal(err)
	}
	c.HTTPClient = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: m.ca.Pool(), ServerName: "localhost", Certificates: []tls.Certificate{pair.TLS}}}}
	return c
}

// TestAdminRolesUnderMutualTLS: with an ACL in force, the admin API
// decides by the caller's certificate: a lock client with no admin rule
// can neither list nor release, a reader can only read (and sees only its
// locks), and an operator's release is audited with the operator's
// identity and address.
func TestAdminRolesUnderMutualTLS(t *testing.T) {
	a, err := acl.Parse([]byte(`{
		"rules": [{"identity": "spiffe://test/batch", "locks": ["batch/*"]}],
		"admin": [
			{"identity": "spiffe://test/sre", "actions": ["read", "release", "kick"], "locks": ["*"]},
			{"identity": "spiffe://test/dash", "actions": ["read"], "locks": ["batch/*"]}
		]}`))
	if err != nil {
		t.Fatal(err)
	}
	m := startMTLS(t, a)
	ctx := context.Background()
	owner, _ := m.hold(t, "deploy/prod")
	m.hold(t, "batch/nightly")

	batch := m.as(t, "spiffe://test/batch")
	for what, call := range map[string]func() error{
		"list":    func() error { _, err := batch.Locks(ctx, ""); return err },
		"show":    func() error { _, err := batch.Lock(ctx, "batch/nightly"); return err },
		"info":    func() error { _, err := batch.Info(ctx); return err },
		"release": func() error { _, err := batch.Release(ctx, "deploy/prod"); return err },
		"kick":    func() error { _, err := batch.Kick(ctx, "deploy/prod", "127.0.0.1:1"); return err },
	} {
		var ae *admin.Error
		if err := call(); !errors.As(err, &ae) || ae.StatusCode != http.StatusForbidden || !strings.Contains(ae.Message, `identity "spiffe://test/batch" may not`) {
			t.Errorf("lock client %s: %v, want 403 naming the identity", what, err)
		}
	}

	dash := m.as(t, "spiffe://test/dash")
	ls, err := dash.Locks(ctx, "")
	if err != nil || len(ls) != 1 || ls[0].Name != "batch/nightly" {
		t.Errorf("reader's listing = %+v, %v; want only batch/nightly", ls, err)
	}
	if _, err := dash.Lock(ctx, "deploy/prod"); err == nil {
		t.Error("reader saw a lock outside its rule")
	}
	if _, err := dash.Release(ctx, "batch/nightly"); err == nil {
		t.Error("a reader released a lock")
	}
	if _, ok := m.srv.Lock("deploy/prod"); !ok {
		t.Fatal("deploy/prod was released by a caller without the right")
	}
	if n := opstest.Count(m.rec.Events(), server.EventAdminDenied); n < 7 {
		t.Errorf("%d admin_denied events, want one per refused request (7)", n)
	}

	sre := m.as(t, "spiffe://test/sre")
	if _, err := sre.Release(ctx, "deploy/prod"); err != nil {
		t.Fatal(err)
	}
	owner.Expect(protocol.TypeError, protocol.CodeClosedByAdmin)
	m.rec.WaitCount(t, server.EventForceRelease, 1)
	for _, e := range m.rec.Events() {
		if e.Kind == server.EventForceRelease {
			if e.Admin.Identity != "spiffe://test/sre" || e.Admin.Addr == "" || e.Peer.Addr != owner.Addr() {
				t.Errorf("force release event names admin %+v, holder %+v", e.Admin, e.Peer)
			}
		}
	}
}

// TestAdminWithoutAdminRules: an ACL without admin rules (every file
// written before they existed) refuses every admin request.
func TestAdminWithoutAdminRules(t *testing.T) {
	a, err := acl.Parse([]byte(`{"rules": [{"identity": "*", "locks": ["*"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	m := startMTLS(t, a)
	m.hold(t, "x")
	c := m.as(t, "spiffe://test/anyone")
	if _, err := c.Locks(context.Background(), ""); err == nil {
		t.Error("listing allowed without admin rules")
	}
	if _, err := c.Release(context.Background(), "x"); err == nil {
		t.Error("release allowed without admin rules")
	}
}

// TestHostUnderTLS: under TLS a Host equal to the server name the client
// asked for (and verified the certificate against) is accepted; another
// Host is refused even over TLS.
func TestHostUnderTLS(t *testing.T) {
	m := startMTLS(t, nil)
	pair, err := m.ca.Issue(testpki.Leaf{CommonName: "client", URIs: []string{"spiffe://test/sre"}})
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(m.addr)
	for _, tc := range []struct {
		sni, host string
		want      int
	}{
		{"baton.internal", "baton.internal:" + port, http.StatusOK},
		{"baton.internal", "evil.example:" + port, http.StatusForbidden},
		{"", "evil.example:" + port, http.StatusForbidden},
	} {
		// The test certificate covers only localhost: skip the client's
		// verification to play a client that asked for baton.internal.
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
			InsecureSkipVerify: true, ServerName: tc.sni, Certificates: []tls.Certificate{pair.TLS}}}}
		req, _ := http.NewRequest("GET", "https://"+m.addr+"/api/locks", nil)
		req.Host = tc.host
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("SNI %q, Host %q = %d, want %d", tc.sni, tc.host, resp.StatusCode, tc.want)
		}
	}
}
