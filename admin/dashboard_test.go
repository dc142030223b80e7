package admin_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/admin"
	"github.com/batonlock/baton/internal/opstest"
	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// notPager hides the Pager methods of a server, so the handler falls back
// to its shared snapshot.
type notPager struct{ admin.Backend }

// dash starts a server and an admin API with a dashboard UI, the
// grants counter and, when hide is set, no Pager.
func dash(t *testing.T, hide bool, cfg admin.Config) (srv *server.Server, addr, base string) {
	t.Helper()
	stats := &admin.Stats{}
	srv = &server.Server{Logger: slog.New(slog.DiscardHandler), Observer: stats}
	addr = opstest.StartServer(t, srv)
	cfg.Server, cfg.Stats, cfg.Logger = srv, stats, slog.New(slog.DiscardHandler)
	if hide {
		cfg.Server = notPager{srv}
	}
	if cfg.UI == nil {
		cfg.UI = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ui:"+r.URL.Path) })
	}
	hs := httptest.NewServer(admin.Handler(cfg))
	t.Cleanup(hs.Close)
	return srv, addr, hs.URL
}

func getJSON[T any](t *testing.T, url string) T {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v T
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func names(l admin.LockList) string {
	var s []string
	for _, x := range l.Locks {
		s = append(s, x.Name)
	}
	return strings.Join(s, " ")
}

// TestPagedLocks pages through the locks in name order with the total,
// filtered by glob, both through the Pager and through the shared
// snapshot; a release through the API shows at once in either.
func TestPagedLocks(t *testing.T) {
	for _, hide := range []bool{false, true} {
		t.Run(fmt.Sprintf("snapshot=%v", hide), func(t *testing.T) {
			_, addr, base := dash(t, hide, admin.Config{SnapshotMaxAge: time.Hour})
			for _, n := range []string{"e", "a/1", "c", "a/2", "b"} {
				c := opstest.Dial(t, addr)
				c.Acquire(n, time.Minute)
				c.Expect(protocol.TypeAcquired, 0)
			}
			w := opstest.DialV2(t, addr, time.Minute, "w")
			w.Claim(1, protocol.ModeExclusive, 0, "c")
			w.ExpectV2(protocol.TypeQueued, 1, 0)

			l := getJSON[admin.LockList](t, base+"/api/locks?limit=2&offset=1")
			if names(l) != "a/2 b" || l.Total == nil || *l.Total != 5 || l.Offset != 1 || l.SnapshotAt == nil {
				t.Errorf("page = %q total %v offset %d, want \"a/2 b\" of 5 from 1", names(l), l.Total, l.Offset)
			}
			l = getJSON[admin.LockList](t, base+"/api/locks?limit=10&match=a/*")
			if names(l) != "a/1 a/2" || *l.Total != 2 {
				t.Errorf("filtered page = %q total %d", names(l), *l.Total)
			}
			l = getJSON[admin.LockList](t, base+"/api/locks?limit=10&offset=7")
			if names(l) != "" || *l.Total != 5 {
				t.Errorf("page past the end = %q total %d", names(l), *l.Total)
			}
			l = getJSON[admin.LockList](t, base+"/api/locks?match=c&limit=1")
			if len(l.Locks) != 1 || len(l.Locks[0].Waiters) != 1 {
				t.Fatalf("lock c = %+v, want one waiter", l.Locks)
			}
			// The unpaged listing keeps its shape: no total.
			if l := getJSON[admin.LockList](t, base+"/api/locks"); l.Total != nil || len(l.Locks) != 5 {
				t.Errorf("unpaged listing: total %v, %d locks", l.Total, len(l.Locks))
			}
			for _, q := range []string{"limit=-1", "limit=x", "offset=-3"} {
				if code, _, _ := call(t, "GET", base+"/api/locks?"+q); code != 400 {
					t.Errorf("?%s = %d, want 400", q, code)
				}
			}
			// A force-release through the API discards the shared snapshot.
			if code, _, _ := call(t, "POST", base+"/api/locks/c/release"); code != 200 {
				t.Fatalf("release = %d", code)
			}
			w.ExpectV2(protocol.TypePromoted, 1, 0)
			l = getJSON[admin.LockList](t, base+"/api/locks?match=c&limit=1")
			if len(l.Locks) != 1 || l.Locks[0].Holder == nil || l.Locks[0].Holder.Label != "w" || len(l.Locks[0].Waiters) != 0 {
				t.Errorf("after the release lock c = %+v, want held by w", l.Locks)
			}
		})
	}
}

// TestSessionsAndSummary lists each session with its claims, lease and
// last heard, and sums up grants, waiters and the longest wait.
func TestSessionsAndSummary(t *testing.T) {
	for _, hide := range []bool{false, true} {
		t.Run(fmt.Sprintf("snapshot=%v", hide), func(t *testing.T) {
			_, addr, base := dash(t, hide, admin.Config{SnapshotMaxAge: time.Millisecond})
			v1 := opstest.Dial(t, addr)
			v1.Acquire("db", 30*time.Second)
			v1.Expect(protocol.TypeAcquired, 0)
			s2 := opstest.DialV2(t, addr, 20*time.Second, "worker")
			s2.Claim(1, protocol.ModeExclusive, 0, "jobs")
			s2.ExpectV2(protocol.TypeGranted, 1, 0)
			s2.Claim(2, protocol.ModeExclusive, 0, "db")
			s2.ExpectV2(protocol.TypeQueued, 2, 0)
			queued := time.Now()

			l := getJSON[admin.SessionList](t, base+"/api/sessions")
			if l.Total != 2 || len(l.Sessions) != 2 {
				t.Fatalf("sessions = %+v, want 2", l)
			}
			a, b := l.Sessions[0], l.Sessions[1]
			if a.Protocol != 1 || a.RemoteAddr != v1.Addr() || a.Held != 1 || a.Waiting != 0 || a.LeaseMS != 30000 {
				t.Errorf("session 1 = %+v, want the version 1 holder", a)
			}
			if b.Protocol != 2 || b.Label != "worker" || b.Held != 1 || b.Waiting != 1 || b.LeaseMS != 20000 || b.Session <= a.Session {
				t.Errorf("session 2 = %+v, want worker holding 1 and waiting 1", b)
			}
			if d := time.Since(b.LastSeen.Time); d < 0 || d > time.Minute {
				t.Errorf("last seen %v ago", d)
			}
			if p := getJSON[admin.SessionList](t, base+"/api/sessions?limit=1&offset=1"); p.Total != 2 || len(p.Sessions) != 1 || p.Sessions[0].Session != b.Session {
				t.Errorf("second page = %+v", p)
			}

			time.Sleep(30 * time.Millisecond) // a wait long enough to measure
			s := getJSON[admin.Summary](t, base+"/api/summary")
			if s.GrantsTotal == nil || *s.GrantsTotal != 2 || s.Locks != 2 || s.Waiters != 1 || s.Sessions != 2 {
				t.Errorf("summary = %+v, want 2 grants, 2 locks, 1 waiter, 2 sessions", s)
			}
			if max := time.Since(queued).Milliseconds(); s.LongestWaitMS < 30 || s.LongestWaitMS > max+10 {
				t.Errorf("longest wait %d ms, want 30..%d", s.LongestWaitMS, max)
			}
		})
	}
}

// TestUIMount serves the dashboard at every GET path outside /api/ with
// headers that keep it out of frames, behind the Host check; /api/cluster
// answers only when a cluster status handler is set.
func TestUIMount(t *testing.T) {
	_, _, base := dash(t, false, admin.Config{})
	resp, err := http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "ui:/" {
		t.Errorf("GET / = %d %q", resp.StatusCode, b)
	}
	if resp.Header.Get("X-Frame-Options") != "DENY" || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
		t.Errorf("GET / headers %v: want X-Frame-Options DENY and a CSP without frames", resp.Header)
	}
	if code, _, _ := call(t, "POST", base+"/"); code != 405 {
		t.Errorf("POST / = %d, want 405", code)
	}
	if code, _ := rawRequest(t, strings.TrimPrefix(base, "http://"), "GET", "/", "evil.example"); code != 403 {
		t.Errorf("GET / with a foreign Host = %d, want 403", code)
	}
	if code, _, _ := call(t, "GET", base+"/api/nope"); code != 404 {
		t.Errorf("GET /api/nope = %d, want 404 from the API", code)
	}
	if code, _, _ := call(t, "GET", base+"/api/cluster"); code != 404 {
		t.Errorf("GET /api/cluster unclustered = %d, want 404", code)
	}
	if i := getJSON[admin.Info](t, base+"/api/info"); i.Cluster {
		t.Error("info says clustered")
	}

	// Under an Authorizer the page needs "read" on some lock.
	_, _, dbase := dash(t, false, admin.Config{Authorizer: denyAll{}})
	if code, _, _ := call(t, "GET", dbase+"/"); code != 403 {
		t.Errorf("GET / refused by the ACL = %d, want 403", code)
	}

	_, _, cbase := dash(t, false, admin.Config{Cluster: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"status":"from the cluster handler"}`)
	})})
	if i := getJSON[admin.Info](t, cbase+"/api/info"); !i.Cluster {
		t.Error("info does not say clustered with a cluster handler")
	}
	if v := getJSON[map[string]string](t, cbase+"/api/cluster"); v["status"] != "from the cluster handler" {
		t.Errorf("GET /api/cluster = %v", v)
	}
}

// denyAll refuses every admin action.
type denyAll struct{}

func (denyAll) AllowAdmin(identity, action, lock string) bool { return false }
func (denyAll) AllowAdminAny(identity, action string) bool    { return false }

// TestDashboardACL: under an Authorizer a page of locks and the sessions
// show only what the caller may read: a session appears only with a
// claim on a readable lock.
func TestDashboardACL(t *testing.T) {
	_, addr, base := dash(t, false, admin.Config{Authorizer: readPrefix("pub/")})
	opstest.PassGate(t, addr)
	pub := opstest.DialV2(t, addr, time.Minute, "public")
	pub.Claim(1, protocol.ModeExclusive, 0, "pub/a")
	pub.ExpectV2(protocol.TypeGranted, 1, 0)
	pub.Claim(2, protocol.ModeExclusive, 0, "secret/b")
	pub.ExpectV2(protocol.TypeGranted, 2, 0)
	sec := opstest.DialV2(t, addr, time.Minute, "secret")
	sec.Claim(1, protocol.ModeExclusive, 0, "secret/c")
	sec.ExpectV2(protocol.TypeGranted, 1, 0)

	if l := getJSON[admin.LockList](t, base+"/api/locks?limit=10"); names(l) != "pub/a" || *l.Total != 1 {
		t.Errorf("readable page = %q total %d, want pub/a alone", names(l), *l.Total)
	}
	s := getJSON[admin.SessionList](t, base+"/api/sessions")
	if s.Total != 1 || len(s.Sessions) != 1 || s.Sessions[0].Label != "public" || s.Sessions[0].Held != 1 {
		t.Errorf("readable sessions = %+v, want public holding the one readable lock", s)
	}
}

// readPrefix allows reading the locks under a prefix, and nothing else.
type readPrefix string

func (p readPrefix) AllowAdmin(identity, action, lock string) bool {
	return action == "read" && strings.HasPrefix(lock, string(p))
}
func (p readPrefix) AllowAdminAny(identity, action string) bool { return action == "read" }

// A resumable session whose connection broke is listed as detached while
// the server keeps its claims.
func TestSessionsKeptDetached(t *testing.T) {
	srv, addr, base := dash(t, false, admin.Config{})
	opstest.PassGate(t, addr)
	c := opstest.Dial(t, addr)
	c.Send(protocol.AppendFrame(protocol.AppendPreamble(nil), protocol.Frame{
		Type: protocol.TypeHello, LeaseMS: 30000, Flags: protocol.HelloResumable, Label: "r"}))
	if f := c.ReadV2(); f.Type != protocol.TypeWelcome || !f.Resumable() {
		t.Fatalf("opening answered %v", f)
	}
	c.Claim(1, protocol.ModeExclusive, 0, "jobs")
	c.ExpectV2(protocol.TypeGranted, 1, 0)
	// The gate's v1 connection may still be listed until the server has
	// seen it close, so only the resumable session is looked at.
	if l := labelled(getJSON[admin.SessionList](t, base+"/api/sessions"), "r"); len(l) != 1 || l[0].Detached {
		t.Fatalf("sessions while connected = %+v, want one attached", l)
	}
	c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for srv.KeptSessions() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the session was not kept")
		}
		time.Sleep(time.Millisecond)
	}
	l := labelled(getJSON[admin.SessionList](t, base+"/api/sessions"), "r")
	if len(l) != 1 || !l[0].Detached || l[0].Held != 1 {
		t.Fatalf("sessions after the break = %+v, want one detached, holding 1", l)
	}
}

// labelled returns the listed sessions with the label.
func labelled(l admin.SessionList, label string) []admin.Session {
	var out []admin.Session
	for _, s := range l.Sessions {
		if s.Label == label {
			out = append(out, s)
		}
	}
	return out
}

// TestWaiterPages: a lock's waiters come one page at a time, with the
// whole queue's length, in listings (the first waiters_limit, default
// DefaultWaiterPage) and for one lock (from waiters_offset), through the
// Pager and through the shared snapshot: a long queue makes a small
// answer.
func TestWaiterPages(t *testing.T) {
	const queued = 3 * admin.DefaultWaiterPage / 2
	for _, hide := range []bool{false, true} {
		t.Run(fmt.Sprintf("snapshot=%v", hide), func(t *testing.T) {
			_, addr, base := dash(t, hide, admin.Config{SnapshotMaxAge: time.Hour})
			h := opstest.Dial(t, addr)
			h.Acquire("q", time.Minute)
			h.Expect(protocol.TypeAcquired, 0)
			w := opstest.DialV2(t, addr, time.Minute, "w")
			var b []byte
			for id := uint32(1); id <= queued; id++ {
				b = protocol.AppendClaim(b, id, protocol.ModeExclusive, 0, 0, "q")
			}
			w.Send(b)
			for id := uint32(1); id <= queued; id++ {
				w.ExpectV2(protocol.TypeQueued, id, 0)
			}
			claims := func(l admin.Lock) (first, last uint64) {
				if len(l.Waiters) == 0 {
					return 0, 0
				}
				return l.Waiters[0].Claim.Claim, l.Waiters[len(l.Waiters)-1].Claim.Claim
			}
			check := func(what string, l admin.Lock, n int, first uint64) {
				t.Helper()
				f, last := claims(l)
				if len(l.Waiters) != n || l.WaitersTotal != queued || (n > 0 && (f != first || last != first+uint64(n)-1)) {
					t.Errorf("%s: waiters %d..%d (%d) of %d, want %d from %d of %d", what, f, last, len(l.Waiters), l.WaitersTotal, n, first, queued)
				}
			}
			l := getJSON[admin.LockList](t, base+"/api/locks?limit=1")
			check("paged listing", l.Locks[0], admin.DefaultWaiterPage, 1)
			l = getJSON[admin.LockList](t, base+"/api/locks?limit=1&waiters_limit=3")
			check("paged listing, waiters_limit=3", l.Locks[0], 3, 1)
			l = getJSON[admin.LockList](t, base+"/api/locks")
			check("unpaged listing", l.Locks[0], admin.DefaultWaiterPage, 1)
			one := getJSON[admin.Lock](t, base+"/api/locks/q")
			check("one lock", one, admin.DefaultWaiterPage, 1)
			one = getJSON[admin.Lock](t, base+"/api/locks/q?waiters_offset=140&waiters_limit=20")
			check("one lock from 140", one, queued-140, 141)
			if one.WaitersOffset != 140 || one.QueueLength() != queued {
				t.Errorf("waiters_offset %d, queue length %d", one.WaitersOffset, one.QueueLength())
			}
			one = getJSON[admin.Lock](t, base+"/api/locks/q?waiters_offset=9999")
			check("one lock past the end", one, 0, 0)
			for _, q := range []string{"waiters_limit=-1", "waiters_offset=x"} {
				if code, _, _ := call(t, "GET", base+"/api/locks/q?"+q); code != 400 {
					t.Errorf("?%s = %d, want 400", q, code)
				}
			}
		})
	}
}
