// Package tlsfiles loads TLS certificates, keys and CA bundles from PEM
// files, for the server (with reload on SIGHUP) and for the command-line
// clients.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
)

// ServerFiles names the server's PEM files. Cert and Key are required;
// ClientCA, when set, requires every client to present a certificate
// signed by one of its CAs (mutual TLS).
type ServerFiles struct {
	Cert, Key, ClientCA string
}

// Server is a server TLS configuration that can be reloaded from its
// files. Connections established before a reload keep what they
// negotiated; new handshakes use the newest successfully loaded files.
type Server struct {
	files ServerFiles
	cur   atomic.Pointer[tls.Config]
}

// NewServer loads files once; it fails if any of them cannot be loaded.
func NewServer(files ServerFiles) (*Server, error) {
	if files.Cert == "" || files.Key == "" {
		return nil, errors.New("tls: both a certificate and a key are required")
	}
	s := &Server{files: files}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// Reload re-reads every file. On any error it keeps the previous
// configuration and returns the error.
func (s *Server) Reload() error {
	cert, err := tls.LoadX509KeyPair(s.files.Cert, s.files.Key)
	if err != nil {
		return fmt.Errorf("tls: loading %s and %s: %w", s.files.Cert, s.files.Key, err)
	}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
	}
	if s.files.ClientCA != "" {
		pool, err := LoadCAPool(s.files.ClientCA)
		if err != nil {
			return err
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	s.cur.Store(cfg)
	return nil
}

// Current returns the configuration of the latest successful Reload:
// its certificate and, with mutual TLS, its client CA pool. It must not
// be modified.
func (s *Server) Current() *tls.Config { return s.cur.Load() }

// MutualTLS reports whether clients must present certificates.
func (s *Server) MutualTLS() bool { return s.files.ClientCA != "" }

// Config returns a configuration for tls.Server or tls.NewListener that
// picks up the latest successful Reload at every handshake.
func (s *Server) Config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.cur.Load(), nil
		},
	}
}

// LoadCAPool reads a PEM bundle of CA certificates.
func LoadCAPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tls: %s: no PEM certificates found", path)
	}
	return pool, nil
}

// ClientFiles names a client's PEM files, all optional: CA verifies the
// server (empty: the system roots); Cert and Key, both or neither, are
// the client's certificate for mutual TLS.
type ClientFiles struct {
	CA, Cert, Key string
}

// Enabled reports whether any TLS file was given, which turns TLS on.
func (f ClientFiles) Enabled() bool { return f.CA != "" || f.Cert != "" || f.Key != "" }

// ClientConfig builds a client configuration for serverName (the host of
// the address being dialed).
func ClientConfig(f ClientFiles, serverName string) (*tls.Config, error) {
	if (f.Cert == "") != (f.Key == "") {
		return nil, errors.New("tls: a client certificate and key go together: give both or neither")
	}
	cfg := &tls.Config{ServerName: serverName, MinVersion: tls.VersionTLS12}
	if f.CA != "" {
		pool, err := LoadCAPool(f.CA)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if f.Cert != "" {
		cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("tls: loading %s and %s: %w", f.Cert, f.Key, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// ClientConfigForAddr returns nil when no TLS file was given, else the
// configuration for dialing addr (host:port or a URL's host).
func ClientConfigForAddr(f *ClientFiles, addr string) (*tls.Config, error) {
	if !f.Enabled() {
		return nil, nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	return ClientConfig(*f, host)
}
