package clustercore

import (
	"bytes"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
)

func TestRelay2ClaimWay(t *testing.T) {
	busy := func() bool { return true }
	free := func() bool { return false }
	for _, tc := range []struct {
		name      string
		route     Relay2Route
		forwarded bool
		idBusy    func() bool
		nameHeld  func() bool
		want      Relay2Way
	}{
		{"this node serves it", Relay2RouteHere, false, free, free, Relay2Serve},
		{"a relayed session's claim served here", Relay2RouteHere, true, free, free, Relay2Serve},
		{"another node owns it: relayed", Relay2RouteThere, false, free, free, Relay2Relay},
		{"no question asked: relayed", Relay2RouteThere, false, nil, free, Relay2Relay},
		{"a relayed session is never relayed on", Relay2RouteThere, true, free, free, Relay2Refuse},
		{"its id's RELEASE waits for an adoption: held", Relay2RouteThere, false, busy, free, Relay2Hold},
		{"the owner warms up: held", Relay2RouteHold, false, free, free, Relay2Hold},
		{"the name moves: held", Relay2RouteMoving, false, free, free, Relay2Hold},
		{"this node warms the name up: held for its warm-up", Relay2RouteWarming, false, free, free, Relay2HoldGated},
		{"not the owner: refused", Relay2RouteNotOwner, false, free, free, Relay2Refuse},
		{"earlier claims on the name held: served behind them", Relay2RouteHere, false, free, busy, Relay2Hold},
		{"earlier claims on the name held: relayed behind them", Relay2RouteThere, false, free, busy, Relay2Hold},
		{"a relayed session is refused, held claims or not", Relay2RouteThere, true, free, busy, Relay2Refuse},
	} {
		if got := Relay2ClaimWay(tc.route, tc.forwarded, tc.idBusy, tc.nameHeld); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	asked := false
	Relay2ClaimWay(Relay2RouteHere, false, func() bool { asked = true; return true }, nil)
	if asked {
		t.Error("asked whether the id is busy for a claim that is not relayed")
	}
}

func TestRelay2HeldFrames(t *testing.T) {
	if Relay2Holds(protocol.Frame{Flags: protocol.ClaimNoWait}) || !Relay2Holds(protocol.Frame{}) {
		t.Error("a no-wait CLAIM is answered BUSY, any other held")
	}
	reasserted := protocol.Frame{Type: protocol.TypeClaim, Claim: 3, Name: "n", Flags: protocol.ClaimTicket | protocol.ClaimValue, Ticket: 12, Value: "v"}
	if got := Relay2HeldTicket(reasserted); got != 12 {
		t.Errorf("ticket %d, want 12", got)
	}
	if got := Relay2HeldTicket(protocol.Frame{Ticket: 12}); got != 0 {
		t.Errorf("ticket %d of a claim without the flag, want 0", got)
	}
	late := Relay2Late(reasserted)
	if late.Flags != protocol.ClaimValue || late.Ticket != 0 || late.Name != "n" || late.Value != "v" || late.Claim != 3 {
		t.Errorf("relayed late as %+v: the ticket goes, the rest stays", late)
	}
	f := protocol.Frame{Type: protocol.TypeClaim}
	Relay2SetValue(&f, "x")
	if f.Value != "x" || f.Flags&protocol.ClaimValue == 0 {
		t.Errorf("%+v carries no value", f)
	}
}

func TestRelay2Reroute(t *testing.T) {
	queued := Claim{ID: 4, State: ClaimLive, Req: protocol.Frame{Name: "n", Mode: 1, Limit: 3, Flags: protocol.ClaimValue, Value: "v"}}
	notOwner := protocol.Frame{Type: protocol.TypeRevoked, Claim: 4, Code: protocol.CodeNotOwner}
	for _, tc := range []struct {
		name   string
		c      *Claim
		f      protocol.Frame
		moving bool
		want   bool
	}{
		{"a queued claim whose name moved", &queued, notOwner, false, true},
		{"another code", &queued, protocol.Frame{Type: protocol.TypeRevoked, Code: protocol.CodeClosedByAdmin}, false, false},
		{"granted once: it held the lock", &Claim{State: ClaimLive, Token: 5, Req: queued.Req}, notOwner, false, false},
		{"not answered yet", &Claim{State: ClaimPending, Req: queued.Req}, notOwner, false, false},
		{"moving: it has its own way", &queued, notOwner, true, false},
		{"attached without its CLAIM", &Claim{State: ClaimLive}, notOwner, false, false},
		{"no-wait", &Claim{State: ClaimLive, Req: protocol.Frame{Name: "n", Flags: protocol.ClaimNoWait}}, notOwner, false, false},
		{"unknown claim", nil, notOwner, false, false},
	} {
		if got := Relay2Reroutable(tc.c, tc.f, tc.moving); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	now := time.Unix(100, 0)
	f, why := Relay2Rehold(&queued, "o:1", now)
	if want := (protocol.Frame{Type: protocol.TypeClaim, Claim: 4, Mode: 1, Limit: 3, Name: "n"}); f != want {
		t.Errorf("held again as %+v, want %+v", f, want)
	}
	if why.Addr != "o:1" || !why.Until.Equal(now.Add(Relay2RerouteWait)) {
		t.Errorf("why %+v", why)
	}
	for _, tc := range []struct {
		name  string
		route Relay2Route
		addr  string
		at    time.Time
		want  bool
	}{
		{"the ring still names that owner", Relay2RouteThere, "o:1", now.Add(time.Millisecond), true},
		{"the ring names another", Relay2RouteThere, "o:2", now, false},
		{"this node serves it now", Relay2RouteHere, "", now, false},
		{"the wait is over", Relay2RouteThere, "o:1", now.Add(Relay2RerouteWait), false},
	} {
		if got := why.Waits(tc.route, tc.addr, tc.at); got != tc.want {
			t.Errorf("%s: waits %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestRelay2ProclaimOf(t *testing.T) {
	f := protocol.Frame{Type: protocol.TypeProclaim, Claim: 6, Value: "v"}
	set := protocol.AppendProclaimed(nil, 6, protocol.ProclaimSet)
	notInUse := protocol.AppendProclaimed(nil, 6, protocol.ProclaimNotInUse)
	refused := protocol.AppendRefused(nil, 6, protocol.CodeUnsupportedFeature, "the claim's owner cannot take a value now")
	for _, tc := range []struct {
		name     string
		c        *Claim
		held, up bool
		way      Relay2Proclaim
		answer   []byte
	}{
		{"held: set when it goes", nil, true, false, Relay2ProclaimHeld, set},
		{"not in use", nil, false, true, Relay2ProclaimAnswer, notInUse},
		{"being released", &Claim{State: ClaimReleasing}, false, true, Relay2ProclaimAnswer, notInUse},
		{"ended", &Claim{State: ClaimEnded}, false, true, Relay2ProclaimAnswer, notInUse},
		{"moving", &Claim{State: ClaimMoving}, false, true, Relay2ProclaimAnswer, refused},
		{"an owner without values", &Claim{State: ClaimLive}, false, false, Relay2ProclaimAnswer, refused},
		{"live: relayed", &Claim{State: ClaimLive}, false, true, Relay2ProclaimRelay, nil},
		{"pending: relayed", &Claim{State: ClaimPending}, false, true, Relay2ProclaimRelay, nil},
	} {
		way, answer := Relay2ProclaimOf(f, tc.c, tc.held, tc.up)
		if way != tc.way || !bytes.Equal(answer, tc.answer) {
			t.Errorf("%s: %v %x, want %v %x", tc.name, way, answer, tc.way, tc.answer)
		}
	}
}
