package clustercore

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/rangelock"
	"github.com/batonlock/baton/internal/rangemirror"
	"github.com/batonlock/baton/protocol"
)

// rangeLocks returns key k's locks of two owners, as a mirror keeps them.
func rangeLocks(t *testing.T) []rangelock.KeyLock {
	t.Helper()
	m := rangemirror.New()
	m.Set(protocol.Frame{Op: protocol.RangeSet, Name: "k", Owner: 1, LockType: protocol.LockWrite, Start: 0, End: 9})
	m.Set(protocol.Frame{Op: protocol.RangeSet, Name: "k", Owner: 2, LockType: protocol.LockRead, Start: 20, End: 29})
	locks := m.Take("k")
	if len(locks) != 2 {
		t.Fatalf("mirror kept %d locks, want 2", len(locks))
	}
	return locks
}

func TestRangeMoveExpired(t *testing.T) {
	const lease = 10 * time.Second
	for _, tc := range []struct {
		name  string
		rm    RangeMove
		after time.Duration
		want  bool
	}{
		{"a planned move before half the lease", RangeMove{Since: moveT0}, lease/2 - time.Nanosecond, false},
		{"a planned move at half the lease", RangeMove{Since: moveT0}, lease / 2, true},
		{"a failover within its client's belief", RangeMove{Since: moveT0, Failover: true, Believed: moveT0.Add(2 * time.Second)}, time.Second, false},
		{"a failover past its client's belief", RangeMove{Since: moveT0, Failover: true, Believed: moveT0.Add(2 * time.Second)}, 2 * time.Second, true},
		{"a planned move has no belief window", RangeMove{Since: moveT0, Believed: moveT0}, time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.rm.Expired(moveT0.Add(tc.after), lease); got != tc.want {
				t.Fatalf("expired %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRangeMoveRequests(t *testing.T) {
	locks := rangeLocks(t)
	planned := RangeMove{Locks: locks}
	if got := planned.Requests("k"); !slices.Equal(got, []protocol.Frame{{Op: protocol.RangeAdopt, Name: "k"}}) || planned.Pending != 0 {
		t.Fatalf("a planned move asks %+v (pending %d), want one RANGE adopt", got, planned.Pending)
	}
	failed := RangeMove{Locks: locks, Failover: true}
	want := []protocol.Frame{rangemirror.Frame(protocol.RangeReassert, locks[0]), rangemirror.Frame(protocol.RangeReassert, locks[1])}
	if got := failed.Requests("k"); !slices.Equal(got, want) || failed.Pending != 2 {
		t.Fatalf("a failover asks %+v (pending %d), want one re-assertion per lock %+v", got, failed.Pending, want)
	}
}

func TestRangeMoveAnswered(t *testing.T) {
	for _, tc := range []struct {
		name     string
		failover bool
		answers  []protocol.RangeStatus
		want     []RangeOutcome
	}{
		{"adopt: done takes them", false, []protocol.RangeStatus{protocol.RangeDone}, []RangeOutcome{RangeTaken}},
		{"adopt: unavailable asks again", false, []protocol.RangeStatus{protocol.RangeUnavailable}, []RangeOutcome{RangeAgain}},
		{"adopt: free says nobody keeps them", false, []protocol.RangeStatus{protocol.RangeFree}, []RangeOutcome{RangeLost}},
		{"reassert: every one held takes them", true, []protocol.RangeStatus{protocol.RangeDone, protocol.RangeDone},
			[]RangeOutcome{RangeWaiting, RangeTaken}},
		{"reassert: one not yet has them all asked again", true, []protocol.RangeStatus{protocol.RangeUnavailable, protocol.RangeDone},
			[]RangeOutcome{RangeWaiting, RangeAgain}},
		{"reassert: a conflict loses them at once", true, []protocol.RangeStatus{protocol.RangeConflict},
			[]RangeOutcome{RangeLost}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rm := RangeMove{Locks: rangeLocks(t), Failover: tc.failover}
			rm.Requests("k")
			var got []RangeOutcome
			for _, st := range tc.answers {
				got = append(got, rm.Answered(st))
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("outcomes %v, want %v", got, tc.want)
			}
		})
	}
	// Asked again after "not yet", the next round starts afresh.
	rm := RangeMove{Locks: rangeLocks(t), Failover: true}
	rm.Requests("k")
	rm.Answered(protocol.RangeUnavailable)
	// its upstream failed
	rm.Requests("k")
	if a, b := rm.Answered(protocol.RangeDone), rm.Answered(protocol.RangeDone); a != RangeWaiting || b != RangeTaken {
		t.Fatalf("after asking again: %d, %d; want waiting, taken", a, b)
	}
}

func TestRangeMoveRequestsWhileMoving(t *testing.T) {
	unlock := protocol.Frame{Op: protocol.RangeUnlock, Name: "k", Owner: 1, Start: 0, End: 9}
	release := protocol.Frame{Op: protocol.RangeRelease, Name: "k", Owner: 2}
	set := protocol.Frame{Op: protocol.RangeSet, Name: "k", Owner: 1, LockType: protocol.LockWrite, Start: 0, End: 9}
	planned, failed := RangeMove{}, RangeMove{Failover: true}
	for _, tc := range []struct {
		name string
		rm   RangeMove
		f    protocol.Frame
		want bool
	}{
		{"a planned move answers an unlock unavailable", planned, unlock, true},
		{"a failover answers a set unavailable", failed, set, true},
		{"a failover applies an unlock", failed, unlock, false},
		{"a failover applies a release", failed, release, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.rm.Unavailable(tc.f); got != tc.want {
				t.Fatalf("unavailable %v, want %v", got, tc.want)
			}
		})
	}
	rm := RangeMove{Locks: rangeLocks(t), Failover: true}
	if left := rm.Drop(unlock); left != 1 || rm.Locks[0].Lock.Owner.ID != 2 {
		t.Fatalf("after the unlock: %d left (%+v), want owner 2's", left, rm.Locks)
	}
	if left := rm.Drop(release); left != 0 {
		t.Fatalf("after the release: %d left, want none", left)
	}
}

func TestFailedRange(t *testing.T) {
	unlock := protocol.Frame{Op: protocol.RangeUnlock, Claim: 4, Name: "k"}
	set := protocol.Frame{Op: protocol.RangeSet, Claim: 4, Name: "k"}
	done := protocol.AppendRangeAnswer(nil, 4, protocol.RangeDone, 0, protocol.Frame{})
	unavailable := protocol.AppendRangeAnswer(nil, 4, protocol.RangeUnavailable, 0, protocol.Frame{})
	for _, tc := range []struct {
		name                       string
		f                          protocol.Frame
		moving, reassert, mirrored bool
		fate                       RangeFate
		answer                     []byte
	}{
		{"an adoption is asked again", protocol.Frame{Op: protocol.RangeAdopt, Name: "k"}, true, true, true, RangeAskAgain, nil},
		{"an unlock of re-asserted locks is done", unlock, false, true, true, RangeDropped, done},
		{"a release of re-asserted locks is done", protocol.Frame{Op: protocol.RangeRelease, Claim: 4}, false, true, true, RangeDropped, done},
		{"an unlock of locks not re-asserted is unavailable", unlock, false, false, true, RangeNotServed, unavailable},
		{"an unlock with nothing kept is unavailable", unlock, false, true, false, RangeNotServed, unavailable},
		{"a set is unavailable", set, false, true, true, RangeNotServed, unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fate, answer := FailedRange(tc.f, tc.moving, tc.reassert, tc.mirrored)
			if fate != tc.fate || !bytes.Equal(answer, tc.answer) {
				t.Fatalf("fate %d, answer %x; want %d, %x", fate, answer, tc.fate, tc.answer)
			}
		})
	}
}

func TestRangesFailed(t *testing.T) {
	const lease = 10 * time.Second
	confirmed := moveT0.Add(-time.Second)
	held := RangeUpstream{Opened: true, Holds: true, Mirrored: true, Keys: 1, Confirmed: confirmed}
	with := func(f func(*RangeUpstream)) RangeUpstream { u := held; f(&u); return u }
	believed := confirmed.Add(8 * time.Second)
	for _, tc := range []struct {
		name           string
		u              RangeUpstream
		live, reassert bool
		after          time.Duration
		fate           RangesFate
		believed       time.Time
	}{
		{"re-asserted while its client may believe", held, true, true, 0, RangesReassert, believed},
		{"just before the belief ends", held, true, true, 7*time.Second - time.Nanosecond, RangesReassert, believed},
		{"past the belief: the session ends", held, true, true, 7 * time.Second, RangesEnd, time.Time{}},
		{"the owner meant it: the session ends", held, true, false, 0, RangesEnd, time.Time{}},
		{"the session ends anyway", held, false, true, 0, RangesNone, time.Time{}},
		{"never opened", with(func(u *RangeUpstream) { u.Opened = false }), true, false, 0, RangesNone, time.Time{}},
		{"holds no range locks", with(func(u *RangeUpstream) { u.Holds = false }), true, false, 0, RangesNone, time.Time{}},
		{"granted nothing", with(func(u *RangeUpstream) { u.Mirrored = false }), true, true, 0, RangesNone, time.Time{}},
		{"no key kept: nothing to re-assert, late or not", with(func(u *RangeUpstream) { u.Keys = 0 }), true, true, 9 * time.Second, RangesReassert, believed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fate, b := RangesFailed(tc.u, tc.live, tc.reassert, moveT0.Add(tc.after), lease)
			if fate != tc.fate || !b.Equal(tc.believed) {
				t.Fatalf("fate %d until %v; want %d until %v", fate, b, tc.fate, tc.believed)
			}
		})
	}
}

func TestRouteRange(t *testing.T) {
	for _, tc := range []struct {
		name             string
		route            MoveRoute
		gated, forwarded bool
		want             RangeWay
	}{
		{"served here", MoveRouteHere, false, false, RangeServe},
		{"served here for a relayed session", MoveRouteHere, false, true, RangeServe},
		{"gated by a planned change", MoveRouteHere, true, false, RangeNotNow},
		{"owned elsewhere: relayed", MoveRouteThere, false, false, RangeRelay},
		{"a relayed session is not relayed on", MoveRouteThere, false, true, RangeNotNow},
		{"warming up: not now", MoveRouteWarming, false, false, RangeNotNow},
		{"nobody serves it: not now", MoveRouteNowhere, false, false, RangeNotNow},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := RouteRange(tc.route, tc.gated, tc.forwarded); got != tc.want {
				t.Fatalf("way %d, want %d", got, tc.want)
			}
		})
	}
}

func TestRangeRelayRules(t *testing.T) {
	set := protocol.Frame{Op: protocol.RangeSet}
	wait := protocol.Frame{Op: protocol.RangeSet, Flags: protocol.RangeWait}
	resume := protocol.Frame{Op: protocol.RangeResume}
	unlock := protocol.Frame{Op: protocol.RangeUnlock}
	for _, tc := range []struct {
		name string
		got  bool
		want bool
	}{
		{"a set may hold", RangeHolds(set), true},
		{"a resume may hold", RangeHolds(resume), true},
		{"an unlock holds nothing", RangeHolds(unlock), false},
		{"a set with wait may wait", RangeWaits(wait), true},
		{"a set without wait does not", RangeWaits(set), false},
		{"PROMOTED is a push", RangeIsPush(protocol.Frame{Status: protocol.RangePromoted}), true},
		{"CANCELLED is a push", RangeIsPush(protocol.Frame{Status: protocol.RangeCancelled}), true},
		{"MOVED is a push", RangeIsPush(protocol.Frame{Status: protocol.RangeMoved}), true},
		{"GRANTED answers a request", RangeIsPush(protocol.Frame{Status: protocol.RangeGranted}), false},
		{"granted: holds", RangeAnswerHolds(set, protocol.RangeGranted), true},
		{"queued: waits", RangeAnswerHolds(wait, protocol.RangeQueued), true},
		{"a resume done: holds", RangeAnswerHolds(resume, protocol.RangeDone), true},
		{"an unlock done: holds nothing new", RangeAnswerHolds(unlock, protocol.RangeDone), false},
		{"a conflict: holds nothing", RangeAnswerHolds(set, protocol.RangeConflict), false},
		{"queued: the wait goes on", RangeWaitEnds(protocol.RangeQueued), false},
		{"req in use: the set keeps its place", RangeWaitEnds(protocol.RangeReqInUse), false},
		{"granted: the wait ends", RangeWaitEnds(protocol.RangeGranted), true},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, tc.got, tc.want)
		}
	}
}

func TestRangePushed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		f     protocol.Frame
		fate  RangePushFate
		tell  []byte
		holds bool
	}{
		{"MOVED(0): the key moves here, nothing told", protocol.Frame{Status: protocol.RangeMoved, Label: "k"}, RangeKeyMoved, nil, false},
		{"MOVED of a waiting set: answered unavailable", protocol.Frame{Status: protocol.RangeMoved, Claim: 5, Label: "k"}, RangeSetMoved,
			protocol.AppendRangeAnswer(nil, 5, protocol.RangeUnavailable, 0, protocol.Frame{}), false},
		{"PROMOTED: passed on, held there", protocol.Frame{Status: protocol.RangePromoted, Claim: 5}, RangePassOn, nil, true},
		{"CANCELLED: passed on", protocol.Frame{Status: protocol.RangeCancelled, Claim: 5}, RangePassOn, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fate, tell, holds := RangePushed(tc.f)
			if fate != tc.fate || !bytes.Equal(tell, tc.tell) || holds != tc.holds {
				t.Fatalf("fate %d, tell %x, holds %v; want %d, %x, %v", fate, tell, holds, tc.fate, tc.tell, tc.holds)
			}
		})
	}
}
