package main

import (
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/testpki"
	"github.com/batonlock/baton/protocol"
)

// securePKI writes a CA, a server certificate and two client
// certificates (identities by URI SAN) into a temporary directory.
type securePKI struct {
	dir, ca, srvCert, srvKey string
	caObj                    *testpki.CA
	clients                  map[string][2]string // name -> cert, key paths
}

func newSecurePKI(t *testing.T) *securePKI {
	t.Helper()
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	p := &securePKI{dir: t.TempDir(), clients: map[string][2]string{}}
	var err error
	p.caObj, err = testpki.NewCA("baton test CA")
	must(err)
	p.ca, err = p.caObj.WriteFile(p.dir, "ca")
	must(err)
	srv, err := p.caObj.Issue(testpki.Localhost("server-1"))
	must(err)
	p.srvCert, p.srvKey, err = srv.WriteFiles(p.dir, "server")
	must(err)
	for _, name := range []string{"importer", "reporter"} {
		c, err := p.caObj.Issue(testpki.Leaf{CommonName: name, URIs: []string{"spiffe://test/" + name}})
		must(err)
		cert, key, err := c.WriteFiles(p.dir, name)
		must(err)
		p.clients[name] = [2]string{cert, key}
	}
	return p
}

func (p *securePKI) tlsFlags(client string) []string {
	c := p.clients[client]
	return []string{"--tls-ca", p.ca, "--tls-cert", c[0], "--tls-key", c[1]}
}

func (p *securePKI) clientConfig(t *testing.T, client string) *tls.Config {
	c := p.clients[client]
	pair, err := tls.LoadX509KeyPair(c[0], c[1])
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{RootCAs: p.caObj.Pool(), ServerName: "localhost", Certificates: []tls.Certificate{pair}}
}

// aclPath is where writeACL puts the ACL file.
func (p *securePKI) aclPath() string { return filepath.Join(p.dir, "acl.json") }

// writeACL writes the ACL file (a reload needs SIGHUP).
func (p *securePKI) writeACL(t *testing.T, acl string) {
	t.Helper()
	if err := os.WriteFile(p.aclPath(), []byte(acl), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestServeMutualTLSWithACL runs a real 'baton serve' with mutual TLS
// and an ACL, and real 'baton run' and admin clients with TLS flags.
func TestServeMutualTLSWithACL(t *testing.T) {
	t.Parallel()
	p := newSecurePKI(t)
	aclPath := p.aclPath()
	writeACL := func(s string) { p.writeACL(t, s) }
	writeACL(`{"rules": [{"identity": "spiffe://test/importer", "locks": ["import/*"]}],
		"admin": [{"identity": "spiffe://test/importer", "actions": ["read"], "locks": ["import/*"]}]}`)
	proc := startBaton(t, "-listen", "127.0.0.1:0", "-admin-listen", "127.0.0.1:0", "-io-timeout", "1s",
		"-tls-cert", p.srvCert, "-tls-key", p.srvKey, "-tls-client-ca", p.ca, "-acl-file", aclPath)
	rec := proc.waitLog(t, "baton listening")
	addr, _ := rec["addr"].(string)
	adminAddr, _ := rec["admin_addr"].(string)
	if rec["tls"] != "mutual" {
		t.Errorf("startup log says tls=%v, want mutual", rec["tls"])
	}

	// Allowed: baton run over mTLS runs the command with the token.
	code, out, errOut := cli(append(append([]string{"run", "--server", addr}, p.tlsFlags("importer")...),
		"import/daily", "--", "sh", "-c", `echo "token=$BATON_TOKEN"`)...)
	if code != 0 || !strings.Contains(out, "token=") {
		t.Fatalf("allowed run: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// Denied by the ACL: 0x18, reported as refused (69), logged, and the
	// command never runs.
	code, out, errOut = cli(append(append([]string{"run", "--server", addr}, p.tlsFlags("reporter")...),
		"import/daily", "--", "echo", "ran")...)
	if code != exitUnavailable || strings.Contains(out, "ran") || !strings.Contains(errOut, "not authorized") {
		t.Fatalf("denied run: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	denial := proc.waitLog(t, "ACQUIRE denied by ACL")
	if denial["identity"] != "spiffe://test/reporter" || denial["lock"] != "import/daily" {
		t.Errorf("denial log %v", denial)
	}

	// A holder that stays through the reloads below.
	holder, err := tls.Dial("tcp", addr, p.clientConfig(t, "importer"))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	holder.Write(protocol.AppendAcquire(nil, protocol.Acquire{Version: 1, LeaseMS: 60_000, Name: "import/held"}))
	if f := readFrameWithin(t, holder); f.Type != protocol.TypeAcquired {
		t.Fatalf("holder got %v", f)
	}

	// Admin CLI over HTTPS with a client certificate.
	code, out, errOut = cli(append([]string{"locks", "--admin", adminAddr}, p.tlsFlags("importer")...)...)
	if code != 0 || !strings.Contains(out, "import/held") || !strings.Contains(out, "spiffe://test/importer") {
		t.Fatalf("baton locks over TLS: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// The admin rules allow the importer to read, not to release, and
	// give the reporter nothing.
	code, out, errOut = cli(append([]string{"release", "--admin", adminAddr, "import/held"}, p.tlsFlags("importer")...)...)
	if code == 0 || !strings.Contains(errOut, `identity "spiffe://test/importer" may not release lock "import/held"`) {
		t.Fatalf("baton release without the right: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = cli(append([]string{"locks", "--admin", adminAddr}, p.tlsFlags("reporter")...)...)
	if code == 0 || !strings.Contains(errOut, "may not read") {
		t.Fatalf("baton locks without admin rules: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	proc.waitLog(t, "admin: request denied by the ACL's admin rules")

	// SIGHUP with a rotated server certificate and a new ACL.
	next, err := p.caObj.Issue(testpki.Localhost("server-2"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := next.WriteFiles(p.dir, "server"); err != nil {
		t.Fatal(err)
	}
	writeACL(`{"rules": [{"identity": "spiffe://test/*", "locks": ["import/*"]}]}`)
	proc.cmd.Process.Signal(syscall.SIGHUP)
	proc.waitLog(t, "SIGHUP: ACL reloaded")
	c, err := tls.Dial("tcp", addr, p.clientConfig(t, "reporter"))
	if err != nil {
		t.Fatal(err)
	}
	if cn := c.ConnectionState().PeerCertificates[0].Subject.CommonName; cn != "server-2" {
		t.Errorf("after SIGHUP a new connection saw certificate %q, want server-2", cn)
	}
	c.Write(protocol.AppendAcquire(nil, protocol.Acquire{Version: 1, LeaseMS: 60_000, Name: "import/daily"}))
	if f := readFrameWithin(t, c); f.Type != protocol.TypeAcquired {
		t.Errorf("reporter after the ACL reload: %v, want ACQUIRED", f)
	}
	c.Close()

	// A broken ACL on reload keeps the rules in force.
	writeACL(`{"rules": [{"identity": "spiffe://test/*"}]}`)
	proc.cmd.Process.Signal(syscall.SIGHUP)
	proc.waitLog(t, "SIGHUP: cannot reload the ACL; keeping the previous rules")
	c, err = tls.Dial("tcp", addr, p.clientConfig(t, "reporter"))
	if err != nil {
		t.Fatal(err)
	}
	c.Write(protocol.AppendAcquire(nil, protocol.Acquire{Version: 1, LeaseMS: 60_000, Name: "import/weekly"}))
	if f := readFrameWithin(t, c); f.Type != protocol.TypeAcquired {
		t.Errorf("after a broken ACL reload: %v, want ACQUIRED under the previous rules", f)
	}
	c.Close()

	// The holder kept its lock and its connection through both reloads.
	holder.Write(protocol.AppendHeartbeat(nil))
	if f := readFrameWithin(t, holder); f.Type != protocol.TypeAcquired {
		t.Errorf("holder after reloads: %v", f)
	}

	// Plaintext against the TLS port fails cleanly and is logged.
	plain, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	plain.Write(protocol.AppendAcquire(nil, protocol.Acquire{Version: 1, LeaseMS: 1000, Name: "import/x"}))
	plain.SetReadDeadline(time.Now().Add(10 * time.Second))
	if f, err := protocol.ReadServerFrame(plain); err == nil && f.Type == protocol.TypeAcquired {
		t.Error("a plaintext client was granted a lock on the TLS port")
	}
	plain.Close()
	proc.waitLog(t, "TLS handshake failed")

	// A client that connects and never starts the handshake is closed
	// after io-timeout (1s).
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	start := time.Now()
	silent.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = silent.Read(make([]byte, 1))
	waited := time.Since(start)
	var ne net.Error
	if err == nil || errors.As(err, &ne) && ne.Timeout() || waited < 900*time.Millisecond || waited > 5*time.Second {
		t.Errorf("silent client: read %v after %v, want the server to close it after about 1s", err, waited)
	}
}

func readFrameWithin(t *testing.T, c net.Conn) protocol.ServerFrame {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	f, err := protocol.ReadServerFrame(c)
	if err != nil {
		t.Fatalf("reading a frame: %v", err)
	}
	return f
}

// An ACL without lock rules denies every ACQUIRE: the server says so when
// it starts.
func TestServeEmptyACLWarns(t *testing.T) {
	t.Parallel()
	p := newSecurePKI(t)
	p.writeACL(t, `{"rules": []}`)
	proc := startBaton(t, "-listen", "127.0.0.1:0", "-tls-cert", p.srvCert, "-tls-key", p.srvKey,
		"-tls-client-ca", p.ca, "-acl-file", p.aclPath())
	rec := proc.waitLog(t, "the ACL has no lock rules: every ACQUIRE is denied (add \"rules\" to the ACL file; see docs/security.md)")
	if rec["level"] != "WARN" {
		t.Errorf("logged at %v, want WARN", rec["level"])
	}
}

func TestServeSecurityFlagCombinations(t *testing.T) {
	t.Parallel()
	p := newSecurePKI(t)
	for _, c := range []struct {
		args []string
		want string
		code int
	}{
		{[]string{"-tls-cert", p.srvCert}, "go together", exitUsage},
		{[]string{"-tls-key", p.srvKey}, "go together", exitUsage},
		{[]string{"-tls-client-ca", p.ca}, "needs TLS", exitUsage},
		{[]string{"-acl-file", "acl.json"}, "needs client identities", exitUsage},
		{[]string{"-tls-cert", p.srvCert, "-tls-key", p.srvKey, "-acl-file", "acl.json"}, "needs client identities", exitUsage},
		{[]string{"-tls-cert", filepath.Join(p.dir, "missing.crt"), "-tls-key", p.srvKey}, "missing.crt", exitError},
		{[]string{"-tls-cert", p.srvCert, "-tls-key", p.srvKey, "-tls-client-ca", p.ca, "-acl-file", filepath.Join(p.dir, "missing.json")}, "missing.json", exitError},
	} {
		code, _, errOut := cli(append([]string{"serve", "-listen", "127.0.0.1:0"}, c.args...)...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("serve %v: exit %d, stderr %q; want exit %d mentioning %q", c.args, code, errOut, c.code, c.want)
		}
	}
	code, _, errOut := cli("run", "--tls-cert", p.clients["importer"][0], "x", "--", "true")
	if code != exitUsage || !strings.Contains(errOut, "both or neither") {
		t.Errorf("run with a client cert and no key: exit %d, stderr %q", code, errOut)
	}
}
