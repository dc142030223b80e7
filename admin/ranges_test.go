package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/acl"
	"github.com/batonlock/baton/admin"
	"github.com/batonlock/baton/internal/opstest"
	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

func setRange(c *opstest.Conn, req uint32, flags, typ uint8, owner, start, end uint64, key string) {
	c.Send(protocol.AppendRange(nil, protocol.Frame{Claim: req, Op: protocol.RangeSet, Flags: flags, LockType: typ,
		Owner: owner, Start: start, End: end, Name: key}))
}

// TestRangesListAndRelease: GET /api/ranges shows each range-lock key
// with its holders (session, owner, label, address, type, start and
// length) and waiters in order, paged by key and bounded per key;
// /api/sessions counts each session's ranges; POST
// /api/ranges/{key}/release?owner=S/O releases one owner's locks there,
// grants the waiter they blocked and ends the owner's session with
// ERROR 0x02.
func TestRangesListAndRelease(t *testing.T) {
	f := start(t)
	ctx := context.Background()
	opstest.PassGate(t, f.addr)
	a := opstest.DialV2(t, f.addr, time.Minute, "mount-a")
	setRange(a, 1, 0, protocol.LockWrite, 7, 0, 99, "mount:etc/passwd")
	setRange(a, 2, 0, protocol.LockRead, 7, 200, 299, "mount:etc/passwd")
	setRange(a, 3, protocol.RangeFlock, protocol.LockWrite, 8, 0, 0, "mount:etc/passwd")
	setRange(a, 4, 0, protocol.LockWrite, 7, 0, protocol.MaxRangeEnd, "mount:var/log")
	for req := uint32(1); req <= 4; req++ {
		if g := a.ReadV2(); g.Claim != req || g.Status != protocol.RangeGranted {
			t.Fatalf("set %d answered %v", req, g)
		}
	}
	b := opstest.DialV2(t, f.addr, time.Minute, "mount-b")
	setRange(b, 1, 0, protocol.LockRead, 1, 50, 50, "mount:etc/passwd")
	sess := b.ReadV2()
	if sess.Status != protocol.RangeConflict {
		t.Fatalf("b's set answered %v", sess)
	}
	aSession := sess.Session
	setRange(b, 2, protocol.RangeWait, protocol.LockRead, 1, 50, 50, "mount:etc/passwd")
	if q := b.ReadV2(); q.Status != protocol.RangeQueued {
		t.Fatalf("b's waiting set answered %v", q)
	}

	list, err := f.client.Ranges(ctx, "mount:etc/*")
	if err != nil {
		t.Fatal(err)
	}
	if list.Total != 2 || len(list.Ranges) != 2 {
		t.Fatalf("ranges of mount:etc/*: %+v, want the posix and flock keys", list)
	}
	px, fl := list.Ranges[0], list.Ranges[1]
	if px.Key != "mount:etc/passwd" || px.Namespace != "posix" || fl.Namespace != "flock" || px.HoldersTotal != 2 || px.WaitersTotal != 1 {
		t.Fatalf("keys %+v %+v", px, fl)
	}
	h := px.Holders[0]
	if h.Session != aSession || h.Owner != 7 || h.Label != "mount-a" || h.RemoteAddr != a.Addr() || h.Type != "write" || h.Start != 0 || h.Length != 100 {
		t.Errorf("first holder %+v, want a's owner 7 write 0+100", h)
	}
	if r := px.Holders[1]; r.Type != "read" || r.Start != 200 || r.Length != 100 {
		t.Errorf("second holder %+v", r)
	}
	if w := px.Waiters[0]; w.Label != "mount-b" || w.Owner != 1 || w.Req != 2 || w.Type != "read" || w.Start != 50 || w.Length != 1 {
		t.Errorf("waiter %+v", w)
	}
	if h := fl.Holders[0]; h.Owner != 8 || h.Length != 0 || h.Type != "write" {
		t.Errorf("flock holder %+v, want owner 8's whole file", h)
	}
	// Paging and bounds: one key per page, one holder per key.
	code, _, v := call(t, "GET", f.url+"/api/ranges?limit=1&offset=2&holders_limit=1&waiters_limit=0")
	rs, _ := v["ranges"].([]any)
	if code != 200 || v["total"] != 3.0 || len(rs) != 1 {
		t.Fatalf("page: %d %v", code, v)
	}
	if k := rs[0].(map[string]any); k["key"] != "mount:var/log" || len(k["holders"].([]any)) != 1 || len(k["waiters"].([]any)) != 0 {
		t.Errorf("page's key %v", k)
	}
	code, _, v = call(t, "GET", f.url+"/api/ranges?key=mount:etc/passwd&holders_limit=1")
	if rs, _ := v["ranges"].([]any); code != 200 || len(rs) != 2 || len(rs[0].(map[string]any)["holders"].([]any)) != 1 || rs[0].(map[string]any)["holders_total"] != 2.0 {
		t.Errorf("one key, one holder: %d %v", code, v)
	}
	for _, bad := range []string{"limit=x", "holders_limit=-1", "waiters_limit=x", "match=" + strings.Repeat("*a", 100)} {
		if code, _, _ := call(t, "GET", f.url+"/api/ranges?"+bad); code != 400 {
			t.Errorf("GET /api/ranges?%s = %d, want 400", bad, code)
		}
	}
	code, _, v = call(t, "GET", f.url+"/api/sessions")
	found := 0
	for _, s := range v["sessions"].([]any) {
		s := s.(map[string]any)
		switch s["label"] {
		case "mount-a":
			found++
			if s["ranges_held"] != 4.0 || s["ranges_waiting"] != 0.0 {
				t.Errorf("a's session %v: want 4 ranges held", s)
			}
		case "mount-b":
			found++
			if s["ranges_held"] != 0.0 || s["ranges_waiting"] != 1.0 {
				t.Errorf("b's session %v: want 1 waiting", s)
			}
		}
	}
	if code != 200 || found != 2 {
		t.Errorf("sessions: %d %v", code, v)
	}

	// The release: refused across origins and for a bad owner; 404 for an
	// owner with nothing there.
	relURL := fmt.Sprintf("%s/api/ranges/mount:etc%%2Fpasswd/release?owner=%d/7", f.url, aSession)
	if code, _, _ := call(t, "POST", relURL, "Sec-Fetch-Site", "cross-site"); code != http.StatusForbidden {
		t.Errorf("cross-site release = %d, want 403", code)
	}
	if code, _, _ := call(t, "GET", relURL); code != http.StatusMethodNotAllowed {
		t.Errorf("GET of the release = %d, want 405", code)
	}
	for _, bad := range []string{"x", "7", "0/7", "1/-1", ""} {
		var ae *admin.Error
		if _, err := f.client.ReleaseRanges(ctx, "mount:etc/passwd", bad); !errors.As(err, &ae) || ae.StatusCode != 400 || ae.Message == "" {
			t.Errorf("owner %q: %v, want 400", bad, err)
		}
	}
	if _, err := f.client.ReleaseRanges(ctx, "mount:etc/passwd", fmt.Sprintf("%d/9", aSession)); !errors.Is(err, admin.ErrNotFound) {
		t.Errorf("an owner with nothing on the key: %v, want 404", err)
	}
	rel, err := f.client.ReleaseRanges(ctx, "mount:etc/passwd", fmt.Sprintf("%d/7", aSession))
	if err != nil {
		t.Fatal(err)
	}
	if p := b.ReadV2(); p.Claim != 2 || p.Status != protocol.RangePromoted {
		t.Errorf("b got %v, want its waiting set promoted", p)
	}
	for {
		fr := a.ReadV2()
		if fr.Type == protocol.TypeSessionError {
			if fr.Code != protocol.CodeClosedByAdmin {
				t.Errorf("a's session ended with %v, want ERROR 0x02", fr)
			}
			break
		}
	}
	if rel.Released != "mount:etc/passwd" || len(rel.Ranges) == 0 || rel.Ranges[0].Holders[0].Label != "mount-b" {
		t.Errorf("release answer %+v: want b holding", rel)
	}
	f.rec.WaitCount(t, server.EventRangeForceRelease, 1)
}

// TestRangesUnderAdminRules: under an ACL's admin rules a reader sees
// only the range keys its rule covers, and may not release; an
// operator's release is reported with its identity.
func TestRangesUnderAdminRules(t *testing.T) {
	a, err := acl.Parse([]byte(`{
		"rules": [{"identity": "*", "locks": ["*"]}],
		"admin": [
			{"identity": "spiffe://test/sre", "actions": ["read", "release"], "locks": ["*"]},
			{"identity": "spiffe://test/dash", "actions": ["read"], "locks": ["mount:home/*"]}
		]}`))
	if err != nil {
		t.Fatal(err)
	}
	m := startMTLS(t, a)
	ctx := context.Background()
	opstest.PassGate(t, m.fixture.addr)
	c := opstest.DialV2(t, m.fixture.addr, time.Minute, "mount")
	setRange(c, 1, 0, protocol.LockWrite, 3, 0, 9, "mount:etc/passwd")
	sess := c.ReadV2()
	setRange(c, 2, 0, protocol.LockWrite, 3, 0, 9, "mount:home/a")
	c.ReadV2()
	if sess.Status != protocol.RangeGranted {
		t.Fatalf("set answered %v", sess)
	}
	dash := m.as(t, "spiffe://test/dash")
	list, err := dash.Ranges(ctx, "")
	if err != nil || list.Total != 1 || list.Ranges[0].Key != "mount:home/a" {
		t.Fatalf("reader's range listing %+v, %v: want only mount:home/a", list, err)
	}
	owner := fmt.Sprintf("%d/3", list.Ranges[0].Holders[0].Session)
	// The session has range locks alone: it is listed, with the ranges
	// the reader may see.
	sl := sessionsAs(t, dash)
	if len(sl.Sessions) != 1 || sl.Sessions[0].Label != "mount" || sl.Sessions[0].RangesHeld != 1 {
		t.Errorf("reader's sessions %+v: want the mount's session with 1 range held", sl)
	}
	var ae *admin.Error
	if _, err := dash.ReleaseRanges(ctx, "mount:home/a", owner); !errors.As(err, &ae) || ae.StatusCode != http.StatusForbidden {
		t.Errorf("a reader's release: %v, want 403", err)
	}
	if _, err := m.as(t, "spiffe://test/sre").ReleaseRanges(ctx, "mount:etc/passwd", owner); err != nil {
		t.Fatal(err)
	}
	m.rec.WaitCount(t, server.EventRangeForceRelease, 1)
	for _, e := range m.rec.Events() {
		if e.Kind == server.EventRangeForceRelease && (e.Admin.Identity != "spiffe://test/sre" || e.Lock != "mount:etc/passwd") {
			t.Errorf("range force-release event %+v", e)
		}
	}
}

// sessionsAs reads GET /api/sessions with c's certificate.
func sessionsAs(t *testing.T, c *admin.Client) admin.SessionList {
	t.Helper()
	resp, err := c.HTTPClient.Get(c.BaseURL + "/api/sessions")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out admin.SessionList
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}
