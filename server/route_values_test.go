package server

import (
	"slices"
	"testing"

	"github.com/batonlock/baton/internal/clustercore"
	"github.com/batonlock/baton/internal/rangelock"
)

// TestRouteActionsAreTheCores: the Router's actions, which embedders
// return, have the values the cluster core's rules read.
func TestRouteActionsAreTheCores(t *testing.T) {
	for a, want := range map[RouteAction]clustercore.RouteAction{
		RouteServe: clustercore.RouteServe, RouteHold: clustercore.RouteHold, RouteForward: clustercore.RouteForward,
		RouteNotOwner: clustercore.RouteNotOwner, RouteMoving: clustercore.RouteMoving,
	} {
		if a.core() != want || a.String() != want.String() {
			t.Errorf("%v is %v in the core, want %v", a, a.core(), want)
		}
	}
}

// TestRangeRefusalsAreTheTables: EventRangeRefused's reasons are the
// names the range table gives its refusals.
func TestRangeRefusalsAreTheTables(t *testing.T) {
	if !slices.Equal(RangeRefusals, rangelock.Refusals) {
		t.Errorf("RangeRefusals = %q, the table's %q", RangeRefusals, rangelock.Refusals)
	}
}
