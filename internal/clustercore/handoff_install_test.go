package clustercore

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/internal/rangelock"
	"github.com/batonlock/baton/protocol"
)

func TestDecodeHandoff(t *testing.T) {
	hash := `"` + strings.Repeat("A", 43) + `="` // 32 bytes in base64
	short := `"AAAA"`
	tests := []struct {
		name, state string
		wantErr     string // "" for none
		wantLocks   int
	}{
		{"previous version, empty", `[]`, "", 0},
		{"previous version with locks", `[{"name":"x"}]`, "1 locks without their sessions", 0},
		{"previous version, bad JSON", `[{`, "unexpected end", 0},
		{"empty state", `{}`, "", 0},
		{"nothing", ``, "unexpected end", 0},
		{"not JSON", `{"locks":`, "unexpected end", 0},
		{"wrong types", `{"locks":"x"}`, "cannot unmarshal", 0},
		{"a claim with its session", `{"locks":[{"name":"a","holders":[{"session":3,"claim":1,"token":5}]}],
			"sessions":[{"session":3,"origin":{"node":"n0","session":3},"adopt":` + hash + `}]}`, "", 1},
		{"a claim of a session not listed", `{"locks":[{"name":"a","waiters":[{"session":4,"claim":1}]}],
			"sessions":[{"session":3,"origin":{"node":"n0","session":3}}]}`, `lock "a": a claim of session 4`, 0},
		{"a session listed twice", `{"sessions":[{"session":3,"origin":{"node":"n0","session":3}},
			{"session":3,"origin":{"node":"n0","session":4}}]}`, "session 3 listed twice", 0},
		{"short adopt hash", `{"sessions":[{"session":3,"origin":{"node":"n0","session":3},"adopt":` + short + `}]}`,
			"bad secret hash for session n0/3", 0},
		{"short resume hash", `{"sessions":[{"session":3,"origin":{"node":"n0","session":3},"resume":` + short + `}]}`,
			"bad secret hash", 0},
		{"short range hash", `{"ranges":[{"key":"k","origin":{"node":"n0","session":3},"hash":` + short + `}]}`,
			`range lock on "k": bad secret hash`, 0},
		{"range with a good hash", `{"ranges":[{"key":"k","origin":{"node":"n0","session":3},"hash":` + hash + `}]}`, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := DecodeHandoff([]byte(tt.state))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("error %v", err)
				}
				if len(st.Locks) != tt.wantLocks {
					t.Errorf("%d locks, want %d", len(st.Locks), tt.wantLocks)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrHandoffState) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want one wrapping ErrHandoffState with %q", err, tt.wantErr)
			}
		})
	}
}

func TestPlanHandoffInstall(t *testing.T) {
	o1, o2, o3 := locktable.Origin{Node: "n0", Session: 1}, locktable.Origin{Node: "r", Session: 2}, locktable.Origin{Node: "n0", Session: 3}
	adopt := make([]byte, protocol.SecretHashLen)
	adopt[31] = 9
	st := &HandoffState{
		Locks: []locktable.LockState{{Name: "a",
			Holders: []locktable.ClaimState{{Session: 10, Claim: 1, Token: 40}},
			Waiters: []locktable.ClaimState{{Session: 20, Claim: 2, Ticket: 3}, {Session: 30, Claim: 3}, {Session: 40, Claim: 4}}}},
		Sessions: []HandoffSession{
			{Session: 10, Origin: o1, Adopt: adopt},
			{Session: 20, Origin: o2, Resume: adopt},
			{Session: 30, Origin: o3},
			// A second session of o1 (a kept session and the upstream
			// session that replaced it): one session here, either's
			// secret adopts.
			{Session: 40, Origin: o1, Resume: adopt},
		},
	}
	// o2 was installed here before (the same state again): it keeps its id.
	detached := func(o locktable.Origin) (locktable.SessionID, bool) { return 77, o == o2 }
	in := PlanHandoffInstall(st, detached, 500)

	tests := []struct {
		origin  locktable.Origin
		sid     locktable.SessionID
		adopt   bool
		resume  bool
		inState locktable.SessionID
	}{
		{o1, 501, true, true, 10},
		{o2, 77, false, true, 20},
		{o3, 502, false, false, 30},
	}
	if in.LastID != 502 || len(in.Kept) != len(tests) {
		t.Errorf("last id %d, %d kept, want 502 (two new sessions after 500), %d", in.LastID, len(in.Kept), len(tests))
	}
	for i, tt := range tests {
		k := in.Kept[i]
		if k.Origin != tt.origin || k.Session != tt.sid || (k.Adopt != nil) != tt.adopt || (k.Resume != nil) != tt.resume {
			t.Errorf("kept %d = %+v, want %+v", i, k, tt)
		}
		if in.Origins[tt.sid] != tt.origin {
			t.Errorf("origin of %d = %v, want %v", tt.sid, in.Origins[tt.sid], tt.origin)
		}
	}
	ls := in.Locks[0]
	if ls.Holders[0].Session != 501 || ls.Holders[0].Token != 40 || ls.Waiters[0].Session != 77 ||
		ls.Waiters[0].Ticket != 3 || ls.Waiters[1].Session != 502 || ls.Waiters[2].Session != 501 {
		t.Errorf("installed lock %+v", ls)
	}
	if st.Locks[0].Holders[0].Session != 10 || st.Locks[0].Waiters[0].Session != 20 {
		t.Errorf("the state was changed: %+v", st.Locks[0])
	}
	adopt[31] = 0
	if in.Kept[0].Adopt[31] != 9 {
		t.Error("the plan shares the state's hash")
	}
}

func TestPlanHandoffStandIns(t *testing.T) {
	o1, o2 := locktable.Origin{Node: "n0", Session: 1}, locktable.Origin{Node: "r", Session: 2}
	hash := make([]byte, protocol.SecretHashLen)
	ranges := []HandoffRange{
		{Key: "k1", Origin: o1, Owner: 5, Type: uint8(rangelock.Write), Start: 0, End: 9, LeaseMS: 3000},
		{Key: "k2", Origin: o2, Flock: true, Owner: 6, Type: uint8(rangelock.Read), LeaseMS: 700, Hash: hash},
		{Key: "k1", Origin: o1, Owner: 7, Type: uint8(rangelock.Read), Start: 20, End: 30, LeaseMS: 1000, Hash: hash},
	}
	got := PlanHandoffStandIns(ranges)
	tests := []struct {
		origin locktable.Origin
		lease  time.Duration
		hash   bool
		locks  []rangelock.KeyLock
		label  string
	}{
		// The longest lease of the origin's ranges; the hash of its first.
		{o1, 3 * time.Second, false, []rangelock.KeyLock{
			{Key: "k1", NS: rangelock.POSIX, Lock: rangelock.Lock{Owner: rangelock.Owner{ID: 5}, Type: rangelock.Write, Range: rangelock.Range{End: 9}}},
			{Key: "k1", NS: rangelock.POSIX, Lock: rangelock.Lock{Owner: rangelock.Owner{ID: 7}, Type: rangelock.Read, Range: rangelock.Range{Start: 20, End: 30}}},
		}, "n0/1 (moving)"},
		{o2, 700 * time.Millisecond, true, []rangelock.KeyLock{
			{Key: "k2", NS: rangelock.Flock, Lock: rangelock.Lock{Owner: rangelock.Owner{ID: 6}, Type: rangelock.Read}},
		}, "r/2 (moving)"},
	}
	if len(got) != len(tests) {
		t.Fatalf("%d stand-ins, want %d", len(got), len(tests))
	}
	for i, tt := range tests {
		st := got[i]
		if st.Origin != tt.origin || st.Lease != tt.lease || (st.Hash != nil) != tt.hash || st.Label() != tt.label {
			t.Errorf("stand-in %d = %+v (%q), want %+v", i, st, st.Label(), tt)
		}
		if len(st.Locks) != len(tt.locks) {
			t.Fatalf("stand-in %d locks %+v, want %+v", i, st.Locks, tt.locks)
		}
		for j := range tt.locks {
			if st.Locks[j] != tt.locks[j] {
				t.Errorf("stand-in %d lock %d = %+v, want %+v", i, j, st.Locks[j], tt.locks[j])
			}
		}
	}
	if id := StandInID(3); id&HandoffStandInBit == 0 || id&^HandoffStandInBit != 3 {
		t.Errorf("StandInID(3) = %x", uint64(id))
	}
}

// seedHandoffState is a state as Encode writes it.
func seedHandoffState(t testing.TB) []byte {
	adopt := make([]byte, protocol.SecretHashLen)
	p := PlanHandoffExport([]locktable.LockState{{Name: "a", Limit: 2,
		Holders: []locktable.ClaimState{{Session: 4, Claim: 1, Mode: locktable.Semaphore, Token: 9, Lease: time.Second}},
		Waiters: []locktable.ClaimState{{Session: 5, Claim: 2, Mode: locktable.Semaphore, Ticket: 3, Lease: time.Second}}}},
		handoffOwners, func(locktable.SessionID) bool { return false })
	out, err := p.Encode(map[locktable.SessionID]HandoffSession{
		4: {Session: 4, Origin: locktable.Origin{Node: "n0", Session: 4}, Adopt: adopt},
		5: {Session: 5, Origin: locktable.Origin{Node: "r", Session: 50}, Resume: adopt},
	}, map[string][]HandoffRangeGate{"n1": {{Key: "g", LeaseMS: 500}}},
		map[string][]HandoffRange{"n1": {{Key: "k", Origin: locktable.Origin{Node: "n0", Session: 4}, Owner: 1,
			Type: uint8(rangelock.Write), End: 10, LeaseMS: 1000, Hash: adopt}}})
	if err != nil {
		t.Fatal(err)
	}
	return out["n1"]
}

// FuzzDecodeHandoff feeds the new owner's side whatever a prior owner
// could send: nothing may crash, and a state that decodes plans an
// install whose every claim has an origin.
func FuzzDecodeHandoff(f *testing.F) {
	f.Add(seedHandoffState(f))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := DecodeHandoff(b)
		if err != nil {
			if !errors.Is(err, ErrHandoffState) {
				t.Fatalf("error %v does not wrap ErrHandoffState", err)
			}
			return
		}
		in := PlanHandoffInstall(st, func(locktable.Origin) (locktable.SessionID, bool) { return 0, false }, 0)
		for _, ls := range in.Locks {
			for _, cs := range append(ls.Holders, ls.Waiters...) {
				if _, ok := in.Origins[cs.Session]; !ok {
					t.Fatalf("claim %+v installed without an origin", cs)
				}
			}
		}
		seen := map[locktable.Origin]bool{}
		for _, o := range in.Origins {
			if seen[o] {
				t.Fatalf("two sessions of origin %v", o)
			}
			seen[o] = true
		}
		for _, s := range PlanHandoffStandIns(st.Ranges) {
			_ = s.Label()
		}
		if _, err := json.Marshal(st); err != nil {
			t.Fatalf("a decoded state does not encode: %v", err)
		}
	})
}
