package protocol_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/batonlock/baton/protocol"
)

func init() {
	v2TypeByName["RING"] = protocol.TypeRing
	v2TypeByName["MEMBER"] = protocol.TypeRingMember
	v2TypeByName["RINGEND"] = protocol.TypeRingEnd
}

// ringExampleField sets the numeric ring-frame field key of an example
// line in docs/protocol-v2-ring.md; it reports whether key is one.
func ringExampleField(f *protocol.Frame, key string, n uint64) bool {
	switch key {
	case "version":
		f.Seq = n
	case "count":
		f.Claim = uint32(n)
	default:
		return false
	}
	return true
}

// ringExampleString sets the string ring-frame field key of an example
// line; it reports whether key is one.
func ringExampleString(f *protocol.Frame, key, s string) bool {
	switch key {
	case "id":
		f.Name = s
	case "addr":
		f.Label = s
	default:
		return false
	}
	return true
}

func TestRingRoundTrip(t *testing.T) {
	frames := [][]byte{
		protocol.AppendRing(nil, 0),
		protocol.AppendRing(nil, protocol.RingWatch),
		protocol.AppendRingMember(nil, "n1", "127.0.0.1:7070", true),
		protocol.AppendRingMember(nil, "n2", "", false),
		protocol.AppendRingEnd(nil, 1<<64-1, 65535, protocol.RingPushed),
		protocol.AppendRingEnd(nil, 0, 0, 0),
	}
	for _, b := range frames {
		parse := protocol.ParseServerFrameV2
		if protocol.Type(b[2]) == protocol.TypeRing {
			parse = protocol.ParseClientFrame
		}
		g, n, err := parse(b)
		if err != nil || n != len(b) {
			t.Errorf("% x: decoded %v, %d, %v", b, g, n, err)
			continue
		}
		if re := protocol.AppendFrame(nil, g); !bytes.Equal(re, b) {
			t.Errorf("%v re-encodes to % x, was % x", g, re, b)
		}
		if _, n, err := parse(b[:len(b)-1]); err != nil || n != 0 {
			t.Errorf("%v: a frame cut short gives %d, %v; want more bytes", g, n, err)
		}
	}
	m, _, _ := protocol.ParseServerFrameV2(frames[2])
	if m.MemberID() != "n1" || m.MemberAddr() != "127.0.0.1:7070" || m.Flags != protocol.MemberInRing {
		t.Errorf("MEMBER decoded as %v", m)
	}
	e, _, _ := protocol.ParseServerFrameV2(frames[4])
	if e.RingVersion() != 1<<64-1 || e.RingCount() != 65535 || e.Flags != protocol.RingPushed {
		t.Errorf("RINGEND decoded as %v", e)
	}
}

// TestRingMemberFits: a member whose id and address do not fit in one
// frame together is sent without its address, never as a frame over the
// limit.
func TestRingMemberFits(t *testing.T) {
	id, addr := strings.Repeat("n", 255), strings.Repeat("a", 254)
	b := protocol.AppendRingMember(nil, id, addr, true)
	if len(b) > protocol.MaxFrameSize {
		t.Fatalf("MEMBER of %d bytes", len(b))
	}
	g, _, err := protocol.ParseServerFrameV2(b)
	if err != nil || g.MemberID() != id || g.MemberAddr() != "" {
		t.Errorf("decoded id %d bytes, addr %q, %v; want the id and no address", len(g.MemberID()), g.MemberAddr(), err)
	}
	b = protocol.AppendRingMember(nil, strings.Repeat("n", 254), addr, true)
	if g, _, err := protocol.ParseServerFrameV2(b); err != nil || g.MemberAddr() != addr || len(b) != protocol.MaxFrameSize {
		t.Errorf("id+addr of 508 bytes: frame of %d bytes, addr %d bytes, %v", len(b), len(g.MemberAddr()), err)
	}
}

func TestRingRefusals(t *testing.T) {
	for _, c := range []struct {
		name  string
		b     []byte
		parse func([]byte) (protocol.Frame, int, error)
		want  error
	}{
		{"RING reserved flag", protocol.AppendFrame(nil, protocol.Frame{Type: protocol.TypeRing, Flags: 0x02}), protocol.ParseClientFrame, protocol.ErrUnsupportedFeature},
		{"RING no payload", []byte{0, 1, 0x26}, protocol.ParseClientFrame, protocol.ErrInvalidFrame},
		{"RING long payload", []byte{0, 3, 0x26, 0, 0}, protocol.ParseClientFrame, protocol.ErrInvalidFrame},
		{"RING from the server", protocol.AppendRing(nil, 0), protocol.ParseServerFrameV2, protocol.ErrUnknownMessage},
		{"RING as the first frame", protocol.AppendRing(nil, 0), protocol.ParseHello, protocol.ErrFirstNotHello},
		{"MEMBER from the client", protocol.AppendRingMember(nil, "n1", "a:1", true), protocol.ParseClientFrame, protocol.ErrUnknownMessage},
		{"RINGEND from the client", protocol.AppendRingEnd(nil, 1, 1, 0), protocol.ParseClientFrame, protocol.ErrUnknownMessage},
		{"unassigned 0x27", []byte{0, 2, 0x27, 0}, protocol.ParseClientFrame, protocol.ErrUnknownMessage},
		{"MEMBER reserved flag", protocol.AppendFrame(nil, protocol.Frame{Type: protocol.TypeRingMember, Flags: 0x80, Name: "n"}), protocol.ParseServerFrameV2, protocol.ErrUnsupportedFeature},
		{"MEMBER empty id", protocol.AppendFrame(nil, protocol.Frame{Type: protocol.TypeRingMember, Label: "a:1"}), protocol.ParseServerFrameV2, protocol.ErrInvalidFrame},
		{"MEMBER id past the end", []byte{0, 5, 0x3c, 1, 9, 'n', 0}, protocol.ParseServerFrameV2, protocol.ErrInvalidFrame},
		{"MEMBER addr past the end", []byte{0, 6, 0x3c, 1, 1, 'n', 3, 'a'}, protocol.ParseServerFrameV2, protocol.ErrInvalidFrame},
		{"MEMBER short", []byte{0, 3, 0x3c, 1, 0}, protocol.ParseServerFrameV2, protocol.ErrInvalidFrame},
		{"RINGEND reserved flag", protocol.AppendFrame(nil, protocol.Frame{Type: protocol.TypeRingEnd, Flags: 0x02}), protocol.ParseServerFrameV2, protocol.ErrUnsupportedFeature},
		{"RINGEND short", []byte{0, 3, 0x3d, 0, 0}, protocol.ParseServerFrameV2, protocol.ErrInvalidFrame},
	} {
		if _, _, err := c.parse(c.b); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

// FuzzV2Ring feeds arbitrary payloads to the ring decoders of both
// directions: no panic, and a frame accepted re-encodes to its bytes.
func FuzzV2Ring(f *testing.F) {
	f.Add(byte(protocol.TypeRing), protocol.AppendRing(nil, 1)[3:])
	f.Add(byte(protocol.TypeRingMember), protocol.AppendRingMember(nil, "n1", "127.0.0.1:1", true)[3:])
	f.Add(byte(protocol.TypeRingEnd), protocol.AppendRingEnd(nil, 7, 3, 0)[3:])
	f.Fuzz(func(t *testing.T, typ byte, payload []byte) {
		if len(payload) > protocol.MaxFrameLen-1 {
			return
		}
		b := []byte{byte((len(payload) + 1) >> 8), byte(len(payload) + 1), typ}
		b = append(b, payload...)
		for _, parse := range []func([]byte) (protocol.Frame, int, error){protocol.ParseClientFrame, protocol.ParseServerFrameV2} {
			g, n, err := parse(b)
			if err != nil || g.Type < protocol.TypeRing || (g.Type > protocol.TypeRing && g.Type < protocol.TypeRingMember) {
				continue
			}
			if n != len(b) {
				t.Fatalf("%v: consumed %d of %d", g, n, len(b))
			}
			if re := protocol.AppendFrame(nil, g); !bytes.Equal(re, b) {
				t.Fatalf("%v re-encodes to % x, read % x", g, re, b)
			}
		}
	})
}
