package protocol_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/batonlock/baton/protocol"
)

func init() {
	v2TypeByName["PROCLAIM"] = protocol.TypeProclaim
	v2TypeByName["WATCH"] = protocol.TypeWatch
	v2TypeByName["PROCLAIMED"] = protocol.TypeProclaimed
	v2TypeByName["CHANGE"] = protocol.TypeChange
}

// The largest frames of a values session round-trip through both
// decoders, and only with the values limit.
func TestWatchFramesRoundTrip(t *testing.T) {
	value := strings.Repeat("v", protocol.MaxValueLen)
	long := strings.Repeat("é", 127) + "x" // 255 bytes
	var secret [protocol.SecretLen]byte
	secret[3] = 9
	client := []protocol.Frame{
		{Type: protocol.TypeClaim, Claim: 1, Flags: protocol.ClaimValue, Mode: protocol.ModeExclusive, Name: long, Value: value},
		{Type: protocol.TypeClaim, Claim: 2, Flags: protocol.ClaimValue | protocol.ClaimReassert, Mode: protocol.ModeSemaphore, Limit: 3,
			Name: long, Token: 7, Ring: 8, Session: 9, Secret: secret, Node: long, Value: value},
		{Type: protocol.TypeClaim, Claim: 3, Flags: protocol.ClaimValue | protocol.ClaimNoWait, Mode: protocol.ModeShared, Name: "n"},
		{Type: protocol.TypeProclaim, Claim: 4, Value: value},
		{Type: protocol.TypeProclaim, Claim: 5},
		{Type: protocol.TypeWatch, Claim: 6, Name: long},
	}
	server := []protocol.Frame{
		{Type: protocol.TypeProclaimed, Claim: 1, Proclaim: protocol.ProclaimNotInUse},
		{Type: protocol.TypeChange, Claim: 2, Change: protocol.ChangeHeld, Mode: protocol.ModeShared, Token: 1 << 60, Value: value, Label: long, Identity: long},
		{Type: protocol.TypeChange, Claim: 3, Change: protocol.ChangeSynced},
		{Type: protocol.TypeChange, Claim: 4, Change: protocol.ChangeReset},
	}
	for _, f := range client {
		b := protocol.AppendFrame(nil, f)
		if len(b) > protocol.FrameHeaderLen+protocol.MaxValuesFrameLen {
			t.Fatalf("%v: %d bytes, over the values limit", f, len(b))
		}
		g, n, err := protocol.ParseClientFrameMax(b, protocol.MaxValuesFrameLen)
		if err != nil || n != len(b) || g != f {
			t.Errorf("client frame %v: parsed %v, %d, %v", f, g, n, err)
		}
		if len(b) > protocol.MaxFrameSize {
			if _, _, err := protocol.ParseClientFrame(b); !errors.Is(err, protocol.ErrFrameTooLong) {
				t.Errorf("%v of %d bytes outside a values session: %v", f.Type, len(b), err)
			}
		}
	}
	for _, f := range server {
		b := protocol.AppendFrame(nil, f)
		g, err := protocol.ReadServerFrameV2Max(iotest.OneByteReader(bytes.NewReader(b)), protocol.MaxValuesFrameLen)
		if err != nil || g != f {
			t.Errorf("server frame %v: read %v, %v", f, g, err)
		}
		if c := g.ChangeOf(); f.Type == protocol.TypeChange && (c.Token != f.Token || c.Value != f.Value || c.Identity != f.Identity) {
			t.Errorf("ChangeOf(%v) = %+v", g, c)
		}
	}
}

func TestWatchFrameErrors(t *testing.T) {
	for _, tt := range []struct {
		name  string
		b     []byte
		err   error
		claim bool
	}{
		{"watch empty name", protocol.AppendWatch(nil, 1, ""), protocol.ErrEmptyName, true},
		{"watch name utf-8", protocol.AppendWatch(nil, 1, "a\xff"), protocol.ErrInvalidName, true},
		{"watch short", frame(0x2a, 0, 0, 1), protocol.ErrInvalidFrame, false},
		{"watch name past end", frame(0x2a, 0, 0, 0, 1, 3, 'a'), protocol.ErrInvalidFrame, false},
		{"proclaim value past end", frame(0x29, 0, 0, 0, 1, 0, 3, 'a'), protocol.ErrInvalidFrame, false},
		{"proclaim bytes left over", frame(0x29, 0, 0, 0, 1, 0, 0, 'a'), protocol.ErrInvalidFrame, false},
		{"proclaimed from the client", protocol.AppendProclaimed(nil, 1, 0), protocol.ErrUnknownMessage, false},
		{"change from the client", protocol.AppendChange(nil, 1, protocol.Change{Kind: protocol.ChangeSynced}), protocol.ErrUnknownMessage, false},
	} {
		_, n, err := protocol.ParseClientFrame(tt.b)
		var ce *protocol.ClaimError
		if !errors.Is(err, tt.err) || errors.As(err, &ce) != tt.claim || n != len(tt.b) {
			t.Errorf("%s: %v, n=%d; want %v (claim level %v), n=%d", tt.name, err, n, tt.err, tt.claim, len(tt.b))
		}
	}
	for _, tt := range []struct {
		name string
		b    []byte
	}{
		{"proclaimed status 2", frame(0x3f, 0, 0, 0, 1, 2)},
		{"change kind 0", protocol.AppendChange(nil, 1, protocol.Change{Kind: 0})},
		{"change kind 6", protocol.AppendChange(nil, 1, protocol.Change{Kind: 6})},
		{"change short", frame(0x40, 0, 0, 0, 1, 1)},
		{"change value past end", frame(0x40, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 5, 'a', 0, 0)},
		{"change value too long", frame(0x40, cat([]byte{0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 4, 1}, make([]byte, 1025), []byte{0, 0})...)},
		{"change identity past end", frame(0x40, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 'a')},
		{"change bytes left over", frame(0x40, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 'x')},
		{"watch from the server", protocol.AppendWatch(nil, 1, "n")},
	} {
		if _, _, err := protocol.ParseServerFrameV2Max(tt.b, protocol.MaxValuesFrameLen); err == nil {
			t.Errorf("%s: parsed without error", tt.name)
		}
	}
}

// FuzzWatchFrames: no input makes the decoders panic or read past the
// buffer, and every frame they accept re-encodes to the same bytes.
func FuzzWatchFrames(f *testing.F) {
	f.Add(protocol.AppendChange(nil, 2, protocol.Change{Kind: protocol.ChangeHeld, Mode: 1, Token: 42, Value: "a:1", Label: "w", Identity: "id"}))
	f.Add(protocol.AppendProclaim(nil, 1, "v"))
	f.Add(protocol.AppendWatch(nil, 1, "db"))
	f.Add(protocol.AppendProclaimed(nil, 1, 1))
	f.Add(protocol.AppendClaimValue(nil, 1, protocol.ModeShared, 0, 0, "db", "v"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, parse := range []func([]byte, int) (protocol.Frame, int, error){protocol.ParseClientFrameMax, protocol.ParseServerFrameV2Max} {
			g, n, err := parse(b, protocol.MaxValuesFrameLen)
			if n > len(b) {
				t.Fatalf("consumed %d of %d bytes", n, len(b))
			}
			if err == nil && n > 0 && (g.Type == protocol.TypeChange || g.Type == protocol.TypeProclaim ||
				g.Type == protocol.TypeWatch || g.Type == protocol.TypeProclaimed) {
				if re := protocol.AppendFrame(nil, g); !bytes.Equal(re, b[:n]) {
					t.Fatalf("%v re-encodes to % x, read from % x", g, re, b[:n])
				}
			}
		}
	})
}
