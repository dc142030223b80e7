package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// The Raft transport: a raft.StreamLayer over TCP, with mutual TLS when
// Config.ServerTLS is set, and an advertised address that may differ from
// the address it binds (a DNS name, for a node that listens on every
// interface).

// streamLayer implements raft.StreamLayer.
type streamLayer struct {
	net.Listener
	advertise net.Addr
	clientTLS *tls.Config // nil: plain TCP
	serverTLS *tls.Config // nil: plain TCP
	// handshakeTimeout bounds the TLS handshake of an accepted
	// connection (Raft sets no deadline on the connections it serves).
	handshakeTimeout time.Duration
}

// DefaultHandshakeTimeout bounds the TLS handshake of a connection to
// the Raft listener.
const DefaultHandshakeTimeout = 10 * time.Second

// Accept returns the next connection; with TLS, one whose handshake
// runs, within handshakeTimeout, on its first read (in Raft's goroutine
// for the connection, never in the accept loop).
func (s *streamLayer) Accept() (net.Conn, error) {
	c, err := s.Listener.Accept()
	if err != nil || s.serverTLS == nil {
		return c, err
	}
	return &serverConn{Conn: tls.Server(c, s.serverTLS), timeout: s.handshakeTimeout}, nil
}

// serverConn is an accepted TLS connection that completes its handshake
// within timeout before its first read.
type serverConn struct {
	*tls.Conn
	timeout time.Duration
	once    sync.Once
	err     error
}

func (c *serverConn) Read(b []byte) (int, error) {
	c.once.Do(func() {
		c.Conn.SetDeadline(time.Now().Add(c.timeout))
		if c.err = c.Conn.Handshake(); c.err == nil {
			c.Conn.SetDeadline(time.Time{})
		}
	})
	if c.err != nil {
		return 0, c.err
	}
	return c.Conn.Read(b)
}

// advertisedAddr is a net.Addr that is a host name and port.
type advertisedAddr string

func (a advertisedAddr) Network() string { return "tcp" }
func (a advertisedAddr) String() string  { return string(a) }

// newStreamLayer listens on bind. With serverTLS, every accepted
// connection is served TLS (serverTLS must require and verify client
// certificates: a peer without a valid one fails the handshake, and Raft
// drops the connection on its first read; one that does not finish the
// handshake within DefaultHandshakeTimeout is dropped too); with clientTLS, every dial
// presents this node's certificate. advertise, when not empty, is the
// address the other members dial; else the bound address, which must
// then not be a wildcard.
func newStreamLayer(bind, advertise string, serverTLS, clientTLS *tls.Config) (*streamLayer, error) {
	if (serverTLS == nil) != (clientTLS == nil) {
		return nil, errors.New("cluster: ServerTLS and ClientTLS go together")
	}
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	s := &streamLayer{Listener: ln, advertise: ln.Addr(), clientTLS: clientTLS, serverTLS: serverTLS, handshakeTimeout: DefaultHandshakeTimeout}
	if advertise != "" {
		host, port, err := net.SplitHostPort(advertise)
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("cluster: advertised Raft address %q: %w", advertise, err)
		}
		if port == "0" {
			_, bound, _ := net.SplitHostPort(ln.Addr().String())
			advertise = net.JoinHostPort(host, bound)
		}
		s.advertise = advertisedAddr(advertise)
	} else if tcp, ok := ln.Addr().(*net.TCPAddr); !ok || tcp.IP == nil || tcp.IP.IsUnspecified() {
		ln.Close()
		return nil, fmt.Errorf("cluster: Raft listens on %s, which other members cannot dial: give an advertised address", ln.Addr())
	}
	return s, nil
}

// Addr is the advertised address: what Raft records for this node.
func (s *streamLayer) Addr() net.Addr { return s.advertise }

// Dial opens a connection to another member's Raft address, with the TLS
// handshake done within timeout when TLS is on.
func (s *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	if s.clientTLS == nil {
		return d.Dial("tcp", string(address))
	}
	td := &tls.Dialer{NetDialer: d, Config: s.clientTLS}
	return td.Dial("tcp", string(address))
}

// PeerTLS returns the TLS configurations of a node's inter-node traffic,
// both mutual and both with the same rule for the other side: its
// certificate chains to the CA pool that roots returns, and isPeer accepts
// the identity that identity reads from it. Host names are not checked:
// a member is recognised by its certificate identity, not by the address
// it was reached on.
//
// cert returns the node's own certificate, roots the CA pool; both are
// called at every handshake, so a reload of the files takes effect for
// the next connection. The server configuration is for listeners that
// only members dial (Raft); the client one for dialing members (Raft, the
// member API, relay hops).
func PeerTLS(cert func() (*tls.Certificate, error), roots func() *x509.CertPool,
	identity func(*x509.Certificate) string, isPeer func(string) bool) (server, client *tls.Config) {
	verify := func(usage x509.ExtKeyUsage) func(tls.ConnectionState) error {
		return func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("cluster: the peer presented no certificate")
			}
			leaf := cs.PeerCertificates[0]
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots(), Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
				return fmt.Errorf("cluster: peer certificate: %w", err)
			}
			if id := identity(leaf); !isPeer(id) {
				return fmt.Errorf("cluster: peer identity %q is not a cluster member's", id)
			}
			return nil
		}
	}
	server = &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return cert()
		},
		// The chain and the identity are checked by VerifyConnection,
		// against the pool of the moment.
		ClientAuth:       tls.RequireAnyClientCert,
		VerifyConnection: verify(x509.ExtKeyUsageClientAuth),
	}
	client = &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return cert()
		},
		// The server's chain and identity are checked by
		// VerifyConnection; its host name is not.
		InsecureSkipVerify: true,
		VerifyConnection:   verify(x509.ExtKeyUsageServerAuth),
	}
	return server, client
}
