package server_test

// The protocol over TLS, with the client's identity from its certificate.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/testpki"
	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// testPKI is a CA with a server and a client certificate, made fresh for
// each test.
type testPKI struct {
	pool           *x509.CertPool
	server, client tls.Certificate
}

func newPKI(t *testing.T, clientURI string) *testPKI {
	t.Helper()
	ca, err := testpki.NewCA("baton test CA")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ca.Issue(testpki.Localhost("baton server"))
	if err != nil {
		t.Fatal(err)
	}
	client, err := ca.Issue(testpki.Leaf{CommonName: "ignored when a URI SAN exists", URIs: []string{clientURI}})
	if err != nil {
		t.Fatal(err)
	}
	return &testPKI{pool: ca.Pool(), server: srv.TLS, client: client.TLS}
}

// tlsClient is a raw client over TLS.
func (ts *testServer) dialTLS(t *testing.T, p *testPKI) (*tls.Conn, *client) {
	t.Helper()
	raw := ts.dial(t)
	conn := tls.Client(raw.conn, &tls.Config{
		RootCAs:      p.pool,
		ServerName:   "127.0.0.1",
		Certificates: []tls.Certificate{p.client},
	})
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(waitLimit))
	if err := conn.Handshake(); err != nil {
		t.Fatalf("TLS handshake: %v", err)
	}
	return conn, raw
}

func readTLSFrame(t *testing.T, conn *tls.Conn) protocol.ServerFrame {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(waitLimit))
	f, err := protocol.ReadServerFrame(conn)
	if err != nil {
		t.Fatalf("read over TLS: %v", err)
	}
	return f
}

// TestTLS: over mTLS a client acquires, its identity (the URI SAN of its
// certificate) reaches the Authorizer and the events, and a session that
// finished its handshake but sent nothing yet still gets ERROR 0x01 on
// shutdown.
func TestTLS(t *testing.T) {
	t.Parallel()
	const identity = "spiffe://baton.test/worker"
	p := newPKI(t, identity)
	authz := &identityRecorder{identities: make(chan string, 1)}
	ts := startServer(t, func(s *server.Server) {
		s.TLSConfig = &tls.Config{
			Certificates: []tls.Certificate{p.server},
			ClientCAs:    p.pool,
			ClientAuth:   tls.RequireAndVerifyClientCert,
		}
		s.Authorizer = authz
	})

	owner, ownerRaw := ts.dialTLS(t, p)
	if _, err := owner.Write(acquireFrame("tls", longLease)); err != nil {
		t.Fatal(err)
	}
	if f := readTLSFrame(t, owner); f.Type != protocol.TypeAcquired {
		t.Fatalf("ACQUIRE over TLS answered %v, want ACQUIRED", f)
	}
	g := ts.events.wait(t, "granted", peerEvent(server.EventGranted, ownerRaw))
	if g.Peer.Identity != identity {
		t.Errorf("granted to identity %q, want %q", g.Peer.Identity, identity)
	}
	if got := authz.last(); got != identity {
		t.Errorf("Authorizer asked about identity %q, want %q", got, identity)
	}

	// Handshake done, no ACQUIRE yet.
	idle, _ := ts.dialTLS(t, p)
	shutdown := make(chan error, 1)
	go func() { shutdown <- ts.Shutdown(context.Background()) }()
	for _, c := range []*tls.Conn{owner, idle} {
		if f := readTLSFrame(t, c); f.Type != protocol.TypeError || f.Code != protocol.CodeShuttingDown {
			t.Errorf("got %v, want ERROR(0x01)", f)
		}
		c.Close()
	}
	if err := <-shutdown; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

type identityRecorder struct{ identities chan string }

func (r *identityRecorder) Allow(identity, lock string) bool {
	select {
	case r.identities <- identity:
	default:
	}
	return true
}

func (r *identityRecorder) last() string {
	select {
	case id := <-r.identities:
		return id
	default:
		return ""
	}
}

// TestTLSShutdownDuringHandshakes shuts the server down while clients
// are in the middle of their TLS handshakes. A client may be refused or
// cut off, but whatever it reads is at most ERROR 0x01; the race detector
// checks that the shutdown's ERROR frames and the handshakes' end (which
// records the client's identity) do not touch a session unsynchronized.
func TestTLSShutdownDuringHandshakes(t *testing.T) {
	t.Parallel()
	p := newPKI(t, "spiffe://baton.test/racer")
	for i := range 20 {
		ts := startServer(t, func(s *server.Server) {
			s.TLSConfig = &tls.Config{
				Certificates: []tls.Certificate{p.server},
				ClientCAs:    p.pool,
				ClientAuth:   tls.RequireAndVerifyClientCert,
			}
		})
		var wg sync.WaitGroup
		errs := make(chan error, 10)
		for range 10 {
			wg.Go(func() {
				raw, err := net.DialTimeout("tcp", ts.addr, waitLimit)
				if err != nil {
					return // refused: the listener is already closed
				}
				defer raw.Close()
				c := tls.Client(raw, &tls.Config{RootCAs: p.pool, ServerName: "127.0.0.1", Certificates: []tls.Certificate{p.client}})
				c.SetDeadline(time.Now().Add(waitLimit))
				if c.Handshake() != nil {
					return // cut off during the handshake
				}
				var frames []protocol.ServerFrame
				for {
					f, err := protocol.ReadServerFrame(c)
					if err != nil {
						break
					}
					frames = append(frames, f)
				}
				if len(frames) > 1 || len(frames) == 1 && (frames[0].Type != protocol.TypeError || frames[0].Code != protocol.CodeShuttingDown) {
					errs <- fmt.Errorf("a client read %v, want at most ERROR(0x01)", frames)
				}
			})
		}
		time.Sleep(time.Duration(i%10) * time.Millisecond) // vary how far the handshakes got
		if err := ts.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	}
}

// prefixAuthz allows identity only the locks with prefix.
type prefixAuthz struct{ identity, prefix string }

func (a prefixAuthz) Allow(identity, lock string) bool {
	return identity == a.identity && len(lock) >= len(a.prefix) && lock[:len(a.prefix)] == a.prefix
}

// TestTLSV2: a version 2 session over mTLS: its certificate's identity is
// checked for every CLAIM's name (one granted, one REFUSED 0x18, the
// session lives on), and it appears in the events of its claims.
func TestTLSV2(t *testing.T) {
	t.Parallel()
	const identity = "spiffe://baton.test/reader"
	p := newPKI(t, identity)
	ts := startServer(t, func(s *server.Server) {
		s.TLSConfig = &tls.Config{
			Certificates: []tls.Certificate{p.server},
			ClientCAs:    p.pool,
			ClientAuth:   tls.RequireAndVerifyClientCert,
		}
		s.Authorizer = prefixAuthz{identity, "reports/"}
	})
	conn, _ := ts.dialTLS(t, p)
	var out []byte
	out = append(out, openingV2(longLease, "tls")...)
	out = append(out, claimFrame(1, shrd, 0, "reports/q1")...)
	out = append(out, claimFrame(2, shrd, 0, "billing/q1")...)
	out = append(out, protocol.AppendPing(nil, 5)...)
	if _, err := conn.Write(out); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(waitLimit))
	want := []protocol.Type{protocol.TypeWelcome, protocol.TypeGranted, protocol.TypeRefused, protocol.TypePong}
	for i, typ := range want {
		read := protocol.ReadServerFrameV2
		if i == 0 {
			read = protocol.ReadHelloAnswer
		}
		f, err := read(conn)
		if err != nil || f.Type != typ {
			t.Fatalf("frame %d: %v, %v; want %v", i, f, err, typ)
		}
		if typ == protocol.TypeRefused && (f.Claim != 2 || f.Code != protocol.CodeNotAuthorized) {
			t.Fatalf("got %v, want REFUSED(2, 0x18)", f)
		}
	}
	g := ts.events.wait(t, "granted", lockEvent(server.EventGranted, "reports/q1"))
	if g.Peer.Identity != identity || g.Label != "tls" || g.Protocol != protocol.Version2 {
		t.Errorf("granted event %+v", g)
	}
}
