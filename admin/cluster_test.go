package admin_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton/admin"
)

// fakeCluster is a ClusterSource of two members; n2 owns the names
// starting with "b", n1 the others. With gate set, each status call
// waits until gate is closed. Each status has the number of the call as
// its ring version.
type fakeCluster struct {
	calls  atomic.Int32
	gate   chan struct{}
	err    error
	noRing bool
}

func (f *fakeCluster) ClusterStatus(ctx context.Context) (admin.ClusterStatus, error) {
	n := f.calls.Add(1)
	if f.gate != nil {
		select {
		case <-f.gate:
		case <-ctx.Done():
			return admin.ClusterStatus{}, ctx.Err()
		}
	}
	if f.err != nil {
		return admin.ClusterStatus{}, f.err
	}
	return admin.ClusterStatus{Node: "n1", RaftState: "Leader", Epoch: 7, Leader: "n1", RingVersion: uint64(n), Ring: []string{"n1", "n2"},
		Members: []admin.ClusterMember{{ID: "n1", Leader: true, Self: true}, {ID: "n2"}}}, nil
}

func (f *fakeCluster) ClusterOwner(name string) (admin.ClusterMember, uint64, bool) {
	if f.noRing {
		return admin.ClusterMember{}, 0, false
	}
	if strings.HasPrefix(name, "b") {
		return admin.ClusterMember{ID: "n2", AdminAddr: "127.0.0.1:2"}, 3, true
	}
	return admin.ClusterMember{ID: "n1", Self: true}, 3, true
}

// TestClusterStatusShared: every caller within maxAge gets one status;
// callers that arrive while it is being taken wait for it instead of
// asking the members again; a caller that goes away does not spoil it
// for the others; after maxAge the status is taken again.
func TestClusterStatusShared(t *testing.T) {
	f := &fakeCluster{gate: make(chan struct{})}
	var arrived atomic.Int32
	ch := admin.ClusterHandler(f, time.Hour)
	_, _, base := dash(t, false, admin.Config{Cluster: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		ch.ServeHTTP(w, r)
	})})
	waitArrived := func(n int32) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); arrived.Load() < n; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d requests reached the handler, want %d", arrived.Load(), n)
			}
		}
	}

	// The first caller gives up while the status is being taken.
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "GET", base+"/api/cluster", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		gone <- err
	}()
	waitArrived(1)
	cancel()
	if err := <-gone; err == nil {
		t.Fatal("the cancelled request succeeded")
	}
	// Eight more wait for the same status.
	var wg sync.WaitGroup
	got := make([]admin.ClusterStatus, 8)
	for i := range got {
		wg.Go(func() { got[i] = getJSON[admin.ClusterStatus](t, base+"/api/cluster") })
	}
	waitArrived(9)
	close(f.gate)
	wg.Wait()
	for i, st := range got {
		if st.Node != "n1" || st.RingVersion != 1 || len(st.Members) != 2 {
			t.Errorf("caller %d got %+v, want the one shared status (version 1)", i, st)
		}
	}
	if n := f.calls.Load(); n != 1 {
		t.Errorf("the status was taken %d times for 9 callers within maxAge, want once", n)
	}

	// After maxAge, a fresh one.
	g := &fakeCluster{}
	_, _, base = dash(t, false, admin.Config{Cluster: admin.ClusterHandler(g, 50*time.Millisecond)})
	first := getJSON[admin.ClusterStatus](t, base+"/api/cluster")
	getJSON[admin.ClusterStatus](t, base+"/api/cluster")
	time.Sleep(60 * time.Millisecond)
	later := getJSON[admin.ClusterStatus](t, base+"/api/cluster")
	if first.RingVersion != 1 || later.RingVersion != 2 || g.calls.Load() != 2 {
		t.Errorf("statuses %d then %d after %d calls, want 1 then 2 after 2", first.RingVersion, later.RingVersion, g.calls.Load())
	}
}

// TestClusterEndpoints: the owner lookup, its errors, a node that
// cannot answer, and the rules of the admin API around them.
func TestClusterEndpoints(t *testing.T) {
	f := &fakeCluster{}
	_, _, base := dash(t, false, admin.Config{Cluster: admin.ClusterHandler(f, 0)})
	if i := getJSON[admin.Info](t, base+"/api/info"); !i.Cluster {
		t.Error("info does not say clustered")
	}
	o := getJSON[admin.ClusterOwner](t, base+"/api/cluster/owner?name="+url.QueryEscape("build/α"))
	if o.Name != "build/α" || o.Owner == nil || o.Owner.ID != "n2" || o.Owner.AdminAddr != "127.0.0.1:2" || o.RingVersion != 3 {
		t.Errorf("owner of build/α = %+v", o)
	}
	if o := getJSON[admin.ClusterOwner](t, base+"/api/cluster/owner?name=deploy"); o.Owner == nil || o.Owner.ID != "n1" || !o.Owner.Self {
		t.Errorf("owner of deploy = %+v", o)
	}
	for path, want := range map[string]int{
		"/api/cluster/owner":                                   400, // no name
		"/api/cluster/owner?name=":                             400,
		"/api/cluster/owner?name=" + strings.Repeat("x", 2000): 400, // too long for a lock name
		"/api/cluster/owner?name=%FF":                          400, // not UTF-8
		"/api/cluster/nope":                                    404,
		"/api/cluster/owner/x":                                 404,
	} {
		if code, _, body := call(t, "GET", base+path); code != want || body["error"] == "" {
			t.Errorf("GET %.60s = %d %v, want %d with an error", path, code, body, want)
		}
	}
	if code, hdr, _ := call(t, "POST", base+"/api/cluster/owner?name=x"); code != 405 || hdr.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /api/cluster/owner = %d, Allow %q; want 405", code, hdr.Get("Allow"))
	}

	// No ring applied yet: no owner, and that is an answer, not an error.
	_, _, nbase := dash(t, false, admin.Config{Cluster: admin.ClusterHandler(&fakeCluster{noRing: true}, 0)})
	if o := getJSON[admin.ClusterOwner](t, nbase+"/api/cluster/owner?name=x"); o.Owner != nil || o.RingVersion != 0 {
		t.Errorf("owner without a ring = %+v, want none", o)
	}
	// A node that cannot answer (starting): 503, and nothing cached.
	s := &fakeCluster{err: errors.New("cluster node starting")}
	_, _, sbase := dash(t, false, admin.Config{Cluster: admin.ClusterHandler(s, time.Hour)})
	for range 2 {
		if code, _, body := call(t, "GET", sbase+"/api/cluster"); code != 503 || body["error"] != "cluster node starting" {
			t.Errorf("GET /api/cluster of a starting node = %d %v, want 503", code, body)
		}
	}
	if s.calls.Load() != 2 {
		t.Errorf("a failed status was reused: %d calls for 2 requests", s.calls.Load())
	}

	// The admin API's rules hold: the ACL's read rule and the Host check.
	_, _, dbase := dash(t, false, admin.Config{Authorizer: denyAll{}, Cluster: admin.ClusterHandler(f, 0)})
	for _, p := range []string{"/api/cluster", "/api/cluster/owner?name=x"} {
		if code, _, _ := call(t, "GET", dbase+p); code != 403 {
			t.Errorf("GET %s refused by the ACL = %d, want 403", p, code)
		}
		if code, _ := rawRequest(t, strings.TrimPrefix(base, "http://"), "GET", p, "evil.example"); code != 403 {
			t.Errorf("GET %s with a foreign Host = %d, want 403", p, code)
		}
	}
}
