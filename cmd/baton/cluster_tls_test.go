package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/audit"
	"github.com/batonlock/baton/cluster"
	"github.com/batonlock/baton/internal/opstest"
	"github.com/batonlock/baton/internal/testpki"
	"github.com/batonlock/baton/protocol"
)

// clusterPKI is a CA and certificate files for the nodes (identity
// spiffe://baton.test/node/ID), a client that is not a node, and the
// -cluster-identity pattern.
type clusterPKI struct {
	dir, ca   string
	authority *testpki.CA
	files     map[string][2]string // name -> cert, key paths
	pairs     map[string]*testpki.Pair
}

const nodeIdentity = "spiffe://baton.test/node/*"

func newClusterPKI(t *testing.T, names ...string) *clusterPKI {
	t.Helper()
	dir := t.TempDir()
	ca, err := testpki.NewCA("baton cluster test CA")
	if err != nil {
		t.Fatal(err)
	}
	p := &clusterPKI{dir: dir, authority: ca, files: map[string][2]string{}, pairs: map[string]*testpki.Pair{}}
	if p.ca, err = ca.WriteFile(dir, "ca"); err != nil {
		t.Fatal(err)
	}
	for _, name := range append(names, "app") {
		leaf := testpki.Localhost(name)
		leaf.URIs = []string{"spiffe://baton.test/node/" + name}
		if name == "app" {
			leaf.URIs = []string{"spiffe://baton.test/app/worker"}
		}
		pair, err := ca.Issue(leaf)
		if err != nil {
			t.Fatal(err)
		}
		c, k, err := pair.WriteFiles(dir, name)
		if err != nil {
			t.Fatal(err)
		}
		p.files[name], p.pairs[name] = [2]string{c, k}, pair
	}
	return p
}

// tlsArgs are the TLS flags of node name.
func (p *clusterPKI) tlsArgs(name string) []string {
	return []string{"-tls-cert", p.files[name][0], "-tls-key", p.files[name][1], "-tls-client-ca", p.ca, "-cluster-identity", nodeIdentity}
}

// cliTLS are the TLS flags of a 'baton cluster' command with name's
// certificate.
func (p *clusterPKI) cliTLS(name string) []string {
	return []string{"--tls-ca", p.ca, "--tls-cert", p.files[name][0], "--tls-key", p.files[name][1]}
}

// clientConfig is a TLS client configuration with name's certificate.
func (p *clusterPKI) clientConfig(name string) *tls.Config {
	return &tls.Config{RootCAs: p.authority.Pool(), Certificates: []tls.Certificate{p.pairs[name].TLS}, ServerName: "127.0.0.1"}
}

// startTLSNode starts node id with TLS; join is the admin address to
// join through, "" to bootstrap, or "-" for neither.
func startTLSNode(t *testing.T, pki *clusterPKI, id, join string, extra ...string) *clusterProc {
	t.Helper()
	args := []string{"-node-id", id, "-listen", "127.0.0.1:0", "-raft-listen", "127.0.0.1:0",
		"-admin-listen", "127.0.0.1:0", "-ops-listen", "127.0.0.1:0", "-data-dir", filepath.Join(t.TempDir(), id)}
	args = append(args, pki.tlsArgs(id)...)
	switch join {
	case "":
		args = append(args, "-bootstrap")
	case "-":
	default:
		args = append(args, "-join", join)
	}
	p := startBaton(t, append(args, extra...)...)
	c := &clusterProc{batonProc: p, id: id}
	if join == "-" {
		rec := p.waitLog(t, "waiting to be added to a cluster: run 'baton cluster join --admin THIS_NODE_ADMIN MEMBER_ADMIN'")
		c.admin, _ = rec["admin_addr"].(string)
		c.ops, _ = rec["ops_addr"].(string)
		return c
	}
	rec := p.waitLog(t, "baton listening")
	c.addr, _ = rec["addr"].(string)
	c.admin, _ = rec["admin_addr"].(string)
	c.ops, _ = rec["ops_addr"].(string)
	return c
}

// tlsStatus reads a node's member API status with name's certificate.
func tlsStatus(pki *clusterPKI, name string, n *clusterProc) (cluster.Status, error) {
	var st cluster.Status
	tr := &http.Transport{TLSClientConfig: pki.clientConfig(name)}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: opstest.Timeout}).Get("https://" + n.admin + "/cluster/v1/status")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("status %d", resp.StatusCode)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

func waitTLSStatus(t *testing.T, pki *clusterPKI, n *clusterProc, what string, cond func(cluster.Status) bool) cluster.Status {
	t.Helper()
	deadline := time.Now().Add(2 * opstest.Timeout)
	for {
		st, err := tlsStatus(pki, n.id, n)
		if err == nil && cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no %s within %v: %+v (err %v)", n.id, what, 2*opstest.Timeout, st, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// dialTLS connects to a protocol port with name's certificate.
func dialTLS(t *testing.T, pki *clusterPKI, name, addr string) *tls.Conn {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: opstest.Timeout}, "tcp", addr, pki.clientConfig(name))
	if err != nil {
		t.Fatalf("TLS dial %s as %s: %v", addr, name, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func readFrame(t *testing.T, c net.Conn) protocol.ServerFrame {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(opstest.Timeout))
	f, err := opstest.ReadFrame(c)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return f
}

// tlsGrant acquires name over TLS as the client "app" through addr,
// heartbeating through the warm-up, until it is granted.
func tlsGrant(t *testing.T, pki *clusterPKI, addr, name string, lease time.Duration) (*tls.Conn, uint64) {
	t.Helper()
	start := time.Now()
	c := dialTLS(t, pki, "app", addr)
	c.Write(opstest.AcquireFrame(name, lease))
	for {
		f := readFrame(t, c)
		switch {
		case f.Type == protocol.TypeAcquired:
			t.Logf("%s granted via %s after %v", name, addr, time.Since(start))
			return c, f.Token
		case f.Type != protocol.TypeWaiting:
			t.Fatalf("%s via %s: %v", name, addr, f)
		case time.Since(start) > 2*opstest.Timeout:
			t.Fatalf("%s via %s: not granted within %v", name, addr, 2*opstest.Timeout)
		}
		time.Sleep(50 * time.Millisecond)
		c.Write(protocol.AppendHeartbeat(nil))
	}
}

// Three 'baton serve' processes with TLS: they form a cluster over mutual
// TLS (Raft, member API), relay a version 1 client through an mTLS hop,
// accept a hop header only from a node's certificate, answer 'baton
// cluster status' over TLS, refuse member writes from a client's
// certificate, add a 4th node with 'baton cluster join', and write the
// membership changes to the audit log.
func TestClusterTLS(t *testing.T) {
	// Serial (no t.Parallel): it bounds the relayed acquire's median latency.
	pki := newClusterPKI(t, "n1", "n2", "n3", "n4")
	auditPath := filepath.Join(t.TempDir(), "audit.log")
	n1 := startTLSNode(t, pki, "n1", "", "-audit-log", auditPath)
	n2 := startTLSNode(t, pki, "n2", n1.admin)
	n3 := startTLSNode(t, pki, "n3", n2.admin) // through a follower
	nodes := map[string]*clusterProc{"n1": n1, "n2": n2, "n3": n3}
	for _, n := range nodes {
		waitTLSStatus(t, pki, n, "a ring of 3", func(st cluster.Status) bool { return len(st.Ring) == 3 })
	}

	// The member API over plain HTTP, or with a client's certificate for
	// a write, is refused.
	if _, err := status(t, n1); err == nil {
		t.Errorf("member API over plain HTTP answered")
	}
	if code, out, errOut := cli(append([]string{"cluster", "remove", "--admin", n1.admin, "n3"}, pki.cliTLS("app")...)...); code != exitError ||
		!strings.Contains(errOut, "not a cluster node's") {
		t.Errorf("baton cluster remove with a client's certificate = %d, %q, %q; want 1 and a refusal", code, out, errOut)
	}

	// A relayed acquire: the client at n2 (TLS), the owner n1, the hop
	// mutual TLS with n2's certificate. Twice: see TestClusterThreeNodesContend.
	const lease = 2 * time.Second
	name := nameOwnedBy(t, "n1", "tls")
	for range 2 {
		c, tok := tlsGrant(t, pki, n2.addr, name, lease)
		st, err := tlsStatus(pki, "n1", n1)
		if err != nil {
			t.Fatal(err)
		}
		if epoch, _ := cluster.SplitToken(tok); epoch == 0 || epoch != st.Epochs["n1"] {
			t.Fatalf("token %#x has epoch %d, want the owner's epoch %d", tok, epoch, st.Epochs["n1"])
		}
		c.Close()
		waitTLSFree(t, pki, n1, name)
	}
	// Latency of a version 1 acquire over TLS (TLS connect, ACQUIRE,
	// ACQUIRED, close), direct to the owner and relayed (a second, mutual
	// TLS, connection to the owner).
	direct := tlsAcquireLatency(t, pki, n1.addr, "tls-direct")
	relayed := tlsAcquireLatency(t, pki, n2.addr, "tls-relayed")
	t.Logf("TLS acquire latency, direct: median %v, p90 %v; relayed: median %v, p90 %v",
		direct[len(direct)/2], direct[len(direct)*9/10], relayed[len(relayed)/2], relayed[len(relayed)*9/10])
	if m := relayed[len(relayed)/2]; m > 200*time.Millisecond {
		t.Errorf("relayed TLS acquire median %v, want well under 200ms on loopback", m)
	}
	if got := scrape(t, n2.ops)["baton_cluster_relayed_connections_total"]; got < 2 {
		t.Errorf("n2 relayed %v connections, want at least 2", got)
	}

	// A version 2 session at n3 (TLS): its claim on n1's name goes
	// through an upstream session over a mutual TLS hop with n3's
	// certificate, and is granted with n1's token.
	v2Name := nameOwnedBy(t, "n1", "tls-v2")
	sess, err := baton.New(baton.Config{Address: n3.addr, Dialer: &tls.Dialer{Config: pki.clientConfig("app")}}).
		OpenSession(t.Context(), baton.SessionOptions{Lease: lease, Label: "tls-v2"})
	if err != nil {
		t.Fatalf("v2 session over TLS at n3: %v", err)
	}
	defer sess.Close()
	cl, err := sess.Acquire(t.Context(), v2Name, baton.Exclusive)
	if err != nil {
		t.Fatalf("v2 claim of %s via n3: %v", v2Name, err)
	}
	if st, err := tlsStatus(pki, "n1", n1); err != nil {
		t.Fatal(err)
	} else if epoch, _ := cluster.SplitToken(cl.Token()); epoch != st.Epochs["n1"] {
		t.Errorf("relayed v2 token %#x has epoch %d, want the owner's %d", cl.Token(), epoch, st.Epochs["n1"])
	}
	if got := scrape(t, n3.ops)["baton_cluster_upstream_sessions"]; got != 1 {
		t.Errorf("n3 holds %v upstream sessions, want 1", got)
	}
	if err := cl.Release(t.Context()); err != nil {
		t.Errorf("release of the relayed v2 claim: %v", err)
	}
	sess.Close()
	waitTLSFree(t, pki, n1, v2Name)

	// A hop header from a client with a valid certificate that is not a
	// node's: ERROR 0x13. From a node's certificate: accepted, and the
	// owner sees the client identity the header carries.
	hop := append(protocol.AppendHop(nil, "192.0.2.7:4242", "spiffe://baton.test/app/relayed"), opstest.AcquireFrame(name, lease)...)
	c := dialTLS(t, pki, "app", n1.addr)
	c.Write(hop)
	if f := readFrame(t, c); f.Type != protocol.TypeError || f.Code != protocol.CodeUnknownMessage {
		t.Fatalf("hop header from a client's certificate: %v, want ERROR 0x13", f)
	}
	c = dialTLS(t, pki, "n2", n1.addr)
	c.Write(hop)
	if f := readFrame(t, c); f.Type != protocol.TypeAcquired {
		t.Fatalf("hop header from node n2's certificate: %v, want ACQUIRED", f)
	}
	code, out, errOut := cli(append([]string{"show", "--admin", "https://" + n1.admin, "--json", name}, pki.cliTLS("n1")...)...)
	if code != 0 || !strings.Contains(out, "spiffe://baton.test/app/relayed") || !strings.Contains(out, "192.0.2.7:4242") {
		t.Errorf("baton show on the owner = %d, %q, %q: want the relayed client's identity and address", code, out, errOut)
	}
	c.Write([]byte{0x7e}) // "the client hung up", as a relaying node says it
	c.Close()
	waitTLSFree(t, pki, n1, name)

	// baton cluster status over TLS, with a client's certificate (no
	// ACL: status is open to any verified identity).
	code, out, errOut = cli(append([]string{"cluster", "status", "--admin", n2.admin}, pki.cliTLS("app")...)...)
	t.Logf("baton cluster status over TLS:\n%s", out)
	if code != 0 || strings.Contains(out, "unreachable") || strings.Count(out, "serving") != 3 {
		t.Fatalf("baton cluster status = %d, %q, %q: want three serving members, all reachable", code, out, errOut)
	}
	for id, n := range nodes {
		if code := readyz(t, n); code != http.StatusOK {
			t.Errorf("%s: /readyz = %d, want 200", id, code)
		}
	}

	// A 4th node started with neither -bootstrap nor -join waits; 'baton
	// cluster join' (with its certificate) has a member add it.
	n4 := startTLSNode(t, pki, "n4", "-")
	if code := readyz(t, n4); code != http.StatusServiceUnavailable {
		t.Errorf("n4 waiting to be added: /readyz = %d, want 503", code)
	}
	code, out, errOut = cli(append([]string{"cluster", "join", "--admin", n4.admin, n3.admin}, pki.cliTLS("n4")...)...)
	if code != 0 || !strings.Contains(out, "n4 joined the cluster: ring version 4") {
		t.Fatalf("baton cluster join = %d, %q, %q", code, out, errOut)
	}
	n4.addr, _ = n4.waitLog(t, "baton listening")["addr"].(string)
	for _, n := range []*clusterProc{n1, n2, n3, n4} {
		waitTLSStatus(t, pki, n, "a ring of 4", func(st cluster.Status) bool { return len(st.Ring) == 4 })
	}
	waitReady(t, n4)
	if code, out, _ := cli(append([]string{"cluster", "join", "--admin", n4.admin, n1.admin}, pki.cliTLS("n4")...)...); code != 0 || !strings.Contains(out, "already serves") {
		t.Errorf("baton cluster join again = %d, %q", code, out)
	}

	// n1's audit log: the joins and the rings, in order.
	want := []string{"cluster_join n1", "cluster_ring 1 n1", "cluster_join n2", "cluster_ring 2 n1,n2",
		"cluster_join n3", "cluster_ring 3 n1,n2,n3", "cluster_join n4", "cluster_ring 4 n1,n2,n3,n4"}
	var got []string
	deadline := time.Now().Add(opstest.Timeout)
	for {
		got = clusterAudit(t, auditPath)
		if len(got) >= len(want) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !slices.Equal(got, want) {
		t.Errorf("n1's audit log of cluster changes:\n%v\nwant\n%v", got, want)
	}
	m := scrape(t, n1.ops)
	if m[`baton_cluster_membership_changes_total{kind="join"}`] != 4 || m[`baton_cluster_membership_changes_total{kind="ring"}`] != 4 {
		t.Errorf("n1 membership metrics: %v", m)
	}
}

// clusterAudit summarises the cluster records of an audit log.
func clusterAudit(t *testing.T, path string) []string {
	t.Helper()
	b, _ := os.ReadFile(path)
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var r audit.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		switch {
		case r.Event == audit.ClusterRing && r.RingVersion != nil:
			out = append(out, fmt.Sprintf("%s %d %s", r.Event, *r.RingVersion, strings.Join(r.Ring, ",")))
		case strings.HasPrefix(r.Event, "cluster_") && r.Member != nil:
			out = append(out, r.Event+" "+r.Member.ID)
		}
	}
	return out
}

// waitTLSFree waits until the owner's admin API (over TLS) shows name
// not held.
func waitTLSFree(t *testing.T, pki *clusterPKI, owner *clusterProc, name string) {
	t.Helper()
	deadline := time.Now().Add(opstest.Timeout)
	for {
		code, out, errOut := cli(append([]string{"show", "--admin", "https://" + owner.admin, name}, pki.cliTLS(owner.id)...)...)
		if code == exitAdminNotFound {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still held at %s after %v: %d %q %q", name, owner.id, opstest.Timeout, code, out, errOut)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// readyz returns the status code of a node's /readyz.
func readyz(t *testing.T, n *clusterProc) int {
	t.Helper()
	resp, err := http.Get("http://" + n.ops + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// A node whose own certificate identity does not match -cluster-identity
// does not start: the other members would refuse it.
func TestClusterTLSOwnIdentityMismatch(t *testing.T) {
	pki := newClusterPKI(t, "n1")
	args := []string{"serve", "-node-id", "n1", "-listen", "127.0.0.1:0", "-raft-listen", "127.0.0.1:0",
		"-admin-listen", "127.0.0.1:0", "-data-dir", t.TempDir(), "-bootstrap",
		"-tls-cert", pki.files["n1"][0], "-tls-key", pki.files["n1"][1], "-tls-client-ca", pki.ca,
		"-cluster-identity", "spiffe://baton.test/nodes/*", "-log-format", "json"}
	code, _, errOut := cli(args...)
	if code != exitError || !strings.Contains(errOut, `does not match -cluster-identity`) {
		t.Fatalf("exit %d, stderr %q; want 1 and the mismatch", code, errOut)
	}
}

// tlsAcquireLatency measures 100 uncontended acquires over TLS at addr,
// each of its own name owned by n1, on a new connection; sorted.
func tlsAcquireLatency(t *testing.T, pki *clusterPKI, addr, prefix string) []time.Duration {
	t.Helper()
	r := cluster.NewRing(0, []string{"n1", "n2", "n3"})
	var ds []time.Duration
	for i := 0; len(ds) < 100 && i < 10000; i++ {
		name := fmt.Sprintf("%s-%d", prefix, i)
		if r.Owner(name) != "n1" {
			continue
		}
		start := time.Now()
		c := dialTLS(t, pki, "app", addr)
		c.Write(opstest.AcquireFrame(name, 2*time.Second))
		if f := readFrame(t, c); f.Type != protocol.TypeAcquired {
			t.Fatalf("%s via %s: %v", name, addr, f)
		}
		ds = append(ds, time.Since(start))
		c.Close()
	}
	slices.Sort(ds)
	return ds
}

// waitReady waits, bounded, until a node's /readyz answers 200.
func waitReady(t *testing.T, n *clusterProc) {
	t.Helper()
	deadline := time.Now().Add(2 * opstest.Timeout)
	for readyz(t, n) != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatalf("%s: /readyz not 200 within %v", n.id, 2*opstest.Timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
