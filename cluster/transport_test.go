package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/testpki"
)

// testPKI is a CA, certificates for node-1..node-5 (identity
// "node-N.baton.test", a DNS SAN) and one for a client that is not a node.
type testPKI struct {
	ca     *testpki.CA
	nodes  map[string]*testpki.Pair
	client *testpki.Pair
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	ca, err := testpki.NewCA("baton test CA")
	if err != nil {
		t.Fatal(err)
	}
	p := &testPKI{ca: ca, nodes: map[string]*testpki.Pair{}}
	for i := 1; i <= 5; i++ {
		id := fmt.Sprintf("node-%d", i)
		if p.nodes[id], err = ca.Issue(testpki.Leaf{CommonName: id, DNSNames: []string{id + ".baton.test"}}); err != nil {
			t.Fatal(err)
		}
	}
	if p.client, err = ca.Issue(testpki.Leaf{CommonName: "app", DNSNames: []string{"app.clients.test"}}); err != nil {
		t.Fatal(err)
	}
	return p
}

// dnsIdentity is the identity rule of these tests: the first DNS SAN.
func dnsIdentity(c *x509.Certificate) string {
	if len(c.DNSNames) > 0 {
		return c.DNSNames[0]
	}
	return c.Subject.CommonName
}

func isNode(id string) bool { return strings.HasSuffix(id, ".baton.test") }

// peerTLS returns node id's inter-node TLS configurations.
func (p *testPKI) peerTLS(id string) (server, client *tls.Config) {
	cert := &p.nodes[id].TLS
	return PeerTLS(func() (*tls.Certificate, error) { return cert, nil }, p.ca.Pool, dnsIdentity, isNode)
}

func (p *testPKI) withTLS(id string) func(*Config) {
	return func(c *Config) { c.ServerTLS, c.ClientTLS = p.peerTLS(id) }
}

// A cluster whose Raft and member API run over mutual TLS forms, agrees
// on its ring and adds a member; its Raft listener refuses, at the
// handshake, a peer without a certificate, one with a certificate of
// another CA, and one with a valid certificate that is not a node's.
func TestMutualTLSCluster(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	ctx := ctxT(t)
	base := t.TempDir()
	var nodes []*testNode
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("node-%d", i)
		n := startNodeWith(t, id, filepath.Join(base, id), "127.0.0.1:0", "127.0.0.1:0", pki.withTLS(id))
		var err error
		if i == 1 {
			err = n.Bootstrap(ctx)
		} else {
			err = n.Join(ctx, nodes[i-2].admin.Addr().String()) // node-3 through a follower
		}
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		nodes = append(nodes, n)
	}
	waitSameRing(t, nodes, 3)

	other, err := testpki.NewCA("another CA")
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := other.Issue(testpki.Leaf{CommonName: "node-9", DNSNames: []string{"node-9.baton.test"}})
	if err != nil {
		t.Fatal(err)
	}
	raftAddr := nodes[0].RaftAddr()
	// The listener speaks TLS: a node's certificate completes the
	// handshake.
	_, n2Client := pki.peerTLS("node-2")
	if c, err := tls.Dial("tcp", raftAddr, n2Client); err != nil {
		t.Fatalf("Raft listener, a node's certificate: %v", err)
	} else {
		c.Close()
	}
	for _, c := range []struct {
		what string
		cert *tls.Certificate
	}{
		{"no certificate", nil},
		{"a certificate of another CA", &stranger.TLS},
		{"a client's certificate (valid, not a node's)", &pki.client.TLS},
	} {
		cfg := &tls.Config{RootCAs: pki.ca.Pool(), InsecureSkipVerify: true}
		if c.cert != nil {
			cfg.Certificates = []tls.Certificate{*c.cert}
		}
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: testWait}, "tcp", raftAddr, cfg)
		if err == nil {
			// TLS 1.3: the server's verdict on the client certificate
			// arrives with the first read.
			conn.SetReadDeadline(time.Now().Add(testWait))
			_, err = conn.Read(make([]byte, 1))
			conn.Close()
		}
		if err == nil || errors.Is(err, io.EOF) && c.cert != nil {
			t.Errorf("Raft listener, %s: %v, want a refused handshake", c.what, err)
		} else {
			t.Logf("Raft listener, %s: refused: %v", c.what, err)
		}
	}
	// Nor does a node accept a server that is not a node.
	_, clientCfg := pki.peerTLS("node-1")
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pki.client.TLS}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if c, err := ln.Accept(); err == nil {
			c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	if c, err := tls.Dial("tcp", ln.Addr().String(), clientCfg); err == nil {
		c.Close()
		t.Errorf("a node completed a handshake with a server whose identity is not a node's")
	} else {
		t.Logf("a node dialing a non-node server: %v", err)
	}
	wg.Wait()

	// A 4th member over TLS, then its removal.
	n4 := startNodeWith(t, "node-4", filepath.Join(base, "node-4"), "127.0.0.1:0", "127.0.0.1:0", pki.withTLS("node-4"))
	if err := n4.Join(ctx, nodes[1].admin.Addr().String()); err != nil {
		t.Fatal(err)
	}
	waitSameRing(t, append(nodes, n4), 4)
	if err := nodes[2].Remove(ctx, "node-4"); err != nil {
		t.Fatal(err)
	}
	waitSameRing(t, nodes, 5)
}

// A node started with an advertised Raft address records it, not the
// wildcard it binds; one that binds a wildcard without it fails to open.
func TestRaftAdvertise(t *testing.T) {
	t.Parallel()
	_, err := Open(Config{ID: "n", RaftAddr: "0.0.0.0:0", DataDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "cannot dial") {
		t.Fatalf("Open on a wildcard without an advertised address: %v", err)
	}
	n := startNodeWith(t, "node-1", t.TempDir(), "0.0.0.0:0", "127.0.0.1:0", func(c *Config) { c.RaftAdvertise = "127.0.0.1:0" })
	if err := n.Bootstrap(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(n.Metadata().Members["node-1"].RaftAddr)
	if host != "127.0.0.1" || port == "0" {
		t.Fatalf("recorded Raft address %q, want 127.0.0.1 and the bound port", n.Metadata().Members["node-1"].RaftAddr)
	}
}

// With TLS, a peer that connects to the Raft listener and never finishes
// the handshake is closed after the handshake timeout, not kept forever.
func TestRaftHandshakeTimeout(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	srvCfg, cliCfg := pki.peerTLS("node-1")
	s, err := newStreamLayer("127.0.0.1:0", "", srvCfg, cliCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.handshakeTimeout = 200 * time.Millisecond
	done := make(chan error, 1)
	go func() {
		c, err := s.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		_, err = c.Read(make([]byte, 1)) // as Raft's handleConn does
		done <- err
	}()
	silent, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	start := time.Now()
	select {
	case err := <-done:
		t.Logf("silent peer dropped after %v: %v", time.Since(start), err)
		if err == nil {
			t.Fatal("a read on a connection that never handshook succeeded")
		}
	case <-time.After(testWait):
		t.Fatalf("silent peer still held after %v", testWait)
	}
}
