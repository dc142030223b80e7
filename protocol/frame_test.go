package protocol_test

import (
	"bytes"
	"errors"
	"io"
	"math"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"
	"time"
	"unicode/utf8"

	"github.com/batonlock/baton/protocol"
)

func TestAppendAcquire(t *testing.T) {
	tests := []struct {
		name string
		in   protocol.Acquire
		want string
	}{
		// The example of docs/protocol.md, byte for byte.
		{"protocol example", protocol.Acquire{Version: 1, LeaseMS: 2000, Name: "job"},
			"01 01 00 00 07 d0 00 03 6a 6f 62"},
		{"invalid fields encoded as given", protocol.Acquire{Version: 2, LeaseMS: 0, Name: ""},
			"01 02 00 00 00 00 00 00"},
		{"max lease, multi-byte name", protocol.Acquire{Version: 1, LeaseMS: math.MaxUint32, Name: "é"},
			"01 01 ff ff ff ff 00 02 c3 a9"},
		{"big endian lease", protocol.Acquire{Version: 1, LeaseMS: 0x01020304, Name: "a"},
			"01 01 01 02 03 04 00 01 61"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := unhex(t, tt.want)
			if got := protocol.AppendAcquire(nil, tt.in); !bytes.Equal(got, want) {
				t.Errorf("AppendAcquire(%+v) = %s, want %s", tt.in, spaced(got), spaced(want))
			}
			// Appending keeps what the buffer already holds.
			prefix := []byte{0xaa, 0xbb}
			got := protocol.AppendAcquire(prefix, tt.in)
			if !bytes.Equal(got, append([]byte{0xaa, 0xbb}, want...)) {
				t.Errorf("AppendAcquire with prefix = %s", spaced(got))
			}
		})
	}
}

func TestAppendAcquireNameLengths(t *testing.T) {
	for _, n := range []int{protocol.MaxNameLen, protocol.MaxNameLen + 1, math.MaxUint16, math.MaxUint16 + 1, math.MaxUint16 + 100} {
		name := strings.Repeat("n", n)
		got := protocol.AppendAcquire(nil, protocol.Acquire{Version: 1, LeaseMS: 1, Name: name})
		wantLen := min(n, math.MaxUint16) // longer names are cut to fit the u16
		if len(got) != protocol.AcquireHeaderLen+wantLen {
			t.Errorf("name of %d bytes: frame is %d bytes, want %d", n, len(got), protocol.AcquireHeaderLen+wantLen)
			continue
		}
		if declared := int(got[6])<<8 | int(got[7]); declared != wantLen {
			t.Errorf("name of %d bytes: name_len = %d, want %d", n, declared, wantLen)
		}
	}
}

func TestAppendFixedFrames(t *testing.T) {
	tests := []struct {
		name string
		got  []byte
		want string
	}{
		{"heartbeat", protocol.AppendHeartbeat(nil), "02"},
		{"waiting", protocol.AppendWaiting(nil), "11"},
		{"acquired zero", protocol.AppendAcquired(nil, 0), "12 00 00 00 00 00 00 00 00"},
		{"acquired big endian", protocol.AppendAcquired(nil, 0x0102030405060708), "12 01 02 03 04 05 06 07 08"},
		{"acquired max", protocol.AppendAcquired(nil, math.MaxUint64), "12 ff ff ff ff ff ff ff ff"},
		{"acquired clock token", protocol.AppendAcquired(nil, 1_700_000_000<<20), "12 00 06 55 3f 10 00 00 00"},
		{"heartbeat appends", protocol.AppendHeartbeat([]byte{0x11}), "11 02"},
		{"waiting appends", protocol.AppendWaiting([]byte{0x02}), "02 11"},
		{"acquired appends", protocol.AppendAcquired([]byte{0x11}, 7), "11 12 00 00 00 00 00 00 00 07"},
	}
	for _, tt := range tests {
		if want := unhex(t, tt.want); !bytes.Equal(tt.got, want) {
			t.Errorf("%s: got %s, want %s", tt.name, spaced(tt.got), spaced(want))
		}
	}
	if protocol.HeartbeatLen != 1 || protocol.WaitingLen != 1 || protocol.AcquiredLen != 9 ||
		protocol.AcquireHeaderLen != 8 || protocol.MaxAcquireLen != 263 || protocol.MaxErrorLen != 258 {
		t.Errorf("frame size constants disagree with docs/protocol.md")
	}
}

func TestAppendError(t *testing.T) {
	tests := []struct {
		name   string
		code   protocol.Code
		reason string
		want   string
	}{
		{"reason as given", protocol.CodeNotAuthorized, "no", "13 18 02 6e 6f"},
		{"shutdown", protocol.CodeShuttingDown, "bye", "13 01 03 62 79 65"},
		{"unknown code", protocol.Code(0x7f), "x", "13 7f 01 78"},
		{"empty reason gets canonical text", protocol.CodeClosedByAdmin, "",
			"13 02 17" + " " + spaced([]byte("closed by administrator"))},
		{"empty reason, unknown server condition", protocol.Code(0x0f), "",
			"13 0f 18" + " " + spaced([]byte("unknown server condition"))},
		{"empty reason, unknown client error", protocol.Code(0xee), "",
			"13 ee 14" + " " + spaced([]byte("unknown client error"))},
	}
	for _, tt := range tests {
		got := protocol.AppendError([]byte{0xaa}, tt.code, tt.reason)
		if want := append([]byte{0xaa}, unhex(t, tt.want)...); !bytes.Equal(got, want) {
			t.Errorf("%s: AppendError(0x%02x, %q) = %s, want %s", tt.name, uint8(tt.code), tt.reason, spaced(got), spaced(want))
		}
	}
}

func TestAppendErrorTruncatesAtRuneBoundary(t *testing.T) {
	a := func(n int) string { return strings.Repeat("a", n) }
	tests := []struct {
		name    string
		reason  string
		wantLen int
	}{
		{"255 ascii kept", a(255), 255},
		{"256 ascii cut", a(256), 255},
		{"1000 ascii cut", a(1000), 255},
		{"2-byte rune ends at 255", a(253) + "é", 255},
		{"2-byte rune straddles 255", a(254) + "é", 254},
		{"3-byte rune ends at 255", a(252) + "€", 255},
		{"3-byte rune straddles 255 by 1", a(253) + "€", 253},
		{"3-byte rune straddles 255 by 2", a(254) + "€", 254},
		{"4-byte rune straddles 255", a(252) + "𝄞", 252},
		{"4-byte rune starts at 255", a(255) + "𝄞", 255},
		{"only 2-byte runes", strings.Repeat("é", 200), 254},
		{"only 3-byte runes", strings.Repeat("€", 100), 255},
		{"only 4-byte runes", strings.Repeat("𝄞", 100), 252},
	}
	for _, tt := range tests {
		frame := protocol.AppendError(nil, protocol.CodeInvalidName, tt.reason)
		if len(frame) < 3 {
			t.Fatalf("%s: frame too short: %s", tt.name, spaced(frame))
		}
		reason := frame[3:]
		if int(frame[2]) != len(reason) {
			t.Errorf("%s: reason_len %d but %d reason bytes", tt.name, frame[2], len(reason))
		}
		if len(reason) != tt.wantLen {
			t.Errorf("%s: reason cut to %d bytes, want %d", tt.name, len(reason), tt.wantLen)
		}
		if !utf8.Valid(reason) || !strings.HasPrefix(tt.reason, string(reason)) {
			t.Errorf("%s: reason %q is not a valid UTF-8 prefix of the input", tt.name, reason)
		}
	}
}

// acquireCase is one ACQUIRE body (the bytes after the type byte) and what
// ReadAcquireBody must make of it.
type acquireCase struct {
	name     string
	body     []byte
	want     protocol.Acquire
	err      error
	consumed int // bytes ReadAcquireBody may read, no more
}

func hdr(version byte, lease uint32, nameLen uint16) []byte {
	return []byte{version, byte(lease >> 24), byte(lease >> 16), byte(lease >> 8), byte(lease), byte(nameLen >> 8), byte(nameLen)}
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func acquireCases() []acquireCase {
	long := bytes.Repeat([]byte("x"), 255)
	return []acquireCase{
		{"valid", cat(hdr(1, 2000, 3), []byte("job")), protocol.Acquire{Version: 1, LeaseMS: 2000, Name: "job"}, nil, 10},
		{"valid 255-byte name", cat(hdr(1, 1, 255), long), protocol.Acquire{Version: 1, LeaseMS: 1, Name: string(long)}, nil, 262},
		{"valid max lease", cat(hdr(1, math.MaxUint32, 1), []byte("a")), protocol.Acquire{Version: 1, LeaseMS: math.MaxUint32, Name: "a"}, nil, 8},
		{"name not trimmed or folded", cat(hdr(1, 5, 6), []byte(" Job\t\x00")), protocol.Acquire{Version: 1, LeaseMS: 5, Name: " Job\t\x00"}, nil, 13},
		{"multi-byte name", cat(hdr(1, 5, 4), []byte("𝄞")), protocol.Acquire{Version: 1, LeaseMS: 5, Name: "𝄞"}, nil, 11},

		// 1. version, checked before anything else is read.
		{"version 0", cat(hdr(0, 2000, 3), []byte("job")), protocol.Acquire{Version: 0}, protocol.ErrUnsupportedVersion, 1},
		{"version 2", cat(hdr(2, 2000, 3), []byte("job")), protocol.Acquire{Version: 2}, protocol.ErrUnsupportedVersion, 1},
		{"version 255", []byte{0xff}, protocol.Acquire{Version: 0xff}, protocol.ErrUnsupportedVersion, 1},
		{"version beats every other rule", hdr(9, 0, 0), protocol.Acquire{Version: 9}, protocol.ErrUnsupportedVersion, 1},
		// 2. lease.
		{"lease 0", cat(hdr(1, 0, 3), []byte("job")), protocol.Acquire{Version: 1}, protocol.ErrInvalidLease, 7},
		{"lease beats empty name", hdr(1, 0, 0), protocol.Acquire{Version: 1}, protocol.ErrInvalidLease, 7},
		{"lease beats long name", hdr(1, 0, 300), protocol.Acquire{Version: 1}, protocol.ErrInvalidLease, 7},
		// 3. empty name.
		{"empty name", cat(hdr(1, 7, 0), []byte("junk")), protocol.Acquire{Version: 1, LeaseMS: 7}, protocol.ErrEmptyName, 7},
		// 4. name too long: the name is never read.
		{"name 256", cat(hdr(1, 7, 256), bytes.Repeat([]byte{0xff}, 256)), protocol.Acquire{Version: 1, LeaseMS: 7}, protocol.ErrNameTooLong, 7},
		{"name 65535", hdr(1, 7, 65535), protocol.Acquire{Version: 1, LeaseMS: 7}, protocol.ErrNameTooLong, 7},
		// 5. UTF-8, checked once the whole name is in.
		{"invalid byte", cat(hdr(1, 7, 1), []byte{0xff}), protocol.Acquire{Version: 1, LeaseMS: 7, Name: "\xff"}, protocol.ErrInvalidName, 8},
		{"overlong encoding", cat(hdr(1, 7, 2), []byte{0xc0, 0xaf}), protocol.Acquire{Version: 1, LeaseMS: 7, Name: "\xc0\xaf"}, protocol.ErrInvalidName, 9},
		{"surrogate half", cat(hdr(1, 7, 3), []byte{0xed, 0xa0, 0x80}), protocol.Acquire{Version: 1, LeaseMS: 7, Name: "\xed\xa0\x80"}, protocol.ErrInvalidName, 10},
		{"rune cut by name_len", cat(hdr(1, 7, 2), []byte("a€")), protocol.Acquire{Version: 1, LeaseMS: 7, Name: "a\xe2"}, protocol.ErrInvalidName, 9},
	}
}

func TestReadAcquireBody(t *testing.T) {
	trailer := []byte{0xde, 0xad, 0xbe, 0xef} // must never be read
	for _, tt := range acquireCases() {
		t.Run(tt.name, func(t *testing.T) {
			cr := &countingReader{r: bytes.NewReader(cat(tt.body, trailer))}
			got, err := protocol.ReadAcquireBody(cr)
			if err != tt.err {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			if cr.n != tt.consumed {
				t.Errorf("read %d bytes, want exactly %d", cr.n, tt.consumed)
			}
			if tt.err != nil {
				code, ok := protocol.CodeOf(err)
				if !ok || code.Err() != tt.err {
					t.Errorf("CodeOf(%v) = %v, %v", err, code, ok)
				}
			}
			// The struct's own Validate agrees with the decoder, except
			// where the decoder stopped before reading the name.
			if tt.err == nil || tt.err == protocol.ErrUnsupportedVersion || tt.err == protocol.ErrInvalidLease || tt.err == protocol.ErrInvalidName {
				if verr := got.Validate(); verr != tt.err {
					t.Errorf("Validate() = %v, want %v", verr, tt.err)
				}
			}
		})
	}
}

func TestReadAcquireBodyOneByteAtATime(t *testing.T) {
	for _, tt := range acquireCases() {
		for _, wrap := range []struct {
			name string
			fn   func(io.Reader) io.Reader
		}{
			{"OneByteReader", iotest.OneByteReader},
			{"HalfReader", iotest.HalfReader},
			{"DataErrReader", iotest.DataErrReader},
		} {
			cr := &countingReader{r: bytes.NewReader(tt.body)}
			got, err := protocol.ReadAcquireBody(wrap.fn(cr))
			if err != tt.err || got != tt.want {
				t.Errorf("%s via %s: got %+v, %v; want %+v, %v", tt.name, wrap.name, got, err, tt.want, tt.err)
			}
			if wrap.name == "OneByteReader" && cr.n != tt.consumed {
				t.Errorf("%s via %s: read %d bytes, want %d", tt.name, wrap.name, cr.n, tt.consumed)
			}
		}
	}
}

func TestReadAcquireBodyCutShort(t *testing.T) {
	for _, tt := range acquireCases() {
		if tt.err != nil {
			continue
		}
		for n := 0; n < len(tt.body); n++ {
			_, err := protocol.ReadAcquireBody(iotest.OneByteReader(bytes.NewReader(tt.body[:n])))
			if err != io.ErrUnexpectedEOF {
				t.Errorf("%s cut to %d of %d bytes: err = %v, want io.ErrUnexpectedEOF", tt.name, n, len(tt.body), err)
			}
		}
	}
	// A name that is declared valid but never arrives in full.
	_, err := protocol.ReadAcquireBody(bytes.NewReader(cat(hdr(1, 1, 255), []byte("short"))))
	if err != io.ErrUnexpectedEOF {
		t.Errorf("short name: err = %v, want io.ErrUnexpectedEOF", err)
	}
}

func TestReadAcquireBodyPassesIOErrors(t *testing.T) {
	boom := errors.New("boom")
	if _, err := protocol.ReadAcquireBody(iotest.ErrReader(boom)); err != boom {
		t.Errorf("error before the version: got %v, want %v", err, boom)
	}
	// TimeoutReader fails its second read: after the version byte.
	body := cat(hdr(1, 2000, 3), []byte("job"))
	if _, err := protocol.ReadAcquireBody(iotest.TimeoutReader(bytes.NewReader(body))); err != iotest.ErrTimeout {
		t.Errorf("error after the version: got %v, want %v", err, iotest.ErrTimeout)
	}
	// Half of the header, then an error: the error, not ErrUnexpectedEOF.
	r := io.MultiReader(bytes.NewReader(body[:4]), iotest.ErrReader(boom))
	if _, err := protocol.ReadAcquireBody(r); err != boom {
		t.Errorf("error inside the header: got %v, want %v", err, boom)
	}
	r = io.MultiReader(bytes.NewReader(body[:8]), iotest.ErrReader(boom))
	if _, err := protocol.ReadAcquireBody(r); err != boom {
		t.Errorf("error inside the name: got %v, want %v", err, boom)
	}
}

// TestReadAcquireBodyHugeNameDoesNotAllocate checks that a name_len of
// 65535 is refused from the header alone: nothing near 64 KiB is allocated.
func TestReadAcquireBodyHugeNameDoesNotAllocate(t *testing.T) {
	frame := cat(hdr(1, 1000, 65535), bytes.Repeat([]byte("x"), 65535))
	r := bytes.NewReader(frame)
	const runs = 100
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range runs {
		r.Reset(frame)
		if _, err := protocol.ReadAcquireBody(r); err != protocol.ErrNameTooLong {
			t.Fatalf("err = %v, want ErrNameTooLong", err)
		}
	}
	runtime.ReadMemStats(&after)
	if perRun := (after.TotalAlloc - before.TotalAlloc) / runs; perRun > 1024 {
		t.Errorf("ReadAcquireBody allocated %d bytes per call for a refused 65535-byte name", perRun)
	}
	allocs := testing.AllocsPerRun(runs, func() {
		r.Reset(frame)
		protocol.ReadAcquireBody(r)
	})
	if allocs > 2 {
		t.Errorf("ReadAcquireBody made %.1f allocations per refused frame", allocs)
	}
}

type serverCase struct {
	name  string
	bytes string
	want  protocol.ServerFrame
}

func serverCases(t testing.TB) []serverCase {
	max := strings.Repeat("r", 255)
	return []serverCase{
		{"waiting", "11", protocol.ServerFrame{Type: protocol.TypeWaiting}},
		{"acquired", "12 01 02 03 04 05 06 07 08", protocol.ServerFrame{Type: protocol.TypeAcquired, Token: 0x0102030405060708}},
		{"acquired zero", "12 00 00 00 00 00 00 00 00", protocol.ServerFrame{Type: protocol.TypeAcquired}},
		{"acquired max", "12 ff ff ff ff ff ff ff ff", protocol.ServerFrame{Type: protocol.TypeAcquired, Token: math.MaxUint64}},
		{"error", "13 18 02 6e 6f", protocol.ServerFrame{Type: protocol.TypeError, Code: protocol.CodeNotAuthorized, Reason: "no"}},
		{"error empty reason", "13 01 00", protocol.ServerFrame{Type: protocol.TypeError, Code: protocol.CodeShuttingDown}},
		{"error unknown code", "13 7f 01 78", protocol.ServerFrame{Type: protocol.TypeError, Code: 0x7f, Reason: "x"}},
		{"error max reason", "13 02 ff " + spaced([]byte(max)), protocol.ServerFrame{Type: protocol.TypeError, Code: protocol.CodeClosedByAdmin, Reason: max}},
		{"error reason utf-8", "13 16 02 c3 a9", protocol.ServerFrame{Type: protocol.TypeError, Code: protocol.CodeInvalidName, Reason: "é"}},
	}
}

func TestReadServerFrame(t *testing.T) {
	for _, tt := range serverCases(t) {
		frame := unhex(t, tt.bytes)
		for _, wrap := range []struct {
			name string
			fn   func(io.Reader) io.Reader
		}{
			{"plain", func(r io.Reader) io.Reader { return r }},
			{"OneByteReader", iotest.OneByteReader},
			{"HalfReader", iotest.HalfReader},
			{"DataErrReader", iotest.DataErrReader},
		} {
			// A trailing WAITING must be left for the next call.
			cr := &countingReader{r: bytes.NewReader(append(frame, 0x11))}
			got, err := protocol.ReadServerFrame(wrap.fn(cr))
			if err != nil || got != tt.want {
				t.Errorf("%s via %s: got %v, %v; want %v", tt.name, wrap.name, got, err, tt.want)
			}
			if wrap.name != "DataErrReader" && cr.n != len(frame) {
				t.Errorf("%s via %s: read %d bytes, frame is %d", tt.name, wrap.name, cr.n, len(frame))
			}
		}
		// Every proper prefix of a frame that has its type byte is cut short.
		for n := 1; n < len(frame); n++ {
			_, err := protocol.ReadServerFrame(iotest.OneByteReader(bytes.NewReader(frame[:n])))
			if err != io.ErrUnexpectedEOF {
				t.Errorf("%s cut to %d of %d bytes: err = %v, want io.ErrUnexpectedEOF", tt.name, n, len(frame), err)
			}
		}
	}
}

func TestReadServerFrameStream(t *testing.T) {
	var stream []byte
	var want []protocol.ServerFrame
	for _, tt := range serverCases(t) {
		stream = append(stream, unhex(t, tt.bytes)...)
		want = append(want, tt.want)
	}
	r := iotest.OneByteReader(bytes.NewReader(stream))
	for i, w := range want {
		got, err := protocol.ReadServerFrame(r)
		if err != nil || got != w {
			t.Fatalf("frame %d: got %v, %v; want %v", i, got, err, w)
		}
	}
	if _, err := protocol.ReadServerFrame(r); err != io.EOF {
		t.Errorf("after the last frame: err = %v, want io.EOF", err)
	}
}

func TestReadServerFrameMalformed(t *testing.T) {
	if _, err := protocol.ReadServerFrame(bytes.NewReader(nil)); err != io.EOF {
		t.Errorf("empty stream: err = %v, want io.EOF", err)
	}
	// Every type byte that is not a server frame, client frames included.
	for b := 0; b < 256; b++ {
		switch protocol.Type(b) {
		case protocol.TypeWaiting, protocol.TypeAcquired, protocol.TypeError:
			continue
		}
		cr := &countingReader{r: bytes.NewReader([]byte{byte(b), 0x11, 0x11})}
		f, err := protocol.ReadServerFrame(cr)
		if !errors.Is(err, protocol.ErrMalformedFrame) {
			t.Errorf("type 0x%02x: err = %v, want ErrMalformedFrame", b, err)
		}
		if f.Type != protocol.Type(b) {
			t.Errorf("type 0x%02x: frame type %v", b, f.Type)
		}
		if cr.n != 1 {
			t.Errorf("type 0x%02x: read %d bytes, want 1", b, cr.n)
		}
	}
	boom := errors.New("boom")
	if _, err := protocol.ReadServerFrame(iotest.ErrReader(boom)); err != boom {
		t.Errorf("I/O error: got %v, want %v", err, boom)
	}
	r := io.MultiReader(bytes.NewReader([]byte{0x13, 0x01, 0x05, 'a'}), iotest.ErrReader(boom))
	if _, err := protocol.ReadServerFrame(r); err != boom {
		t.Errorf("I/O error inside a reason: got %v, want %v", err, boom)
	}
}

func TestFrameStrings(t *testing.T) {
	types := map[protocol.Type]string{
		protocol.TypeAcquire: "ACQUIRE", protocol.TypeHeartbeat: "HEARTBEAT",
		protocol.TypeWaiting: "WAITING", protocol.TypeAcquired: "ACQUIRED",
		protocol.TypeError: "ERROR", 0x00: "UNKNOWN", 0x14: "UNKNOWN",
	}
	for typ, want := range types {
		if got := typ.String(); got != want {
			t.Errorf("Type(0x%02x).String() = %q, want %q", uint8(typ), got, want)
		}
	}
	frames := map[string]protocol.ServerFrame{
		"WAITING":              {Type: protocol.TypeWaiting},
		"ACQUIRED(42)":         {Type: protocol.TypeAcquired, Token: 42},
		`ERROR(0x02 "kicked")`: {Type: protocol.TypeError, Code: protocol.CodeClosedByAdmin, Reason: "kicked"},
	}
	for want, f := range frames {
		if got := f.String(); got != want {
			t.Errorf("%#v.String() = %q, want %q", f, got, want)
		}
	}
}

func TestAcquireValidate(t *testing.T) {
	tests := []struct {
		in   protocol.Acquire
		want error
	}{
		{protocol.Acquire{Version: 1, LeaseMS: 1, Name: "a"}, nil},
		{protocol.Acquire{Version: 0, LeaseMS: 0, Name: ""}, protocol.ErrUnsupportedVersion},
		{protocol.Acquire{Version: 1, LeaseMS: 0, Name: ""}, protocol.ErrInvalidLease},
		{protocol.Acquire{Version: 1, LeaseMS: 1, Name: ""}, protocol.ErrEmptyName},
		{protocol.Acquire{Version: 1, LeaseMS: 1, Name: strings.Repeat("\xff", 256)}, protocol.ErrNameTooLong},
		{protocol.Acquire{Version: 1, LeaseMS: 1, Name: "\xff"}, protocol.ErrInvalidName},
	}
	for _, tt := range tests {
		if got := tt.in.Validate(); got != tt.want {
			t.Errorf("Acquire{Version: %d, LeaseMS: %d, Name: %.20q}.Validate() = %v, want %v", tt.in.Version, tt.in.LeaseMS, tt.in.Name, got, tt.want)
		}
	}
	if got := (protocol.Acquire{LeaseMS: 2000}).Lease(); got != 2*time.Second {
		t.Errorf("Lease() = %v, want 2s", got)
	}
	if got := (protocol.Acquire{LeaseMS: math.MaxUint32}).Lease(); got != math.MaxUint32*time.Millisecond {
		t.Errorf("Lease() of max u32 = %v", got)
	}
}

func TestValidateName(t *testing.T) {
	tests := []struct {
		name string
		want error
	}{
		{"a", nil},
		{"Job", nil},
		{" padded ", nil},
		{"\x00", nil},
		{strings.Repeat("x", 255), nil},
		{strings.Repeat("é", 127) + "x", nil}, // 255 bytes
		{"", protocol.ErrEmptyName},
		{strings.Repeat("x", 256), protocol.ErrNameTooLong},
		{strings.Repeat("é", 128), protocol.ErrNameTooLong}, // 256 bytes, 128 runes
		{"\xff", protocol.ErrInvalidName},
		{"a\xc3", protocol.ErrInvalidName},
	}
	for _, tt := range tests {
		if got := protocol.ValidateName(tt.name); got != tt.want {
			t.Errorf("ValidateName(%.20q (%d bytes)) = %v, want %v", tt.name, len(tt.name), got, tt.want)
		}
	}
}

func TestValidateLease(t *testing.T) {
	maxWire := time.Duration(math.MaxUint32) * time.Millisecond
	tests := []struct {
		lease  time.Duration
		wantMS uint32
		err    error
	}{
		{math.MinInt64, 0, protocol.ErrInvalidLease},
		{-time.Second, 0, protocol.ErrInvalidLease},
		{0, 0, protocol.ErrInvalidLease},
		{1, 0, protocol.ErrInvalidLease},
		{time.Millisecond - 1, 0, protocol.ErrInvalidLease},
		{time.Millisecond, 1, nil},
		{1500 * time.Microsecond, 1, nil}, // whole milliseconds on the wire
		{2 * time.Second, 2000, nil},
		{maxWire, math.MaxUint32, nil},
		{maxWire + time.Millisecond - 1, math.MaxUint32, nil},
		{maxWire + time.Millisecond, 0, protocol.ErrInvalidLease},
		{math.MaxInt64, 0, protocol.ErrInvalidLease},
	}
	for _, tt := range tests {
		err := protocol.ValidateLease(tt.lease)
		if err != tt.err {
			t.Errorf("ValidateLease(%v) = %v, want %v", tt.lease, err, tt.err)
			continue
		}
		if err == nil {
			if got := protocol.LeaseMS(tt.lease); got != tt.wantMS {
				t.Errorf("LeaseMS(%v) = %d, want %d", tt.lease, got, tt.wantMS)
			}
		}
	}
}
