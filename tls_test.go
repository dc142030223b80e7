package baton

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/testpki"
	"github.com/batonlock/baton/server"
)

// selfSigned returns a certificate for 127.0.0.1 and a pool trusting it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	ca, err := testpki.NewCA("baton test CA")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := ca.Issue(testpki.Localhost("baton test"))
	if err != nil {
		t.Fatal(err)
	}
	return pair.TLS, ca.Pool()
}

// A *tls.Dialer makes the client speak TLS; a certificate that fails
// verification is a permanent error, so DoRetry does not spin on it.
func TestTLS(t *testing.T) {
	t.Parallel()
	cert, pool := selfSigned(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &server.Server{
		Logger:    slog.New(slog.DiscardHandler),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}},
	}
	served := make(chan struct{})
	go func() { defer close(served); srv.Serve(ln) }()
	defer func() { srv.Shutdown(context.Background()); <-served }()
	addr := ln.Addr().String()

	c := New(Config{Address: addr, Dialer: &tls.Dialer{Config: &tls.Config{RootCAs: pool}}})
	var token uint64
	if err := c.Do(t.Context(), "tls", time.Second, func(_ context.Context, tok uint64) error {
		token = tok
		return nil
	}); err != nil || token == 0 {
		t.Fatalf("Do over TLS: %v, token %d", err, token)
	}

	untrusting := New(Config{Address: addr, Dialer: &tls.Dialer{Config: &tls.Config{RootCAs: x509.NewCertPool()}}})
	err = untrusting.DoRetry(t.Context(), "tls", time.Second, func(context.Context, uint64) error {
		t.Error("fn ran without a trusted server")
		return nil
	})
	var cv *tls.CertificateVerificationError
	if !errors.As(err, &cv) || Temporary(err) {
		t.Fatalf("DoRetry with an untrusted certificate: %v (Temporary %v), want a permanent verification error", err, Temporary(err))
	}
}
