package clustercore

import (
	"bytes"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
)

func TestHostMovingOver(t *testing.T) {
	for _, tc := range []struct {
		name                      string
		closed, ending, finishing bool
		want                      bool
	}{
		{"an open session retries", false, false, false, false},
		{"an ended session stops", true, false, false, true},
		{"an ended session stops even while finishing", true, true, true, true},
		{"an ending session stops", false, true, false, true},
		{"a client that hung up while claims moved: go on", false, true, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := HostMovingOver(tc.closed, tc.ending, tc.finishing); got != tc.want {
				t.Fatalf("over %v, want %v", got, tc.want)
			}
		})
	}
}

func TestHostRetryDue(t *testing.T) {
	for _, tc := range []struct {
		name                      string
		moving, scheduled, closed bool
		want                      bool
	}{
		{"something moves, nothing scheduled: schedule", true, false, false, true},
		{"nothing moves", false, false, false, false},
		{"already scheduled", true, true, false, false},
		{"the session ended", true, false, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := HostRetryDue(tc.moving, tc.scheduled, tc.closed); got != tc.want {
				t.Fatalf("due %v, want %v", got, tc.want)
			}
		})
	}
}

func TestHostFinishUntil(t *testing.T) {
	const lease = 10 * time.Second
	slack := lease/2 + 2*MoveRetry
	for _, tc := range []struct {
		name  string
		since []time.Time
		want  time.Time
	}{
		{"one claim: half its lease and two retries after it began moving", []time.Time{moveT0}, moveT0.Add(slack)},
		{"the latest claim decides", []time.Time{moveT0.Add(time.Second), moveT0, moveT0.Add(3 * time.Second)}, moveT0.Add(3*time.Second + slack)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := HostFinishUntil(tc.since, lease); !got.Equal(tc.want) {
				t.Fatalf("until %v, want %v", got, tc.want)
			}
		})
	}
}

func TestHostAdopted(t *testing.T) {
	granted := protocol.Frame{Type: protocol.TypeGranted, Claim: 4, Token: 9}
	queued := protocol.Frame{Type: protocol.TypeQueued, Claim: 4, Ticket: 5}
	for _, tc := range []struct {
		name      string
		m         Move
		f         protocol.Frame
		released  bool
		state     ClaimState
		push, rel []byte
	}{
		{"not released: no RELEASE, the promotion still told", Move{}, granted, false, ClaimLive, protocol.AppendPromoted(nil, 4, 9), nil},
		{"released while it moved: the RELEASE goes on to the new owner now", Move{Token: 9}, granted, true, ClaimReleasing, nil, protocol.AppendRelease(nil, 4)},
		{"released while queued, still queued there: the RELEASE goes on", Move{}, queued, true, ClaimReleasing, nil, protocol.AppendRelease(nil, 4)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Claim{ID: 4, State: ClaimMoving}
			push, rel := tc.m.HostAdopted(&c, tc.f, tc.released)
			if c.State != tc.state {
				t.Fatalf("state %d, want %d", c.State, tc.state)
			}
			if !bytes.Equal(push, tc.push) || !bytes.Equal(rel, tc.rel) {
				t.Fatalf("push %x release %x, want %x %x", push, rel, tc.push, tc.rel)
			}
		})
	}
}

func TestHostMovedAnswers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		head  protocol.Type
		c     *Claim
		id    uint32
		want  bool
		after bool // the claim's MovedAnswer after
	}{
		{"the kept RELEASE at the head: MOVED answers it", protocol.TypeRelease, &Claim{ID: 3, MovedAnswer: true}, 3, true, false},
		{"a RELEASE not kept: the owner's push at its export", protocol.TypeRelease, &Claim{ID: 3}, 3, false, false},
		{"another claim's RELEASE at the head", protocol.TypeRelease, &Claim{ID: 2, MovedAnswer: true}, 3, false, true},
		{"a CLAIM at the head", protocol.TypeClaim, &Claim{ID: 3, MovedAnswer: true}, 3, false, true},
		{"a request about no claim", protocol.TypeRelease, nil, 3, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := HostMovedAnswers(tc.head, tc.c, tc.id); got != tc.want {
				t.Fatalf("answers %v, want %v", got, tc.want)
			}
			if tc.c != nil && tc.c.MovedAnswer != tc.after {
				t.Fatalf("MovedAnswer %v after, want %v", tc.c.MovedAnswer, tc.after)
			}
		})
	}
}

func TestHostStartMove(t *testing.T) {
	req := protocol.Frame{Type: protocol.TypeClaim, Name: "n", Mode: protocol.Mode(1)}
	for _, tc := range []struct {
		name string
		st   ClaimState
		keep bool
	}{
		{"a live claim moves", ClaimLive, false},
		{"a claim being released keeps its RELEASE for the new owner", ClaimReleasing, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Claim{ID: 1, State: tc.st, Req: req, Token: 6}
			m, keep := c.HostStartMove(moveT0)
			if keep != tc.keep || c.State != ClaimMoving || m.Name != "n" || m.Token != 6 || !m.Since.Equal(moveT0) {
				t.Fatalf("move %+v keep %v state %d", m, keep, c.State)
			}
			c.HostKeptRelease()
			if !HostMovedAnswers(protocol.TypeRelease, &c, 1) {
				t.Fatal("a kept RELEASE is not answered by the second MOVED")
			}
		})
	}
}

func TestHostAwaits(t *testing.T) {
	for _, tc := range []struct {
		st       ClaimState
		inFlight bool
		want     bool
	}{
		{ClaimMoving, false, true},
		{ClaimMoving, true, false},
		{ClaimLive, false, false},
		{ClaimEnded, false, false},
	} {
		if got := HostAwaits(tc.st, tc.inFlight); got != tc.want {
			t.Errorf("HostAwaits(%d, %v) = %v, want %v", tc.st, tc.inFlight, got, tc.want)
		}
	}
}

func TestHostMoveRoute(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    HostRoute
		want MoveRoute
	}{
		{"forward: there", HostRoute{Forward: true}, MoveRouteThere},
		{"serve: here", HostRoute{Serve: true}, MoveRouteHere},
		{"held for a warm-up: warming", HostRoute{Gated: true}, MoveRouteWarming},
		{"anything else: nowhere", HostRoute{}, MoveRouteNowhere},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := HostMoveRoute(tc.r); got != tc.want {
				t.Fatalf("route %d, want %d", got, tc.want)
			}
		})
	}
}
