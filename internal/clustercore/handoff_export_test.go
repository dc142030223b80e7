package clustercore

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/internal/rangelock"
	"github.com/batonlock/baton/protocol"
)

// handoffOwners maps names "a…" to n1, "b…" to n2, others stay.
func handoffOwners(name string) string {
	switch name[0] {
	case 'a':
		return "n1"
	case 'b':
		return "n2"
	}
	return ""
}

func TestPlanHandoffExport(t *testing.T) {
	const keptSID = 7
	claim := func(sid locktable.SessionID, cid locktable.ClaimID) locktable.ClaimState {
		return locktable.ClaimState{Session: sid, Claim: cid, Mode: locktable.Exclusive, Lease: time.Second,
			Idle: 300 * time.Millisecond, Age: time.Second}
	}
	locks := []locktable.LockState{
		{Name: "a1", Holders: []locktable.ClaimState{claim(1, 10)}, Waiters: []locktable.ClaimState{claim(keptSID, 11), claim(2, 12)}},
		{Name: "b1", Limit: 3, Holders: []locktable.ClaimState{claim(1, 13)}},
	}
	p := PlanHandoffExport(locks, handoffOwners, func(sid locktable.SessionID) bool { return sid == keptSID })
	if p.Claims != 4 {
		t.Errorf("claims = %d, want 4", p.Claims)
	}
	if got, want := p.Sessions(), []locktable.SessionID{1, 2, keptSID}; !reflect.DeepEqual(got, want) {
		t.Errorf("sessions = %v, want %v", got, want)
	}
	tests := []struct {
		sid      locktable.SessionID
		ids      []locktable.ClaimID
		names    []string
		limits   []uint32
		wantIdle time.Duration
	}{
		// A continuing session is heard from by its host: idle 0.
		{1, []locktable.ClaimID{10, 13}, []string{"a1", "b1"}, []uint32{0, 3}, 0},
		{2, []locktable.ClaimID{12}, []string{"a1"}, []uint32{0}, 0},
		// A kept session keeps the time it was last heard.
		{keptSID, []locktable.ClaimID{11}, []string{"a1"}, []uint32{0}, 300 * time.Millisecond},
	}
	for _, tt := range tests {
		if got := p.MovedIDs(tt.sid); !reflect.DeepEqual(got, tt.ids) {
			t.Errorf("session %d: moved ids %v, want %v", tt.sid, got, tt.ids)
		}
		for i, c := range p.PerSession[tt.sid] {
			if c.Name != tt.names[i] || c.Limit != tt.limits[i] || c.State.Idle != tt.wantIdle {
				t.Errorf("session %d claim %d: %s limit %d idle %v, want %s limit %d idle %v", tt.sid, i,
					c.Name, c.Limit, c.State.Idle, tt.names[i], tt.limits[i], tt.wantIdle)
			}
		}
	}

	sessions := map[locktable.SessionID]HandoffSession{}
	for _, sid := range p.Sessions() {
		sessions[sid] = HandoffSession{Session: sid, Origin: locktable.Origin{Node: "n0", Session: uint64(sid)}}
	}
	gates := map[string][]HandoffRangeGate{"n3": {{Key: "c", LeaseMS: 900}}}
	ranges := map[string][]HandoffRange{"n1": {{Key: "a2", Owner: 5}}}
	out, err := p.Encode(sessions, gates, ranges)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		locks    []string
		sessions []locktable.SessionID
		gates    int
		ranges   int
	}{
		"n1": {[]string{"a1"}, []locktable.SessionID{1, 2, keptSID}, 0, 1},
		"n2": {[]string{"b1"}, []locktable.SessionID{1}, 0, 0},
		"n3": {nil, nil, 1, 0}, // a new owner with range gates only
	}
	if len(out) != len(want) {
		t.Fatalf("states for %d new owners, want %d", len(out), len(want))
	}
	for to, w := range want {
		st, err := DecodeHandoff(out[to])
		if err != nil {
			t.Fatalf("%s: %v", to, err)
		}
		var names []string
		for _, ls := range st.Locks {
			names = append(names, ls.Name)
		}
		var sids []locktable.SessionID
		for _, m := range st.Sessions {
			sids = append(sids, m.Session)
		}
		if !reflect.DeepEqual(names, w.locks) || !reflect.DeepEqual(sids, w.sessions) ||
			len(st.RangeGates) != w.gates || len(st.Ranges) != w.ranges {
			t.Errorf("%s: locks %v sessions %v gates %d ranges %d, want %+v", to, names, sids,
				len(st.RangeGates), len(st.Ranges), w)
		}
	}
}

func TestHandoffSessionFacts(t *testing.T) {
	direct := HandoffSessionFacts{Clustered: true, V2: true, HasOrigin: true}
	with := func(change func(*HandoffSessionFacts)) HandoffSessionFacts {
		f := direct
		change(&f)
		return f
	}
	tests := []struct {
		name               string
		f                  HandoffSessionFacts
		continues, movesOn bool
		tell               HandoffTell
	}{
		{"version 2 session on this node", direct, true, true, HandoffStartMoving},
		{"relayed session", with(func(f *HandoffSessionFacts) { f.Forwarded = true }), true, true, HandoffTellMoved},
		{"kept session", HandoffSessionFacts{Clustered: true, Kept: true}, false, true, HandoffAsKept},
		{"kept, its upstream still registered", with(func(f *HandoffSessionFacts) { f.Kept, f.Forwarded = true, true }), false, true, HandoffAsKept},
		{"kept, not a cluster node", HandoffSessionFacts{Kept: true}, false, false, HandoffAsKept},
		{"not a cluster node", with(func(f *HandoffSessionFacts) { f.Clustered = false }), false, false, HandoffStartMoving},
		{"version 1", with(func(f *HandoffSessionFacts) { f.V2 = false }), false, false, HandoffStartMoving},
		{"closing", with(func(f *HandoffSessionFacts) { f.Closing = true }), false, false, HandoffStartMoving},
		{"gone", HandoffSessionFacts{Clustered: true}, false, false, HandoffStartMoving},
		{"relayed without an origin", with(func(f *HandoffSessionFacts) { f.Forwarded, f.HasOrigin = true, false }), false, false, HandoffTellMoved},
	}
	for _, tt := range tests {
		if got := tt.f.Continues(); got != tt.continues {
			t.Errorf("%s: continues %v, want %v", tt.name, got, tt.continues)
		}
		if got := tt.f.MovesOn(); got != tt.movesOn {
			t.Errorf("%s: moves on %v, want %v", tt.name, got, tt.movesOn)
		}
		if got := tt.f.Tell(); got != tt.tell {
			t.Errorf("%s: told %v, want %v", tt.name, got, tt.tell)
		}
	}
}

func TestHandoffLater(t *testing.T) {
	var later interface{ RetryAfter() time.Duration }
	var err error = HandoffLater{Holders: 2}
	if l, ok := err.(interface{ RetryAfter() time.Duration }); !ok {
		t.Fatal("HandoffLater has no RetryAfter: the leader would not try again")
	} else {
		later = l
	}
	if d := later.RetryAfter(); d <= 0 || d > time.Second {
		t.Errorf("RetryAfter = %v", d)
	}
	if got := err.Error(); got != "server: 2 holders of moving names told, not gone yet" {
		t.Errorf("Error() = %q", got)
	}
}

func TestPlanHandoffRanges(t *testing.T) {
	continuing := HandoffSessionFacts{Clustered: true, V2: true, HasOrigin: true}
	relayed, closing, v1 := continuing, continuing, continuing
	relayed.Forwarded, closing.Closing, v1.V2 = true, true, false
	hash := make([]byte, protocol.SecretHashLen)
	sessions := map[rangelock.SessionID]HandoffRangeSession{
		1: {HandoffSessionFacts: continuing, Origin: locktable.Origin{Node: "n0", Session: 1}, Lease: 2 * time.Second, Resume: hash},
		2: {HandoffSessionFacts: relayed, Origin: locktable.Origin{Node: "r", Session: 9}, Lease: time.Second},
		3: {HandoffSessionFacts: closing, Lease: 5 * time.Second}, // does not continue: ends
		4: {HandoffSessionFacts: v1, Lease: 3 * time.Second},      // version 1: its lease gates, no end here
	}
	session := func(sid rangelock.SessionID) HandoffRangeSession { return sessions[sid] }
	lock := func(key string, sid rangelock.SessionID, owner rangelock.OwnerID, start uint64) rangelock.KeyLock {
		return rangelock.KeyLock{Key: key, NS: rangelock.POSIX, Lock: rangelock.Lock{
			Owner: rangelock.Owner{Session: sid, ID: owner}, Type: rangelock.Write, Range: rangelock.Range{Start: start, End: start + 1}}}
	}
	on := map[string][]rangelock.SessionID{"a1": {1, 3}, "a2": {2}, "b1": {1, 3, 4}, "b2": {1, 2}}
	held := []rangelock.KeyLock{lock("a1", 1, 1, 0), lock("a1", 3, 1, 4), lock("a2", 2, 8, 0), lock("b1", 1, 1, 0),
		lock("a1", 1, 2, 9)}
	waiting := []rangelock.Cancelled{
		{Key: "b2", Owner: rangelock.Owner{Session: 1}, Tag: 21},
		{Key: "b2", Owner: rangelock.Owner{Session: 2}, Tag: 22},
		{Key: "b1", Owner: rangelock.Owner{Session: 3}, Tag: 23}, // ends: no answer
	}
	x := PlanHandoffRanges(on, held, waiting, handoffOwners, session)

	wantGates := map[string][]HandoffRangeGate{
		"n1": {{Key: "a1", LeaseMS: 5000}},
		"n2": {{Key: "b1", LeaseMS: 5000}}, // the longest lease of those that do not continue
	}
	if !reflect.DeepEqual(x.Gates, wantGates) {
		t.Errorf("gates = %v, want %v", x.Gates, wantGates)
	}
	if want := []rangelock.SessionID{3}; !reflect.DeepEqual(x.Ending, want) {
		t.Errorf("ending = %v, want %v (version 2 sessions that do not continue, once)", x.Ending, want)
	}
	if n := len(x.Handed["n1"]); n != 3 {
		t.Errorf("%d ranges handed to n1, want 3 (a lock of a session that ends is not handed over)", n)
	}
	if r := x.Handed["n2"]; len(r) != 1 || r[0].Key != "b1" || r[0].LeaseMS != 2000 || len(r[0].Hash) != len(hash) ||
		r[0].Origin != sessions[1].Origin {
		t.Errorf("handed to n2 = %+v", r)
	}
	wantMoving := []HandoffKeyRanges{
		{Session: 1, Key: "a1", Locks: []rangelock.KeyLock{held[0], held[4]}},
		{Session: 1, Key: "b1", Locks: []rangelock.KeyLock{held[3]}},
	}
	if !reflect.DeepEqual(x.Moving, wantMoving) {
		t.Errorf("moving = %+v, want %+v", x.Moving, wantMoving)
	}
	wantAnswers := []HandoffRangeAnswer{
		{Session: 2, Status: protocol.RangeMoved, Label: "a2"},          // its relaying node takes the key over
		{Session: 1, Tag: 21, Status: protocol.RangeUnavailable},        // a waiter here asks again
		{Session: 2, Tag: 22, Status: protocol.RangeMoved, Label: "b2"}, // the relaying node answers unavailable
	}
	if !reflect.DeepEqual(x.Answers, wantAnswers) {
		t.Errorf("answers = %+v, want %+v", x.Answers, wantAnswers)
	}
}

// TestPlanHandoffExportRoundTrip checks what the new owner installs of an
// export: the same claims, under sessions of the same origins.
func TestPlanHandoffExportRoundTrip(t *testing.T) {
	locks := []locktable.LockState{{Name: "a", Holders: []locktable.ClaimState{{Session: 4, Claim: 1, Token: 99, Lease: time.Second}},
		Waiters: []locktable.ClaimState{{Session: 5, Claim: 2, Ticket: 7, Lease: time.Second}}}}
	p := PlanHandoffExport(locks, handoffOwners, func(locktable.SessionID) bool { return false })
	adopt := make([]byte, protocol.SecretHashLen)
	adopt[0] = 1
	out, err := p.Encode(map[locktable.SessionID]HandoffSession{
		4: {Session: 4, Origin: locktable.Origin{Node: "n0", Session: 4}, Adopt: adopt},
		5: {Session: 5, Origin: locktable.Origin{Node: "r", Session: 40}},
	}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(out["n1"], &raw); err != nil || raw["locks"] == nil || raw["sessions"] == nil {
		t.Fatalf("wire format: %s (%v)", out["n1"], err)
	}
	st, err := DecodeHandoff(out["n1"])
	if err != nil {
		t.Fatal(err)
	}
	in := PlanHandoffInstall(st, func(locktable.Origin) (locktable.SessionID, bool) { return 0, false }, 100)
	h, w := in.Locks[0].Holders[0], in.Locks[0].Waiters[0]
	if h.Token != 99 || w.Ticket != 7 || in.Origins[h.Session] != (locktable.Origin{Node: "n0", Session: 4}) ||
		in.Origins[w.Session] != (locktable.Origin{Node: "r", Session: 40}) {
		t.Errorf("installed %+v / %+v with origins %v", h, w, in.Origins)
	}
	if in.Kept[0].Adopt == nil || in.Kept[0].Adopt[0] != 1 || in.Kept[1].Adopt != nil {
		t.Errorf("kept = %+v", in.Kept)
	}
}
