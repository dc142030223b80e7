package protocol_test

import (
	"bytes"
	"errors"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/batonlock/baton/protocol"
)

type v2Reader struct {
	name  string
	read  func(io.Reader) (protocol.Frame, error)
	parse func([]byte) (protocol.Frame, int, error)
}

var (
	helloReader  = v2Reader{"ReadHello", protocol.ReadHello, protocol.ParseHello}
	clientReader = v2Reader{"ReadClientFrame", protocol.ReadClientFrame, protocol.ParseClientFrame}
	serverReader = v2Reader{"ReadServerFrameV2", protocol.ReadServerFrameV2, protocol.ParseServerFrameV2}
	answerReader = v2Reader{"ReadHelloAnswer", protocol.ReadHelloAnswer, protocol.ParseHelloAnswer}
)

// v2Case is one well-formed version 2 frame: its encoding by the typed
// encoder, its bytes, and the reader that accepts it.
type v2Case struct {
	name  string
	enc   []byte
	hex   string
	frame protocol.Frame
	r     v2Reader
}

func v2Cases() []v2Case {
	long := strings.Repeat("n", 255)
	return []v2Case{
		{"hello", protocol.AppendHello(nil, 2000, "w1"), "00 09 21 00 00 07 d0 00 02 77 31",
			protocol.Frame{Type: protocol.TypeHello, LeaseMS: 2000, Label: "w1"}, helloReader},
		{"hello no label", protocol.AppendHello(nil, 1, ""), "00 07 21 00 00 00 01 00 00",
			protocol.Frame{Type: protocol.TypeHello, LeaseMS: 1}, helloReader},
		{"hello max", protocol.AppendHello(nil, math.MaxUint32, long), "01 06 21 ff ff ff ff 00 ff " + spaced([]byte(long)),
			protocol.Frame{Type: protocol.TypeHello, LeaseMS: math.MaxUint32, Label: long}, helloReader},
		{"ping", protocol.AppendPing(nil, 1), "00 09 22 00 00 00 00 00 00 00 01",
			protocol.Frame{Type: protocol.TypePing, Seq: 1}, clientReader},
		{"ping max", protocol.AppendPing(nil, math.MaxUint64), "00 09 22 ff ff ff ff ff ff ff ff",
			protocol.Frame{Type: protocol.TypePing, Seq: math.MaxUint64}, clientReader},
		{"claim exclusive", protocol.AppendClaim(nil, 1, protocol.ModeExclusive, 0, 0, "job"), "00 0f 23 00 00 00 01 00 01 00 00 00 00 03 6a 6f 62",
			protocol.Frame{Type: protocol.TypeClaim, Claim: 1, Mode: protocol.ModeExclusive, Name: "job"}, clientReader},
		{"claim shared no-wait", protocol.AppendClaim(nil, 0x01020304, protocol.ModeShared, 0, protocol.ClaimNoWait, "é"), "00 0e 23 01 02 03 04 01 02 00 00 00 00 02 c3 a9",
			protocol.Frame{Type: protocol.TypeClaim, Claim: 0x01020304, Flags: protocol.ClaimNoWait, Mode: protocol.ModeShared, Name: "é"}, clientReader},
		{"claim semaphore", protocol.AppendClaim(nil, math.MaxUint32, protocol.ModeSemaphore, 5, 0, "pool"), "00 10 23 ff ff ff ff 00 03 00 00 00 05 04 70 6f 6f 6c",
			protocol.Frame{Type: protocol.TypeClaim, Claim: math.MaxUint32, Mode: protocol.ModeSemaphore, Limit: 5, Name: "pool"}, clientReader},
		{"claim max", protocol.AppendClaim(nil, 0, protocol.ModeSemaphore, math.MaxUint32, 0, long), "01 0b 23 00 00 00 00 00 03 ff ff ff ff ff " + spaced([]byte(long)),
			protocol.Frame{Type: protocol.TypeClaim, Mode: protocol.ModeSemaphore, Limit: math.MaxUint32, Name: long}, clientReader},
		{"hello resumable", protocol.AppendFrame(nil, protocol.Frame{Type: protocol.TypeHello, LeaseMS: 2000, Flags: protocol.HelloResumable, Label: "w1"}),
			"00 09 21 00 00 07 d0 01 02 77 31",
			protocol.Frame{Type: protocol.TypeHello, LeaseMS: 2000, Flags: protocol.HelloResumable, Label: "w1"}, helloReader},
		{"claim re-assertion", protocol.AppendFrame(nil, reassertFrame()),
			"00 3a 23 00 00 00 01 02 01 00 00 00 00 03 6a 6f 62 00 00 00 00 00 00 00 09 00 00 00 00 00 00 00 03 00 00 00 00 00 00 00 07 " +
				"00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f 02 6e 31",
			reassertFrame(), clientReader},
		{"claim re-assertion queued no node", protocol.AppendFrame(nil, protocol.Frame{Type: protocol.TypeClaim, Claim: 2, Flags: protocol.ClaimReassert | protocol.ClaimNoWait, Mode: protocol.ModeShared, Name: "a", Session: 1}),
			"00 36 23 00 00 00 02 03 02 00 00 00 00 01 61 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 01 " +
				"00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00",
			protocol.Frame{Type: protocol.TypeClaim, Claim: 2, Flags: protocol.ClaimReassert | protocol.ClaimNoWait, Mode: protocol.ModeShared, Name: "a", Session: 1}, clientReader},
		{"claim re-assertion max", protocol.AppendFrame(nil, reassertMax()), "02 00 23 ff ff ff ff 02 03 ff ff ff ff ff " + spaced([]byte(strings.Repeat("n", 255))) +
			" ff ff ff ff ff ff ff ff ff ff ff ff ff ff ff ff ff ff ff ff ff ff ff ff 00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f cc " +
			spaced([]byte(strings.Repeat("d", 204))), reassertMax(), clientReader},
		{"hello resumable tickets", protocol.AppendFrame(nil, protocol.Frame{Type: protocol.TypeHello, LeaseMS: 2000, Flags: protocol.HelloResumable | protocol.HelloTickets, Label: "w1"}),
			"00 09 21 00 00 07 d0 03 02 77 31",
			protocol.Frame{Type: protocol.TypeHello, LeaseMS: 2000, Flags: protocol.HelloResumable | protocol.HelloTickets, Label: "w1"}, helloReader},
		{"claim re-assertion ticket", protocol.AppendFrame(nil, protocol.Frame{Type: protocol.TypeClaim, Claim: 2, Flags: protocol.ClaimReassert | protocol.ClaimTicket, Mode: protocol.ModeExclusive, Name: "a", Ticket: 5<<40 | 2, Ring: 3, Session: 1}),
			"00 36 23 00 00 00 02 06 01 00 00 00 00 01 61 00 00 05 00 00 00 00 02 00 00 00 00 00 00 00 03 00 00 00 00 00 00 00 01 " +
				"00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00",
			protocol.Frame{Type: protocol.TypeClaim, Claim: 2, Flags: protocol.ClaimReassert | protocol.ClaimTicket, Mode: protocol.ModeExclusive, Name: "a", Ticket: 5<<40 | 2, Ring: 3, Session: 1}, clientReader},
		{"welcome tickets", protocol.AppendFrame(nil, protocol.Frame{Type: protocol.TypeWelcome, Session: 7, Flags: protocol.WelcomeRing | protocol.WelcomeTickets, Ring: 9}),
			"00 12 31 00 00 00 00 00 00 00 07 06 00 00 00 00 00 00 00 09",
			protocol.Frame{Type: protocol.TypeWelcome, Session: 7, Flags: protocol.WelcomeRing | protocol.WelcomeTickets, Ring: 9}, serverReader},
		{"welcome resumable ring", protocol.AppendFrame(nil, welcomeFull()),
			"00 25 31 00 00 00 00 00 00 00 07 03 00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f 02 6e 31 00 00 00 00 00 00 00 09",
			welcomeFull(), serverReader},
		{"welcome resumable single", protocol.AppendFrame(nil, protocol.Frame{Type: protocol.TypeWelcome, Session: 7, Flags: protocol.WelcomeResumable, Secret: secret()}),
			"00 1b 31 00 00 00 00 00 00 00 07 01 00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f 00",
			protocol.Frame{Type: protocol.TypeWelcome, Session: 7, Flags: protocol.WelcomeResumable, Secret: secret()}, serverReader},
		{"welcome ring", protocol.AppendFrame(nil, protocol.Frame{Type: protocol.TypeWelcome, Session: 7, Flags: protocol.WelcomeRing, Ring: 1 << 40}),
			"00 12 31 00 00 00 00 00 00 00 07 02 00 00 01 00 00 00 00 00",
			protocol.Frame{Type: protocol.TypeWelcome, Session: 7, Flags: protocol.WelcomeRing, Ring: 1 << 40}, serverReader},
		{"release", protocol.AppendRelease(nil, 7), "00 05 24 00 00 00 07",
			protocol.Frame{Type: protocol.TypeRelease, Claim: 7}, clientReader},
		{"welcome", protocol.AppendWelcome(nil, 42), "00 0a 31 00 00 00 00 00 00 00 2a 00",
			protocol.Frame{Type: protocol.TypeWelcome, Session: 42}, serverReader},
		{"pong", protocol.AppendPong(nil, 0x0102030405060708), "00 09 32 01 02 03 04 05 06 07 08",
			protocol.Frame{Type: protocol.TypePong, Seq: 0x0102030405060708}, serverReader},
		{"granted", protocol.AppendGranted(nil, 1, 1_700_000_000<<20), "00 0d 33 00 00 00 01 00 06 55 3f 10 00 00 00",
			protocol.Frame{Type: protocol.TypeGranted, Claim: 1, Token: 1_700_000_000 << 20}, serverReader},
		{"queued", protocol.AppendQueued(nil, 2), "00 05 34 00 00 00 02",
			protocol.Frame{Type: protocol.TypeQueued, Claim: 2}, serverReader},
		{"queued ticket", protocol.AppendQueuedTicket(nil, 2, 7<<40|3), "00 0d 34 00 00 00 02 00 00 07 00 00 00 00 03",
			protocol.Frame{Type: protocol.TypeQueued, Claim: 2, Ticket: 7<<40 | 3}, serverReader},
		{"queued ticket 0", protocol.AppendQueuedTicket(nil, 2, 0), "00 05 34 00 00 00 02",
			protocol.Frame{Type: protocol.TypeQueued, Claim: 2}, serverReader},
		{"busy", protocol.AppendBusy(nil, 3), "00 05 35 00 00 00 03",
			protocol.Frame{Type: protocol.TypeBusy, Claim: 3}, serverReader},
		{"promoted", protocol.AppendPromoted(nil, 2, math.MaxUint64), "00 0d 36 00 00 00 02 ff ff ff ff ff ff ff ff",
			protocol.Frame{Type: protocol.TypePromoted, Claim: 2, Token: math.MaxUint64}, serverReader},
		{"released", protocol.AppendReleased(nil, 1), "00 05 37 00 00 00 01",
			protocol.Frame{Type: protocol.TypeReleased, Claim: 1}, serverReader},
		{"refused", protocol.AppendRefused(nil, 4, protocol.CodeLimitMismatch, "3"), "00 08 38 00 00 00 04 22 01 33",
			protocol.Frame{Type: protocol.TypeRefused, Claim: 4, Code: protocol.CodeLimitMismatch, Reason: "3"}, serverReader},
		{"revoked", protocol.AppendRevoked(nil, 5, protocol.CodeClosedByAdmin, "ops"), "00 0a 39 00 00 00 05 02 03 6f 70 73",
			protocol.Frame{Type: protocol.TypeRevoked, Claim: 5, Code: protocol.CodeClosedByAdmin, Reason: "ops"}, serverReader},
		{"revoked canonical reason", protocol.AppendRevoked(nil, 5, protocol.CodeNotAuthorized, ""), "00 1e 39 00 00 00 05 18 17 " + spaced([]byte("not authorized for lock")),
			protocol.Frame{Type: protocol.TypeRevoked, Claim: 5, Code: protocol.CodeNotAuthorized, Reason: "not authorized for lock"}, serverReader},
		{"session error", protocol.AppendSessionError(nil, protocol.CodeShuttingDown, "bye"), "00 06 3a 01 03 62 79 65",
			protocol.Frame{Type: protocol.TypeSessionError, Code: protocol.CodeShuttingDown, Reason: "bye"}, serverReader},
		{"session error max reason", protocol.AppendSessionError(nil, protocol.Code(0xff), long), "01 02 3a ff ff " + spaced([]byte(long)),
			protocol.Frame{Type: protocol.TypeSessionError, Code: 0xff, Reason: long}, serverReader},
		{"welcome as hello answer", protocol.AppendWelcome(nil, 1), "00 0a 31 00 00 00 00 00 00 00 01 00",
			protocol.Frame{Type: protocol.TypeWelcome, Session: 1}, answerReader},
		{"v2 error as hello answer", protocol.AppendSessionError(nil, protocol.CodeInvalidLease, "0"), "00 04 3a 17 01 30",
			protocol.Frame{Type: protocol.TypeSessionError, Code: protocol.CodeInvalidLease, Reason: "0"}, answerReader},
		{"v1 error as hello answer", protocol.AppendError(nil, protocol.CodeUnsupportedVersion, ""), "13 10 1c " + spaced([]byte("unsupported protocol version")),
			protocol.Frame{Type: protocol.TypeError, Code: protocol.CodeUnsupportedVersion, Reason: "unsupported protocol version"}, answerReader},
	}
}

func TestV2Encode(t *testing.T) {
	for _, tt := range v2Cases() {
		want := unhex(t, tt.hex)
		if !bytes.Equal(tt.enc, want) {
			t.Errorf("%s: encoded %s, want %s", tt.name, spaced(tt.enc), spaced(want))
		}
		if tt.frame.Type == protocol.TypeError {
			continue // a version 1 frame
		}
		if got := protocol.AppendFrame([]byte{0xaa}, tt.frame); !bytes.Equal(got, append([]byte{0xaa}, want...)) {
			t.Errorf("%s: AppendFrame = %s, want aa %s", tt.name, spaced(got), spaced(want))
		}
		if len(want)-protocol.FrameHeaderLen > protocol.MaxFrameLen {
			t.Errorf("%s: a %d-byte frame is over MaxFrameLen", tt.name, len(want))
		}
	}
	if got := protocol.AppendPreamble([]byte{0xaa}); !bytes.Equal(got, unhex(t, "aa 01 02 00 00 00 00 00 00")) {
		t.Errorf("AppendPreamble = %s", spaced(got))
	}
	// Over-long strings are cut at a UTF-8 boundary to fit their u8.
	f, _, err := protocol.ParseClientFrame(protocol.AppendClaim(nil, 1, protocol.ModeShared, 0, 0, strings.Repeat("é", 200)))
	if err != nil || f.Name != strings.Repeat("é", 127) {
		t.Errorf("cut name: %v, %d bytes", err, len(f.Name))
	}
	f, _, err = protocol.ParseHello(protocol.AppendHello(nil, 1, strings.Repeat("x", 1000)))
	if err != nil || len(f.Label) != protocol.MaxLabelLen {
		t.Errorf("cut label: %v, %d bytes", err, len(f.Label))
	}
	// A type version 2 does not define is encoded with no fields.
	if got := protocol.AppendFrame(nil, protocol.Frame{Type: 0x7f, Claim: 9}); !bytes.Equal(got, unhex(t, "00 01 7f")) {
		t.Errorf("unknown type: %s", spaced(got))
	}
}

func TestV2RoundTrip(t *testing.T) {
	trailer := []byte{0xde, 0xad}
	for _, tt := range v2Cases() {
		want := unhex(t, tt.hex)
		wrappers := []struct {
			name string
			fn   func(io.Reader) io.Reader
		}{
			{"whole", func(r io.Reader) io.Reader { return r }},
			{"OneByteReader", iotest.OneByteReader},
			{"HalfReader", iotest.HalfReader},
			{"DataErrReader", iotest.DataErrReader},
		}
		for _, w := range wrappers {
			cr := &countingReader{r: bytes.NewReader(cat(want, trailer))}
			if w.name == "DataErrReader" {
				cr = &countingReader{r: bytes.NewReader(want)}
			}
			got, err := tt.r.read(w.fn(cr))
			if err != nil || got != tt.frame {
				t.Errorf("%s: %s via %s = %v, %v; want %v", tt.name, tt.r.name, w.name, got, err, tt.frame)
			}
			if w.name != "DataErrReader" && cr.n != len(want) && w.name != "whole" {
				t.Errorf("%s: %s via %s read %d bytes, want %d", tt.name, tt.r.name, w.name, cr.n, len(want))
			}
		}
		got, n, err := tt.r.parse(cat(want, trailer))
		if err != nil || got != tt.frame || n != len(want) {
			t.Errorf("%s: parse = %v, %d, %v; want %v, %d", tt.name, got, n, err, tt.frame, len(want))
		}
		// Every proper prefix is "need more", and a reader given it
		// reports the frame cut short.
		for i := range len(want) {
			if f, n, err := tt.r.parse(want[:i]); n != 0 || err != nil || f != (protocol.Frame{}) {
				t.Errorf("%s: parse of %d of %d bytes = %v, %d, %v; want need-more", tt.name, i, len(want), f, n, err)
			}
			_, err := tt.r.read(iotest.OneByteReader(bytes.NewReader(want[:i])))
			if want := io.ErrUnexpectedEOF; i == 0 {
				if err != io.EOF {
					t.Errorf("%s: read of 0 bytes: %v, want io.EOF", tt.name, err)
				}
			} else if err != want {
				t.Errorf("%s: read of %d of %d bytes: %v, want %v", tt.name, i, len(tt.hex), err, want)
			}
		}
	}
}

// TestV2Coalesced reads whole conversations written in one piece, as a
// peer may batch them: each frame must come out once, in order, and the
// reader must stop at each frame's end.
func TestV2Coalesced(t *testing.T) {
	var client, server []byte
	var wantClient, wantServer []protocol.Frame
	for _, tt := range v2Cases() {
		switch tt.r.name {
		case clientReader.name:
			client = append(client, tt.enc...)
			wantClient = append(wantClient, tt.frame)
		case serverReader.name:
			server = append(server, tt.enc...)
			wantServer = append(wantServer, tt.frame)
		}
	}
	opening := protocol.AppendHello(protocol.AppendPreamble(nil), 2000, "w1")
	stream := append(opening, client...)
	for _, wrap := range []func(io.Reader) io.Reader{func(r io.Reader) io.Reader { return r }, iotest.OneByteReader, iotest.HalfReader} {
		r := wrap(bytes.NewReader(stream))
		var typ [1]byte
		io.ReadFull(r, typ[:])
		if a, err := protocol.ReadAcquireBody(r); err != protocol.ErrUnsupportedVersion || a.Version != protocol.Version2 {
			t.Fatalf("v1 decoder on the preamble: %+v, %v", a, err)
		}
		if err := protocol.ReadPreambleTail(r); err != nil {
			t.Fatal(err)
		}
		if h, err := protocol.ReadHello(r); err != nil || h.LeaseMS != 2000 || h.Label != "w1" {
			t.Fatalf("ReadHello = %v, %v", h, err)
		}
		readAll(t, clientReader, r, wantClient)
		readAll(t, serverReader, wrap(bytes.NewReader(server)), wantServer)
	}
	// The same with the buffer parsers, fed in pieces of every size.
	for chunk := 1; chunk <= 64; chunk *= 2 {
		var got []protocol.Frame
		var buf []byte
		b := stream[protocol.PreambleLen:]
		parse := protocol.ParseHello
		for len(b) > 0 || len(buf) > 0 {
			k := min(chunk, len(b))
			buf, b = append(buf, b[:k]...), b[k:]
			for {
				f, n, err := parse(buf)
				if err != nil {
					t.Fatalf("chunk %d: %v", chunk, err)
				}
				if n == 0 {
					break
				}
				got, buf, parse = append(got, f), buf[n:], protocol.ParseClientFrame
			}
			if len(b) == 0 && len(buf) > 0 {
				t.Fatalf("chunk %d: %d bytes left over", chunk, len(buf))
			}
		}
		if len(got) != len(wantClient)+1 || !slices.Equal(got[1:], wantClient) {
			t.Errorf("chunk %d: parsed %v", chunk, got)
		}
	}
}

// readAll reads frames with rd until EOF and checks they are want.
func readAll(t *testing.T, rd v2Reader, r io.Reader, want []protocol.Frame) {
	t.Helper()
	var got []protocol.Frame
	for range len(want) + 1 {
		f, err := rd.read(r)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s after %d frames: %v", rd.name, len(got), err)
		}
		got = append(got, f)
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s read back:\n%v\nwant\n%v", rd.name, got, want)
	}
}

// v2ErrCase is a malformed input and what a decoder must make of it.
type v2ErrCase struct {
	name     string
	r        v2Reader
	bytes    []byte
	err      error // the sentinel, found with errors.Is
	claim    bool  // a *ClaimError (claim level), else session level
	consumed int   // bytes a reader reads, no more
	want     protocol.Frame
}

func frame(typ byte, payload ...byte) []byte {
	n := 1 + len(payload)
	return append([]byte{byte(n >> 8), byte(n), typ}, payload...)
}

func claimPayload(id uint32, flags, mode byte, limit uint32, name string) []byte {
	p := []byte{byte(id >> 24), byte(id >> 16), byte(id >> 8), byte(id), flags, mode,
		byte(limit >> 24), byte(limit >> 16), byte(limit >> 8), byte(limit), byte(len(name))}
	return append(p, name...)
}

func v2ErrCases() []v2ErrCase {
	claim := func(name string, p []byte, err error, want protocol.Frame) v2ErrCase {
		want.Type = protocol.TypeClaim
		return v2ErrCase{name, clientReader, frame(0x23, p...), err, true, 3 + len(p), want}
	}
	badClaim := func(name string, p []byte, err error, want protocol.Frame) v2ErrCase {
		want.Type = protocol.TypeClaim
		return v2ErrCase{name, clientReader, frame(0x23, p...), err, false, 3 + len(p), want}
	}
	ping := frame(0x22, 0, 0, 0, 0, 0, 0, 0, 1)
	hello := func(lease uint32, flags byte, label string) []byte {
		p := []byte{byte(lease >> 24), byte(lease >> 16), byte(lease >> 8), byte(lease), flags, byte(len(label))}
		return frame(0x21, append(p, label...)...)
	}
	typ := func(t protocol.Type) protocol.Frame { return protocol.Frame{Type: t} }
	return []v2ErrCase{
		// Length field, checked before anything else is read.
		{"length 0", clientReader, []byte{0, 0, 0x22}, protocol.ErrInvalidFrame, false, 2, protocol.Frame{}},
		{"length 513", clientReader, cat([]byte{0x02, 0x01}, make([]byte, 513)), protocol.ErrFrameTooLong, false, 2, protocol.Frame{}},
		{"length 65535", serverReader, []byte{0xff, 0xff, 0x31}, protocol.ErrFrameTooLong, false, 2, protocol.Frame{}},
		{"length 513 first", helloReader, []byte{0x02, 0x01}, protocol.ErrFrameTooLong, false, 2, protocol.Frame{}},
		// Type.
		{"unknown type", clientReader, frame(0x7f), protocol.ErrUnknownMessage, false, 3, typ(0x7f)},
		{"v1 type in v2", clientReader, frame(0x02), protocol.ErrUnknownMessage, false, 3, typ(0x02)},
		{"server type from client", clientReader, frame(0x32, 0, 0, 0, 0, 0, 0, 0, 1), protocol.ErrUnknownMessage, false, 11, typ(0x32)},
		{"server type first", helloReader, frame(0x31), protocol.ErrUnknownMessage, false, 3, typ(0x31)},
		{"client type from server", serverReader, ping, protocol.ErrUnknownMessage, false, 11, typ(0x22)},
		{"unknown type from server", serverReader, frame(0x00), protocol.ErrUnknownMessage, false, 3, typ(0)},
		{"first not hello", helloReader, ping, protocol.ErrFirstNotHello, false, 11, typ(0x22)},
		{"first is claim", helloReader, frame(0x23), protocol.ErrFirstNotHello, false, 3, typ(0x23)},
		{"duplicate hello", clientReader, hello(2000, 0, ""), protocol.ErrDuplicateHello, false, 9, typ(0x21)},
		{"duplicate bad hello", clientReader, frame(0x21), protocol.ErrDuplicateHello, false, 3, typ(0x21)},
		// HELLO, in order: fixed part, flags, lease, layout, label.
		{"hello short", helloReader, frame(0x21, 0, 0, 7, 0xd0, 0), protocol.ErrInvalidFrame, false, 8, typ(0x21)},
		{"hello flags", helloReader, hello(2000, 0x04, "x"), protocol.ErrUnsupportedFeature, false, 10,
			protocol.Frame{Type: protocol.TypeHello, LeaseMS: 2000, Flags: 4}},
		{"hello flags beat lease and layout", helloReader, frame(0x21, 0, 0, 0, 0, 0x80, 9, 1, 2, 3, 4, 5), protocol.ErrUnsupportedFeature, false, 14,
			protocol.Frame{Type: protocol.TypeHello, Flags: 0x80}},
		{"hello lease 0", helloReader, hello(0, 0, "x"), protocol.ErrInvalidLease, false, 10, typ(0x21)},
		{"hello lease beats layout", helloReader, frame(0x21, 0, 0, 0, 0, 0, 5), protocol.ErrInvalidLease, false, 9, typ(0x21)},
		{"hello label longer than frame", helloReader, frame(0x21, 0, 0, 0, 1, 0, 2, 'x'), protocol.ErrInvalidFrame, false, 10,
			protocol.Frame{Type: protocol.TypeHello, LeaseMS: 1}},
		{"hello trailing byte", helloReader, frame(0x21, 0, 0, 0, 1, 0, 0, 'x'), protocol.ErrInvalidFrame, false, 10,
			protocol.Frame{Type: protocol.TypeHello, LeaseMS: 1}},
		{"hello label utf-8", helloReader, hello(1, 0, "a\xff"), protocol.ErrInvalidLabel, false, 11,
			protocol.Frame{Type: protocol.TypeHello, LeaseMS: 1, Label: "a\xff"}},
		// Fixed layouts.
		{"ping short", clientReader, frame(0x22, 0, 0, 0, 0, 0, 0, 0), protocol.ErrInvalidFrame, false, 10, typ(0x22)},
		{"ping long", clientReader, frame(0x22, 0, 0, 0, 0, 0, 0, 0, 0, 0), protocol.ErrInvalidFrame, false, 12, typ(0x22)},
		{"release short", clientReader, frame(0x24, 0, 0, 1), protocol.ErrInvalidFrame, false, 6, typ(0x24)},
		{"release long", clientReader, frame(0x24, 0, 0, 0, 1, 0), protocol.ErrInvalidFrame, false, 8, typ(0x24)},
		// CLAIM: the id and flags, then the layout, then claim level.
		{"claim without flags", clientReader, frame(0x23, 0, 0, 0, 1), protocol.ErrInvalidFrame, false, 7, typ(0x23)},
		{"claim short", clientReader, frame(0x23, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0), protocol.ErrInvalidFrame, false, 13, protocol.Frame{Type: protocol.TypeClaim, Claim: 1}},
		{"claim name longer than frame", clientReader, frame(0x23, claimPayload(1, 0, 1, 0, "ab")[:12]...), protocol.ErrInvalidFrame, false, 15, protocol.Frame{Type: protocol.TypeClaim, Claim: 1}},
		{"claim trailing byte", clientReader, frame(0x23, append(claimPayload(1, 0, 1, 0, "ab"), 0)...), protocol.ErrInvalidFrame, false, 17, protocol.Frame{Type: protocol.TypeClaim, Claim: 1}},
		claim("claim reserved flag", claimPayload(9, 0x10, 1, 0, "job"), protocol.ErrUnsupportedFeature, protocol.Frame{Claim: 9, Flags: 0x10}),
		badClaim("claim value without its field", claimPayload(9, 0x08, 1, 0, "job"), protocol.ErrInvalidFrame, protocol.Frame{Claim: 9, Flags: 8}),
		badClaim("claim value past end", cat(claimPayload(9, 0x08, 1, 0, "job"), []byte{0, 3, 'a'}), protocol.ErrInvalidFrame, protocol.Frame{Claim: 9, Flags: 8}),
		claim("claim ticket without re-assertion", claimPayload(9, 0x04, 1, 0, "job"), protocol.ErrUnsupportedFeature, protocol.Frame{Claim: 9, Flags: 4}),
		badClaim("claim re-assertion without its fields", claimPayload(9, 0x02, 1, 0, "job"), protocol.ErrInvalidFrame, protocol.Frame{Claim: 9, Flags: 2}),
		badClaim("claim re-assertion short", cat(claimPayload(9, 0x02, 1, 0, "job"), make([]byte, 40)), protocol.ErrInvalidFrame, protocol.Frame{Claim: 9, Flags: 2}),
		badClaim("claim re-assertion node past end", cat(claimPayload(9, 0x02, 1, 0, "job"), make([]byte, 40), []byte{2, 'n'}), protocol.ErrInvalidFrame, protocol.Frame{Claim: 9, Flags: 2}),
		badClaim("claim re-assertion bytes left over", cat(claimPayload(9, 0x02, 1, 0, "job"), make([]byte, 41), []byte{'x'}), protocol.ErrInvalidFrame, protocol.Frame{Claim: 9, Flags: 2}),
		claim("claim re-assertion mode 0", cat(claimPayload(9, 0x02, 0, 0, "job"), make([]byte, 41)), protocol.ErrUnknownMode,
			protocol.Frame{Claim: 9, Flags: 2, Name: "job"}),
		claim("claim reserved flag beats layout", []byte{0, 0, 0, 9, 0x81, 0xee}, protocol.ErrUnsupportedFeature, protocol.Frame{Claim: 9, Flags: 0x81}),
		claim("claim mode 0", claimPayload(9, 0, 0, 0, "job"), protocol.ErrUnknownMode, protocol.Frame{Claim: 9, Name: "job"}),
		claim("claim mode 4", claimPayload(9, 1, 4, 0, "job"), protocol.ErrUnknownMode, protocol.Frame{Claim: 9, Flags: 1, Mode: 4, Name: "job"}),
		claim("claim mode beats limit and name", claimPayload(9, 0, 0xff, 7, ""), protocol.ErrUnknownMode, protocol.Frame{Claim: 9, Mode: 0xff, Limit: 7}),
		claim("claim semaphore 0", claimPayload(9, 0, 3, 0, "job"), protocol.ErrInvalidLimit, protocol.Frame{Claim: 9, Mode: 3, Name: "job"}),
		claim("claim exclusive with limit", claimPayload(9, 0, 1, 1, "job"), protocol.ErrInvalidLimit, protocol.Frame{Claim: 9, Mode: 1, Limit: 1, Name: "job"}),
		claim("claim shared with limit", claimPayload(9, 0, 2, 2, ""), protocol.ErrInvalidLimit, protocol.Frame{Claim: 9, Mode: 2, Limit: 2}),
		claim("claim empty name", claimPayload(9, 0, 2, 0, ""), protocol.ErrEmptyName, protocol.Frame{Claim: 9, Mode: 2}),
		claim("claim name utf-8", claimPayload(9, 0, 3, 1, "a\xc3"), protocol.ErrInvalidName, protocol.Frame{Claim: 9, Mode: 3, Limit: 1, Name: "a\xc3"}),
		// Server frames.
		{"welcome short", serverReader, frame(0x31, 0, 0, 0, 0, 0, 0, 0, 1), protocol.ErrInvalidFrame, false, 11, typ(0x31)},
		{"welcome flags", serverReader, frame(0x31, 0, 0, 0, 0, 0, 0, 0, 1, 0x20), protocol.ErrUnsupportedFeature, false, 12,
			protocol.Frame{Type: protocol.TypeWelcome, Session: 1, Flags: 0x20}},
		{"welcome resumable short", serverReader, frame(0x31, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 2, 3), protocol.ErrInvalidFrame, false, 15,
			protocol.Frame{Type: protocol.TypeWelcome, Session: 1, Flags: 1}},
		{"welcome resumable node past end", serverReader, cat(frame(0x31, cat([]byte{0, 0, 0, 0, 0, 0, 0, 1, 1}, make([]byte, 16), []byte{3, 'a'})...)), protocol.ErrInvalidFrame, false, 30,
			protocol.Frame{Type: protocol.TypeWelcome, Session: 1, Flags: 1}},
		{"welcome ring short", serverReader, frame(0x31, 0, 0, 0, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 0, 0, 9), protocol.ErrInvalidFrame, false, 19,
			protocol.Frame{Type: protocol.TypeWelcome, Session: 1, Flags: 2}},
		{"welcome ring long", serverReader, frame(0x31, 0, 0, 0, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 0, 0, 0, 9, 0), protocol.ErrInvalidFrame, false, 21,
			protocol.Frame{Type: protocol.TypeWelcome, Session: 1, Flags: 2, Ring: 9}},
		{"welcome plain long", serverReader, frame(0x31, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0), protocol.ErrInvalidFrame, false, 13,
			protocol.Frame{Type: protocol.TypeWelcome, Session: 1}},
		{"pong long", serverReader, frame(0x32, make([]byte, 9)...), protocol.ErrInvalidFrame, false, 12, typ(0x32)},
		{"granted short", serverReader, frame(0x33, make([]byte, 11)...), protocol.ErrInvalidFrame, false, 14, typ(0x33)},
		{"promoted long", serverReader, frame(0x36, make([]byte, 13)...), protocol.ErrInvalidFrame, false, 16, typ(0x36)},
		{"queued short", serverReader, frame(0x34, 0), protocol.ErrInvalidFrame, false, 4, typ(0x34)},
		{"queued between", serverReader, frame(0x34, make([]byte, 8)...), protocol.ErrInvalidFrame, false, 11, typ(0x34)},
		{"queued ticket 0", serverReader, frame(0x34, make([]byte, 12)...), protocol.ErrInvalidFrame, false, 15, typ(0x34)},
		{"queued ticket long", serverReader, frame(0x34, make([]byte, 13)...), protocol.ErrInvalidFrame, false, 16, typ(0x34)},
		{"busy long", serverReader, frame(0x35, make([]byte, 5)...), protocol.ErrInvalidFrame, false, 8, typ(0x35)},
		{"released empty", serverReader, frame(0x37), protocol.ErrInvalidFrame, false, 3, typ(0x37)},
		{"refused short", serverReader, frame(0x38, 0, 0, 0, 1, 0x20), protocol.ErrInvalidFrame, false, 8, typ(0x38)},
		{"refused reason longer than frame", serverReader, frame(0x38, 0, 0, 0, 1, 0x20, 2, 'x'), protocol.ErrInvalidFrame, false, 10, typ(0x38)},
		{"revoked trailing byte", serverReader, frame(0x39, 0, 0, 0, 1, 0x02, 0, 'x'), protocol.ErrInvalidFrame, false, 10, typ(0x39)},
		{"error short", serverReader, frame(0x3a, 0x01), protocol.ErrInvalidFrame, false, 4, typ(0x3a)},
		{"error reason longer than frame", serverReader, frame(0x3a, 0x01, 5, 'a'), protocol.ErrInvalidFrame, false, 6, typ(0x3a)},
		{"answer too long", answerReader, []byte{0x03, 0x00}, protocol.ErrFrameTooLong, false, 2, protocol.Frame{}},
		{"answer not a frame", answerReader, []byte{0x14, 0x00}, protocol.ErrFrameTooLong, false, 2, protocol.Frame{}},
	}
}

// serverOnlyCodes are the version 2 codes no decoder can produce: server
// conditions, the access check, the server's claim map, the lock table.
var serverOnlyCodes = []protocol.Code{
	protocol.CodeShuttingDown, protocol.CodeClosedByAdmin, protocol.CodeNotOwner, protocol.CodeReassertRefused, protocol.CodeStaleRing, protocol.CodeSlowWatcher, protocol.CodeLimitReached, protocol.CodeNotAuthorized,
	protocol.CodeClaimInUse, protocol.CodeLimitMismatch, protocol.CodeModeConflict,
}

func TestV2Errors(t *testing.T) {
	trailer := []byte{0xde, 0xad, 0xbe, 0xef} // must never be read
	produced := map[protocol.Code]bool{}
	for _, tt := range v2ErrCases() {
		check := func(how string, f protocol.Frame, err error) {
			t.Helper()
			if !errors.Is(err, tt.err) {
				t.Errorf("%s (%s): err = %v, want %v", tt.name, how, err, tt.err)
				return
			}
			var ce *protocol.ClaimError
			if isClaim := errors.As(err, &ce); isClaim != tt.claim {
				t.Errorf("%s (%s): claim-level = %v, want %v (%v)", tt.name, how, isClaim, tt.claim, err)
			} else if isClaim && ce.Claim != tt.want.Claim {
				t.Errorf("%s (%s): ClaimError for claim %d, want %d", tt.name, how, ce.Claim, tt.want.Claim)
			}
			if f != tt.want {
				t.Errorf("%s (%s): frame %+v, want %+v", tt.name, how, f, tt.want)
			}
			code, ok := protocol.CodeOf(err)
			if !ok || code.Err() != tt.err {
				t.Errorf("%s (%s): CodeOf(%v) = %v, %v", tt.name, how, err, code, ok)
			}
			produced[code] = true
		}
		cr := &countingReader{r: bytes.NewReader(cat(tt.bytes, trailer))}
		f, err := tt.r.read(cr)
		check("read", f, err)
		if cr.n != tt.consumed {
			t.Errorf("%s: read %d bytes, want exactly %d", tt.name, cr.n, tt.consumed)
		}
		cr = &countingReader{r: bytes.NewReader(tt.bytes)}
		f, err = tt.r.read(iotest.OneByteReader(cr))
		check("one byte at a time", f, err)
		f, n, err := tt.r.parse(cat(tt.bytes, trailer))
		check("parse", f, err)
		if n != tt.consumed {
			t.Errorf("%s: parse n = %d, want %d", tt.name, n, tt.consumed)
		}
	}
	// The preamble's tail.
	for _, tail := range [][]byte{{0, 0, 0, 0, 0, 1}, {0xff, 0, 0, 0, 0, 0}, {0, 0, 7, 0xd0, 0, 3}} {
		cr := &countingReader{r: bytes.NewReader(cat(tail, trailer))}
		err := protocol.ReadPreambleTail(cr)
		if !errors.Is(err, protocol.ErrUnsupportedVersion) || cr.n != 6 {
			t.Errorf("preamble tail % x: %v after %d bytes", tail, err, cr.n)
		}
		code, _ := protocol.CodeOf(err)
		produced[code] = true
	}
	if err := protocol.ReadPreambleTail(bytes.NewReader(make([]byte, 5))); err != io.ErrUnexpectedEOF {
		t.Errorf("short preamble tail: %v", err)
	}
	if err := protocol.ReadPreambleTail(bytes.NewReader(make([]byte, 6))); err != nil {
		t.Errorf("zero preamble tail: %v", err)
	}

	// A value over MaxValueLen fits only a values session's frame limit.
	long := string(make([]byte, protocol.MaxValueLen+1))
	for _, b := range [][]byte{
		protocol.AppendClaimValue(nil, 9, protocol.ModeExclusive, 0, 0, "job", long),
		protocol.AppendProclaim(nil, 9, long),
	} {
		f, n, err := protocol.ParseClientFrameMax(b, protocol.MaxValuesFrameLen)
		var ce *protocol.ClaimError
		if !errors.Is(err, protocol.ErrValueTooLong) || !errors.As(err, &ce) || n != len(b) || f.Claim != 9 {
			t.Errorf("%v with a %d-byte value: %v, %d; want a claim-level ErrValueTooLong over %d bytes", f.Type, len(long), err, n, len(b))
		}
		if _, _, err := protocol.ParseClientFrame(b); !errors.Is(err, protocol.ErrFrameTooLong) {
			t.Errorf("%v of %d bytes outside a values session: %v, want ErrFrameTooLong", f.Type, len(b), err)
		}
		produced[protocol.CodeValueTooLong] = true
	}

	// Every version 2 code is produced by some malformed input, or is one
	// that only the server (access check, claim map, lock table) or a
	// server condition can produce; never both.
	for _, c := range serverOnlyCodes {
		if produced[c] {
			t.Errorf("%v is listed as server-only but a decoder produced it", c)
		}
		produced[c] = true
	}
	for _, c := range protocol.CodesV2 {
		if !produced[c] {
			t.Errorf("no malformed input produces %v", c)
		}
	}
	if len(produced) != len(protocol.CodesV2) {
		t.Errorf("decoders produced codes outside CodesV2: %v", produced)
	}
}

// A claim-level error leaves the stream at the next frame: the session
// reads on.
func TestV2ClaimErrorReadsOn(t *testing.T) {
	stream := cat(
		protocol.AppendClaim(nil, 1, protocol.ModeSemaphore, 0, 0, "pool"),
		frame(0x23, 0, 0, 0, 2, 0x40, 1, 2, 3), // a later revision's CLAIM
		protocol.AppendClaim(nil, 3, protocol.ModeShared, 0, 0, "db"),
	)
	r := iotest.OneByteReader(bytes.NewReader(stream))
	wantErr := []error{protocol.ErrInvalidLimit, protocol.ErrUnsupportedFeature, nil}
	for i, want := range wantErr {
		f, err := protocol.ReadClientFrame(r)
		if !errors.Is(err, want) || f.Claim != uint32(i+1) {
			t.Errorf("frame %d: %v, %v; want claim %d, %v", i, f, err, i+1, want)
		}
		if err != nil && !strings.Contains(err.Error(), "claim "+string(rune('1'+i))) {
			t.Errorf("frame %d: message %q does not name the claim", i, err)
		}
	}
	if _, err := protocol.ReadClientFrame(r); err != io.EOF {
		t.Errorf("after the stream: %v", err)
	}
}

func TestValidateClaim(t *testing.T) {
	ok := protocol.Frame{Type: protocol.TypeClaim, Mode: protocol.ModeSemaphore, Limit: 2, Name: "p"}
	if err := protocol.ValidateClaim(ok); err != nil {
		t.Errorf("ValidateClaim(%v) = %v", ok, err)
	}
	for _, tt := range v2ErrCases() {
		if !tt.claim {
			continue
		}
		if err := protocol.ValidateClaim(tt.want); err != tt.err {
			t.Errorf("%s: ValidateClaim = %v, want %v", tt.name, err, tt.err)
		}
	}
}

// TestV2HugeLengthDoesNotAllocate checks that a length over MaxFrameLen
// is refused from the length field alone.
func TestV2HugeLengthDoesNotAllocate(t *testing.T) {
	data := cat([]byte{0xff, 0xff}, bytes.Repeat([]byte{0x23}, 65535))
	r := bytes.NewReader(data)
	const runs = 100
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range runs {
		r.Reset(data)
		if _, err := protocol.ReadClientFrame(r); !errors.Is(err, protocol.ErrFrameTooLong) {
			t.Fatalf("err = %v", err)
		}
	}
	runtime.ReadMemStats(&after)
	if perRun := (after.TotalAlloc - before.TotalAlloc) / runs; perRun > 1024 {
		t.Errorf("ReadClientFrame allocated %d bytes per refused 65535-byte frame", perRun)
	}
	// A whole valid frame costs at most its own bytes and its strings.
	frame := protocol.AppendClaim(nil, 1, protocol.ModeShared, 0, 0, strings.Repeat("n", 255))
	allocs := testing.AllocsPerRun(runs, func() {
		r.Reset(frame)
		protocol.ReadClientFrame(r)
	})
	if allocs > 3 {
		t.Errorf("ReadClientFrame made %.1f allocations per CLAIM", allocs)
	}
	allocs = testing.AllocsPerRun(runs, func() { protocol.ParseClientFrame(frame) })
	if allocs > 1 {
		t.Errorf("ParseClientFrame made %.1f allocations per CLAIM (the name)", allocs)
	}
}

func TestV2ModeAndTypeNames(t *testing.T) {
	for m, want := range map[protocol.Mode]string{1: "exclusive", 2: "shared", 3: "semaphore", 0: "unknown", 9: "unknown"} {
		if m.String() != want {
			t.Errorf("Mode(%d) = %q, want %q", m, m.String(), want)
		}
	}
	names := map[string]bool{}
	for _, tt := range v2Cases() {
		s := tt.frame.Type.String()
		if s == "UNKNOWN" {
			t.Errorf("%s: type 0x%02x has no name", tt.name, uint8(tt.frame.Type))
		}
		if tt.frame.Type != protocol.TypeError {
			names[s] = true
		}
		if fs := tt.frame.String(); !strings.HasPrefix(fs, s) {
			t.Errorf("%s: String() = %q", tt.name, fs)
		}
	}
	if len(names) != 14 {
		t.Errorf("%d distinct version 2 frame names, want 14: %v", len(names), names)
	}
}

func secret() (b [protocol.SecretLen]byte) {
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

func reassertFrame() protocol.Frame {
	return protocol.Frame{Type: protocol.TypeClaim, Claim: 1, Flags: protocol.ClaimReassert, Mode: protocol.ModeExclusive, Name: "job",
		Token: 9, Ring: 3, Session: 7, Secret: secret(), Node: "n1"}
}

// reassertMax is the largest re-assertion: its name and node take
// MaxReassertText bytes, and the frame is as long as a frame may be.
func reassertMax() protocol.Frame {
	name := strings.Repeat("n", 255)
	return protocol.Frame{Type: protocol.TypeClaim, Claim: math.MaxUint32, Flags: protocol.ClaimReassert, Mode: protocol.ModeSemaphore,
		Limit: math.MaxUint32, Name: name, Token: math.MaxUint64, Ring: math.MaxUint64, Session: math.MaxUint64, Secret: secret(),
		Node: strings.Repeat("d", protocol.MaxReassertText-len(name))}
}

func TestReassertFitsFrame(t *testing.T) {
	b := protocol.AppendFrame(nil, reassertMax())
	if len(b) != protocol.MaxFrameSize {
		t.Errorf("largest re-assertion is %d bytes, want MaxFrameSize %d", len(b), protocol.MaxFrameSize)
	}
	over := reassertMax()
	over.Node += "d"
	if _, _, err := protocol.ParseClientFrame(protocol.AppendFrame(nil, over)); !errors.Is(err, protocol.ErrFrameTooLong) {
		t.Errorf("a re-assertion one byte over: %v, want %v", err, protocol.ErrFrameTooLong)
	}
}

func welcomeFull() protocol.Frame {
	return protocol.Frame{Type: protocol.TypeWelcome, Session: 7, Flags: protocol.WelcomeResumable | protocol.WelcomeRing, Secret: secret(), Node: "n1", Ring: 9}
}
