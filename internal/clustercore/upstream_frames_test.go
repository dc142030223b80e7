package clustercore

import (
	"bytes"
	"testing"

	"github.com/batonlock/baton/protocol"
)

const testMoved protocol.Code = 0x06

func TestUpstreamFrameKindOf(t *testing.T) {
	for _, tc := range []struct {
		name          string
		f             protocol.Frame
		asked, opened bool
		want          UpstreamFrameKind
	}{
		{"WELCOME answers the HELLO", protocol.Frame{Type: protocol.TypeWelcome}, false, false, UpstreamAnswer},
		{"GRANTED answers a CLAIM", protocol.Frame{Type: protocol.TypeGranted}, false, true, UpstreamAnswer},
		{"RELEASED answers a RELEASE", protocol.Frame{Type: protocol.TypeReleased}, false, true, UpstreamAnswer},
		{"PROCLAIMED answers a PROCLAIM", protocol.Frame{Type: protocol.TypeProclaimed}, false, true, UpstreamAnswer},
		{"a RANGE answer answers a RANGE", protocol.Frame{Type: protocol.TypeRangeAnswer, Claim: 4, Status: protocol.RangeDone}, false, true, UpstreamAnswer},
		{"a RANGE promotion is a push", protocol.Frame{Type: protocol.TypeRangeAnswer, Claim: 4, Status: protocol.RangePromoted}, false, true, UpstreamRangePush},
		{"a RANGE move is a push", protocol.Frame{Type: protocol.TypeRangeAnswer, Claim: 4, Status: protocol.RangeMoved}, false, true, UpstreamRangePush},
		{"PROMOTED is a push", protocol.Frame{Type: protocol.TypePromoted}, false, true, UpstreamPush},
		{"REVOKED is a push", protocol.Frame{Type: protocol.TypeRevoked, Code: protocol.CodeNotOwner}, false, true, UpstreamPush},
		{"MOVED is never passed on", protocol.Frame{Type: protocol.TypeRevoked, Code: testMoved}, false, true, UpstreamMoved},
		{"ERROR 0x1e before WELCOME to a HELLO that asked: open again", protocol.Frame{Type: protocol.TypeError, Code: protocol.CodeUnsupportedFeature}, true, false, UpstreamReopen},
		{"session ERROR 0x1e before WELCOME: open again", protocol.Frame{Type: protocol.TypeSessionError, Code: protocol.CodeUnsupportedFeature}, true, false, UpstreamReopen},
		{"ERROR 0x1e to a HELLO that asked nothing ends it", protocol.Frame{Type: protocol.TypeError, Code: protocol.CodeUnsupportedFeature}, false, false, UpstreamEnded},
		{"ERROR 0x1e after WELCOME ends it", protocol.Frame{Type: protocol.TypeSessionError, Code: protocol.CodeUnsupportedFeature}, true, true, UpstreamEnded},
		{"ERROR 0x01 ends it", protocol.Frame{Type: protocol.TypeSessionError, Code: protocol.CodeShuttingDown}, true, true, UpstreamEnded},
		{"a CHANGE fits nothing", protocol.Frame{Type: protocol.TypeChange}, false, true, UpstreamStray},
	} {
		if got := UpstreamFrameKindOf(tc.f, testMoved, tc.asked, tc.opened); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestUpstreamParse(t *testing.T) {
	welcome := protocol.AppendFrame(nil, protocol.Frame{Type: protocol.TypeWelcome, LeaseMS: 1000})
	granted := protocol.AppendGranted(nil, 3, 9)
	queued := protocol.AppendQueued(nil, 4)
	all := append(append(append([]byte{}, welcome...), granted...), queued...)
	for _, tc := range []struct {
		name       string
		buf        []byte
		opened     bool
		maxLen     int
		frames     [][]byte
		n          int
		wantOpened bool
		err        bool
	}{
		{"nothing yet", nil, false, protocol.MaxFrameLen, nil, 0, false, false},
		{"the WELCOME, then frames", all, false, protocol.MaxFrameLen, [][]byte{welcome, granted, queued}, len(all), true, false},
		{"a frame cut short waits", all[:len(all)-1], false, protocol.MaxFrameLen, [][]byte{welcome, granted}, len(welcome) + len(granted), true, false},
		{"opened: no HELLO answer expected", granted, true, protocol.MaxFrameLen, [][]byte{granted}, len(granted), true, false},
		{"an ERROR answers the HELLO", protocol.AppendError(nil, protocol.CodeUnsupportedFeature, "no"), false, protocol.MaxFrameLen,
			[][]byte{protocol.AppendError(nil, protocol.CodeUnsupportedFeature, "no")}, len(protocol.AppendError(nil, protocol.CodeUnsupportedFeature, "no")), true, false},
		{"over the largest frame", granted, true, 4, nil, 0, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buf := bytes.Clone(tc.buf)
			var got [][]byte
			n, opened, err := UpstreamParse(buf, tc.opened, tc.maxLen, func(f protocol.Frame, raw []byte) { got = append(got, raw) })
			if (err != nil) != tc.err || n != tc.n || opened != tc.wantOpened || len(got) != len(tc.frames) {
				t.Fatalf("n %d, opened %v, err %v, %d frames; want %d, %v, err %v, %d frames", n, opened, err, len(got), tc.n, tc.wantOpened, tc.err, len(tc.frames))
			}
			for i := range got {
				if !bytes.Equal(got[i], tc.frames[i]) {
					t.Fatalf("frame %d: %x, want %x", i, got[i], tc.frames[i])
				}
			}
			clear(buf) // the caller reuses its buffer: the frames are copies
			for i := range got {
				if !bytes.Equal(got[i], tc.frames[i]) {
					t.Fatalf("frame %d changed with the buffer: %x", i, got[i])
				}
			}
		})
	}
	if _, _, err := UpstreamParse([]byte{0x7f, 0, 0, 0, 1}, true, protocol.MaxFrameLen, func(protocol.Frame, []byte) {}); err == nil {
		t.Fatalf("an unknown frame parsed: %v", err)
	}
}

func TestUpstreamHelloFlags(t *testing.T) {
	for _, tc := range []struct {
		tickets, values bool
		want            uint8
	}{
		{false, false, 0},
		{true, false, protocol.HelloTickets},
		{false, true, protocol.HelloValues},
		{true, true, protocol.HelloTickets | protocol.HelloValues},
	} {
		if got := UpstreamHelloFlags(tc.tickets, tc.values); got != tc.want {
			t.Errorf("tickets %v values %v: %#x, want %#x", tc.tickets, tc.values, got, tc.want)
		}
	}
	for _, tc := range []struct{ asked, opened, want bool }{
		{true, false, true}, {true, true, false}, {false, false, false}, {false, true, false},
	} {
		if got := UpstreamKeepsOpening(tc.asked, tc.opened); got != tc.want {
			t.Errorf("asked %v opened %v: keeps %v, want %v", tc.asked, tc.opened, got, tc.want)
		}
	}
}

func TestUpstreamAnswerWayOf(t *testing.T) {
	claim := Sent{Kind: protocol.TypeClaim, ID: 3}
	release := Sent{Kind: protocol.TypeRelease, ID: 3}
	rng := Sent{Kind: protocol.TypeRange}
	for _, tc := range []struct {
		name                        string
		f                           protocol.Frame
		r                           Sent
		toClient, rangeAdopt, moved bool
		want                        UpstreamAnswerWay
	}{
		{"WELCOME opens", protocol.Frame{Type: protocol.TypeWelcome}, Sent{Kind: protocol.TypeHello}, false, false, false, UpstreamOpened},
		{"PONG", protocol.Frame{Type: protocol.TypePong}, Sent{Kind: protocol.TypePing}, false, false, false, UpstreamPonged},
		{"a range adoption's answer", protocol.Frame{Type: protocol.TypeRangeAnswer}, rng, true, true, false, UpstreamRangeAdopted},
		{"a client's RANGE answer", protocol.Frame{Type: protocol.TypeRangeAnswer}, rng, true, false, false, UpstreamRangeAnswered},
		{"the client waits: to its place", protocol.Frame{Type: protocol.TypeGranted}, claim, true, false, false, UpstreamToClient},
		{"an adoption at the new owner", protocol.Frame{Type: protocol.TypeGranted}, claim, false, false, true, UpstreamAdoptAnswered},
		{"a held claim relayed late", protocol.Frame{Type: protocol.TypeGranted}, claim, false, false, false, UpstreamHeldAnswered},
		{"a RELEASE of a claim that moved", protocol.Frame{Type: protocol.TypeReleased}, release, false, false, true, UpstreamToNewOwner},
		{"a RELEASE the client waits for", protocol.Frame{Type: protocol.TypeReleased}, release, true, false, false, UpstreamToClient},
	} {
		if got := UpstreamAnswerWayOf(tc.f, tc.r, tc.toClient, tc.rangeAdopt, tc.moved); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
