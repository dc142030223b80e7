package ui_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/batonlock/baton/admin"
	"github.com/batonlock/baton/admin/ui"
	"github.com/batonlock/baton/internal/browsertest"
	"github.com/batonlock/baton/internal/opstest"
	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// cannedCluster is a ClusterSource whose status the test sets; names
// starting with "b" belong to n2, the others to n1 (this node).
type cannedCluster struct {
	st     atomic.Pointer[admin.ClusterStatus]
	owners atomic.Int32
}

func (c *cannedCluster) ClusterStatus(context.Context) (admin.ClusterStatus, error) {
	st := *c.st.Load()
	st.CheckedAt = admin.Time{Time: time.Now()}
	return st, nil
}

func (c *cannedCluster) ClusterOwner(name string) (admin.ClusterMember, uint64, bool) {
	c.owners.Add(1)
	if strings.HasPrefix(name, "b") {
		return admin.ClusterMember{ID: "n2", State: "serving", ProtocolAddr: "127.0.0.1:7171", AdminAddr: "127.0.0.1:7172"}, c.st.Load().RingVersion, true
	}
	return admin.ClusterMember{ID: "n1", State: "serving", Self: true}, c.st.Load().RingVersion, true
}

func healthy(id string, ring uint64) admin.ClusterMember {
	return admin.ClusterMember{ID: id, State: "serving", ProtocolAddr: "127.0.0.1:1" + id[1:], AdminAddr: "127.0.0.1:2" + id[1:],
		RaftAddr: "127.0.0.1:3" + id[1:], Epoch: 40, LeaderView: admin.MemberReachable,
		Health: &admin.MemberHealth{RaftState: "Follower", Leader: "n1", RingVersion: ring, Locks: 2, Waiters: 1, Connections: 3}}
}

// TestClusterView renders a canned cluster status: the leader marked,
// the ring version, then, without a reload, a member that stops
// answering and one left behind on an older ring; the owner lookup and
// the lock view's owner; nothing overflows at phone width.
func TestClusterView(t *testing.T) {
	src := &cannedCluster{}
	st := admin.ClusterStatus{Node: "n1", RaftState: "Leader", Epoch: 41, Leader: "n1", RingVersion: 3,
		RingCommittedAt: admin.Time{Time: time.Now().Add(-time.Minute)}, Ring: []string{"n1", "n2", "n3"}, MaxLeaseMS: 30000,
		Members: []admin.ClusterMember{healthy("n1", 3), healthy("n2", 3), healthy("n3", 3)}}
	st.Members[0].Leader, st.Members[0].Self, st.Members[0].Health.RaftState = true, true, "Leader"
	src.st.Store(&st)

	srv := &server.Server{Logger: slog.New(slog.DiscardHandler)}
	addr := opstest.StartServer(t, srv)
	hs := httptest.NewServer(admin.Handler(admin.Config{Server: srv, Version: "v-test", Started: time.Now(),
		Logger: slog.New(slog.DiscardHandler), UI: ui.Handler(), Cluster: admin.ClusterHandler(src, 100*time.Millisecond)}))
	t.Cleanup(hs.Close)
	h := opstest.DialV2(t, addr, time.Minute, "deployer")
	h.Claim(1, protocol.ModeExclusive, 0, "deploy/prod")
	h.ExpectV2(protocol.TypeGranted, 1, 0)

	p := open(t, 1280, 900)
	p.Do(chromedp.Navigate(hs.URL + "/#/cluster"))
	p.WaitFor("the members", `document.querySelectorAll('tr.member').length == 3`, 10*time.Second)
	if eval[bool](p, `document.getElementById("tab-cluster").hidden`) {
		t.Error("the cluster tab is hidden on a clustered server")
	}
	rows := eval[[]string](p, `Array.from(document.querySelectorAll('tr.member')).map(r => r.dataset.node + (r.dataset.leader ? "*" : "") + (r.classList.contains("unhealthy") ? "!" : ""))`)
	if strings.Join(rows, " ") != "n1* n2 n3" {
		t.Errorf("member rows %v, want n1* n2 n3 (* the leader, ! unhealthy)", rows)
	}
	sum := eval[string](p, `document.getElementById("cluster-summary").innerText`)
	for _, w := range []string{"Asked n1 (Leader, epoch 41)", "Leader: n1", "Ring version 3: n1 n2 n3", "Largest lease 30.0 s"} {
		if !strings.Contains(sum, w) {
			t.Errorf("summary %q lacks %q", sum, w)
		}
	}
	if r := eval[string](p, `document.querySelector('tr.member[data-node="n2"]').innerText`); !strings.Contains(r, "2 · 1 · 3") || !strings.Contains(r, "ok") {
		t.Errorf("n2's row %q: want its counts and ok", r)
	}

	// Live: n2 stops answering, n3 is left behind on ring 2 and the
	// leader cannot reach it.
	down := st
	down.Members = slices.Clone(st.Members)
	down.Members[1].Health, down.Members[1].Error = nil, "dial tcp 127.0.0.1:22: connect: connection refused"
	n3 := *down.Members[2].Health
	n3.RingVersion = 2
	down.Members[2].Health, down.Members[2].LeaderView = &n3, admin.MemberUnreachable
	down.Members[2].LastContact = &admin.Time{Time: time.Now().Add(-90 * time.Second)}
	src.st.Store(&down)
	d := p.WaitFor("the unhealthy members", `document.querySelectorAll('tr.member.unhealthy').length == 2`, 5*time.Second)
	t.Logf("a change of health shown %v after it happened", d.Round(time.Millisecond))
	if r := eval[string](p, `document.querySelector('tr.member[data-node="n2"]').innerText`); !strings.Contains(r, "not answering") || !strings.Contains(r, "connection refused") {
		t.Errorf("n2's row %q: want not answering, and why", r)
	}
	if r := eval[string](p, `document.querySelector('tr.member[data-node="n3"]').innerText`); !strings.Contains(r, "unreachable, last heard 1 m ") || !strings.Contains(r, "behind: ring 2") {
		t.Errorf("n3's row %q: want unreachable since 1 m 30 s and behind on ring 2", r)
	}

	// The owner lookup: typing asks once it pauses; a name of another
	// node links to its dashboard.
	p.Do(chromedp.SendKeys("#owner-name", "build/nightly"))
	p.WaitFor("the owner", `document.getElementById("owner-answer").dataset.owner == "n2"`, 5*time.Second)
	if n := src.owners.Load(); n < 1 || n > 4 {
		t.Errorf("%d owner lookups for 13 characters typed, want them debounced", n)
	}
	if a := eval[string](p, `document.getElementById("owner-answer").innerText`); !strings.Contains(a, "build/nightly is owned by n2 in ring version 3") {
		t.Errorf("owner answer %q", a)
	}
	if href := eval[string](p, `document.querySelector('#owner-answer a').href`); href != "http://127.0.0.1:7172/#/lock/build%2Fnightly" {
		t.Errorf("link to the owner's dashboard %q", href)
	}
	// A new ring moves the name: the answer follows without typing.
	moved := down
	moved.RingVersion = 4
	src.st.Store(&moved)
	p.WaitFor("the answer in the new ring", `document.getElementById("owner-answer").innerText.includes("ring version 4")`, 5*time.Second)
	eval[string](p, `document.getElementById("owner-name").value = ""`)
	p.Do(chromedp.SendKeys("#owner-name", "x"))
	p.WaitFor("this node's name", `document.getElementById("owner-answer").dataset.owner == "n1"`, 5*time.Second)
	if a := eval[string](p, `document.getElementById("owner-answer").innerText`); !strings.Contains(a, "(this node)") || strings.Contains(a, "dashboard") {
		t.Errorf("owner answer for a name of this node %q", a)
	}
	if !slices.Contains(browsertest.AccessibleNames(t, p, "searchbox"), "Lock name whose owner node to find") {
		t.Error("the owner lookup's input has no accessible name")
	}
	if !slices.Contains(browsertest.AccessibleNames(t, p, "table"), "Members") {
		t.Error("no table named Members")
	}

	// The lock view names the owner node.
	p.Do(chromedp.Navigate(lockURL(hs.URL, "deploy/prod")))
	p.WaitFor("the lock with its owner", `document.querySelector('tr.holder') && (document.getElementById("lock-owner")||{dataset:{}}).dataset.owner == "n1"`, 5*time.Second)
	p.Do(chromedp.Navigate(lockURL(hs.URL, "b/elsewhere")))
	p.WaitFor("a lock of another node", `document.getElementById("not-held") && (document.getElementById("lock-owner")||{dataset:{}}).dataset.owner == "n2"`, 5*time.Second)
	if s := eval[string](p, `document.getElementById("main").innerText`); !strings.Contains(s, "open n2's dashboard") || !strings.Contains(s, "on this node") {
		t.Errorf("lock view of another node's name: %q", s)
	}

	// Phone width.
	p.Do(chromedp.Navigate(hs.URL+"/#/cluster"), chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile))
	p.WaitFor("the members at phone width", `document.querySelectorAll('tr.member').length == 3`, 5*time.Second)
	p.Fresh()
	sw, cw := eval[int](p, `document.documentElement.scrollWidth`), eval[int](p, `document.documentElement.clientWidth`)
	t.Logf("#/cluster at 390 px: scrollWidth %d, clientWidth %d", sw, cw)
	if sw > cw {
		t.Errorf("the cluster view overflows at 390 px: scrollWidth %d > clientWidth %d", sw, cw)
	}
}
