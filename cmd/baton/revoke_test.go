//go:build unix

package main

import (
	"crypto/tls"
	"syscall"
	"testing"

	"github.com/batonlock/baton/protocol"
)

// TestServeACLReloadRevokes: a real 'baton serve' with mutual TLS. A
// SIGHUP whose ACL no longer allows a waiter removes it with ERROR 0x18,
// so it is never granted later; with -acl-revoke-holders a holder the new
// rules refuse is ended too.
func TestServeACLReloadRevokes(t *testing.T) {
	t.Parallel()
	p := newSecurePKI(t)
	aclPath := p.aclPath()
	writeACL := func(s string) { p.writeACL(t, s) }
	writeACL(`{"rules": [{"identity": "spiffe://test/*", "locks": ["import/*"]}]}`)
	proc := startBaton(t, "-listen", "127.0.0.1:0", "-acl-revoke-holders",
		"-tls-cert", p.srvCert, "-tls-key", p.srvKey, "-tls-client-ca", p.ca, "-acl-file", aclPath)
	addr, _ := proc.waitLog(t, "baton listening")["addr"].(string)
	acquire := func(client string) *tls.Conn {
		c, err := tls.Dial("tcp", addr, p.clientConfig(t, client))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.Write(protocol.AppendAcquire(nil, protocol.Acquire{Version: 1, LeaseMS: 60_000, Name: "import/x"}))
		return c
	}
	holder := acquire("importer")
	if f := readFrameWithin(t, holder); f.Type != protocol.TypeAcquired {
		t.Fatalf("holder got %v", f)
	}
	waiter := acquire("reporter")
	if f := readFrameWithin(t, waiter); f.Type != protocol.TypeWaiting {
		t.Fatalf("waiter got %v", f)
	}

	// The reporter loses its permission: its queue place goes with it.
	writeACL(`{"rules": [{"identity": "spiffe://test/importer", "locks": ["import/*"]}]}`)
	proc.cmd.Process.Signal(syscall.SIGHUP)
	if n := proc.waitLog(t, "SIGHUP: claims the ACL no longer allows ended with 0x18")["claims"]; n != 1.0 {
		t.Errorf("reload ended %v claims, want 1", n)
	}
	if f := readFrameWithin(t, waiter); f.Type != protocol.TypeError || f.Code != protocol.CodeNotAuthorized {
		t.Errorf("revoked waiter got %v, want ERROR 0x18", f)
	}
	holder.Write(protocol.AppendHeartbeat(nil))
	if f := readFrameWithin(t, holder); f.Type != protocol.TypeAcquired {
		t.Errorf("permitted holder after the reload: %v, want ACQUIRED", f)
	}

	// Nobody may take import/*: the holder is ended as well.
	writeACL(`{"rules": [{"identity": "spiffe://test/importer", "locks": ["other/*"]}]}`)
	proc.cmd.Process.Signal(syscall.SIGHUP)
	if n := proc.waitLog(t, "SIGHUP: claims the ACL no longer allows ended with 0x18")["claims"]; n != 1.0 {
		t.Errorf("second reload ended %v claims, want 1", n)
	}
	if f := readFrameWithin(t, holder); f.Type != protocol.TypeError || f.Code != protocol.CodeNotAuthorized {
		t.Errorf("revoked holder got %v, want ERROR 0x18", f)
	}
}
