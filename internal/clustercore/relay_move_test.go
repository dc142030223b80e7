package clustercore

import (
	"bytes"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
)

var moveT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestMoveStep(t *testing.T) {
	const lease = 10 * time.Second
	planned := Move{Name: "a", Since: moveT0}
	failed := Move{Name: "a", Since: moveT0, Failover: true, Believed: moveT0.Add(3 * time.Second)}
	for _, tc := range []struct {
		name  string
		m     Move
		after time.Duration
		route MoveRoute
		want  MoveStep
	}{
		{"served there: its adoption is sent", planned, time.Second, MoveRouteThere, MoveSend},
		{"served here: adopted in this node's table", planned, time.Second, MoveRouteHere, MoveAdoptHere},
		{"routed nowhere yet: wait", planned, time.Second, MoveRouteNowhere, MoveWait},
		{"a planned move waits while this node warms the name up", planned, time.Second, MoveRouteWarming, MoveWait},
		{"a failover is taken over by a node warming the name up", failed, time.Second, MoveRouteWarming, MoveTakeOver},
		{"half the lease: given up", planned, lease / 2, MoveRouteThere, MoveGiveUp},
		{"just before half the lease: still sent", planned, lease/2 - time.Nanosecond, MoveRouteThere, MoveSend},
		{"past its client's belief: given up", failed, 3 * time.Second, MoveRouteThere, MoveGiveUp},
		{"within its client's belief: sent", failed, 3*time.Second - time.Nanosecond, MoveRouteThere, MoveSend},
		{"a queued claim has no belief window", Move{Since: moveT0, Failover: true}, 4 * time.Second, MoveRouteThere, MoveSend},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.m.Step(moveT0.Add(tc.after), lease, tc.route); got != tc.want {
				t.Fatalf("step %d, want %d", got, tc.want)
			}
		})
	}
}

func TestClaimFailOver(t *testing.T) {
	const lease = 10 * time.Second
	confirmed := moveT0.Add(-time.Second)
	req := protocol.Frame{Type: protocol.TypeClaim, Name: "n", Mode: protocol.Mode(2), Limit: 3}
	for _, tc := range []struct {
		name      string
		c         Claim
		confirmed time.Time
		want      Move
	}{
		{"a held claim may be believed 0.8 of the lease after its confirmation", Claim{ID: 1, State: ClaimLive, Req: req, Token: 7}, confirmed,
			Move{Name: "n", Mode: 2, Limit: 3, Token: 7, Since: moveT0, Failover: true, Believed: confirmed.Add(8 * time.Second)}},
		{"a queued claim keeps its ticket, with no window", Claim{ID: 1, State: ClaimLive, Req: req, Ticket: 4}, confirmed,
			Move{Name: "n", Mode: 2, Limit: 3, Since: moveT0, Failover: true, Ticket: 4}},
		{"never confirmed: no window", Claim{ID: 1, State: ClaimLive, Req: req, Token: 7}, time.Time{},
			Move{Name: "n", Mode: 2, Limit: 3, Token: 7, Since: moveT0, Failover: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.c
			if got := c.FailOver(moveT0, lease, tc.confirmed); got != tc.want || c.State != ClaimMoving {
				t.Fatalf("move %+v, state %d; want %+v, moving", got, c.State, tc.want)
			}
		})
	}
}

func TestMoveAdoption(t *testing.T) {
	o := MoveOrigin{Session: 5, Node: "r", Secret: [protocol.SecretLen]byte{1}, Ring: 9}
	valued := Claim{ID: 2, Req: protocol.Frame{Flags: protocol.ClaimValue, Value: "v"}}
	base := protocol.Frame{Type: protocol.TypeClaim, Claim: 2, Mode: 1, Limit: 1, Flags: protocol.ClaimReassert,
		Name: "n", Ring: 9, Session: 5, Secret: o.Secret, Node: "r"}
	with := func(f func(*protocol.Frame)) protocol.Frame { g := base; f(&g); return g }
	for _, tc := range []struct {
		name            string
		m               Move
		c               Claim
		values, tickets bool
		want            protocol.Frame
	}{
		{"a held claim re-asserts its token", Move{Name: "n", Mode: 1, Limit: 1, Token: 7}, valued, true, true,
			with(func(f *protocol.Frame) { f.Token = 7 })},
		{"a failed-over claim carries its value", Move{Name: "n", Mode: 1, Limit: 1, Token: 7, Failover: true}, valued, true, true,
			with(func(f *protocol.Frame) { f.Token, f.Flags, f.Value = 7, f.Flags|protocol.ClaimValue, "v" })},
		{"not to an upstream without values", Move{Name: "n", Mode: 1, Limit: 1, Token: 7, Failover: true}, valued, false, true,
			with(func(f *protocol.Frame) { f.Token = 7 })},
		{"a queued claim carries its ticket", Move{Name: "n", Mode: 1, Limit: 1, Ticket: 4}, Claim{ID: 2}, true, true,
			with(func(f *protocol.Frame) { f.Flags, f.Ticket = f.Flags|protocol.ClaimTicket, 4 })},
		{"not to an upstream without tickets", Move{Name: "n", Mode: 1, Limit: 1, Ticket: 4}, Claim{ID: 2}, true, false, base},
		{"a held claim's ticket is not sent", Move{Name: "n", Mode: 1, Limit: 1, Token: 7, Ticket: 4}, Claim{ID: 2}, true, true,
			with(func(f *protocol.Frame) { f.Token = 7 })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.m.Adoption(&tc.c, o, tc.values, tc.tickets); got != tc.want {
				t.Fatalf("adoption %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestMoveAdoptAnswer(t *testing.T) {
	stale := protocol.Frame{Type: protocol.TypeRefused, Code: protocol.CodeStaleRing}
	for _, tc := range []struct {
		name     string
		failover bool
		f        protocol.Frame
		want     AdoptOutcome
	}{
		{"GRANTED: adopted", false, protocol.Frame{Type: protocol.TypeGranted}, Adopted},
		{"QUEUED: adopted", false, protocol.Frame{Type: protocol.TypeQueued}, Adopted},
		{"REFUSED 0x03: not yet", false, protocol.Frame{Type: protocol.TypeRefused, Code: protocol.CodeNotOwner}, AdoptNotYet},
		{"a failover's stale ring: sent again", true, stale, AdoptNotYet},
		{"a planned move's stale ring: lost", false, stale, AdoptLost},
		{"BUSY: lost", false, protocol.Frame{Type: protocol.TypeBusy}, AdoptLost},
		{"REFUSED for another reason: lost", true, protocol.Frame{Type: protocol.TypeRefused, Code: protocol.CodeShuttingDown}, AdoptLost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := Move{Failover: tc.failover}
			if got := m.AdoptAnswer(tc.f); got != tc.want {
				t.Fatalf("outcome %d, want %d", got, tc.want)
			}
		})
	}
}

func TestMoveAdoptedAndGivenUp(t *testing.T) {
	granted := protocol.Frame{Type: protocol.TypeGranted, Claim: 3, Token: 8}
	for _, tc := range []struct {
		name     string
		token    uint64
		f        protocol.Frame
		released bool
		push     []byte
		after    Claim
	}{
		{"a claim told QUEUED and granted there hears PROMOTED", 0, granted, false,
			protocol.AppendPromoted(nil, 3, 8), Claim{ID: 3, State: ClaimLive, Token: 8}},
		{"a held claim hears nothing", 5, granted, false, nil, Claim{ID: 3, State: ClaimLive, Token: 8}},
		{"queued there: its ticket, nothing said", 0, protocol.Frame{Type: protocol.TypeQueued, Claim: 3, Ticket: 6}, false,
			nil, Claim{ID: 3, State: ClaimLive, Ticket: 6}},
		{"released meanwhile: releasing, nothing said", 0, granted, true, nil, Claim{ID: 3, State: ClaimReleasing, Token: 8}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Claim{ID: 3, State: ClaimMoving}
			m := Move{Token: tc.token}
			if push := m.Adopted(&c, tc.f, tc.released); !bytes.Equal(push, tc.push) || c != tc.after {
				t.Fatalf("push %x, claim %+v; want %x, %+v", push, c, tc.push, tc.after)
			}
		})
	}
	if got, want := GiveUpAnswer(3, false), protocol.AppendRevoked(nil, 3, protocol.CodeNotOwner, ""); !bytes.Equal(got, want) {
		t.Errorf("given up: %x, want REVOKED 0x03 %x", got, want)
	}
	if got, want := GiveUpAnswer(3, true), protocol.AppendReleased(nil, 3); !bytes.Equal(got, want) {
		t.Errorf("given up after its RELEASE: %x, want RELEASED %x", got, want)
	}
}

func TestMoveHere(t *testing.T) {
	queued, held := Move{Name: "n", Mode: 1, Limit: 1, Ticket: 4}, Move{Name: "n", Token: 7}
	for _, tc := range []struct {
		name            string
		m               Move
		released, owner bool
		answer, push    []byte
		how             HereStep
		hold            protocol.Frame
	}{
		{"released meanwhile: its RELEASE is answered, nothing taken over", queued, true, true,
			protocol.AppendReleased(nil, 3), nil, HereNothing, protocol.Frame{}},
		{"told QUEUED, now the owner here: PROMOTED; a queued claim is held with its ticket", queued, false, true,
			nil, protocol.AppendPromoted(nil, 3, 9), HereHold,
			protocol.Frame{Type: protocol.TypeClaim, Claim: 3, Mode: 1, Limit: 1, Name: "n", Flags: protocol.ClaimTicket, Ticket: 4}},
		{"still queued here: nothing said", queued, false, false, nil, nil, HereHold,
			protocol.Frame{Type: protocol.TypeClaim, Claim: 3, Mode: 1, Limit: 1, Name: "n", Flags: protocol.ClaimTicket, Ticket: 4}},
		{"a held claim hears nothing, and is re-asserted with its token", held, false, true, nil, nil, HereReassert, protocol.Frame{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			answer, push := tc.m.AdoptedHere(3, tc.released, tc.owner, 9)
			if !bytes.Equal(answer, tc.answer) || !bytes.Equal(push, tc.push) {
				t.Fatalf("adopted here: answer %x, push %x; want %x, %x", answer, push, tc.answer, tc.push)
			}
			if how, hold := tc.m.TakeOverHere(3, tc.released); how != tc.how || hold != tc.hold {
				t.Fatalf("taken over: %d %+v; want %d %+v", how, hold, tc.how, tc.hold)
			}
		})
	}
	noTicket := Move{Name: "n"}
	if _, hold := noTicket.TakeOverHere(3, false); hold.Flags != 0 || hold.Ticket != 0 {
		t.Errorf("a queued claim without a ticket is held with flags %x, ticket %d", hold.Flags, hold.Ticket)
	}
}

func TestClaimMoved(t *testing.T) {
	named := protocol.Frame{Type: protocol.TypeClaim, Name: "n", Mode: 1, Limit: 1}
	for _, tc := range []struct {
		name   string
		c      Claim
		fate   MovedFate
		revoke []byte
	}{
		{"a live claim moves", Claim{ID: 2, State: ClaimLive, Req: named}, MovedMoves, nil},
		{"a claim being released moves", Claim{ID: 2, State: ClaimReleasing, Req: named}, MovedMoves, nil},
		{"attached without its CLAIM: revoked", Claim{ID: 2, State: ClaimLive}, MovedLost, protocol.AppendRevoked(nil, 2, protocol.CodeNotOwner, "")},
		{"attached, being released: ends silently", Claim{ID: 2, State: ClaimReleasing}, MovedLost, nil},
		{"pending: the frame fits nothing", Claim{ID: 2, State: ClaimPending, Req: named}, MovedStray, nil},
		{"moving already: the frame fits nothing", Claim{ID: 2, State: ClaimMoving, Req: named}, MovedStray, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if fate, revoke := tc.c.Moved(); fate != tc.fate || !bytes.Equal(revoke, tc.revoke) {
				t.Fatalf("fate %d, revoke %x; want %d, %x", fate, revoke, tc.fate, tc.revoke)
			}
		})
	}
	c := Claim{ID: 2, State: ClaimLive, Req: named, Token: 7}
	if m := c.StartMove(moveT0); c.State != ClaimMoving || m != (Move{Name: "n", Mode: 1, Limit: 1, Token: 7, Since: moveT0}) {
		t.Fatalf("started move %+v, state %d", m, c.State)
	}
}
