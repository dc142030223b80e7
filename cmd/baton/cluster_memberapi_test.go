package main

import (
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/cluster"
	"github.com/batonlock/baton/internal/memberclient"
	"github.com/batonlock/baton/internal/opstest"
)

// memberSecret is the cluster secret of the member API tests.
const memberSecret = "member-api-test-secret-0123456789"

// writeSecretFile writes memberSecret, with a trailing newline as an
// editor leaves it, to a file of its own.
func writeSecretFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cluster.secret")
	if err := os.WriteFile(path, []byte(memberSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// memberRequest sends a request to a node's member API at admin, with
// Host host (the address when empty), the headers given, and body.
func memberRequest(t *testing.T, admin, method, path, host, body string, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+admin+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// The member API of a real 'baton serve' node, through its admin
// listener: a web page's cross-site POST (a browser's headers, text/plain
// so no preflight), a rebound Host name, a write without the cluster's
// secret or with a body that is not a typed, bounded operation are all
// refused and counted, and the cluster's state is unchanged; the same
// write with the secret, as a member sends it, is applied. 'baton
// cluster' needs the secret too.
func TestClusterMemberAPIRefusesStrangers(t *testing.T) {
	t.Parallel()
	secretFile := writeSecretFile(t)
	f := startServe(t, func(c *serveConfig) {
		c.nodeID, c.dataDir, c.bootstrap = "n1", t.TempDir(), true
		c.raftListen, c.adminListen, c.opsListen = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
		// The name the other members reach it by: allowed as a Host.
		c.advertiseHost = "n1.baton.test"
		c.clusterSecretFile = secretFile
	})
	admin := f.addrs.admin
	_, port, _ := net.SplitHostPort(admin)
	bearer := "Bearer " + cluster.SecretToken([]byte(memberSecret))
	jsonSecret := map[string]string{"Content-Type": "application/json", "Authorization": bearer}
	lease := `{"lease_ms":3600000}`
	raw := `{"op":"raise_lease","lease":3600000000000}`
	browser := map[string]string{"Content-Type": "text/plain;charset=UTF-8", "Origin": "https://attacker.example",
		"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "empty"}
	cases := []struct {
		name, method, path, host, body string
		header                         map[string]string
		want                           int
		says                           string
	}{
		{"a cross-site page's POST", "POST", "/cluster/v1/lease", "", lease, browser, http.StatusForbidden, "cross-origin"},
		{"a cross-site page's raw apply", "POST", "/cluster/v1/apply", "", raw, browser, http.StatusForbidden, "cross-origin"},
		{"a cross-site page's join", "POST", "/cluster/v1/join", "", `{"id":"evil","raft_addr":"198.51.100.7:7080","protocol_addr":"198.51.100.7:7070"}`,
			browser, http.StatusForbidden, "cross-origin"},
		{"a rebound Host name", "POST", "/cluster/v1/lease", "attacker.example:" + port, lease, jsonSecret, http.StatusForbidden, "not allowed"},
		{"a rebound Host name's status", "GET", "/cluster/v1/status", "attacker.example:" + port, "", nil, http.StatusForbidden, "not allowed"},
		{"no secret", "POST", "/cluster/v1/lease", "", lease, map[string]string{"Content-Type": "application/json"}, http.StatusUnauthorized, "secret"},
		{"another secret", "POST", "/cluster/v1/lease", "", lease,
			map[string]string{"Content-Type": "application/json", "Authorization": "Bearer " + cluster.SecretToken([]byte("guess"))}, http.StatusForbidden, "secret"},
		{"text/plain with the secret", "POST", "/cluster/v1/lease", "", lease,
			map[string]string{"Content-Type": "text/plain", "Authorization": bearer}, http.StatusUnsupportedMediaType, "application/json"},
		{"a raw log entry", "POST", "/cluster/v1/apply", "", raw, jsonSecret, http.StatusNotFound, ""},
		{"a lease past the protocol's", "POST", "/cluster/v1/lease", "", `{"lease_ms":4294967296}`, jsonSecret, http.StatusBadRequest, "out of range"},
		{"an epoch floor", "POST", "/cluster/v1/epoch", "", `{"id":"n1","epoch_floor":16777217}`, jsonSecret, http.StatusBadRequest, "epoch_floor"},
	}
	for _, c := range cases {
		code, body := memberRequest(t, admin, c.method, c.path, c.host, c.body, c.header)
		if code != c.want || !strings.Contains(body, c.says) {
			t.Errorf("%s: %d %s, want %d saying %q", c.name, code, body, c.want, c.says)
		}
	}
	st := statusAt(t, admin)
	if st.MaxLease != "0s" || len(st.Members) != 1 {
		t.Fatalf("after the refused requests: largest lease %s, members %+v", st.MaxLease, st.Members)
	}
	m := scrape(t, f.addrs.ops)
	for reason, want := range map[string]float64{"cross_origin": 3, "host": 2, "secret": 2, "content_type": 1, "invalid": 2} {
		if got := m[`baton_cluster_member_api_refused_total{reason="`+reason+`"}`]; got != want {
			t.Errorf("refusals for %s: %v, want %v", reason, got, want)
		}
	}
	// As a member sends it: with the secret, to the recorded address
	// (the advertised name), applied.
	if code, body := memberRequest(t, admin, "POST", "/cluster/v1/lease", "n1.baton.test:"+port, `{"lease_ms":1500}`, jsonSecret); code != http.StatusOK {
		t.Fatalf("a member's write: %d %s", code, body)
	}
	if st := statusAt(t, admin); st.MaxLease != (1500 * time.Millisecond).String() {
		t.Errorf("largest lease %s after a member's write, want 1.5s", st.MaxLease)
	}
	// The CLI's writes: refused without the secret, taken with it (an
	// unknown member: 404, exit 3).
	if code, _, stderr := cli("cluster", "remove", "--admin", admin, "n9"); code != exitError || !strings.Contains(stderr, "401") {
		t.Errorf("'baton cluster remove' without the secret: exit %d, %s", code, stderr)
	}
	if code, _, stderr := cli("cluster", "remove", "--admin", admin, "--cluster-secret-file", secretFile, "n9"); code != exitAdminNotFound {
		t.Errorf("'baton cluster remove' with the secret: exit %d, %s", code, stderr)
	}
}

// statusAt reads GET /cluster/v1/status at a node's admin address.
func statusAt(t *testing.T, admin string) cluster.Status {
	t.Helper()
	n := &clusterProc{admin: admin, id: admin}
	st, err := status(t, n)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// A secret file that is too short, or missing, stops the node at start
// with a message naming the flag.
func TestClusterSecretFileErrors(t *testing.T) {
	short := filepath.Join(t.TempDir(), "short")
	if err := os.WriteFile(short, []byte("abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{short, filepath.Join(t.TempDir(), "missing")} {
		if _, _, err := memberclient.ReadSecret(path); err == nil || !strings.Contains(err.Error(), "-cluster-secret-file") {
			t.Errorf("%s: %v", path, err)
		}
	}
	got, old, err := memberclient.ReadSecret(writeSecretFile(t))
	if err != nil || string(got) != memberSecret || len(old) != 0 {
		t.Errorf("secret %q, old %q, %v", got, old, err)
	}
	if code, _, stderr := cli("serve", "-cluster-secret-file", short); code != exitUsage || !strings.Contains(stderr, "-node-id") {
		t.Errorf("-cluster-secret-file without -node-id: exit %d, %s", code, stderr)
	}
}

// Without a secret a node warns at start and still takes a member's JSON
// write, but a web page's cross-site POST, a rebound Host name and a body
// that is not JSON are refused as with one.
func TestClusterMemberAPIWithoutSecret(t *testing.T) {
	t.Parallel()
	f := startServe(t, func(c *serveConfig) {
		c.nodeID, c.dataDir, c.bootstrap = "n1", t.TempDir(), true
		c.raftListen, c.adminListen = "127.0.0.1:0", "127.0.0.1:0"
	})
	if !strings.Contains(f.logs.String(), "no -cluster-secret-file") {
		t.Errorf("no warning about the missing secret; logs:\n%s", f.logs.String())
	}
	admin := f.addrs.admin
	_, port, _ := net.SplitHostPort(admin)
	lease := `{"lease_ms":3600000}`
	browser := map[string]string{"Content-Type": "text/plain", "Origin": "http://attacker.example", "Sec-Fetch-Site": "cross-site"}
	for _, c := range []struct {
		name, host string
		header     map[string]string
		want       int
	}{
		{"a cross-site page's POST", "", browser, http.StatusForbidden},
		{"a rebound Host name", "attacker.example:" + port, map[string]string{"Content-Type": "application/json"}, http.StatusForbidden},
		{"text/plain", "", map[string]string{"Content-Type": "text/plain"}, http.StatusUnsupportedMediaType},
	} {
		if code, body := memberRequest(t, admin, "POST", "/cluster/v1/lease", c.host, lease, c.header); code != c.want {
			t.Errorf("%s: %d %s, want %d", c.name, code, body, c.want)
		}
	}
	if st := statusAt(t, admin); st.MaxLease != "0s" {
		t.Fatalf("largest lease %s after the refused requests", st.MaxLease)
	}
	if code, body := memberRequest(t, admin, "POST", "/cluster/v1/lease", "", `{"lease_ms":1500}`,
		map[string]string{"Content-Type": "application/json"}); code != http.StatusOK {
		t.Errorf("a member's write without a secret configured: %d %s", code, body)
	}
}

// Three nodes with one secret file: n3 joins through n2, a
// follower that forwards the join to the leader, every node takes its
// epoch through the leader, and 'baton cluster leave' works with the
// secret and is refused without it.
func TestClusterSecretThreeNodes(t *testing.T) {
	t.Parallel()
	secretFile := writeSecretFile(t)
	nodes := startClusterLib(t, func(c *serveConfig) { c.clusterSecretFile = secretFile })
	for _, n := range nodes {
		if st := waitStatus(t, n, "an epoch", func(st cluster.Status) bool { return st.Epochs[n.id] != 0 }); len(st.Members) != 3 {
			t.Errorf("%s: members %+v", n.id, st.Members)
		}
	}
	n3 := nodes["n3"]
	if code, _, stderr := cli("cluster", "leave", "--admin", n3.admin); code != exitError || !strings.Contains(stderr, "401") {
		t.Errorf("'baton cluster leave' without the secret: exit %d, %s", code, stderr)
	}
	if code, out, stderr := cli("cluster", "leave", "--admin", n3.admin, "--cluster-secret-file", secretFile); code != exitOK {
		t.Fatalf("'baton cluster leave' with the secret: exit %d, %s %s", code, out, stderr)
	}
	waitStatus(t, nodes["n1"], "a ring of 2", func(st cluster.Status) bool { return len(st.Ring) == 2 && len(st.Members) == 2 })
}

// SIGHUP reloads the secret file: a second line is accepted too, a file
// with the new secret alone refuses the old one, and a broken file keeps
// the secrets in force.
func TestClusterSecretReload(t *testing.T) {
	t.Parallel()
	secretFile := writeSecretFile(t)
	f := startServe(t, func(c *serveConfig) {
		c.nodeID, c.dataDir, c.bootstrap = "n1", t.TempDir(), true
		c.raftListen, c.adminListen = "127.0.0.1:0", "127.0.0.1:0"
		c.clusterSecretFile = secretFile
	})
	next := "the-next-cluster-secret-9876543210"
	write := func(t *testing.T, s string) {
		if err := os.WriteFile(secretFile, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	hups := 0
	hup := func(t *testing.T, want string) {
		t.Helper()
		hups++
		f.hup <- syscall.SIGHUP
		deadline := time.Now().Add(opstest.Timeout)
		for strings.Count(f.logs.String(), "cluster secret reloaded")+strings.Count(f.logs.String(), "cannot reload the cluster secret") < hups {
			if time.Now().After(deadline) {
				t.Fatalf("no reload logged; logs:\n%s", f.logs.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
		if !strings.Contains(f.logs.String(), want) {
			t.Errorf("logs lack %q:\n%s", want, f.logs.String())
		}
	}
	post := func(secret string) int {
		code, _ := memberRequest(t, f.addrs.admin, "POST", "/cluster/v1/lease", "", `{"lease_ms":1000}`,
			map[string]string{"Content-Type": "application/json", "Authorization": "Bearer " + cluster.SecretToken([]byte(secret))})
		return code
	}
	if a, b := post(memberSecret), post(next); a != http.StatusOK || b != http.StatusForbidden {
		t.Fatalf("before the change: old %d, next %d", a, b)
	}
	write(t, memberSecret+"\n"+next+"\n")
	hup(t, "also_accepted=1")
	if a, b := post(memberSecret), post(next); a != http.StatusOK || b != http.StatusOK {
		t.Errorf("accepting the next: old %d, next %d", a, b)
	}
	write(t, next+"\n")
	hup(t, "also_accepted=0")
	if a, b := post(memberSecret), post(next); a != http.StatusForbidden || b != http.StatusOK {
		t.Errorf("the next alone: old %d, next %d", a, b)
	}
	write(t, "short\n")
	hup(t, "cannot reload the cluster secret")
	if b := post(next); b != http.StatusOK {
		t.Errorf("after a broken file: next %d", b)
	}
}
