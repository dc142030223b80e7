package locktable_test

import (
	"errors"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

// countingTokens counts the tokens drawn, so a test can see that an
// operation drew none.
type countingTokens struct {
	locktable.CounterTokens
	drawn int
}

func (c *countingTokens) Next() uint64 { c.drawn++; return c.CounterTokens.Next() }

func openV2(t *testing.T, tb *locktable.Table, now time.Time, sid locktable.SessionID, lease time.Duration) {
	t.Helper()
	if err := tb.Open(now, sid, locktable.SessionParams{Lease: lease, Label: "s"}); err != nil {
		t.Fatal(err)
	}
}

func mustClaim(t *testing.T, tb *locktable.Table, now time.Time, sid locktable.SessionID, cid locktable.ClaimID, req locktable.ClaimRequest) (locktable.Status, locktable.Result) {
	t.Helper()
	st, res, err := tb.Claim(now, sid, cid, req)
	if err != nil {
		t.Fatal(err)
	}
	return st, res
}

var excl = locktable.ClaimRequest{Name: "a", Mode: locktable.Exclusive}

// A detached session keeps its claims: nobody behind it is promoted, a
// grant made while detached is kept and sent to nobody, Adopt moves the
// claim with its token and queue place, and the lease runs on from when
// the session was last heard from.
func TestDetachKeepsClaimsUntilAdoptOrExpiry(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tb := locktable.New(&locktable.CounterTokens{})
	openV2(t, tb, t0, 1, time.Second)
	openV2(t, tb, t0, 2, time.Second)
	openV2(t, tb, t0, 3, time.Second)
	if err := tb.Detach(1, locktable.Origin{Session: 1}); !errors.Is(err, locktable.ErrNoClaim) {
		t.Errorf("Detach of a session without claims: %v, want ErrNoClaim", err)
	}
	st, _ := mustClaim(t, tb, t0, 1, 7, excl) // holds a, token 1
	mustClaim(t, tb, t0, 2, 8, excl)          // queued behind 1
	mustClaim(t, tb, t0, 1, 9, locktable.ClaimRequest{Name: "b", Mode: locktable.Shared})
	o := locktable.Origin{Node: "", Session: 1}
	if err := tb.Detach(1, o); err != nil {
		t.Fatal(err)
	}
	if err := tb.Detach(1, o); !errors.Is(err, locktable.ErrNoSession) {
		t.Errorf("Detach twice: %v, want ErrNoSession", err)
	}
	if err := tb.Detach(2, o); !errors.Is(err, locktable.ErrBadState) {
		t.Errorf("Detach of another session to the same origin: %v, want ErrBadState", err)
	}
	if d, err := tb.Deadline(1); err != nil || !d.Equal(t0.Add(time.Second)) {
		t.Errorf("Deadline = %v, %v; want a lease after t0", d, err)
	}
	// Not expired within its lease, counted from t0.
	if _, err := tb.ExpireSession(t0.Add(time.Second), 1); !errors.Is(err, locktable.ErrNotExpired) {
		t.Fatalf("ExpireSession within the lease: %v", err)
	}
	v, err := tb.DetachedClaim(o, 7)
	if err != nil || v.Name != "a" || v.Mode != locktable.Exclusive || v.Status.State != locktable.Owner || v.Status.Token != st.Token {
		t.Fatalf("DetachedClaim = %+v, %v", v, err)
	}
	if _, err := tb.DetachedClaim(o, 99); !errors.Is(err, locktable.ErrNoClaim) {
		t.Errorf("DetachedClaim of an unknown id: %v", err)
	}
	if sid, ok := tb.DetachedSession(o); !ok || sid != 1 {
		t.Errorf("DetachedSession = %d, %v", sid, ok)
	}
	// Adopt claim 7 into session 3: same token; session 1 stays for claim 9.
	t1 := t0.Add(500 * time.Millisecond)
	got, err := tb.Adopt(t1, o, 7, 3)
	if err != nil || got.State != locktable.Owner || got.Token != st.Token {
		t.Fatalf("Adopt = %+v, %v; want owner with token %d", got, err, st.Token)
	}
	if _, err := tb.ClaimStatus(locktable.Key{Session: 3, Claim: 7}); err != nil {
		t.Errorf("adopted claim not in session 3: %v", err)
	}
	// Session 1 (claim 9) expires a lease after t0 and releases b.
	res, err := tb.ExpireSession(t0.Add(time.Second+time.Nanosecond), 1)
	if err != nil || len(res.Events) != 1 || res.Events[0].Lock != "b" || res.Events[0].Reason != locktable.ReasonExpired {
		t.Fatalf("ExpireSession = %+v, %v", res, err)
	}
	if _, ok := tb.DetachedSession(o); ok {
		t.Error("the expired session still stands for its origin")
	}
}

// A queued claim of a detached session that reaches the head is granted
// and kept: no frame goes out for it, and Adopt reports the grant.
func TestDetachedGrantIsKeptForAdopt(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tb := locktable.New(&locktable.CounterTokens{})
	for sid := locktable.SessionID(1); sid <= 3; sid++ {
		openV2(t, tb, t0, sid, time.Second)
	}
	mustClaim(t, tb, t0, 1, 1, excl)
	mustClaim(t, tb, t0, 2, 1, excl) // queued
	o := locktable.Origin{Node: "n", Session: 2}
	if err := tb.Detach(2, o); err != nil {
		t.Fatal(err)
	}
	res, err := tb.Release(t0, locktable.Key{Session: 1, Claim: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Sends) != 0 {
		t.Errorf("a grant to a detached session was sent: %+v", res.Sends)
	}
	st, err := tb.Adopt(t0, o, 1, 3)
	if err != nil || st.State != locktable.Owner || st.Token != 2 {
		t.Fatalf("Adopt = %+v, %v; want owner, token 2", st, err)
	}
	// The detached session, empty, is gone.
	if _, ok := tb.DetachedSession(o); ok {
		t.Error("an empty detached session stays")
	}
}

func TestReassert(t *testing.T) {
	t0 := time.Unix(1000, 0)
	shared := locktable.ClaimRequest{Name: "a", Mode: locktable.Shared}
	sem := func(n uint32) locktable.ClaimRequest {
		return locktable.ClaimRequest{Name: "s", Mode: locktable.Semaphore, Limit: n}
	}
	tests := []struct {
		name    string
		setup   func(t *testing.T, tb *locktable.Table) // sessions 1..3 open, 4 detached
		sid     locktable.SessionID
		cid     locktable.ClaimID
		req     locktable.ClaimRequest
		token   uint64
		wantErr error
	}{
		{name: "free name", req: excl, token: 500},
		{name: "shared beside a shared holder", req: shared, token: 500,
			setup: func(t *testing.T, tb *locktable.Table) { mustClaim(t, tb, t0, 2, 1, shared) }},
		{name: "exclusive over a holder", req: excl, token: 500, wantErr: locktable.ErrReassertConflict,
			setup: func(t *testing.T, tb *locktable.Table) { mustClaim(t, tb, t0, 2, 1, excl) }},
		{name: "shared over an exclusive holder", req: shared, token: 500, wantErr: locktable.ErrReassertConflict,
			setup: func(t *testing.T, tb *locktable.Table) { mustClaim(t, tb, t0, 2, 1, excl) }},
		{name: "second conflicting re-assertion", req: excl, token: 501, wantErr: locktable.ErrReassertConflict,
			setup: func(t *testing.T, tb *locktable.Table) {
				if _, _, err := tb.Reassert(t0, 2, 1, excl, 500); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "semaphore with room", req: sem(2), token: 500,
			setup: func(t *testing.T, tb *locktable.Table) { mustClaim(t, tb, t0, 2, 1, sem(2)) }},
		{name: "semaphore full", req: sem(1), token: 500, wantErr: locktable.ErrReassertConflict,
			setup: func(t *testing.T, tb *locktable.Table) { mustClaim(t, tb, t0, 2, 1, sem(1)) }},
		{name: "semaphore limit differs", req: sem(3), token: 500, wantErr: locktable.ErrLimitMismatch,
			setup: func(t *testing.T, tb *locktable.Table) { mustClaim(t, tb, t0, 2, 1, sem(2)) }},
		{name: "semaphore on an exclusive name", req: locktable.ClaimRequest{Name: "a", Mode: locktable.Semaphore, Limit: 2}, token: 500,
			wantErr: locktable.ErrModeConflict,
			setup:   func(t *testing.T, tb *locktable.Table) { mustClaim(t, tb, t0, 2, 1, shared) }},
		{name: "token 0", req: excl, wantErr: locktable.ErrNoToken},
		{name: "claim id in use", req: excl, token: 500, wantErr: locktable.ErrClaimExists,
			setup: func(t *testing.T, tb *locktable.Table) {
				mustClaim(t, tb, t0, 1, 1, locktable.ClaimRequest{Name: "x", Mode: locktable.Exclusive})
			}},
		{name: "unknown session", sid: 9, req: excl, token: 500, wantErr: locktable.ErrNoSession},
		{name: "detached session", sid: 4, req: excl, token: 500, wantErr: locktable.ErrNoSession},
		{name: "empty name", req: locktable.ClaimRequest{Mode: locktable.Exclusive}, token: 500, wantErr: protocol.ErrEmptyName},
		{name: "bad mode", req: locktable.ClaimRequest{Name: "a", Mode: 9}, token: 500, wantErr: locktable.ErrInvalidMode},
		{name: "semaphore limit 0", req: sem(0), token: 500, wantErr: locktable.ErrInvalidLimit},
		// Waiters arrived after the grant being re-asserted: it goes
		// ahead of them (here, waiting for the gate).
		{name: "ahead of waiters while gated", req: excl, token: 500,
			setup: func(t *testing.T, tb *locktable.Table) {
				tb.SetGate(t0.Add(time.Hour))
				if st, _ := mustClaim(t, tb, t0, 2, 1, excl); st.State != locktable.Waiting {
					t.Fatalf("claim before the gate: %v", st.State)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tokens := &countingTokens{}
			tb := locktable.New(tokens)
			for sid := locktable.SessionID(1); sid <= 4; sid++ {
				openV2(t, tb, t0, sid, time.Second)
			}
			mustClaim(t, tb, t0, 4, 1, locktable.ClaimRequest{Name: "kept", Mode: locktable.Exclusive})
			if err := tb.Detach(4, locktable.Origin{Node: "n", Session: 4}); err != nil {
				t.Fatal(err)
			}
			if tt.setup != nil {
				tt.setup(t, tb)
			}
			sid, cid := tt.sid, tt.cid
			if sid == 0 {
				sid = 1
			}
			if cid == 0 {
				cid = 1
			}
			drawn := tokens.drawn
			before := tb.SessionInfos()
			t1 := t0.Add(300 * time.Millisecond)
			st, res, err := tb.Reassert(t1, sid, cid, tt.req, tt.token)
			if tokens.drawn != drawn {
				t.Errorf("Reassert drew %d tokens", tokens.drawn-drawn)
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Reassert = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				if len(res.Events)+len(res.Sends) != 0 {
					t.Errorf("a refused re-assertion reports %+v", res)
				}
				if after := tb.SessionInfos(); len(after) != len(before) {
					t.Errorf("sessions changed: %d, then %d", len(before), len(after))
				}
				return
			}
			if st.State != locktable.Owner || st.Token != tt.token || !st.Deadline.Equal(t1.Add(time.Second)) {
				t.Errorf("status %+v; want owner with token %d, deadline a lease after t1", st, tt.token)
			}
			if len(res.Events) != 1 || res.Events[0].Kind != locktable.EventGranted || res.Events[0].Token != tt.token || len(res.Sends) != 0 {
				t.Errorf("result %+v", res)
			}
			// The claim is held as any: releasing it promotes, with a
			// fresh token from the source.
			if got, err := tb.ClaimStatus(locktable.Key{Session: sid, Claim: cid}); err != nil || got.Token != tt.token {
				t.Errorf("ClaimStatus = %+v, %v", got, err)
			}
			if _, err := tb.Release(t1, locktable.Key{Session: sid, Claim: cid}); err != nil {
				t.Errorf("Release: %v", err)
			}
		})
	}
}

// Reassert does not lower the token source: a grant after it takes the
// next token of the source, whatever the re-asserted token.
func TestReassertLeavesTokenSource(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tb := locktable.New(&locktable.CounterTokens{})
	openV2(t, tb, t0, 1, time.Second)
	openV2(t, tb, t0, 2, time.Second)
	if _, _, err := tb.Reassert(t0, 1, 1, excl, 1_000_000); err != nil {
		t.Fatal(err)
	}
	if st, _ := mustClaim(t, tb, t0, 2, 1, excl); st.State != locktable.Waiting {
		t.Fatalf("a claim behind a re-asserted holder: %v", st.State)
	}
	res, err := tb.Release(t0, locktable.Key{Session: 1, Claim: 1})
	if err != nil || len(res.Sends) != 1 || res.Sends[0].Token != 1 {
		t.Fatalf("promotion after the re-asserted holder: %+v, %v; want token 1 from the source", res, err)
	}
}
