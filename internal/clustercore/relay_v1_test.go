package clustercore

import (
	"bytes"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

func TestV1Unexpected(t *testing.T) {
	cases := []struct {
		b    byte
		want protocol.Code
	}{
		{byte(protocol.TypeAcquire), protocol.CodeDuplicateAcquire},
		{0x55, protocol.CodeUnknownMessage},
		{protocol.HopMarker, protocol.CodeUnknownMessage},
		{byte(protocol.TypeWaiting), protocol.CodeUnknownMessage},
	}
	for _, c := range cases {
		if got := V1Unexpected(c.b); got != c.want {
			t.Errorf("V1Unexpected(%#x) = %v, want %v", c.b, got, c.want)
		}
	}
}

// A held claim, step by step: WAITING once, each heartbeat answered
// WAITING and moving the lease's end, the Router asked again at each
// round's end, the claim ended by silence for a lease or by a frame
// other than HEARTBEAT.
func TestV1Hold(t *testing.T) {
	t0 := time.Unix(100, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	hb := []byte{byte(protocol.TypeHeartbeat)}
	type step struct {
		round    bool   // start a round at at
		first    bool   // Round's answer
		heard    []byte // bytes heard at at
		answer   []byte // Heard's answer
		code     protocol.Code
		timeout  bool       // the deadline passed at at
		next     V1HoldStep // Timeout's answer
		deadline int        // Deadline after the step, in ms since t0
	}
	waiting := func(n int) []byte { return bytes.Repeat(protocol.AppendWaiting(nil), n) }
	// Lease 250ms, retry 100ms.
	run := func(t *testing.T, steps []struct {
		at int
		s  step
	}) {
		t.Helper()
		h := V1Hold{Lease: 250 * time.Millisecond, Retry: 100 * time.Millisecond}
		for i, st := range steps {
			now, s := ms(st.at), st.s
			switch {
			case s.round:
				if got := h.Round(now); got != s.first {
					t.Fatalf("step %d: Round = %v, want %v", i, got, s.first)
				}
			case s.timeout:
				if got := h.Timeout(now); got != s.next {
					t.Fatalf("step %d: Timeout = %v, want %v", i, got, s.next)
				}
			default:
				out, code := h.Heard(now, s.heard, nil)
				if !bytes.Equal(out, s.answer) || code != s.code {
					t.Fatalf("step %d: Heard(% x) = % x, %v; want % x, %v", i, s.heard, out, code, s.answer, s.code)
				}
			}
			if got := h.Deadline(); !got.Equal(ms(s.deadline)) {
				t.Fatalf("step %d: Deadline = %v after t0, want %dms", i, got.Sub(t0), s.deadline)
			}
		}
	}
	type st = struct {
		at int
		s  step
	}
	t.Run("heartbeats keep it, rounds ask again", func(t *testing.T) {
		run(t, []st{
			{0, step{round: true, first: true, deadline: 100}},
			{50, step{heard: hb, answer: waiting(1), deadline: 100}},
			{99, step{timeout: true, next: V1HoldRead, deadline: 100}},
			{100, step{timeout: true, next: V1HoldAsk, deadline: 100}},
			{100, step{round: true, first: false, deadline: 200}},
			{150, step{heard: bytes.Repeat(hb, 3), answer: waiting(3), deadline: 200}},
			{200, step{timeout: true, next: V1HoldAsk, deadline: 200}},
			{200, step{round: true, first: false, deadline: 300}},
			{300, step{timeout: true, next: V1HoldAsk, deadline: 300}},
			{300, step{round: true, first: false, deadline: 400}},
			// The lease's end comes before the round's.
			{350, step{round: true, first: false, deadline: 400}},
		})
	})
	t.Run("silent for its lease", func(t *testing.T) {
		run(t, []st{
			{0, step{round: true, first: true, deadline: 100}},
			{100, step{round: true, deadline: 200}},
			{200, step{round: true, deadline: 250}},
			{250, step{timeout: true, next: V1HoldRead, deadline: 250}},
			{251, step{timeout: true, next: V1HoldEnd, deadline: 250}},
		})
	})
	t.Run("a second ACQUIRE", func(t *testing.T) {
		run(t, []st{
			{0, step{round: true, first: true, deadline: 100}},
			{50, step{heard: []byte{2, 1, 2}, code: protocol.CodeDuplicateAcquire, deadline: 100}},
		})
	})
	t.Run("an unknown byte after heartbeats", func(t *testing.T) {
		run(t, []st{
			{0, step{round: true, first: true, deadline: 100}},
			// Nothing is answered and the lease does not move.
			{90, step{heard: []byte{2, 2, 0x7e}, code: protocol.CodeUnknownMessage, deadline: 100}},
			{100, step{round: true, deadline: 200}},
			{200, step{round: true, deadline: 250}},
		})
	})
	t.Run("nothing heard", func(t *testing.T) {
		run(t, []st{
			{0, step{round: true, first: true, deadline: 100}},
			{50, step{heard: nil, answer: nil, deadline: 100}},
			{100, step{round: true, deadline: 200}},
			{200, step{round: true, deadline: 250}},
		})
	})
}

// What of the owner's bytes reaches the client, and where the claim's
// stream on the hop ends.
func TestV1Copy(t *testing.T) {
	w := protocol.AppendWaiting(nil)
	acq := protocol.AppendAcquired(nil, 0x7e7e)
	ack := []byte{protocol.HopAck}
	type read struct {
		b        []byte
		last     bool // the read also ended the owner's stream
		goneSent bool
		failed   bool // the write to the client fails
		pass     []byte
		end      bool
		acked    bool
	}
	cases := []struct {
		name  string
		told  bool
		reads []read
	}{
		{"passes frames as they come", false, []read{
			{b: w, pass: w},
			{b: acq[:4], pass: acq[:4]},
			{b: acq[4:], pass: acq[4:]},
		}},
		{"a held claim's first WAITING is skipped", true, []read{
			{b: append(clone(w), acq...), pass: acq},
		}},
		{"a held claim's first frame is ACQUIRED", true, []read{
			{b: acq, pass: acq},
			{b: w, pass: w},
		}},
		{"the ack after hopClientGone ends the stream; the hop is kept", false, []read{
			{b: acq, pass: acq},
			{b: append(clone(w), ack...), goneSent: true, end: true, acked: true},
		}},
		{"an ack before hopClientGone ends it, not kept", false, []read{
			{b: ack, end: true, acked: false},
		}},
		{"bytes after the ack: not kept", false, []read{
			{b: append(clone(ack), 0x11), goneSent: true, end: true, acked: false},
		}},
		{"the stream closed with the ack: not kept", false, []read{
			{b: ack, last: true, goneSent: true, end: true, acked: false},
		}},
		{"0x7e inside a token is no ack", false, []read{
			{b: acq[:8], pass: acq[:8]},
			{b: acq[8:], pass: acq[8:]},
		}},
		{"after hopClientGone nothing passes", false, []read{
			{b: w, goneSent: true},
		}},
		{"after a failed write nothing passes, the ack is still seen", false, []read{
			{b: acq, pass: acq, failed: true},
			{b: w},
			{b: ack, goneSent: true, end: true, acked: true},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cp := NewV1Copy(c.told)
			for i, r := range c.reads {
				pass, end, acked := cp.Owner(r.b, r.last, r.goneSent)
				if !bytes.Equal(pass, r.pass) || end != r.end || acked != r.acked {
					t.Fatalf("read %d: Owner(% x) = % x, end %v, acked %v; want % x, %v, %v",
						i, r.b, pass, end, acked, r.pass, r.end, r.acked)
				}
				if r.failed {
					cp.ClientFailed()
				}
			}
		})
	}
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }

// How a version 1 claim in the table ends by what its connection
// brings, direct and relayed.
func TestV1End(t *testing.T) {
	gone := byte(protocol.HopClientGone)
	graceful, proto, moved := locktable.ReasonGraceful, locktable.ReasonProtocolError, locktable.ReasonMoved
	keep := V1Ending{KeepUntilLease: true}
	other := []struct {
		name     string
		relayed  bool
		b        []byte
		readOK   bool
		orphaned bool
		want     V1Ending
	}{
		{"direct: second ACQUIRE", false, []byte{1}, true, false, V1Ending{Reason: proto, Code: protocol.CodeDuplicateAcquire}},
		{"direct: 0x7e is unknown", false, []byte{gone}, true, false, V1Ending{Reason: proto, Code: protocol.CodeUnknownMessage}},
		{"relayed: unknown byte", true, []byte{0x55}, true, false, V1Ending{Reason: proto, Code: protocol.CodeUnknownMessage}},
		{"relayed: client gone, hop passed on", true, []byte{gone}, true, false, V1Ending{Reason: graceful, PassHop: true}},
		{"relayed: client gone, then a byte", true, []byte{gone, 2}, true, false, V1Ending{Reason: graceful}},
		{"relayed: client gone, read failed", true, []byte{gone}, false, false, V1Ending{Reason: graceful}},
		{"relayed: client gone, claim orphaned", true, []byte{gone}, true, true, V1Ending{Reason: graceful}},
	}
	for _, c := range other {
		if got := (V1End{Relayed: c.relayed}).Other(c.b, c.readOK, c.orphaned); got != c.want {
			t.Errorf("Other %s: %+v, want %+v", c.name, got, c.want)
		}
	}
	broke := []struct {
		relayed, orphaned bool
		want              V1Ending
	}{
		{false, false, V1Ending{Reason: graceful}},
		{false, true, V1Ending{Reason: graceful}},
		{true, false, keep},
		{true, true, V1Ending{Reason: graceful}},
	}
	for _, c := range broke {
		if got := (V1End{Relayed: c.relayed}).Broke(c.orphaned); got != c.want {
			t.Errorf("Broke(relayed %v, orphaned %v) = %+v, want %+v", c.relayed, c.orphaned, got, c.want)
		}
	}
	movedCases := []struct {
		name             string
		relayed          bool
		b                []byte
		failed, timedOut bool
		want             V1Ending
		done             bool
	}{
		{"direct: heartbeats crossed the ERROR", false, []byte{2, 2}, false, false, V1Ending{}, false},
		{"direct: 0x7e is no hang-up", false, []byte{gone}, false, false, V1Ending{}, false},
		{"direct: hang-up", false, nil, true, false, V1Ending{Reason: moved}, true},
		{"direct: lease ran out", false, nil, true, true, V1Ending{Reason: moved}, true},
		{"relayed: heartbeats", true, []byte{2}, false, false, V1Ending{}, false},
		{"relayed: client gone", true, []byte{2, gone}, false, false, V1Ending{Reason: moved}, true},
		{"relayed: client gone as the hop closes", true, []byte{gone}, true, false, V1Ending{Reason: moved}, true},
		{"relayed: hop broke", true, nil, true, false, keep, true},
		{"relayed: lease ran out", true, nil, true, true, V1Ending{Reason: moved}, true},
	}
	for _, c := range movedCases {
		got, done := (V1End{Relayed: c.relayed}).Moved(c.b, c.failed, c.timedOut)
		if got != c.want || done != c.done {
			t.Errorf("Moved %s: %+v, %v; want %+v, %v", c.name, got, done, c.want, c.done)
		}
	}
}

// What of a relayed client's bytes goes to the owner: heartbeats, then
// the first other byte and nothing after; a client's own 0x7e never goes
// as the relaying node's word.
func TestV1FromClient(t *testing.T) {
	gone := byte(protocol.HopClientGone)
	cases := []struct {
		name string
		b    []byte
		pass []byte
		more bool
	}{
		{"nothing", nil, nil, true},
		{"heartbeats", []byte{2, 2, 2}, []byte{2, 2, 2}, true},
		{"a second ACQUIRE ends it", []byte{2, 1, 1, 2}, []byte{2, 1}, false},
		{"an unknown byte ends it", []byte{0x55, 2}, []byte{0x55}, false},
		{"the client's 0x7e goes as no frame", []byte{2, gone}, []byte{2, v1NoFrame}, false},
		{"a hop header after it does not go", append([]byte{gone}, protocol.AppendHop(nil, "1.2.3.4:5", "root")...), []byte{v1NoFrame}, false},
	}
	for _, c := range cases {
		pass, more := V1FromClient(clone(c.b))
		if !bytes.Equal(pass, c.pass) || more != c.more {
			t.Errorf("%s: V1FromClient(% x) = % x, %v; want % x, %v", c.name, c.b, pass, more, c.pass, c.more)
		}
		if V1Unexpected(v1NoFrame) != protocol.CodeUnknownMessage || v1NoFrame == protocol.HopClientGone {
			t.Fatalf("v1NoFrame %#x is read as a frame or the hop's word", v1NoFrame)
		}
	}
}
