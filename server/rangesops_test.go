package server_test

import (
	"errors"
	"testing"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

func rangeEventOf(k server.EventKind, key string, session uint64) func(server.Event) bool {
	return func(e server.Event) bool {
		return e.Kind == k && e.Lock == key && uint64(e.Session) == session && e.Range != nil
	}
}

// TestRangeEvents: range grants and releases are reported to the
// observers (the audit log and the metrics) as claims' are: one event
// per request, with the key, session, label, owner, type and range, a
// release before the grant it allows; the end of a session reports what
// it held.
func TestRangeEvents(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	a := ts.dialV2(t, longLease, "host-a")
	b := ts.dialV2(t, longLease, "host-b")
	w, r := protocol.LockWrite, protocol.LockRead

	a.mustWrite(rangeFrame(1, protocol.RangeSet, 0, w, 7, 0, 99, "f"))
	tok := a.expectRange(1, protocol.RangeGranted).Token
	g := ts.events.wait(t, "range granted", rangeEventOf(server.EventRangeGranted, "f", a.session))
	if g.Token != tok || g.Label != "host-a" || g.Peer.Addr == "" || g.Protocol != protocol.Version2 ||
		*g.Range != (server.RangeLock{Owner: 7, Type: "write", Start: 0, End: 99}) {
		t.Errorf("grant event %+v %+v, want a's owner 7 write [0,99] token %d", g, *g.Range, tok)
	}
	b.mustWrite(rangeFrame(1, protocol.RangeSet, protocol.RangeWait, r, 3, 50, eof, "f"))
	b.expectRange(1, protocol.RangeQueued)
	a.mustWrite(rangeFrame(2, protocol.RangeUnlock, 0, 0, 7, 40, 200, "f"))
	a.expectRange(2, protocol.RangeDone)
	b.expectRange(1, protocol.RangePromoted)
	rel := ts.events.wait(t, "range released", rangeEventOf(server.EventRangeReleased, "f", a.session))
	if rel.Action != "unlock" || *rel.Range != (server.RangeLock{Owner: 7, Type: "write", Start: 40, End: 99, Ranges: 1}) {
		t.Errorf("unlock event %q %+v, want unlock of [40,99]", rel.Action, *rel.Range)
	}
	pg := ts.events.wait(t, "promotion", rangeEventOf(server.EventRangeGranted, "f", b.session))
	if pg.Range.Type != "read" || pg.Range.Start != 50 || pg.Range.End != eof || pg.Label != "host-b" {
		t.Errorf("promotion event %+v", *pg.Range)
	}
	evs := ts.events.all()
	iRel, iGrant := -1, -1
	for i, e := range evs {
		switch {
		case e.Kind == server.EventRangeReleased && iRel < 0:
			iRel = i
		case e.Kind == server.EventRangeGranted && uint64(e.Session) == b.session:
			iGrant = i
		}
	}
	if iRel > iGrant {
		t.Errorf("the release (event %d) comes after the grant it allowed (event %d)", iRel, iGrant)
	}
	// A flock, released by closing its file.
	a.mustWrite(rangeFrame(3, protocol.RangeSet, protocol.RangeFlock, w, 8, 0, 0, "f"))
	a.expectRange(3, protocol.RangeGranted)
	a.mustWrite(rangeFrame(4, protocol.RangeRelease, protocol.RangeFlock, 0, 8, 0, 0, "f"))
	a.expectRange(4, protocol.RangeDone)
	ts.events.wait(t, "flock release", func(e server.Event) bool {
		return e.Kind == server.EventRangeReleased && e.Action == "release" && e.Range.Flock && e.Range.Owner == 8
	})
	// The end of a session reports what it held, named as before.
	b.close()
	end := ts.events.wait(t, "session end", rangeEventOf(server.EventRangeReleased, "f", b.session))
	if end.Action != "session" || end.Label != "host-b" || end.Peer.Addr == "" || end.Range.Owner != 3 {
		t.Errorf("session end event %q %q %+v", end.Action, end.Label, *end.Range)
	}
}

// TestRangeForceRelease: an administrator releases one owner's range
// locks on a key. The waiters they blocked are granted; the owner's
// session, which has no frame that revokes one range lock, is ended with
// ERROR 0x02 (closed by administrator), so its client knows its locks
// lost; the action and the release are reported for the audit log.
func TestRangeForceRelease(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	a := ts.dialV2(t, longLease, "host-a")
	b := ts.dialV2(t, longLease, "host-b")
	w := protocol.LockWrite
	a.mustWrite(rangeFrame(1, protocol.RangeSet, 0, w, 7, 0, 99, "f"))
	a.expectRange(1, protocol.RangeGranted)
	a.mustWrite(rangeFrame(2, protocol.RangeSet, protocol.RangeFlock, w, 7, 0, 0, "f"))
	a.expectRange(2, protocol.RangeGranted)
	b.mustWrite(rangeFrame(1, protocol.RangeSet, protocol.RangeWait, w, 1, 10, 10, "f"))
	b.expectRange(1, protocol.RangeQueued)

	sre := server.Peer{Identity: "sre", Addr: "127.0.0.1:1"}
	if err := ts.ReleaseRangesBy("f", a.session, 8, sre); !errors.Is(err, server.ErrNoHolder) {
		t.Fatalf("release of an owner with nothing on the key: %v, want ErrNoHolder", err)
	}
	if err := ts.ReleaseRangesBy("g", a.session, 7, sre); !errors.Is(err, server.ErrNoHolder) {
		t.Fatalf("release on a key with no lock: %v, want ErrNoHolder", err)
	}
	if err := ts.ReleaseRangesBy("f", a.session, 7, sre); err != nil {
		t.Fatal(err)
	}
	b.expectRange(1, protocol.RangePromoted)
	a.expectSessionError(protocol.CodeClosedByAdmin)
	fr := ts.events.wait(t, "force release", rangeEventOf(server.EventRangeForceRelease, "f", a.session))
	if fr.Admin != sre || fr.Range.Owner != 7 || fr.Label != "host-a" {
		t.Errorf("force-release event %+v %+v", fr, *fr.Range)
	}
	ts.events.waitCount(t, 2, func(e server.Event) bool {
		return e.Kind == server.EventRangeReleased && e.Action == "force" && uint64(e.Session) == a.session
	})
	ts.events.waitCount(t, 2, func(e server.Event) bool {
		return e.Kind == server.EventRangeRevoked && e.Action == "admin" && uint64(e.Session) == a.session
	})
}

// TestRangeRevokeOnReload: after an ACL reload that refuses a key, the
// waiting range requests there are answered denied (0x0f) and counted;
// holders keep their ranges unless holders are revoked too, when they
// lose them and their session is ended with ERROR 0x18. Keys the list
// still allows are untouched.
func TestRangeRevokeOnReload(t *testing.T) {
	t.Parallel()
	authz := &reloadableAuthz{}
	ts := startServer(t, func(s *server.Server) { s.Authorizer = authz })
	a := ts.dialV2(t, longLease, "host-a")
	b := ts.dialV2(t, longLease, "host-b")
	c := ts.dialV2(t, longLease, "host-c")
	w := protocol.LockWrite
	a.mustWrite(rangeFrame(1, protocol.RangeSet, 0, w, 1, 0, 9, "secret/f"))
	a.expectRange(1, protocol.RangeGranted)
	b.mustWrite(rangeFrame(1, protocol.RangeSet, protocol.RangeWait, w, 1, 0, 9, "secret/f"))
	b.expectRange(1, protocol.RangeQueued)
	c.mustWrite(rangeFrame(1, protocol.RangeSet, 0, w, 1, 0, 9, "public/f"))
	c.expectRange(1, protocol.RangeGranted)

	authz.set("secret/")
	if n := ts.Revoke(false); n != 1 {
		t.Errorf("Revoke(false) ended %d, want b's waiting request", n)
	}
	b.expectRange(1, protocol.RangeDenied)
	ts.events.wait(t, "revoked waiter", func(e server.Event) bool {
		return e.Kind == server.EventRangeRevoked && e.Action == "acl" && uint64(e.Session) == b.session && e.Range.Waiting
	})
	// a still holds: its owner 1 conflicts with b's new request.
	authz.set("")
	b.mustWrite(rangeFrame(2, protocol.RangeSet, 0, w, 1, 0, 9, "secret/f"))
	b.expectRange(2, protocol.RangeConflict)

	authz.set("secret/")
	if n := ts.Revoke(true); n != 1 {
		t.Errorf("Revoke(true) ended %d, want a's held lock", n)
	}
	a.expectSessionError(protocol.CodeNotAuthorized)
	rel := ts.events.wait(t, "revoked holder", rangeEventOf(server.EventRangeReleased, "secret/f", a.session))
	if rel.Action != "revoked" {
		t.Errorf("release reason %q, want revoked", rel.Action)
	}
	authz.set("")
	b.mustWrite(rangeFrame(3, protocol.RangeSet, 0, w, 1, 0, 9, "secret/f"))
	b.expectRange(3, protocol.RangeGranted)
	c.mustWrite(rangeFrame(2, protocol.RangeQuery, 0, w, 2, 0, 9, "public/f"))
	if f := c.expectRange(2, protocol.RangeLocked); f.Session != c.session {
		t.Errorf("public/f held by session %d, want c's own", f.Session)
	}
}

// TestRangeEventsFlockConversion: a flock conversion reports the release
// of the old lock before the grant of the new one, as the table made
// them.
func TestRangeEventsFlockConversion(t *testing.T) {
	t.Parallel()
	ts := startServer(t)
	a := ts.dialV2(t, longLease, "host-a")
	a.mustWrite(rangeFrame(1, protocol.RangeSet, protocol.RangeFlock, protocol.LockRead, 4, 0, 0, "f"))
	a.expectRange(1, protocol.RangeGranted)
	a.mustWrite(rangeFrame(2, protocol.RangeSet, protocol.RangeFlock, protocol.LockWrite, 4, 0, 0, "f"))
	a.expectRange(2, protocol.RangeGranted)
	ts.events.waitCount(t, 2, rangeEventOf(server.EventRangeGranted, "f", a.session))
	var kinds []string
	for _, e := range ts.events.all() {
		if e.Range != nil {
			kinds = append(kinds, e.Kind.String()+":"+e.Range.Type+":"+e.Action)
		}
	}
	want := []string{"range_granted:read:", "range_released:read:convert", "range_granted:write:"}
	if len(kinds) != 3 || kinds[0] != want[0] || kinds[1] != want[1] || kinds[2] != want[2] {
		t.Errorf("events %q, want %q", kinds, want)
	}
}
