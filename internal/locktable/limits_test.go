package locktable_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/locktable"
)

// The limits refuse a claim before anything changes: the refused claim
// is not in the table, and every claim already there, of this session
// and of others, stands as it was.
func TestLimits(t *testing.T) {
	lease := time.Minute
	for _, tc := range []struct {
		name    string
		limits  locktable.Limits
		run     func(tb *locktable.Table) error
		wantErr error
		// what the table holds afterwards
		held, waiters int
	}{
		{
			name:   "claims per session",
			limits: locktable.Limits{Claims: 3},
			run: func(tb *locktable.Table) error {
				// Session 1: two held, one queued behind session 2.
				claim(t, tb, 2, 1, "q")
				claim(t, tb, 1, 1, "a")
				claim(t, tb, 1, 2, "b")
				claim(t, tb, 1, 3, "q")
				_, _, err := tb.Claim(epoch, 1, 4, locktable.ClaimRequest{Name: "c", Mode: locktable.Exclusive})
				return err
			},
			wantErr: locktable.ErrTooManyClaims, held: 3, waiters: 1,
		},
		{
			name:   "claims per session: no-wait too",
			limits: locktable.Limits{Claims: 1},
			run: func(tb *locktable.Table) error {
				claim(t, tb, 1, 1, "a")
				_, _, err := tb.Claim(epoch, 1, 2, locktable.ClaimRequest{Name: "c", Mode: locktable.Exclusive, NoWait: true})
				return err
			},
			wantErr: locktable.ErrTooManyClaims, held: 1,
		},
		{
			name:   "claims per session: another session is not limited by it",
			limits: locktable.Limits{Claims: 1},
			run: func(tb *locktable.Table) error {
				claim(t, tb, 1, 1, "a")
				_, _, err := tb.Claim(epoch, 2, 1, locktable.ClaimRequest{Name: "b", Mode: locktable.Exclusive})
				return err
			},
			held: 2,
		},
		{
			name:   "waiters per name",
			limits: locktable.Limits{Waiters: 2},
			run: func(tb *locktable.Table) error {
				claim(t, tb, 1, 1, "a")
				claim(t, tb, 2, 1, "a")
				claim(t, tb, 3, 1, "a")
				_, _, err := tb.Claim(epoch, 4, 1, locktable.ClaimRequest{Name: "a", Mode: locktable.Exclusive})
				return err
			},
			wantErr: locktable.ErrTooManyWaiters, held: 1, waiters: 2,
		},
		{
			name:   "waiters per name: a no-wait claim is answered busy",
			limits: locktable.Limits{Waiters: 1},
			run: func(tb *locktable.Table) error {
				claim(t, tb, 1, 1, "a")
				claim(t, tb, 2, 1, "a")
				st, _, err := tb.Claim(epoch, 4, 1, locktable.ClaimRequest{Name: "a", Mode: locktable.Exclusive, NoWait: true})
				if err == nil && st.State != locktable.Busy {
					return fmt.Errorf("state %v, want busy", st.State)
				}
				return err
			},
			held: 1, waiters: 1,
		},
		{
			name:   "waiters per name: another name has its own queue",
			limits: locktable.Limits{Waiters: 1},
			run: func(tb *locktable.Table) error {
				claim(t, tb, 1, 1, "a")
				claim(t, tb, 2, 1, "a")
				claim(t, tb, 1, 2, "b")
				_, _, err := tb.Claim(epoch, 3, 1, locktable.ClaimRequest{Name: "b", Mode: locktable.Exclusive})
				return err
			},
			held: 2, waiters: 2,
		},
		{
			name:   "waiters per name: version 1",
			limits: locktable.Limits{Waiters: 1, Claims: 1},
			run: func(tb *locktable.Table) error {
				v1 := func(id locktable.SessionID) error {
					_, _, err := tb.Acquire(epoch, id, locktable.Request{Name: "a", Lease: lease})
					return err
				}
				if err := v1(11); err != nil {
					return err
				}
				if err := v1(12); err != nil {
					return err
				}
				err := v1(13)
				if tb.Sessions() != 6 { // 4 opened by the test, 11 and 12
					return fmt.Errorf("%d sessions after a refused ACQUIRE, want 6", tb.Sessions())
				}
				return err
			},
			wantErr: locktable.ErrTooManyWaiters, held: 1, waiters: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := locktable.New(&locktable.CounterTokens{})
			tb.SetLimits(tc.limits)
			for sid := locktable.SessionID(1); sid <= 4; sid++ {
				if err := tb.Open(epoch, sid, locktable.SessionParams{Lease: lease}); err != nil {
					t.Fatal(err)
				}
			}
			err := tc.run(tb)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if got := tb.Holders(); got != tc.held {
				t.Errorf("%d holders, want %d", got, tc.held)
			}
			if got := tb.Counts().Waiters; got != tc.waiters {
				t.Errorf("%d waiters, want %d", got, tc.waiters)
			}
		})
	}
}

// A refused claim leaves every claim of the table exactly as it was.
func TestLimitRefusalChangesNothing(t *testing.T) {
	tb := locktable.New(&locktable.CounterTokens{})
	tb.SetLimits(locktable.Limits{Claims: 2, Waiters: 1})
	for sid := locktable.SessionID(1); sid <= 3; sid++ {
		if err := tb.Open(epoch, sid, locktable.SessionParams{Lease: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	claim(t, tb, 1, 1, "a")
	claim(t, tb, 2, 1, "a")
	claim(t, tb, 2, 2, "b")
	before := fmt.Sprint(tb.Export(epoch, nil))
	later := epoch.Add(time.Second)
	if _, _, err := tb.Claim(later, 3, 1, locktable.ClaimRequest{Name: "a", Mode: locktable.Exclusive}); !errors.Is(err, locktable.ErrTooManyWaiters) {
		t.Fatalf("waiter over the limit: %v", err)
	}
	if _, _, err := tb.Claim(later, 2, 3, locktable.ClaimRequest{Name: "c", Mode: locktable.Exclusive}); !errors.Is(err, locktable.ErrTooManyClaims) {
		t.Fatalf("claim over the limit: %v", err)
	}
	if after := fmt.Sprint(tb.Export(epoch, nil)); after != before {
		t.Errorf("table changed by refused claims:\nbefore %s\nafter  %s", before, after)
	}
	if d, _ := tb.Deadline(2); !d.Equal(epoch.Add(time.Minute)) {
		t.Errorf("a refused claim refreshed the session's lease: deadline %v", d)
	}
	if n := tb.ClaimCount(2); n != 2 {
		t.Errorf("ClaimCount(2) = %d, want 2", n)
	}
}

func claim(t *testing.T, tb *locktable.Table, sid locktable.SessionID, cid locktable.ClaimID, name string) locktable.Status {
	t.Helper()
	st, _, err := tb.Claim(epoch, sid, cid, locktable.ClaimRequest{Name: name, Mode: locktable.Exclusive})
	if err != nil {
		t.Fatalf("session %d claim %d on %q: %v", sid, cid, name, err)
	}
	return st
}

// LockPage returns the queue's waiters from offset, at most limit, in
// queue order, and the whole queue's length.
func TestLockPage(t *testing.T) {
	tb := locktable.New(&locktable.CounterTokens{})
	for sid := locktable.SessionID(1); sid <= 6; sid++ {
		if err := tb.Open(epoch, sid, locktable.SessionParams{Lease: time.Minute}); err != nil {
			t.Fatal(err)
		}
		claim(t, tb, sid, 1, "a")
	}
	for _, tc := range []struct {
		offset, limit int
		want          []locktable.SessionID
	}{
		{0, 2, []locktable.SessionID{2, 3}},
		{3, 10, []locktable.SessionID{5, 6}},
		{5, 1, nil},
		{99, 1, nil},
		{0, 0, nil},
		{-1, 1, []locktable.SessionID{2}},
	} {
		l, ok := tb.LockPage("a", tc.offset, tc.limit)
		if !ok {
			t.Fatal("LockPage: no lock")
		}
		var got []locktable.SessionID
		for _, w := range l.Waiters {
			got = append(got, w.Session)
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) || l.WaiterCount != 5 || len(l.Holders) != 1 {
			t.Errorf("LockPage(a, %d, %d): waiters %v of %d, %d holders; want %v of 5, 1 holder", tc.offset, tc.limit, got, l.WaiterCount, len(l.Holders), tc.want)
		}
	}
	if _, ok := tb.LockPage("none", 0, 1); ok {
		t.Error("LockPage of a lock nobody holds reports one")
	}
}
