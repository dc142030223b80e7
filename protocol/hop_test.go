package protocol_test

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/batonlock/baton/protocol"
)

var testHash = func() *[protocol.SecretHashLen]byte {
	var h [protocol.SecretHashLen]byte
	for i := range h {
		h[i] = byte(i)
	}
	return &h
}()

// appendHop encodes h with the encoder of its version.
func appendHop(b []byte, h protocol.Hop) []byte {
	switch h.Version {
	case protocol.HopVersion1:
		return protocol.AppendHop(b, h.Addr, h.Identity)
	case protocol.HopVersion2:
		return protocol.AppendHopV2(b, h.Addr, h.Identity, h.Origin, h.Session)
	}
	return protocol.AppendHopV3(b, h.Addr, h.Identity, h.Origin, h.Session, h.Resume)
}

func sameHop(a, b protocol.Hop) bool {
	ra, rb := a.Resume, b.Resume
	a.Resume, b.Resume = nil, nil
	return a == b && (ra == nil) == (rb == nil) && (ra == nil || *ra == *rb)
}

type hopCase struct {
	name string
	hop  protocol.Hop
	hex  string
}

func hopCases() []hopCase {
	return []hopCase{
		{"v1 without identity", protocol.Hop{Version: 1, Addr: "10.0.0.1:1"},
			"7e 01 0a 31 30 2e 30 2e 30 2e 31 3a 31 00 00"},
		{"v1 with identity", protocol.Hop{Version: 1, Addr: "a:1", Identity: "admin"},
			"7e 01 03 61 3a 31 00 05 61 64 6d 69 6e"},
		{"v1 empty", protocol.Hop{Version: 1}, "7e 01 00 00 00"},
		{"v2", protocol.Hop{Version: 2, Addr: "a:1", Identity: "id", Origin: "n9", Session: 42},
			"7e 02 03 61 3a 31 00 02 69 64 02 6e 39 00 00 00 00 00 00 00 2a"},
		{"v3 plain", protocol.Hop{Version: 3, Addr: "a:1", Origin: "n9", Session: 1 << 40},
			"7e 03 03 61 3a 31 00 00 02 6e 39 00 00 01 00 00 00 00 00 00"},
		{"v3 resumable", protocol.Hop{Version: 3, Addr: "a:1", Origin: "r", Session: 7, Resume: testHash},
			"7e 03 03 61 3a 31 00 00 01 72 00 00 00 00 00 00 00 07 01 " +
				"00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f 10 11 12 13 14 15 16 17 18 19 1a 1b 1c 1d 1e 1f"},
	}
}

// TestHopEncoding pins each version's bytes, and that ParseHop gives back
// what was encoded, and wants more bytes for every shorter prefix.
func TestHopEncoding(t *testing.T) {
	for _, tc := range hopCases() {
		t.Run(tc.name, func(t *testing.T) {
			want := unhex(t, tc.hex)
			b := appendHop([]byte{0xff}, tc.hop)
			if !bytes.Equal(b[1:], want) || b[0] != 0xff {
				t.Fatalf("encoded %s, want %s", spaced(b[1:]), tc.hex)
			}
			h, n, err := protocol.ParseHop(append(want, 0x01, 0x02))
			if err != nil || n != len(want) || !sameHop(h, tc.hop) {
				t.Fatalf("ParseHop = %+v, %d, %v; want %+v, %d", h, n, err, tc.hop, len(want))
			}
			for i := range want {
				if h, n, err := protocol.ParseHop(want[:i]); n != 0 || err != nil {
					t.Fatalf("ParseHop of %d of %d bytes = %+v, %d, %v; want more bytes", i, len(want), h, n, err)
				}
			}
		})
	}
}

// TestHopCutsLongFields: the encoders cut fields to what their length
// bytes can say.
func TestHopCutsLongFields(t *testing.T) {
	long := strings.Repeat("x", 70000)
	b := protocol.AppendHopV3(nil, long, long, long, 1, nil)
	h, n, err := protocol.ParseHop(b)
	if err != nil || n != len(b) {
		t.Fatalf("ParseHop = %d, %v; want %d", n, err, len(b))
	}
	if len(h.Addr) != protocol.MaxHopAddrLen || len(h.Identity) != protocol.MaxHopIdentityLen || len(h.Origin) != protocol.MaxHopOriginLen {
		t.Fatalf("fields of %d, %d and %d bytes; want %d, %d and %d", len(h.Addr), len(h.Identity), len(h.Origin),
			protocol.MaxHopAddrLen, protocol.MaxHopIdentityLen, protocol.MaxHopOriginLen)
	}
}

// TestParseHopRefusals: a wrong first byte, an unknown version or
// unknown flags are ErrBadHop.
func TestParseHopRefusals(t *testing.T) {
	v3 := protocol.AppendHopV3(nil, "a", "", "n", 1, nil)
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"not a hop marker", []byte{0x01, 0x01}},
		{"version 0", []byte{0x7e, 0x00, 0x00, 0x00, 0x00}},
		{"version 4", []byte{0x7e, 0x04, 0x00, 0x00, 0x00}},
		{"flags 0x02", append(v3[:len(v3)-1:len(v3)-1], 0x02)},
		{"flags 0xff", append(v3[:len(v3)-1:len(v3)-1], 0xff)},
	} {
		if h, n, err := protocol.ParseHop(tc.b); !errors.Is(err, protocol.ErrBadHop) || n != 0 {
			t.Errorf("%s: ParseHop(%s) = %+v, %d, %v; want ErrBadHop", tc.name, spaced(tc.b), h, n, err)
		}
	}
}

// readCall is one call of a ReadFullFunc.
type readCall struct{ n, then int }

// recorder is a ReadFullFunc over b that records its calls and checks
// that no call asks to read ahead beyond limit bytes (-1: unchecked).
func recorder(t *testing.T, b []byte, limit int) (protocol.ReadFullFunc, *[]readCall) {
	var calls []readCall
	pos := 0
	return func(p []byte, then int) error {
		calls = append(calls, readCall{len(p), then})
		if then < 0 || limit >= 0 && pos+len(p)+then > limit {
			t.Errorf("read %d with then %d at %d: reads ahead past %d", len(p), then, pos, limit)
		}
		if pos+len(p) > len(b) {
			pos = len(b)
			return io.ErrUnexpectedEOF
		}
		pos += copy(p, b[pos:])
		return nil
	}, &calls
}

// TestReadHopBodyReads pins the reads of a hop header: up to each length
// field at once, the first byte after the header with the last field,
// and a look-ahead (then) that never goes past the shortest opening that
// can follow. A server reads an opening in as few system calls as these
// allow (server.TestOpeningReads).
func TestReadHopBodyReads(t *testing.T) {
	for _, tc := range []struct {
		name  string
		hop   []byte
		calls []readCall
	}{
		{"v1", protocol.AppendHop(nil, "192.0.2.7:4000", ""), []readCall{{2, 10}, {16, 8}, {1, 7}}},
		{"v1 with identity", protocol.AppendHop(nil, "a", "abc"), []readCall{{2, 10}, {3, 8}, {4, 7}}},
		{"v2", protocol.AppendHopV2(nil, "a", "", "n9", 1), []readCall{{2, 10}, {3, 8}, {1, 7}, {11, 7}}},
		{"v3", protocol.AppendHopV3(nil, "a", "", "n9", 1, testHash),
			[]readCall{{2, 10}, {3, 8}, {1, 7}, {10, 8}, {1, 8}, {32, 8}, {1, 7}}},
		{"v3 plain", protocol.AppendHopV3(nil, "a", "", "n9", 1, nil),
			[]readCall{{2, 10}, {3, 8}, {1, 7}, {10, 8}, {1, 8}, {1, 7}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opening := protocol.AppendPreamble(nil)
			readFull, calls := recorder(t, append(tc.hop[1:], opening...), len(tc.hop)-1+len(opening))
			var next [1]byte
			if _, err := protocol.ReadHopBody(readFull, next[:]); err != nil {
				t.Fatal(err)
			}
			if next[0] != opening[0] {
				t.Errorf("next = %#x, want %#x", next[0], opening[0])
			}
			if !slices.Equal(*calls, tc.calls) {
				t.Errorf("reads %v, want %v", *calls, tc.calls)
			}
		})
	}
}

// TestReadHopBodyPassesErrors: the reader's errors come back as they are.
func TestReadHopBodyPassesErrors(t *testing.T) {
	b := protocol.AppendHopV3(nil, "a", "id", "n9", 1, testHash)
	for i := 1; i < len(b); i++ {
		fail := errors.New("boom")
		rest := b[1:i]
		_, err := protocol.ReadHopBody(func(p []byte, _ int) error {
			if len(p) > len(rest) {
				return fail
			}
			rest = rest[copy(p, rest):]
			return nil
		}, nil)
		if err != fail {
			t.Fatalf("cut after %d bytes: %v, want the reader's error", i, err)
		}
	}
}

// FuzzParseHop feeds arbitrary bytes to the hop header decoders. They
// must never panic; ParseHop and ReadHopBody must agree; a header either
// decoder accepts must re-encode to the bytes read; and ReadHopBody must
// read exactly the header and the byte after it, never asking to read
// ahead beyond the shortest opening that can follow.
func FuzzParseHop(f *testing.F) {
	for _, tc := range hopCases() {
		b := appendHop(nil, tc.hop)
		f.Add(b)
		f.Add(b[:len(b)-1])
		f.Add(append(b, protocol.AppendPreamble(nil)...))
	}
	f.Add([]byte{})
	f.Add([]byte{0x7e})
	f.Add([]byte{0x7e, 0x04})
	f.Fuzz(func(t *testing.T, data []byte) {
		h, n, err := protocol.ParseHop(data)
		if err != nil && (!errors.Is(err, protocol.ErrBadHop) || n != 0) {
			t.Fatalf("ParseHop = %d, %v", n, err)
		}
		if n > len(data) {
			t.Fatalf("ParseHop took %d of %d bytes", n, len(data))
		}
		if len(data) == 0 || data[0] != protocol.HopMarker {
			return
		}
		// The stream decoder on the same bytes, with one byte after.
		var next [1]byte
		limit := -1 // the length of an incomplete header is not known
		if n > 0 {
			limit = n - 1 + protocol.PreambleLen
		}
		readFull, _ := recorder(t, data[1:], limit)
		rh, rerr := protocol.ReadHopBody(readFull, next[:])
		switch {
		case err != nil:
			if rerr != err {
				t.Fatalf("ParseHop: %v; ReadHopBody: %v", err, rerr)
			}
		case n == 0:
			if rerr != io.ErrUnexpectedEOF {
				t.Fatalf("ParseHop wants more bytes; ReadHopBody: %+v, %v", rh, rerr)
			}
		default:
			if rerr == nil && (!sameHop(rh, h) || next[0] != data[n]) {
				t.Fatalf("ReadHopBody = %+v, next %#x; ParseHop = %+v, next %#x", rh, next[0], h, data[n])
			}
			if rerr != nil && (rerr != io.ErrUnexpectedEOF || n != len(data)) {
				t.Fatalf("ReadHopBody: %v with %d bytes after the header", rerr, len(data)-n)
			}
			if re := appendHop(nil, h); !bytes.Equal(re, data[:n]) {
				t.Fatalf("re-encoded %s, read %s", spaced(re), spaced(data[:n]))
			}
			if _, m, err := protocol.ParseHop(data[:n-1]); m != 0 || err != nil {
				t.Fatalf("ParseHop of all but the header's last byte = %d, %v; want more bytes", m, err)
			}
		}
	})
}

// FuzzHopRoundTrip encodes arbitrary fields in each version: ParseHop
// gives them back, cut to their maximum lengths, from exactly the
// encoded bytes.
func FuzzHopRoundTrip(f *testing.F) {
	for _, tc := range hopCases() {
		f.Add(tc.hop.Version, tc.hop.Addr, tc.hop.Identity, tc.hop.Origin, tc.hop.Session, tc.hop.Resume != nil)
	}
	f.Fuzz(func(t *testing.T, version byte, addr, identity, origin string, session uint64, resumable bool) {
		want := protocol.Hop{Version: version%3 + 1, Addr: addr[:min(len(addr), protocol.MaxHopAddrLen)],
			Identity: identity[:min(len(identity), protocol.MaxHopIdentityLen)]}
		if want.Version >= protocol.HopVersion2 {
			want.Origin, want.Session = origin[:min(len(origin), protocol.MaxHopOriginLen)], session
		}
		if want.Version == protocol.HopVersion3 && resumable {
			want.Resume = testHash
		}
		in := want
		in.Addr, in.Identity = addr, identity
		if in.Version >= protocol.HopVersion2 {
			in.Origin = origin
		}
		b := appendHop(nil, in)
		h, n, err := protocol.ParseHop(b)
		if err != nil || n != len(b) || !sameHop(h, want) {
			t.Fatalf("ParseHop(%s) = %+v, %d, %v; want %+v, %d", spaced(b), h, n, err, want, len(b))
		}
	})
}

// hopScanOracle finds HopAck in an owner's stream by decoding its
// frames one by one with ReadServerFrame: the index of the first HopAck
// at a frame boundary, or -1 if the stream ends, or turns out not to be
// the protocol, before one.
func hopScanOracle(data []byte) int {
	r := bytes.NewReader(data)
	for r.Len() > 0 {
		at := len(data) - r.Len()
		if data[at] == protocol.HopAck {
			return at
		}
		if _, err := protocol.ReadServerFrame(r); err != nil {
			return -1
		}
	}
	return -1
}

// hopScanSplit scans data in the chunks that cuts (ascending offsets)
// make, and returns the index of HopAck in data, or -1.
func hopScanSplit(data []byte, cuts ...int) int {
	var s protocol.HopScan
	from := 0
	for _, to := range append(cuts, len(data)) {
		to = max(from, min(to, len(data)))
		if at := s.Scan(data[from:to]); at >= 0 {
			return from + at
		}
		from = to
	}
	return -1
}

func TestHopScan(t *testing.T) {
	ack := []byte{protocol.HopAck}
	acquired := protocol.AppendAcquired(nil, 0x7e7e7e7e7e7e7e7e)
	errFrame := protocol.AppendError(nil, protocol.CodeShuttingDown, "~~~")
	tests := []struct {
		name string
		data []byte
		want int
	}{
		{"ack alone", ack, 0},
		{"after WAITING", append(protocol.AppendWaiting(nil), ack...), 1},
		{"inside a token", acquired, -1},
		{"after a token of 0x7e bytes", append(slices.Clone(acquired), ack...), 9},
		{"inside an ERROR's reason", errFrame, -1},
		{"after an ERROR", append(slices.Clone(errFrame), ack...), len(errFrame)},
		{"ERROR's code is 0x7e", []byte{0x13, 0x7e, 0, 0x7e}, 3},
		{"ERROR's reason length is 0x7e", append([]byte{0x13, 0x01, 0x7e}, bytes.Repeat(ack, 0x7e+1)...), 3 + 0x7e},
		{"after a byte no frame starts with", []byte{0x55, 0x7e}, -1},
		{"empty", nil, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := hopScanSplit(tt.data); got != tt.want {
				t.Fatalf("Scan(%s) = %d, want %d", spaced(tt.data), got, tt.want)
			}
			// Any split gives the same answer: a frame may come in
			// pieces.
			for cut := range len(tt.data) {
				if got := hopScanSplit(tt.data, cut); got != tt.want {
					t.Fatalf("Scan(%s) cut at %d = %d, want %d", spaced(tt.data), cut, got, tt.want)
				}
			}
		})
	}
}

// FuzzHopScan feeds arbitrary bytes, cut anywhere, to HopScan: it must
// never panic, and find HopAck where decoding the frames one by one
// finds it.
func FuzzHopScan(f *testing.F) {
	f.Add([]byte{protocol.HopAck}, 0, 0)
	f.Add(append(protocol.AppendAcquired(nil, 0x7e), protocol.HopAck), 3, 9)
	f.Add(append(protocol.AppendError(nil, 0x7e, "~"), protocol.HopAck), 1, 2)
	f.Add([]byte{0x11, 0x99, 0x7e}, 1, 2)
	f.Fuzz(func(t *testing.T, data []byte, cut1, cut2 int) {
		cut1 = min(max(cut1, 0), len(data))
		cut2 = min(max(cut2, cut1), len(data))
		want := hopScanOracle(data)
		if got := hopScanSplit(data, cut1, cut2); got != want {
			t.Fatalf("Scan(%s) cut at %d, %d = %d; decoding frames: %d", spaced(data), cut1, cut2, got, want)
		}
	})
}
