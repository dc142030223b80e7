package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// memberPost sends a POST to a member's admin listener as anyone could:
// body with Content-Type ctype (none when empty) and secret (none when
// empty). It returns the status and body.
func memberPost(t *testing.T, n *testNode, path, ctype, secret, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+n.admin.Addr().String()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	SetRequestSecret(req, []byte(secret))
	resp, err := n.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The member API writes nothing for a request without the cluster's
// secret (401) or with another one (403), and a node with another secret
// cannot join; with the secret a follower's write is forwarded to the
// leader and applied.
func TestMemberAPISecret(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	leader := leaderOf(t, nodes)
	follower := nodes[0]
	if follower == leader {
		follower = nodes[1]
	}
	for _, n := range []*testNode{leader, follower} {
		before := n.Metadata().MaxLease
		body := `{"lease_ms":3600000}`
		if code, msg := memberPost(t, n, pathLease, "application/json", "", body); code != http.StatusUnauthorized {
			t.Errorf("%s: a write without the secret: %d %s", n.ID(), code, msg)
		}
		if code, msg := memberPost(t, n, pathLease, "application/json", "another secret", body); code != http.StatusForbidden {
			t.Errorf("%s: a write with another secret: %d %s", n.ID(), code, msg)
		}
		if got := n.Metadata().MaxLease; got != before {
			t.Errorf("%s: refused writes raised the largest lease from %v to %v", n.ID(), before, got)
		}
		// A bare "Bearer" or another scheme is no secret either.
		req, _ := http.NewRequest(http.MethodPost, "http://"+n.admin.Addr().String()+pathLease, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Basic "+SecretToken([]byte(testSecret)))
		resp, err := n.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: the secret's token under another scheme: %d", n.ID(), resp.StatusCode)
		}
	}
	// The status stays readable without it (the admin API shows it too).
	resp, err := follower.client.Get("http://" + follower.admin.Addr().String() + pathStatus)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("status without the secret: %d", resp.StatusCode)
	}
	// With the secret, on a follower: forwarded to the leader, applied.
	if code, msg := memberPost(t, follower, pathLease, "application/json", testSecret, `{"lease_ms":1500}`); code != http.StatusOK {
		t.Fatalf("a write with the secret on a follower: %d %s", code, msg)
	}
	ctx := ctxT(t)
	if err := follower.waitFor(ctx, func(md *Metadata) bool { return md.MaxLease >= 1500*time.Millisecond }); err != nil {
		t.Fatalf("the forwarded lease was not applied: %v", err)
	}
	// A node with another secret is refused at once, not retried.
	stranger := startNodeWith(t, "node-9", filepath.Join(t.TempDir(), "node-9"), "127.0.0.1:0", "127.0.0.1:0", func(c *Config) {
		c.Secret = []byte("not the cluster's")
	})
	jctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err = stranger.Join(jctx, follower.admin.Addr().String())
	var he *httpError
	if !errors.As(err, &he) || he.Status != http.StatusForbidden {
		t.Errorf("a join with another secret: %v, want 403", err)
	}
	if _, ok := leader.Metadata().Members["node-9"]; ok {
		t.Error("a node with another secret was added")
	}
}

// The member API takes typed, checked operations only: no raw log entry
// (the writes that once raised the largest lease to an hour, pushed an
// epoch floor past 2^24 and added a serving member with an address of
// the sender's choice), no body that is not JSON, no field it does not
// know, no lease or epoch out of range; the cluster is unchanged by all
// of them, and a legitimate epoch still commits.
func TestMemberAPITypedWrites(t *testing.T) {
	t.Parallel()
	refusedCh := make(chan string, 64)
	nodes := startClusterWith(t, 3, func(c *Config) {
		c.OnRefused = func(r string) {
			select {
			case refusedCh <- r:
			default:
			}
		}
	})
	leader := leaderOf(t, nodes)
	before := leader.Metadata()
	floor := uint64(1<<24 + 1)
	cases := []struct {
		name, path, ctype, body string
		want                    int
	}{
		{"raw lease", "/cluster/v1/apply", "application/json", `{"op":"raise_lease","lease":3600000000000}`, http.StatusNotFound},
		{"raw epoch floor", "/cluster/v1/apply", "application/json",
			fmt.Sprintf(`{"op":"put_member","member":{"id":"node-1","raft_addr":"127.0.0.1:1","state":"serving"},"epoch_floor":%d}`, floor), http.StatusNotFound},
		{"raw member", "/cluster/v1/apply", "application/json",
			`{"op":"put_member","member":{"id":"evil","raft_addr":"127.0.0.1:1","protocol_addr":"198.51.100.7:7070","state":"serving"}}`, http.StatusNotFound},
		{"text/plain join", pathJoin, "text/plain", `{"id":"evil","raft_addr":"127.0.0.1:1"}`, http.StatusUnsupportedMediaType},
		{"no content type", pathLease, "", `{"lease_ms":3600000}`, http.StatusUnsupportedMediaType},
		{"form", pathLease, "application/x-www-form-urlencoded", `lease_ms=3600000`, http.StatusUnsupportedMediaType},
		{"epoch floor field", pathEpoch, "application/json", fmt.Sprintf(`{"id":"node-1","epoch_floor":%d}`, floor), http.StatusBadRequest},
		{"epoch of no member", pathEpoch, "application/json", `{"id":"evil"}`, http.StatusNotFound},
		{"lease 0", pathLease, "application/json", `{"lease_ms":0}`, http.StatusBadRequest},
		{"lease past u32", pathLease, "application/json", `{"lease_ms":4294967296}`, http.StatusBadRequest},
		{"lease negative", pathLease, "application/json", `{"lease_ms":-1}`, http.StatusBadRequest},
		{"lease as a raw duration", pathLease, "application/json", `{"lease":3600000000000}`, http.StatusBadRequest},
		{"two values", pathLease, "application/json", `{"lease_ms":1}{"lease_ms":4294967295}`, http.StatusBadRequest},
		{"handed, nothing pending", pathHanded, "application/json", `{"id":"node-1","version":99}`, http.StatusConflict},
		{"join without raft address", pathJoin, "application/json", `{"id":"evil","protocol_addr":"198.51.100.7:7070"}`, http.StatusBadRequest},
		{"join with a bad id", pathJoin, "application/json", `{"id":"e vil","raft_addr":"127.0.0.1:1"}`, http.StatusBadRequest},
	}
	for _, n := range nodes {
		for _, c := range cases {
			if code, msg := memberPost(t, n, c.path, c.ctype, testSecret, c.body); code != c.want {
				t.Errorf("%s, %s: %d %s, want %d", n.ID(), c.name, code, strings.TrimSpace(msg), c.want)
			}
		}
	}
	ctx := ctxT(t)
	// A legitimate epoch, through a follower, after all of them.
	var follower *testNode
	for _, n := range nodes {
		if n != leader {
			follower = n
		}
	}
	e, err := follower.AcquireEpoch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	after := leader.Metadata()
	if e != before.LastEpoch+1 || after.LastEpoch != e {
		t.Errorf("epoch %d after the refused writes; last epoch %d before, %d after", e, before.LastEpoch, after.LastEpoch)
	}
	if after.MaxLease != before.MaxLease {
		t.Errorf("largest lease %v, was %v", after.MaxLease, before.MaxLease)
	}
	if len(after.Members) != 3 || after.Members["evil"].ID != "" {
		t.Errorf("members %v", after.MemberList())
	}
	count := map[string]int{}
	for len(refusedCh) > 0 {
		count[<-refusedCh]++
	}
	if count[RefusedContentType] != 3*3 || count[RefusedInvalid] < 3*8 {
		t.Errorf("refusals counted %v, want %d content_type and at least %d invalid", count, 3*3, 3*8)
	}
}

// A secret is changed without a restart: every node accepts the new one
// first, then sends it, then drops the old one; members' writes go
// through at each step, and the old secret is refused at the end.
func TestMemberAPISecretRotation(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	leader := leaderOf(t, nodes)
	var follower *testNode
	for _, n := range nodes {
		if n != leader {
			follower = n
		}
	}
	ctx := ctxT(t)
	old, next := []byte(testSecret), []byte("the next secret of the cluster")
	step := func(what string, set func(n *testNode)) {
		t.Helper()
		for _, n := range nodes {
			set(n)
		}
		if _, err := follower.AcquireEpoch(ctx); err != nil {
			t.Fatalf("%s: a follower's epoch: %v", what, err)
		}
	}
	step("accept the next", func(n *testNode) { n.SetSecret(old, next) })
	// The follower sends the next secret before the others do.
	follower.SetSecret(next, old)
	if _, err := follower.AcquireEpoch(ctx); err != nil {
		t.Fatalf("the follower sending the next secret first: %v", err)
	}
	step("send the next", func(n *testNode) { n.SetSecret(next, old) })
	step("drop the old", func(n *testNode) { n.SetSecret(next) })
	if code, msg := memberPost(t, leader, pathLease, "application/json", testSecret, `{"lease_ms":1}`); code != http.StatusForbidden {
		t.Errorf("the old secret after the change: %d %s", code, msg)
	}
	// Accepted: a write that meets a leadership change is answered 503
	// (under load, "leadership lost while committing log"), and asked
	// again as a member does; a refused secret is 401 or 403 at once.
	code, msg := memberPost(t, leader, pathLease, "application/json", string(next), `{"lease_ms":1}`)
	for code == http.StatusServiceUnavailable && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
		code, msg = memberPost(t, leader, pathLease, "application/json", string(next), `{"lease_ms":1}`)
	}
	if code != http.StatusOK {
		t.Errorf("the new secret: %d %s", code, msg)
	}
}
