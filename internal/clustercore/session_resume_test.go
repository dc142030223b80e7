package clustercore

import (
	"testing"
	"time"
)

// What an open session whose client went elsewhere keeps: each case
// gives Kept, then EndsClaims.
func TestSessionAbandon(t *testing.T) {
	cases := map[string]struct {
		a                SessionAbandon
		kept, endsClaims bool
	}{
		"claims kept":                        {SessionAbandon{ClaimsKept: true, ClaimsLeft: true}, true, false},
		"claims and ranges kept":             {SessionAbandon{ClaimsKept: true, Ranges: true, ClaimsLeft: true}, true, false},
		"ranges kept, claims over the limit": {SessionAbandon{Ranges: true, ClaimsLeft: true}, true, true},
		"ranges kept, no claims":             {SessionAbandon{Ranges: true}, true, false},
		"nothing kept: stays open":           {SessionAbandon{ClaimsLeft: true}, false, false},
		"nothing at all":                     {SessionAbandon{}, false, false},
	}
	for name, tc := range cases {
		if got := tc.a.Kept(); got != tc.kept {
			t.Errorf("%s: Kept = %v, want %v", name, got, tc.kept)
		}
		if got := tc.a.EndsClaims(); got != tc.endsClaims {
			t.Errorf("%s: EndsClaims = %v, want %v", name, got, tc.endsClaims)
		}
	}
}

func TestKeptEndHoldFor(t *testing.T) {
	deadline := time.Unix(1000, 0)
	lease := 10 * time.Second
	servesA := func(name string) bool { return name == "a" }
	var e KeptEnd
	if _, _, held := e.HoldFor(deadline.Add(time.Second), deadline, lease, []string{"a", "a"}, servesA); held {
		t.Fatal("every name served: the end waited")
	}
	if _, _, held := e.HoldFor(deadline.Add(time.Second), deadline, lease, nil, servesA); held {
		t.Fatal("no claims: the end waited")
	}
	now := deadline.Add(time.Second)
	retryAt, warn, held := e.HoldFor(now, deadline, lease, []string{"a", "b"}, servesA)
	if !held || !retryAt.Equal(now.Add(KeptRetry)) || warn != "" {
		t.Fatalf("name b not served, within a lease: held %v retry %v warn %q; want held, retry at now+KeptRetry, no warning", held, retryAt.Sub(now), warn)
	}
	late := deadline.Add(lease + time.Second)
	if _, warn, held := e.HoldFor(late, deadline, lease, []string{"b"}, servesA); !held || warn != "b" {
		t.Fatalf("a lease past the deadline: held %v warn %q; want held, warning about b", held, warn)
	}
	if _, warn, held := e.HoldFor(late.Add(time.Second), deadline, lease, []string{"b"}, servesA); !held || warn != "" {
		t.Fatalf("later again: held %v warn %q; want held, warned once only", held, warn)
	}
}
