package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/batonlock/baton/acl"
	"github.com/batonlock/baton/cluster"
	"github.com/batonlock/baton/internal/glob"
	"github.com/batonlock/baton/server"
)

// The security of a cluster node (docs/cluster.md, "Security"). With TLS
// configured every inter-node connection is mutual TLS with the node's
// own certificate and the CA of -tls-client-ca: Raft, the member API
// calls and the relay hops. A peer is a member when its certificate
// chains to that CA and its identity (server.Identity: the first URI
// SAN, else DNS SAN, else common name) matches -cluster-identity; host
// names are not checked.

// clusterTLS is a cluster node's inter-node TLS; nil when TLS is off.
type clusterTLS struct {
	pattern glob.Pattern
	// server serves the Raft listener; client dials members.
	server, client *tls.Config
}

// certIdentity is server.Identity of a certificate.
func certIdentity(c *x509.Certificate) string {
	return server.Identity(tls.ConnectionState{PeerCertificates: []*x509.Certificate{c}})
}

// newClusterTLS builds the inter-node TLS from the node's reloadable TLS
// files; it fails when the node's own certificate does not match the
// pattern (the other members would refuse it).
func newClusterTLS(sec *security, pattern string) (*clusterTLS, error) {
	if sec.tls == nil {
		return nil, nil
	}
	p, err := glob.Compile(pattern)
	if err != nil {
		return nil, fmt.Errorf("-cluster-identity %q: %w", pattern, err)
	}
	ct := &clusterTLS{pattern: p}
	cert := func() (*tls.Certificate, error) {
		cur := sec.tls.Current()
		if len(cur.Certificates) == 0 {
			return nil, errors.New("no certificate loaded")
		}
		return &cur.Certificates[0], nil
	}
	roots := func() *x509.CertPool { return sec.tls.Current().ClientCAs }
	c, _ := cert()
	if c.Leaf == nil {
		if c.Leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return nil, err
		}
	}
	if id := certIdentity(c.Leaf); !ct.isNode(id) {
		return nil, fmt.Errorf("this node's certificate identity %q does not match -cluster-identity %q: the other members would refuse it", id, pattern)
	}
	ct.server, ct.client = cluster.PeerTLS(cert, roots, certIdentity, ct.isNode)
	return ct, nil
}

// isNode reports whether identity is a member node's.
func (ct *clusterTLS) isNode(identity string) bool {
	return ct != nil && identity != "" && ct.pattern.Match(identity)
}

// httpClient returns the client of the member API calls, and its scheme.
func (ct *clusterTLS) httpClient() (*http.Client, string) {
	tr := &http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: time.Minute}
	if ct == nil {
		return &http.Client{Timeout: 10 * time.Second, Transport: tr}, "http"
	}
	tr.TLSClientConfig = ct.client
	return &http.Client{Timeout: 10 * time.Second, Transport: tr}, "https"
}

// dialOwner opens a relay hop to an owner over mutual TLS, the handshake
// done within ctx: the owner recognises this node by its certificate.
func (ct *clusterTLS) dialOwner(ctx context.Context, addr string) (net.Conn, error) {
	d := &tls.Dialer{Config: ct.client}
	return d.DialContext(ctx, "tcp", addr)
}

// memberAPIGuard wraps the member API: with TLS, only a member node may
// use it, except that GET /cluster/v1/status is also open to an identity
// the ACL grants the admin "read" action (every identity without an
// ACL). Being allowed locks or admin actions never makes a client a node.
func memberAPIGuard(ct *clusterTLS, rules *acl.Reloadable, h http.Handler) http.Handler {
	if ct == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := ""
		if r.TLS != nil {
			id = server.Identity(*r.TLS)
		}
		status := r.Method == http.MethodGet && r.URL.Path == "/cluster/v1/status"
		switch {
		case ct.isNode(id):
		case status && id != "" && (rules == nil || rules.AllowAdminAny(id, acl.ActionRead)):
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprintf(w, "{\"error\":%q}\n", fmt.Sprintf("identity %q is not a cluster node's (-cluster-identity): the member API refuses it", id))
			return
		}
		h.ServeHTTP(w, r)
	})
}
