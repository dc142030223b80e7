package protocol_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/batonlock/baton/protocol"
)

func init() {
	v2TypeByName["DETACH"] = protocol.TypeDetach
	v2TypeByName["DETACHED"] = protocol.TypeDetached
}

func TestDetachRoundTrip(t *testing.T) {
	for _, c := range []struct {
		b     []byte
		parse func([]byte) (protocol.Frame, int, error)
		typ   protocol.Type
	}{
		{protocol.AppendDetach(nil), protocol.ParseClientFrame, protocol.TypeDetach},
		{protocol.AppendDetached(nil), protocol.ParseServerFrameV2, protocol.TypeDetached},
	} {
		if !bytes.Equal(c.b, []byte{0, 1, byte(c.typ)}) {
			t.Errorf("%v encodes to % x", c.typ, c.b)
		}
		g, n, err := c.parse(c.b)
		if err != nil || n != len(c.b) || g.Type != c.typ {
			t.Errorf("% x: decoded %v, %d, %v", c.b, g, n, err)
		}
		if _, n, err := c.parse(c.b[:2]); err != nil || n != 0 {
			t.Errorf("%v cut short gives %d, %v; want more bytes", c.typ, n, err)
		}
	}
	h, _, err := protocol.ParseHello(protocol.AppendFrame(nil, protocol.Frame{Type: protocol.TypeHello, LeaseMS: 1000,
		Flags: protocol.HelloResumable | protocol.HelloDetach}))
	if err != nil || !h.Detach() || !h.Resumable() {
		t.Errorf("HELLO resumable+detach decoded as %v, %v", h, err)
	}
}

func TestDetachRefusals(t *testing.T) {
	for _, c := range []struct {
		name  string
		b     []byte
		parse func([]byte) (protocol.Frame, int, error)
		want  error
	}{
		{"DETACH with a payload", []byte{0, 2, 0x28, 0}, protocol.ParseClientFrame, protocol.ErrInvalidFrame},
		{"DETACHED with a payload", []byte{0, 2, 0x3e, 0}, protocol.ParseServerFrameV2, protocol.ErrInvalidFrame},
		{"DETACH from the server", protocol.AppendDetach(nil), protocol.ParseServerFrameV2, protocol.ErrUnknownMessage},
		{"DETACHED from the client", protocol.AppendDetached(nil), protocol.ParseClientFrame, protocol.ErrUnknownMessage},
		{"DETACH as the first frame", protocol.AppendDetach(nil), protocol.ParseHello, protocol.ErrFirstNotHello},
		{"HELLO detach without resumable", protocol.AppendFrame(nil, protocol.Frame{Type: protocol.TypeHello, LeaseMS: 1000, Flags: protocol.HelloDetach}),
			protocol.ParseHello, protocol.ErrUnsupportedFeature},
		{"HELLO reserved bit 4", protocol.AppendFrame(nil, protocol.Frame{Type: protocol.TypeHello, LeaseMS: 1000, Flags: 0x11}),
			protocol.ParseHello, protocol.ErrUnsupportedFeature},
		{"WELCOME reserved bit 5", protocol.AppendFrame(nil, protocol.Frame{Type: protocol.TypeWelcome, Flags: 0x20}),
			protocol.ParseServerFrameV2, protocol.ErrUnsupportedFeature},
	} {
		if _, _, err := c.parse(c.b); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

// FuzzV2Detach feeds arbitrary payloads with the detach types to the
// decoders of both directions: no panic, and a frame accepted re-encodes
// to its bytes.
func FuzzV2Detach(f *testing.F) {
	f.Add(byte(protocol.TypeDetach), []byte{})
	f.Add(byte(protocol.TypeDetached), []byte{})
	f.Add(byte(protocol.TypeDetach), []byte{1})
	f.Fuzz(func(t *testing.T, typ byte, payload []byte) {
		if len(payload) > protocol.MaxFrameLen-1 {
			return
		}
		b := []byte{byte((len(payload) + 1) >> 8), byte(len(payload) + 1), typ}
		b = append(b, payload...)
		for _, parse := range []func([]byte) (protocol.Frame, int, error){protocol.ParseClientFrame, protocol.ParseServerFrameV2} {
			g, n, err := parse(b)
			if err != nil || (g.Type != protocol.TypeDetach && g.Type != protocol.TypeDetached) {
				continue
			}
			if n != len(b) || len(payload) != 0 {
				t.Fatalf("%v: consumed %d of %d", g, n, len(b))
			}
			if re := protocol.AppendFrame(nil, g); !bytes.Equal(re, b) {
				t.Fatalf("%v re-encodes to % x, read % x", g, re, b)
			}
		}
	})
}
