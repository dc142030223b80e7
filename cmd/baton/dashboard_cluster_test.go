package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/admin"
	"github.com/batonlock/baton/cluster"
	"github.com/batonlock/baton/internal/browsertest"
	"github.com/batonlock/baton/internal/opstest"
)

// adminGet decodes the JSON answer of GET path on an admin listener.
func adminGet[T any](t *testing.T, addr, path string) T {
	t.Helper()
	var v T
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s%s: %d %s", addr, path, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("GET %s%s: %v in %s", addr, path, err, b)
	}
	return v
}

// TestDashboardCluster: three 'baton serve' nodes. Their /api/cluster
// and /api/cluster/owner answer (checked without a browser too), and a
// follower's dashboard shows the cluster view: the three members with the leader
// marked, the ring version, each member healthy with its counts; typing
// a name answers its owner, the node the ring gives it to; the lock view
// names the owner. After kill -9 of the other follower the view shows it not
// answering and, as the leader sees it, unreachable.
func TestDashboardCluster(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t)
	st := waitStatus(t, nodes["n1"], "a leader", func(st cluster.Status) bool { return st.Leader != "" })
	var followers []*clusterProc
	for _, id := range []string{"n1", "n2", "n3"} {
		if id != st.Leader {
			followers = append(followers, nodes[id])
		}
	}
	asked, victim, leader := followers[0], followers[1], nodes[st.Leader]
	for _, n := range nodes {
		waitStatus(t, n, "the same leader", func(s cluster.Status) bool { return s.Leader == st.Leader })
	}

	// The API the view reads.
	cs := adminGet[admin.ClusterStatus](t, asked.admin, "/api/cluster")
	var ids []string
	for _, m := range cs.Members {
		ids = append(ids, m.ID)
		if m.Health == nil || m.LeaderView != admin.MemberReachable || m.Health.RingVersion != st.AppliedRingVersion {
			t.Errorf("member %+v: want healthy, reachable, on ring %d", m, st.AppliedRingVersion)
		}
		if m.Leader != (m.ID == st.Leader) || m.Self != (m.ID == asked.id) {
			t.Errorf("member %s: leader %v, self %v; the leader is %s, asked %s", m.ID, m.Leader, m.Self, st.Leader, asked.id)
		}
		if want := nodes[m.ID]; m.ProtocolAddr != want.addr || m.AdminAddr != want.admin {
			t.Errorf("member %s: addresses %s, %s; want %s, %s", m.ID, m.ProtocolAddr, m.AdminAddr, want.addr, want.admin)
		}
	}
	if cs.Node != asked.id || cs.Leader != st.Leader || cs.RingVersion != st.AppliedRingVersion || strings.Join(ids, " ") != "n1 n2 n3" ||
		cs.RaftState != "Follower" || cs.Epoch == 0 {
		t.Fatalf("GET /api/cluster at %s = %+v: want members n1 n2 n3, leader %s, ring %d", asked.id, cs, st.Leader, st.AppliedRingVersion)
	}
	// A name the ring gives to the leader: every node answers so.
	name := nameOwnedBy(t, leader.id, "deploy/web")
	if got := cluster.NewRing(st.AppliedRingVersion, st.Ring).Owner(name); got != leader.id {
		t.Fatalf("ring %v gives %s to %s, want %s", st.Ring, name, got, leader.id)
	}
	for _, n := range nodes {
		o := adminGet[admin.ClusterOwner](t, n.admin, "/api/cluster/owner?name="+url.QueryEscape(name))
		if o.Owner == nil || o.Owner.ID != leader.id || o.Owner.AdminAddr != leader.admin || o.RingVersion != st.AppliedRingVersion {
			t.Errorf("GET /api/cluster/owner at %s = %+v, want %s in ring %d", n.id, o, leader.id, st.AppliedRingVersion)
		}
	}

	// Its owner holds it, and a client of the asked node waits for it
	// (relayed): the leader's counts show one lock and one waiter. The
	// probes pass the warm-up of a new cluster, which the first grant
	// lengthens to its lease plus 2 s (see TestClusterThreeNodesContend);
	// baton's Go client heartbeats the short lease.
	const lease = 2 * time.Second
	for range 2 {
		probe, _ := waitGrant(t, leader.addr, name, lease)
		probe.Close()
		waitFree(t, leader, name)
	}
	held, err := baton.New(baton.DefaultConfig(leader.addr)).Acquire(t.Context(), name, lease)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())
	go baton.New(baton.DefaultConfig(asked.addr)).Acquire(t.Context(), name, lease) // waits until the test ends

	p := browsertest.Open(t, 1280, 900)
	p.Do(chromedp.Navigate("http://" + asked.admin + "/#/cluster"))
	p.WaitFor("the three members", `document.querySelectorAll('tr.member').length == 3`, 10*time.Second)
	rows := browsertest.Eval[[]string](p, `Array.from(document.querySelectorAll('tr.member')).map(r => r.dataset.node + (r.dataset.leader ? "*" : "") + (r.classList.contains("unhealthy") ? "!" : ""))`)
	var want []string
	for _, id := range []string{"n1", "n2", "n3"} {
		if id == st.Leader {
			id += "*"
		}
		want = append(want, id)
	}
	if !slices.Equal(rows, want) {
		t.Errorf("member rows %v, want %v (* the leader, ! unhealthy)", rows, want)
	}
	p.WaitFor("the owner's lock and waiter", fmt.Sprintf(`document.querySelector('tr.member[data-node=%q] td[data-label^="Locks"]').innerText.startsWith("1 · 1 · ")`, leader.id), 5*time.Second)
	if v := browsertest.Eval[string](p, `document.getElementById("ring-version").innerText`); v != fmt.Sprint(st.AppliedRingVersion) {
		t.Errorf("ring version shown %q, want %d", v, st.AppliedRingVersion)
	}
	lrow := browsertest.Eval[string](p, fmt.Sprintf(`document.querySelector('tr.member[data-node=%q]').innerText`, leader.id))
	for _, w := range []string{"leader", "Leader", leader.addr, leader.admin} {
		if !strings.Contains(lrow, w) {
			t.Errorf("the leader's row %q lacks %q", lrow, w)
		}
	}
	if v := browsertest.Eval[bool](p, `document.getElementById("tab-cluster").hidden`); v {
		t.Error("the cluster tab is hidden on a cluster node")
	}
	if !slices.Contains(browsertest.AccessibleNames(t, p, "searchbox"), "Lock name whose owner node to find") {
		t.Error("the owner lookup's input has no accessible name")
	}

	// Who owns a name, answered as it is typed, asked once typing pauses.
	typed := time.Now()
	p.Do(chromedp.SendKeys("#owner-name", name))
	p.WaitFor("the owner answer", fmt.Sprintf(`document.getElementById("owner-answer").dataset.owner == %q`, leader.id), 10*time.Second)
	lookups := browsertest.Eval[int](p, `window.batonPerf.ownerLookups`)
	answer := browsertest.Eval[string](p, `document.getElementById("owner-answer").innerText`)
	t.Logf("owner of %q (%d characters typed) shown %v after typing began, after %d lookups: %q", name, len(name), time.Since(typed).Round(time.Millisecond), lookups, answer)
	if lookups < 1 || lookups > len(name)/2 {
		t.Errorf("%d owner lookups for %d characters typed: want them debounced", lookups, len(name))
	}
	if !strings.Contains(answer, name+" is owned by "+leader.id) || !strings.Contains(answer, fmt.Sprintf("ring version %d", st.AppliedRingVersion)) {
		t.Errorf("owner answer %q", answer)
	}
	p.Fresh()
	p.Screenshot("dashboard-cluster.png")

	// The lock view names the owner node, here another one, with a link
	// to its dashboard; on the owner, "this node".
	p.Do(chromedp.Navigate("http://" + asked.admin + "/#/lock/" + url.PathEscape(name)))
	p.WaitFor("the owner of the lock", fmt.Sprintf(`(document.getElementById("lock-owner")||{dataset:{}}).dataset.owner == %q`, leader.id), 10*time.Second)
	if href := browsertest.Eval[string](p, `document.querySelector('#lock-owner a').href`); href != "http://"+leader.admin+"/#/lock/"+url.PathEscape(name) {
		t.Errorf("link to the owner's dashboard %q", href)
	}
	p.Do(chromedp.Navigate("http://" + leader.admin + "/#/lock/" + url.PathEscape(name)))
	p.WaitFor("the owner, this node, with the holder and the waiter", `(document.getElementById("lock-owner")||{innerText:""}).innerText.includes("(this node)") && document.querySelectorAll('tr.holder').length == 1 && document.querySelectorAll('tr.waiter').length == 1`, 10*time.Second)

	// Phone width: the members are cards, nothing scrolls sideways.
	p.Do(chromedp.Navigate("http://"+asked.admin+"/#/cluster"), chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile))
	p.WaitFor("the members at phone width", `document.querySelectorAll('tr.member').length == 3`, 10*time.Second)
	p.Fresh()
	if sw, cw := browsertest.Eval[int](p, `document.documentElement.scrollWidth`), browsertest.Eval[int](p, `document.documentElement.clientWidth`); sw > cw {
		t.Errorf("the cluster view overflows at 390 px: scrollWidth %d > clientWidth %d", sw, cw)
	}
	p.Do(chromedp.EmulateViewport(1280, 900))

	// kill -9 of the other follower: the live view shows it.
	killed := time.Now()
	if err := victim.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-victim.exited
	sel := fmt.Sprintf(`document.querySelector('tr.member[data-node=%q]')`, victim.id)
	d := p.WaitFor("the killed member not answering", sel+`.classList.contains("unhealthy") && `+sel+`.innerText.includes("not answering")`, opstest.Timeout)
	t.Logf("%s killed: shown not answering %v later", victim.id, d.Round(time.Millisecond))
	p.WaitFor("the killed member unreachable as the leader sees it", sel+`.querySelector('td[data-label="Leader sees"]').innerText.startsWith("unreachable")`, 2*opstest.Timeout)
	t.Logf("%s killed: shown unreachable as the leader sees it %v after the kill", victim.id, time.Since(killed).Round(time.Millisecond))
	for _, id := range []string{asked.id, leader.id} {
		if bad := browsertest.Eval[bool](p, fmt.Sprintf(`document.querySelector('tr.member[data-node=%q]').classList.contains("unhealthy")`, id)); bad {
			t.Errorf("live member %s shown unhealthy", id)
		}
	}
}
