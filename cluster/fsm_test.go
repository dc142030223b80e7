package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func applyCmd(t *testing.T, f *fsm, index uint64, c command) applyResult {
	t.Helper()
	data, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	res, _ := f.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: data}).(applyResult)
	return res
}

type bufSink struct {
	bytes.Buffer
	cancelled bool
}

func (s *bufSink) ID() string    { return "test" }
func (s *bufSink) Cancel() error { s.cancelled = true; return nil }
func (s *bufSink) Close() error  { return nil }

func TestFSMApplySnapshotRestore(t *testing.T) {
	t.Parallel()
	f := newFSM()
	var rings []uint64
	f.onRing = func(prev, cur *Ring) { rings = append(rings, cur.Version()) }
	t0 := time.Unix(1_800_000_000, 0).UTC()
	floor := EpochFloor(t0)
	applyCmd(t, f, 1, command{Op: opPutMember, Member: Member{ID: "a", RaftAddr: "127.0.0.1:1", State: Serving}, At: t0, EpochFloor: floor})
	applyCmd(t, f, 2, command{Op: opPutMember, Member: Member{ID: "b", RaftAddr: "127.0.0.1:2", State: Joining}, At: t0.Add(time.Second)})
	if md, idx := f.read(); md.RingVersion != 1 || idx != 2 {
		t.Fatalf("a joining member changed the ring: version %d, index %d", md.RingVersion, idx)
	}
	applyCmd(t, f, 3, command{Op: opPutMember, Member: Member{ID: "b", RaftAddr: "127.0.0.1:2", State: Serving}, At: t0.Add(2 * time.Second)})
	if res := applyCmd(t, f, 4, command{Op: opEpoch, ID: "a"}); res.Epoch != floor || res.RingVersion != 2 {
		t.Errorf("first epoch %+v, want %d at ring 2", res, floor)
	}
	if res := applyCmd(t, f, 5, command{Op: opEpoch, ID: "b"}); res.Epoch != floor+1 {
		t.Errorf("second epoch %d", res.Epoch)
	}
	applyCmd(t, f, 6, command{Op: opRaiseLease, Lease: 5 * time.Second})
	applyCmd(t, f, 7, command{Op: opRaiseLease, Lease: time.Second})
	applyCmd(t, f, 8, command{Op: opRemoveMember, ID: "b", At: t0.Add(3 * time.Second)})
	if res := applyCmd(t, f, 9, command{Op: "bogus"}); !strings.Contains(res.Error, "unknown command") {
		t.Errorf("unknown command: %+v", res)
	}
	if res, _ := f.Apply(&raft.Log{Index: 10, Type: raft.LogCommand, Data: []byte("{")}).(applyResult); res.Error == "" {
		t.Error("undecodable entry applied")
	}
	md, _ := f.read()
	if md.RingVersion != 3 || !md.RingCommittedAt.Equal(t0.Add(3*time.Second)) || md.MaxLease != 5*time.Second ||
		md.LastEpoch != floor+1 || len(md.Epochs) != 1 || len(md.Members) != 1 {
		t.Fatalf("metadata %+v", md)
	}
	if !reflect.DeepEqual(rings, []uint64{1, 2, 3}) {
		t.Errorf("ring hook saw %v", rings)
	}
	// A removed node's epoch stays consumed.
	if res := applyCmd(t, f, 11, command{Op: opEpoch, ID: "b"}); res.Epoch != floor+2 {
		t.Errorf("epoch after removal %d, want %d", res.Epoch, floor+2)
	}
	md, _ = f.read()

	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink bufSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	snap.Release()
	g := newFSM()
	if err := g.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	got, _ := g.read()
	if !reflect.DeepEqual(got, md) {
		t.Errorf("restored %+v\nwant %+v", got, md)
	}
	if r := g.currentRing(); r.Version() != 3 || !reflect.DeepEqual(r.Members(), []string{"a"}) {
		t.Errorf("restored ring %d %v", r.Version(), r.Members())
	}
	if err := g.Restore(io.NopCloser(strings.NewReader("nope"))); err == nil {
		t.Error("restored garbage")
	}
}

func TestTokens(t *testing.T) {
	t.Parallel()
	low := 0
	tk := NewTokens(5, func() { low++ })
	prev := uint64(0)
	for range 3 {
		tok := tk.Next()
		if tok <= prev {
			t.Fatalf("token %d after %d", tok, prev)
		}
		prev = tok
	}
	if e, c := SplitToken(prev); e != 5 || c != 3 {
		t.Errorf("split %d: %d/%d", prev, e, c)
	}
	if err := tk.SetEpoch(5); err != ErrEpochNotAbove {
		t.Errorf("same epoch: %v", err)
	}
	if err := tk.SetEpoch(6); err != nil || tk.Epoch() != 6 {
		t.Fatal(err)
	}
	if tok := tk.Next(); tok <= prev || tok != 6<<EpochShift|1 {
		t.Errorf("first token of epoch 6: %d", tok)
	}
	// Near the end of the counter: low fires once, then exhaustion.
	tk.mu.Lock()
	tk.counter = counterMask - 2
	tk.mu.Unlock()
	if _, err := tk.TryNext(); err != nil || low != 1 {
		t.Fatalf("err %v, low %d", err, low)
	}
	if _, err := tk.TryNext(); err != nil || low != 1 {
		t.Fatalf("err %v, low fired %d times", err, low)
	}
	if _, err := tk.TryNext(); err != ErrTokensExhausted {
		t.Errorf("past the counter: %v", err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Next past the counter did not panic")
			}
		}()
		tk.Next()
	}()
	// The first epoch's tokens are above the clock tokens of a single
	// server (unix seconds << 20) for a day after the floor was taken.
	now := time.Now()
	floorTok := EpochFloor(now) << EpochShift
	if clock := uint64(now.Add(24*time.Hour).Unix()+1) << 20; floorTok <= clock {
		t.Errorf("epoch floor tokens %d not above clock tokens %d", floorTok, clock)
	}
}

func TestHandlerErrors(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3)
	follower := nodes[0]
	if leader := leaderOf(t, nodes); follower == leader {
		follower = nodes[1]
	}
	ts := httptest.NewServer(follower.Handler())
	defer ts.Close()
	post := func(path, body string, forwarded bool) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, ts.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		SetRequestSecret(req, []byte(testSecret))
		if forwarded {
			req.Header.Set(HeaderForwarded, "1")
		}
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// A forwarded write that reaches a follower is not forwarded again.
	if code, body := post(pathLease, `{"lease_ms":1}`, true); code != http.StatusServiceUnavailable || !strings.Contains(body, "not the leader") {
		t.Errorf("forwarded write on a follower: %d %s", code, body)
	}
	// A direct one is forwarded to the leader.
	if code, body := post(pathLease, `{"lease_ms":1}`, false); code != http.StatusOK || !strings.Contains(body, `"index"`) {
		t.Errorf("write on a follower: %d %s", code, body)
	}
	if code, _ := post(pathJoin, `{"id":""}`, false); code != http.StatusBadRequest {
		t.Errorf("join without an id: %d", code)
	}
	if code, _ := post(pathRemove, `{"id":"node-9"}`, false); code != http.StatusNotFound {
		t.Errorf("removal of an unknown member: %d", code)
	}
	if code, _ := post(pathJoin, strings.Repeat("x", maxBody+1), false); code != http.StatusBadRequest {
		t.Errorf("oversized body: %d", code)
	}
	resp, err := ts.Client().Get(ts.URL + pathStatus)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	if st.ID != follower.ID() || st.IsLeader || st.Leader == "" || st.AppliedRingVersion != 3 || len(st.Members) != 3 || len(st.Ring) != 3 {
		t.Errorf("status %+v", st)
	}
}

// Queue tickets come from the epoch, with a counter apart from the
// tokens': a node's increase, a later epoch's are above every earlier
// one's, and none are given without an epoch.
func TestTokensTickets(t *testing.T) {
	t.Parallel()
	if tk := NewTokens(0, nil).NextTicket(); tk != 0 {
		t.Fatalf("a ticket without an epoch: %d", tk)
	}
	tk := NewTokens(5, nil)
	a, b := tk.NextTicket(), tk.NextTicket()
	if a != 5<<EpochShift|1 || b != 5<<EpochShift|2 {
		t.Fatalf("tickets %#x %#x", a, b)
	}
	if tok := tk.Next(); tok != 5<<EpochShift|1 {
		t.Errorf("the first token after two tickets: %#x, want the first of the epoch", tok)
	}
	if err := tk.SetEpoch(6); err != nil {
		t.Fatal(err)
	}
	if c := tk.NextTicket(); c != 6<<EpochShift|1 || c <= b {
		t.Errorf("first ticket of epoch 6: %#x", c)
	}
}

// The log never hands out an epoch whose tokens would wrap, nor records
// a lease no client can have, whatever entry reaches it.
func TestFSMBounds(t *testing.T) {
	t.Parallel()
	f := newFSM()
	var index uint64
	apply := func(c command) applyResult {
		index++
		return applyCmd(t, f, index, c)
	}
	m := Member{ID: "n1", RaftAddr: "127.0.0.1:1", State: Serving}
	if res := apply(command{Op: opPutMember, Member: m, EpochFloor: MaxEpoch + 1}); res.Error == "" || f.md.LastEpoch != 0 {
		t.Errorf("a floor above MaxEpoch: %+v, last epoch %d", res, f.md.LastEpoch)
	}
	if res := apply(command{Op: opPutMember, Member: m, EpochFloor: MaxEpoch}); res.Error != "" {
		t.Fatal(res.Error)
	}
	res := apply(command{Op: opEpoch, ID: "n1"})
	if res.Error != "" || res.Epoch != MaxEpoch {
		t.Fatalf("the last epoch: %+v", res)
	}
	if tok := NewTokens(res.Epoch, nil).Next(); tok>>EpochShift != MaxEpoch {
		t.Errorf("the last epoch's token %#x", tok)
	}
	if res := apply(command{Op: opEpoch, ID: "n1"}); res.Error == "" || f.md.LastEpoch != MaxEpoch {
		t.Errorf("an epoch past MaxEpoch: %+v, last epoch %d", res, f.md.LastEpoch)
	}
	if err := NewTokens(MaxEpoch, nil).SetEpoch(MaxEpoch + 1); !errors.Is(err, ErrEpochRange) {
		t.Errorf("SetEpoch past MaxEpoch: %v", err)
	}
	for _, l := range []time.Duration{-1, 0, MaxRecordedLease + time.Millisecond, 1 << 62} {
		if res := apply(command{Op: opRaiseLease, Lease: l}); res.Error == "" || f.md.MaxLease != 0 {
			t.Errorf("lease %v: %+v, largest %v", l, res, f.md.MaxLease)
		}
	}
	if res := apply(command{Op: opRaiseLease, Lease: MaxRecordedLease}); res.Error != "" || f.md.MaxLease != MaxRecordedLease {
		t.Errorf("the largest lease: %+v, %v", res, f.md.MaxLease)
	}
}
