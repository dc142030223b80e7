package server_test

import (
	"crypto/tls"
	"io"
	"testing"

	"github.com/batonlock/baton/internal/testpki"
	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// Over TLS a hop header is trusted by the identity of the connection's
// client certificate, never by its address: a client with a valid
// certificate that is not a node's is refused with ERROR 0x13 even from
// an address TrustHop accepts; a node's certificate is accepted, and the
// owner takes on the client identity and address the header carries.
func TestRelayHopTLSIdentity(t *testing.T) {
	ca, err := testpki.NewCA("hop CA")
	if err != nil {
		t.Fatal(err)
	}
	issue := func(l testpki.Leaf) tls.Certificate {
		p, err := ca.Issue(l)
		if err != nil {
			t.Fatal(err)
		}
		return p.TLS
	}
	srvCert := issue(testpki.Localhost("owner"))
	app := &testPKI{pool: ca.Pool(), client: issue(testpki.Leaf{URIs: []string{"spiffe://test/app/worker"}})}
	node := &testPKI{pool: ca.Pool(), client: issue(testpki.Leaf{URIs: []string{"spiffe://test/node/n2"}})}
	owner := startServer(t, func(s *server.Server) {
		s.TLSConfig = &tls.Config{Certificates: []tls.Certificate{srvCert}, ClientCAs: ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert}
		s.Router = &router{route: func(string, bool) server.Route { return server.Route{Action: server.RouteServe} }}
		s.TrustHop = trustAll // loopback: the address rule would let anyone in
		s.TrustHopIdentity = func(id string) bool { return id == "spiffe://test/node/n2" }
	})
	hop := append(protocol.AppendHop(nil, "192.0.2.7:4242", "spiffe://test/app/relayed"), acquireFrame("x", longLease)...)

	conn, _ := owner.dialTLS(t, app)
	conn.Write(hop)
	if f := readTLSFrame(t, conn); f.Type != protocol.TypeError || f.Code != protocol.CodeUnknownMessage {
		t.Fatalf("hop header from a client's certificate: %v, want ERROR 0x13", f)
	}
	conn, _ = owner.dialTLS(t, node)
	conn.Write(hop)
	if f := readTLSFrame(t, conn); f.Type != protocol.TypeAcquired {
		t.Fatalf("hop header from a node's certificate: %v, want ACQUIRED", f)
	}
	locks := owner.Snapshot(nil)
	if len(locks) != 1 || locks[0].Holder.Peer.Identity != "spiffe://test/app/relayed" || locks[0].Holder.Peer.Addr != "192.0.2.7:4242" {
		t.Fatalf("owner's table: %+v, want the relayed client's identity and address", locks)
	}
	// The client hangs up: the owner releases, acknowledges, and the same
	// TLS connection carries the next hop header, trusted again by the
	// connection's certificate (not by the identity the last header
	// carried).
	conn.Write([]byte{0x7e})
	var ack [1]byte
	if _, err := io.ReadFull(conn, ack[:]); err != nil || ack[0] != 0x7e {
		t.Fatalf("after hopClientGone over TLS: %#x, %v; want the ack", ack[0], err)
	}
	conn.Write(append(protocol.AppendHop(nil, "192.0.2.8:4343", "spiffe://test/app/next"), acquireFrame("y", longLease)...))
	if f := readTLSFrame(t, conn); f.Type != protocol.TypeAcquired {
		t.Fatalf("next hop header on the same TLS connection: %v, want ACQUIRED", f)
	}
	locks = owner.Snapshot(nil)
	if len(locks) != 1 || locks[0].Name != "y" || locks[0].Holder.Peer.Identity != "spiffe://test/app/next" || locks[0].Holder.Peer.Addr != "192.0.2.8:4343" {
		t.Fatalf("owner's table: %+v, want only y, held by the next relayed client", locks)
	}
}
