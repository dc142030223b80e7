package server_test

import (
	"crypto/tls"
	"crypto/x509"
	"testing"

	"github.com/batonlock/baton/internal/testpki"
	"github.com/batonlock/baton/server"
)

// TestIdentityPrecedence: the first URI SAN, else the first DNS SAN,
// else the subject common name; empty without a client certificate.
func TestIdentityPrecedence(t *testing.T) {
	ca, err := testpki.NewCA("identity CA")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		leaf testpki.Leaf
		want string
	}{
		{"URI beats DNS and CN", testpki.Leaf{CommonName: "cn", DNSNames: []string{"dns.example", "dns2.example"},
			URIs: []string{"spiffe://test/a", "spiffe://test/b"}}, "spiffe://test/a"},
		{"DNS beats CN", testpki.Leaf{CommonName: "cn", DNSNames: []string{"dns.example", "dns2.example"}}, "dns.example"},
		{"CN alone", testpki.Leaf{CommonName: "cn"}, "cn"},
		{"nothing", testpki.Leaf{}, ""},
	} {
		pair, err := ca.Issue(c.leaf)
		if err != nil {
			t.Fatal(err)
		}
		cert, err := x509.ParseCertificate(pair.TLS.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		got := server.Identity(tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}})
		if got != c.want {
			t.Errorf("%s: identity %q, want %q", c.name, got, c.want)
		}
	}
	if got := server.Identity(tls.ConnectionState{}); got != "" {
		t.Errorf("no certificate: identity %q, want empty", got)
	}
}
