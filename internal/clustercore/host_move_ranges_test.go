package clustercore

import (
	"slices"
	"testing"
	"time"
)

func TestHostRangeRetryFor(t *testing.T) {
	const lease = 10 * time.Second
	type mv struct {
		rm       RangeMove
		inFlight bool
	}
	get := func(m *mv) (*RangeMove, bool) { return &m.rm, m.inFlight }
	for _, tc := range []struct {
		name  string
		moves map[string]*mv
		after time.Duration
		want  HostRangeRetry
	}{
		{"keys not in flight, sorted", map[string]*mv{"e": {rm: RangeMove{Since: moveT0}}, "b": {rm: RangeMove{Since: moveT0}},
			"d": {rm: RangeMove{Since: moveT0}}, "a": {rm: RangeMove{Since: moveT0}}, "f": {rm: RangeMove{Since: moveT0}},
			"c": {rm: RangeMove{Since: moveT0}, inFlight: true}}, time.Second, HostRangeRetry{Keys: []string{"a", "b", "d", "e", "f"}}},
		{"one key moved for half the lease: the session ends", map[string]*mv{"a": {rm: RangeMove{Since: moveT0}},
			"b": {rm: RangeMove{Since: moveT0}, inFlight: true}}, lease / 2, HostRangeRetry{End: true}},
		{"a key in flight expires too", map[string]*mv{"a": {rm: RangeMove{Since: moveT0.Add(time.Second)}},
			"b": {rm: RangeMove{Since: moveT0}, inFlight: true}}, lease / 2, HostRangeRetry{End: true}},
		{"nothing to ask", map[string]*mv{"a": {rm: RangeMove{Since: moveT0}, inFlight: true}}, time.Second, HostRangeRetry{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := HostRangeRetryFor(tc.moves, get, moveT0.Add(tc.after), lease)
			if got.End != tc.want.End || !slices.Equal(got.Keys, tc.want.Keys) {
				t.Fatalf("retry %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestRangeMoveHostStep(t *testing.T) {
	for _, tc := range []struct {
		route MoveRoute
		want  HostRangeStep
	}{
		{MoveRouteThere, HostRangeSend},
		{MoveRouteHere, HostRangeHere},
		{MoveRouteWarming, HostRangeHere},
		{MoveRouteNowhere, HostRangeWait},
	} {
		rm := RangeMove{}
		if got := rm.HostStep(tc.route); got != tc.want {
			t.Errorf("HostStep(%d) = %d, want %d", tc.route, got, tc.want)
		}
	}
}

func TestRangeMoveHostTakenHere(t *testing.T) {
	for _, tc := range []struct {
		name      string
		failover  bool
		ok        bool
		done, end bool
	}{
		{"a planned change's locks adopted here", false, true, true, false},
		{"a planned change's locks no longer kept: the session ends, the key stays", false, false, false, true},
		{"a failover's locks installed here", true, true, true, false},
		{"a failover's lock in conflict: the key is done and the session ends", true, false, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rm := RangeMove{Failover: tc.failover}
			if done, end := rm.HostTakenHere(tc.ok); done != tc.done || end != tc.end {
				t.Fatalf("done %v end %v, want %v %v", done, end, tc.done, tc.end)
			}
		})
	}
}

func TestHostResumeRange(t *testing.T) {
	for _, tc := range []struct {
		name      string
		route     MoveRoute
		forwarded bool
		want      RangeWay
	}{
		{"another node serves it: relayed", MoveRouteThere, false, RangeRelay},
		{"a relayed session is never relayed on", MoveRouteThere, true, RangeNotNow},
		{"served here", MoveRouteHere, false, RangeServe},
		{"served here for a relayed session", MoveRouteHere, true, RangeServe},
		{"warming up after a take-over: served here", MoveRouteWarming, true, RangeServe},
		{"nobody serves it now", MoveRouteNowhere, false, RangeNotNow},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := HostResumeRange(tc.route, tc.forwarded); got != tc.want {
				t.Fatalf("way %d, want %d", got, tc.want)
			}
		})
	}
}
