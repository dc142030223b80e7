package main

import (
	"crypto/tls"

	"github.com/batonlock/baton/internal/tlsfiles"
)

// clientTLSFlags registers the TLS flags shared by the client commands
// ('baton run' and the admin commands). Giving any of them turns TLS on.
func clientTLSFlags(fs *flagSet) *tlsfiles.ClientFiles {
	f := &tlsfiles.ClientFiles{}
	fs.StringVar(&f.CA, "tls-ca", "BATON_TLS_CA", "", "CA bundle (PEM) to verify the server with; any --tls-* flag turns TLS on (system roots when empty)")
	fs.StringVar(&f.Cert, "tls-cert", "BATON_TLS_CLIENT_CERT", "", "client certificate (PEM) for mutual TLS; needs --tls-key")
	fs.StringVar(&f.Key, "tls-key", "BATON_TLS_CLIENT_KEY", "", "client private key (PEM) for mutual TLS")
	return f
}

// clientTLSConfig returns nil when no TLS flag was given, else the TLS
// configuration for dialing addr (host:port or a URL's host).
func clientTLSConfig(f *tlsfiles.ClientFiles, addr string) (*tls.Config, error) {
	return tlsfiles.ClientConfigForAddr(f, addr)
}
