package admin_test

import (
	"errors"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/batonlock/baton/admin"
	"github.com/batonlock/baton/internal/opstest"
	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// TestV2ClaimsOverHTTP lists version 2 claims with their mode, session,
// label and claim id beside a version 1 claim, force-releases one shared
// holder by token and another by SESSION/CLAIM, and kicks one waiting
// claim by SESSION/CLAIM: each gets REVOKED(0x02), and its session lives
// on.
func TestV2ClaimsOverHTTP(t *testing.T) {
	f := start(t)
	opstest.PassGate(t, f.addr)
	ctx := t.Context()
	r1 := opstest.DialV2(t, f.addr, 10*time.Second, "reader-1")
	r1.Claim(7, protocol.ModeShared, 0, "db")
	tok7 := r1.ExpectV2(protocol.TypeGranted, 7, 0).Token
	r2 := opstest.DialV2(t, f.addr, 10*time.Second, "reader-2")
	r2.Claim(3, protocol.ModeShared, 0, "db")
	r2.ExpectV2(protocol.TypeGranted, 3, 0)
	w := opstest.DialV2(t, f.addr, 10*time.Second, "writer")
	w.Claim(1, protocol.ModeExclusive, 0, "db")
	w.ExpectV2(protocol.TypeQueued, 1, 0)
	v1 := f.wait(t, "db")

	l, err := f.client.Lock(ctx, "db")
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Holders) != 2 || len(l.Waiters) != 2 || l.Holder == nil || *l.Holder != l.Holders[0] {
		t.Fatalf("lock %+v: want 2 holders, 2 waiters", l)
	}
	h := l.Holders[0]
	if h.Protocol != 2 || h.Claim.Claim != 7 || h.Mode != "shared" || h.Label != "reader-1" || h.Token != tok7 || h.Session == 0 {
		t.Errorf("holder 0 = %+v, want reader-1's shared claim 7 with token %d", h, tok7)
	}
	if wt := l.Waiters[0]; wt.Protocol != 2 || wt.Claim.Claim != 1 || wt.Mode != "exclusive" || wt.Label != "writer" {
		t.Errorf("waiter 0 = %+v, want the writer's exclusive claim 1", wt)
	}
	if wt := l.Waiters[1]; wt.Protocol != 1 || wt.Claim.Claim != 0 || wt.Mode != "exclusive" || wt.RemoteAddr != v1.Addr() || wt.Label != "" {
		t.Errorf("waiter 1 = %+v, want the version 1 client", wt)
	}

	// A bare release of a lock with two holders names none: 409.
	if code, _, v := call(t, "POST", f.url+"/api/locks/db/release"); code != 409 {
		t.Errorf("bare release of two holders = %d %v, want 409", code, v)
	}
	if _, err := f.client.ReleaseHolder(ctx, "db", 12345, ""); !errors.Is(err, admin.ErrNotFound) {
		t.Errorf("release of an unknown token: %v, want not found", err)
	}
	if code, _, _ := call(t, "POST", f.url+"/api/locks/db/release?claim=x/1"); code != 400 {
		t.Errorf("release ?claim=x/1 = %d, want 400", code)
	}

	// Kick the writer's queued claim by SESSION/CLAIM.
	wref := l.Waiters[0].Claim.Ref()
	if _, err := f.client.Kick(ctx, "db", wref); err != nil {
		t.Fatal(err)
	}
	w.ExpectV2(protocol.TypeRevoked, 1, protocol.CodeClosedByAdmin)
	// Release reader-1 by token: reader-2 keeps its claim.
	rel, err := f.client.ReleaseHolder(ctx, "db", tok7, "")
	if err != nil {
		t.Fatal(err)
	}
	r1.ExpectV2(protocol.TypeRevoked, 7, protocol.CodeClosedByAdmin)
	if rel.Lock == nil || len(rel.Lock.Holders) != 1 || rel.Lock.Holders[0].Label != "reader-2" {
		t.Fatalf("after releasing claim 7: %+v", rel.Lock)
	}
	// Release reader-2 by SESSION/CLAIM: the version 1 waiter is next.
	if _, err := f.client.ReleaseHolder(ctx, "db", 0, rel.Lock.Holders[0].Claim.Ref()); err != nil {
		t.Fatal(err)
	}
	r2.ExpectV2(protocol.TypeRevoked, 3, protocol.CodeClosedByAdmin)
	v1.Expect(protocol.TypeAcquired, 0)

	// Every session lives on: a PING on each is answered, and the ids
	// may be claimed again.
	for _, c := range []*opstest.Conn{r1, r2, w} {
		c.Send(protocol.AppendPing(nil, 9))
		if fr := c.ReadV2(); fr.Type != protocol.TypePong {
			t.Fatalf("session after REVOKED: PING answered %v", fr)
		}
	}
	w.Claim(1, protocol.ModeShared, 0, "db")
	w.ExpectV2(protocol.TypeQueued, 1, 0)

	// The admin events name the claims.
	evs := f.rec.Events()
	var kicks, forces int
	for _, e := range evs {
		switch e.Kind {
		case server.EventKick:
			kicks++
			if e.Protocol != 2 || e.Claim != 1 || e.Label != "writer" || e.Mode.String() != "exclusive" {
				t.Errorf("kick event %+v", e)
			}
		case server.EventForceRelease:
			forces++
			if e.Protocol != 2 || e.Mode.String() != "shared" || e.Label == "" {
				t.Errorf("force-release event %+v", e)
			}
		}
	}
	if kicks != 1 || forces != 2 {
		t.Errorf("%d kicks, %d force-releases, want 1 and 2", kicks, forces)
	}
}

// TestV2KickUnknownClaim: SESSION/CLAIM that names no waiter is 404.
func TestV2KickUnknownClaim(t *testing.T) {
	f := start(t)
	f.hold(t, "k")
	code, _, v := call(t, "DELETE", f.url+"/api/locks/k/waiters/"+url.PathEscape(fmt.Sprintf("%d/%d", 99, 1)))
	if code != 404 {
		t.Fatalf("kick of an unknown claim = %d %v, want 404", code, v)
	}
}
