package tlsfiles_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/testpki"
	"github.com/batonlock/baton/internal/tlsfiles"
	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

type pki struct {
	dir                 string
	ca                  *testpki.CA
	caPath              string
	srvCert, srvKey     string
	clientCert, clntKey string
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir()}
	var err error
	if p.ca, err = testpki.NewCA("test CA"); err != nil {
		t.Fatal(err)
	}
	if p.caPath, err = p.ca.WriteFile(p.dir, "ca"); err != nil {
		t.Fatal(err)
	}
	srv, err := p.ca.Issue(testpki.Localhost("server-1"))
	if err != nil {
		t.Fatal(err)
	}
	if p.srvCert, p.srvKey, err = srv.WriteFiles(p.dir, "server"); err != nil {
		t.Fatal(err)
	}
	cl, err := p.ca.Issue(testpki.Leaf{CommonName: "worker"})
	if err != nil {
		t.Fatal(err)
	}
	if p.clientCert, p.clntKey, err = cl.WriteFiles(p.dir, "client"); err != nil {
		t.Fatal(err)
	}
	return p
}

func startTLS(t *testing.T, ts *tlsfiles.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &server.Server{TLSConfig: ts.Config(), IOTimeout: 2 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return ln.Addr().String()
}

// acquire dials with TLS, sends ACQUIRE and returns the first reply.
func acquire(t *testing.T, addr string, cfg *tls.Config, name string) (*tls.Conn, protocol.ServerFrame) {
	t.Helper()
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(5 * time.Second))
	c.Write(protocol.AppendAcquire(nil, protocol.Acquire{Version: 1, LeaseMS: 60_000, Name: name}))
	f, err := protocol.ReadServerFrame(c)
	if err != nil {
		t.Fatal(err)
	}
	return c, f
}

func TestReloadServesNewCertificateAndKeepsSessions(t *testing.T) {
	p := newPKI(t)
	ts, err := tlsfiles.NewServer(tlsfiles.ServerFiles{Cert: p.srvCert, Key: p.srvKey, ClientCA: p.caPath})
	if err != nil {
		t.Fatal(err)
	}
	addr := startTLS(t, ts)
	clientCfg, err := tlsfiles.ClientConfig(tlsfiles.ClientFiles{CA: p.caPath, Cert: p.clientCert, Key: p.clntKey}, "localhost")
	if err != nil {
		t.Fatal(err)
	}
	holder, f := acquire(t, addr, clientCfg, "job")
	if f.Type != protocol.TypeAcquired {
		t.Fatalf("holder got %v", f)
	}
	if cn := holder.ConnectionState().PeerCertificates[0].Subject.CommonName; cn != "server-1" {
		t.Fatalf("before reload the server presented %q", cn)
	}

	// Rotate the server certificate on disk and reload.
	next, err := p.ca.Issue(testpki.Localhost("server-2"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := next.WriteFiles(p.dir, "server"); err != nil {
		t.Fatal(err)
	}
	if err := ts.Reload(); err != nil {
		t.Fatal(err)
	}
	waiter, f := acquire(t, addr, clientCfg, "job")
	if cn := waiter.ConnectionState().PeerCertificates[0].Subject.CommonName; cn != "server-2" {
		t.Fatalf("after reload a new connection saw %q, want server-2", cn)
	}
	if f.Type != protocol.TypeWaiting {
		t.Fatalf("new client got %v: the old session should still hold the lock", f)
	}
	holder.Write(protocol.AppendHeartbeat(nil))
	if f2, err := protocol.ReadServerFrame(holder); err != nil || f2.Type != protocol.TypeAcquired {
		t.Fatalf("existing session after reload: %v %v", f2, err)
	}

	// A broken file on reload keeps the certificate in force.
	os.WriteFile(p.srvCert, []byte("not a certificate"), 0o600)
	if err := ts.Reload(); err == nil {
		t.Fatal("reload of a broken certificate succeeded")
	}
	c3, _ := acquire(t, addr, clientCfg, "other")
	if cn := c3.ConnectionState().PeerCertificates[0].Subject.CommonName; cn != "server-2" {
		t.Fatalf("after a failed reload a new connection saw %q, want server-2", cn)
	}
}

func TestClientConfigErrors(t *testing.T) {
	p := newPKI(t)
	if _, err := tlsfiles.ClientConfig(tlsfiles.ClientFiles{Cert: p.clientCert}, "x"); err == nil || !strings.Contains(err.Error(), "both or neither") {
		t.Errorf("cert without key: %v", err)
	}
	if _, err := tlsfiles.ClientConfig(tlsfiles.ClientFiles{CA: filepath.Join(p.dir, "missing")}, "x"); err == nil {
		t.Error("missing CA file accepted")
	}
	bad := filepath.Join(p.dir, "bad.pem")
	os.WriteFile(bad, []byte("junk"), 0o600)
	if _, err := tlsfiles.ClientConfig(tlsfiles.ClientFiles{CA: bad}, "x"); err == nil || !strings.Contains(err.Error(), "no PEM") {
		t.Errorf("junk CA file: %v", err)
	}
	if _, err := tlsfiles.NewServer(tlsfiles.ServerFiles{Cert: p.srvCert}); err == nil {
		t.Error("server without key accepted")
	}
	if _, err := tlsfiles.NewServer(tlsfiles.ServerFiles{Cert: p.srvCert, Key: p.srvKey, ClientCA: bad}); err == nil {
		t.Error("junk client CA accepted")
	}
	if !(tlsfiles.ClientFiles{CA: "x"}).Enabled() || (tlsfiles.ClientFiles{}).Enabled() {
		t.Error("Enabled is wrong")
	}
}

func TestOtherCAIsRejectedAtHandshake(t *testing.T) {
	p := newPKI(t)
	ts, err := tlsfiles.NewServer(tlsfiles.ServerFiles{Cert: p.srvCert, Key: p.srvKey, ClientCA: p.caPath})
	if err != nil {
		t.Fatal(err)
	}
	addr := startTLS(t, ts)
	other, _ := testpki.NewCA("other CA")
	stranger, _ := other.Issue(testpki.Leaf{CommonName: "stranger"})
	cfg := &tls.Config{RootCAs: p.ca.Pool(), ServerName: "localhost", Certificates: []tls.Certificate{stranger.TLS}}
	c, err := tls.Dial("tcp", addr, cfg)
	if err == nil {
		// TLS 1.3: the client learns of the rejection on its first read.
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write(protocol.AppendAcquire(nil, protocol.Acquire{Version: 1, LeaseMS: 1000, Name: "x"}))
		_, err = protocol.ReadServerFrame(c)
		c.Close()
	}
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("certificate")) {
		t.Fatalf("client with a certificate from another CA: err = %v, want a certificate error", err)
	}
}
