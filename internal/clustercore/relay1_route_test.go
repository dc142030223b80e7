package clustercore

import "testing"

// Each answer of the Router, for a request from a client and one relayed
// here: a relayed request is never relayed again.
func TestV1RouteStep(t *testing.T) {
	cases := []struct {
		r         RouteAction
		forwarded bool
		want      V1RouteStep
	}{
		{RouteServe, false, V1StepServe},
		{RouteServe, true, V1StepServe},
		{RouteHold, false, V1StepHold},
		{RouteHold, true, V1StepHold},
		{RouteForward, false, V1StepRelay},
		{RouteForward, true, V1StepRefuse},
		{RouteNotOwner, false, V1StepRefuse},
		{RouteNotOwner, true, V1StepRefuse},
		{RouteMoving, false, V1StepHold},
		{RouteMoving, true, V1StepHold},
	}
	for _, c := range cases {
		v := V1Route{Forwarded: c.forwarded}
		if got := v.Step(c.r); got != c.want {
			t.Errorf("Step(%d), forwarded %v = %d, want %d", c.r, c.forwarded, got, c.want)
		}
	}
}

// An unreachable owner is logged at the first attempt and every 50th
// after, whatever the Router said in between.
func TestV1RouteUnreachableWarns(t *testing.T) {
	var v V1Route
	var warned []int
	for i := range 120 {
		r := RouteForward
		if i%3 == 1 {
			r = RouteHold
		}
		if v.Step(r) == V1StepRelay && v.Unreachable() {
			warned = append(warned, i)
		}
	}
	// Attempts 0 and 50 are relays that warn; 100 is a hold.
	want := []int{0, 50}
	if len(warned) != len(want) || warned[0] != want[0] || warned[1] != want[1] {
		t.Errorf("warned at attempts %v, want %v", warned, want)
	}
}

func TestV1Endings(t *testing.T) {
	if V1Refused.Code != 0x03 || V1Refused.KeepUntilLease || V1Refused.PassHop {
		t.Errorf("V1Refused = %+v, want ERROR 0x03 and nothing else", V1Refused)
	}
	if V1ShutDown.Code != 0x01 {
		t.Errorf("V1ShutDown = %+v, want ERROR 0x01", V1ShutDown)
	}
}

// Who may open with a hop header: by identity over TLS, by address
// without, nobody on a node without a Router or without the check.
func TestHopTrust(t *testing.T) {
	member := func(id string) bool { return id == "n2" }
	yes := func() bool { return true }
	no := func() bool { return false }
	cases := []struct {
		name  string
		trust HopTrust
		tls   bool
		id    string
		want  bool
	}{
		{"tls member", HopTrust{Routed: true, ByIdentity: member, ByAddr: yes}, true, "n2", true},
		{"tls other", HopTrust{Routed: true, ByIdentity: member, ByAddr: yes}, true, "eve", false},
		{"tls no identity", HopTrust{Routed: true, ByIdentity: func(string) bool { return true }, ByAddr: yes}, true, "", false},
		{"tls no check", HopTrust{Routed: true, ByAddr: yes}, true, "n2", false},
		{"plain by address", HopTrust{Routed: true, ByIdentity: member, ByAddr: yes}, false, "", true},
		{"plain refused", HopTrust{Routed: true, ByIdentity: member, ByAddr: no}, false, "n2", false},
		{"plain no check", HopTrust{Routed: true, ByIdentity: member}, false, "n2", false},
		{"no router", HopTrust{ByIdentity: member, ByAddr: yes}, true, "n2", false},
		{"no router plain", HopTrust{ByIdentity: member, ByAddr: yes}, false, "", false},
	}
	for _, c := range cases {
		if got := c.trust.Trusted(c.tls, c.id); got != c.want {
			t.Errorf("%s: Trusted = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestRouteActionString(t *testing.T) {
	for a, want := range map[RouteAction]string{RouteServe: "serve", RouteHold: "hold", RouteForward: "forward",
		RouteNotOwner: "not-owner", RouteMoving: "moving", RouteAction(9): "RouteAction(9)"} {
		if got := a.String(); got != want {
			t.Errorf("%d: %q, want %q", int(a), got, want)
		}
	}
}
