package protocol_test

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/batonlock/baton/protocol"
)

// FuzzReadAcquireBody feeds arbitrary bytes to the server's ACQUIRE
// decoder. It must never panic, never read or keep more than the frame
// allows, return each rule's sentinel after reading exactly the fields the
// rule needs, and a frame it accepts must re-encode to the bytes it read.
func FuzzReadAcquireBody(f *testing.F) {
	for _, tt := range acquireCases() {
		f.Add(tt.body)
	}
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Add(hdr(1, 1, 255))
	f.Add(hdr(1, 1, 65535))

	f.Fuzz(func(t *testing.T, data []byte) {
		cr := &countingReader{r: bytes.NewReader(data)}
		a, err := protocol.ReadAcquireBody(cr)
		if len(a.Name) > protocol.MaxNameLen {
			t.Fatalf("decoded a %d-byte name", len(a.Name))
		}
		if cr.n > protocol.MaxAcquireLen-1 {
			t.Fatalf("read %d bytes, an ACQUIRE body is at most %d", cr.n, protocol.MaxAcquireLen-1)
		}
		// The same bytes one at a time give the same answer.
		a1, err1 := protocol.ReadAcquireBody(iotest.OneByteReader(bytes.NewReader(data)))
		if a1 != a || err1 != err {
			t.Fatalf("one byte at a time: %+v, %v; all at once: %+v, %v", a1, err1, a, err)
		}
		consumed := data[:cr.n]
		declared := -1
		if len(data) >= 7 {
			declared = int(data[5])<<8 | int(data[6])
		}
		switch err {
		case nil, protocol.ErrInvalidName:
			if err == nil && a.Validate() != nil {
				t.Fatalf("accepted %+v, which Validate refuses: %v", a, a.Validate())
			}
			if err != nil && a.Validate() != err {
				t.Fatalf("refused %+v with %v, Validate says %v", a, err, a.Validate())
			}
			re := protocol.AppendAcquire(nil, a)
			if !bytes.Equal(re, append([]byte{byte(protocol.TypeAcquire)}, consumed...)) {
				t.Fatalf("re-encoded %s, consumed 01 %s", spaced(re), spaced(consumed))
			}
		case protocol.ErrUnsupportedVersion:
			if cr.n != 1 || data[0] == protocol.Version {
				t.Fatalf("ErrUnsupportedVersion after %d bytes, version %d", cr.n, data[0])
			}
		case protocol.ErrInvalidLease:
			if cr.n != 7 || a.LeaseMS != 0 {
				t.Fatalf("ErrInvalidLease after %d bytes, lease %d", cr.n, a.LeaseMS)
			}
		case protocol.ErrEmptyName:
			if cr.n != 7 || declared != 0 || a.LeaseMS == 0 {
				t.Fatalf("ErrEmptyName after %d bytes, name_len %d", cr.n, declared)
			}
		case protocol.ErrNameTooLong:
			if cr.n != 7 || declared <= protocol.MaxNameLen || a.LeaseMS == 0 {
				t.Fatalf("ErrNameTooLong after %d bytes, name_len %d", cr.n, declared)
			}
		case io.ErrUnexpectedEOF:
			if cr.n != len(data) {
				t.Fatalf("ErrUnexpectedEOF after %d of %d bytes", cr.n, len(data))
			}
		default:
			t.Fatalf("unexpected error %v", err)
		}
	})
}

// FuzzReadServerFrame feeds arbitrary bytes to the client's frame decoder.
// It must never panic, never read more than one frame, and a frame it
// accepts must re-encode to the bytes it read.
func FuzzReadServerFrame(f *testing.F) {
	for _, tt := range serverCases(f) {
		frame := unhex(f, tt.bytes)
		f.Add(frame)
		f.Add(frame[:len(frame)-1])
		f.Add(append(frame, frame...))
	}
	f.Add([]byte{})
	f.Add([]byte{0x01})
	f.Add([]byte{0x13, 0x02, 0xff})
	f.Add([]byte{0x13, 0x16, 0x01, 0xff})

	f.Fuzz(func(t *testing.T, data []byte) {
		cr := &countingReader{r: bytes.NewReader(data)}
		fr, err := protocol.ReadServerFrame(cr)
		if len(fr.Reason) > protocol.MaxReasonLen {
			t.Fatalf("decoded a %d-byte reason", len(fr.Reason))
		}
		if cr.n > protocol.MaxErrorLen {
			t.Fatalf("read %d bytes, the largest server frame is %d", cr.n, protocol.MaxErrorLen)
		}
		fr1, err1 := protocol.ReadServerFrame(iotest.OneByteReader(bytes.NewReader(data)))
		if fr1 != fr || !sameErr(err1, err) {
			t.Fatalf("one byte at a time: %v, %v; all at once: %v, %v", fr1, err1, fr, err)
		}
		consumed := data[:cr.n]
		switch {
		case err == nil:
			var re []byte
			switch fr.Type {
			case protocol.TypeWaiting:
				re = protocol.AppendWaiting(nil)
			case protocol.TypeAcquired:
				re = protocol.AppendAcquired(nil, fr.Token)
			case protocol.TypeError:
				if fr.Reason == "" {
					// AppendError fills an empty reason with the
					// canonical text, so the empty reason of the wire
					// cannot be re-encoded through it.
					re = []byte{byte(protocol.TypeError), byte(fr.Code), 0}
				} else {
					re = protocol.AppendError(nil, fr.Code, fr.Reason)
				}
			default:
				t.Fatalf("accepted a frame of type %v", fr.Type)
			}
			if !bytes.Equal(re, consumed) {
				t.Fatalf("decoded %v, re-encoded %s, consumed %s", fr, spaced(re), spaced(consumed))
			}
		case errors.Is(err, protocol.ErrMalformedFrame):
			switch fr.Type {
			case protocol.TypeWaiting, protocol.TypeAcquired, protocol.TypeError:
				t.Fatalf("known type %v refused: %v", fr.Type, err)
			}
			if cr.n != 1 {
				t.Fatalf("ErrMalformedFrame after %d bytes", cr.n)
			}
		case err == io.EOF:
			if len(data) != 0 {
				t.Fatalf("io.EOF with %d bytes of input", len(data))
			}
		case err == io.ErrUnexpectedEOF:
			if len(data) == 0 || cr.n != len(data) {
				t.Fatalf("io.ErrUnexpectedEOF after %d of %d bytes", cr.n, len(data))
			}
		default:
			t.Fatalf("unexpected error %v", err)
		}
	})
}

// sameErr compares errors by identity or, for wrapped ErrMalformedFrame
// values that are built per call, by text.
func sameErr(a, b error) bool {
	if a == b {
		return true
	}
	return a != nil && b != nil && errors.Is(a, protocol.ErrMalformedFrame) && a.Error() == b.Error()
}

// v2Event is one decoder call on a stream: what it returned and how many
// bytes it consumed.
type v2Event struct {
	f        protocol.Frame
	err      string
	consumed int
}

// v2Stream decodes a whole stream with first for the first frame and rest
// for the others, as a server (or client) reads a connection, until an
// error other than a *ClaimError or the end of the input.
func v2Stream(r io.Reader, first, rest func(io.Reader) (protocol.Frame, error)) []v2Event {
	cr := &countingReader{r: r}
	var evs []v2Event
	read := first
	for range protocol.MaxFrameSize * 4 {
		before := cr.n
		f, err := read(cr)
		ev := v2Event{f: f, consumed: cr.n - before}
		if err != nil {
			ev.err = err.Error()
		}
		evs = append(evs, ev)
		var ce *protocol.ClaimError
		if err != nil && !errors.As(err, &ce) {
			break
		}
		read = rest
	}
	return evs
}

// v2Parse is v2Stream with the buffer parsers over the whole input.
func v2Parse(data []byte, first, rest func([]byte) (protocol.Frame, int, error)) []v2Event {
	var evs []v2Event
	parse := first
	for range protocol.MaxFrameSize * 4 {
		f, n, err := parse(data)
		if n == 0 && err == nil {
			if len(data) == 0 {
				evs = append(evs, v2Event{err: io.EOF.Error()})
			} else {
				evs = append(evs, v2Event{err: io.ErrUnexpectedEOF.Error(), consumed: len(data)})
			}
			break
		}
		ev := v2Event{f: f, consumed: n}
		if err != nil {
			ev.err = err.Error()
		}
		evs = append(evs, ev)
		data = data[n:]
		var ce *protocol.ClaimError
		if err != nil && !errors.As(err, &ce) {
			break
		}
		parse = rest
	}
	return evs
}

// checkV2Stream checks the properties every v2 decoder has on any input:
// no frame over MaxFrameSize is consumed, strings stay within 255 bytes,
// every error is an I/O end or carries a version 2 code, a frame accepted
// re-encodes to exactly the bytes it came from, and reading one byte at
// a time or parsing a buffer gives the same answers.
func checkV2Stream(t *testing.T, data []byte, evs, oneByte, parsed []v2Event) {
	if !slices.Equal(evs, oneByte) {
		t.Fatalf("one byte at a time:\n%v\nall at once:\n%v", oneByte, evs)
	}
	if len(parsed) != len(evs) {
		t.Fatalf("parsed:\n%v\nread:\n%v", parsed, evs)
	}
	off := 0
	for i, ev := range evs {
		p := parsed[i]
		if p.f != ev.f || (ev.err == "") != (p.err == "") {
			t.Fatalf("event %d: parsed %+v, read %+v", i, p, ev)
		}
		if ev.consumed > protocol.MaxFrameSize {
			t.Fatalf("event %d consumed %d bytes", i, ev.consumed)
		}
		if len(ev.f.Name) > 255 || len(ev.f.Label) > 255 || len(ev.f.Reason) > 255 {
			t.Fatalf("event %d: a string over 255 bytes: %v", i, ev.f)
		}
		raw := data[off : off+ev.consumed]
		off += ev.consumed
		switch ev.err {
		case "":
			var re []byte
			if ev.f.Type == protocol.TypeError { // a version 1 ERROR answering the opening
				re = append([]byte{byte(protocol.TypeError), byte(ev.f.Code), byte(len(ev.f.Reason))}, ev.f.Reason...)
			} else {
				re = protocol.AppendFrame(nil, ev.f)
			}
			if !bytes.Equal(re, raw) {
				t.Fatalf("event %d: decoded %v, re-encoded %s, consumed %s", i, ev.f, spaced(re), spaced(raw))
			}
		case io.EOF.Error():
			if ev.consumed != 0 || off != len(data) {
				t.Fatalf("event %d: io.EOF after %d bytes, %d of %d in all", i, ev.consumed, off, len(data))
			}
		case io.ErrUnexpectedEOF.Error():
			if off != len(data) {
				t.Fatalf("event %d: io.ErrUnexpectedEOF with %d of %d bytes consumed", i, off, len(data))
			}
		default:
			if !p.coded() || !ev.coded() {
				t.Fatalf("event %d: error %q carries no version 2 code", i, ev.err)
			}
			length := int(raw[0])<<8 | int(raw[1])
			if ev.consumed != protocol.FrameHeaderLen && ev.consumed != protocol.FrameHeaderLen+length {
				t.Fatalf("event %d: refused after %d bytes of a frame of length %d", i, ev.consumed, length)
			}
		}
	}
}

// coded reports whether the event's error text is that of a version 2
// code's sentinel (possibly with detail), as CodeOf would find it.
func (ev v2Event) coded() bool {
	for _, c := range protocol.CodesV2 {
		if strings.HasPrefix(ev.err, c.Err().Error()) || strings.Contains(ev.err, ": "+strings.TrimPrefix(c.Err().Error(), "baton: ")) {
			return true
		}
	}
	return false
}

// FuzzV2ClientStream feeds arbitrary bytes to a version 2 server's
// decoders as a connection delivers them after 01 02: the preamble's tail,
// HELLO, then client frames.
func FuzzV2ClientStream(f *testing.F) {
	opening := protocol.AppendHello(make([]byte, 6), 2000, "w1")
	f.Add(opening)
	f.Add([]byte{})
	f.Add(append(slices.Clone(opening), 0xff, 0xff))
	for _, tt := range v2Cases() {
		if tt.r.name == clientReader.name {
			f.Add(append(slices.Clone(opening), tt.enc...))
		}
	}
	for _, tt := range v2ErrCases() {
		switch tt.r.name {
		case helloReader.name:
			f.Add(append(make([]byte, 6), tt.bytes...))
		case clientReader.name:
			f.Add(append(slices.Clone(opening), tt.bytes...))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tail := min(len(data), protocol.PreambleLen-2)
		if err := protocol.ReadPreambleTail(bytes.NewReader(data)); err != nil {
			if tail == len(data) && len(data) < protocol.PreambleLen-2 {
				if err != io.ErrUnexpectedEOF {
					t.Fatalf("short tail: %v", err)
				}
			} else if !errors.Is(err, protocol.ErrUnsupportedVersion) || bytes.Equal(data[:tail], make([]byte, tail)) {
				t.Fatalf("tail % x: %v", data[:tail], err)
			}
			return
		}
		body := data[protocol.PreambleLen-2:]
		evs := v2Stream(bytes.NewReader(body), protocol.ReadHello, protocol.ReadClientFrame)
		one := v2Stream(iotest.OneByteReader(bytes.NewReader(body)), protocol.ReadHello, protocol.ReadClientFrame)
		parsed := v2Parse(body, protocol.ParseHello, protocol.ParseClientFrame)
		checkV2Stream(t, body, evs, one, parsed)
		for i, ev := range evs {
			switch {
			case ev.err == "" && i == 0 && ev.f.Type != protocol.TypeHello:
				t.Fatalf("first frame accepted as %v", ev.f.Type)
			case ev.err == "" && i > 0 && (!v2ClientTypes[ev.f.Type] || ev.f.Type == protocol.TypeHello):
				t.Fatalf("client frame accepted as %v", ev.f.Type)
			case ev.err == "" && ev.f.Type == protocol.TypeClaim && protocol.ValidateClaim(ev.f) != nil:
				t.Fatalf("accepted %v, which ValidateClaim refuses", ev.f)
			}
		}
	})
}

// The frame types of each direction of version 2, written out here
// rather than taken from the decoders, which the fuzzers judge.
// TestV2TypeListsComplete keeps them complete as types are added.
var (
	v2ClientTypes = map[protocol.Type]bool{protocol.TypeHello: true, protocol.TypePing: true, protocol.TypeClaim: true,
		protocol.TypeRelease: true, protocol.TypeRange: true, protocol.TypeRing: true, protocol.TypeDetach: true,
		protocol.TypeProclaim: true, protocol.TypeWatch: true}
	v2ServerTypes = map[protocol.Type]bool{protocol.TypeWelcome: true, protocol.TypePong: true, protocol.TypeGranted: true,
		protocol.TypeQueued: true, protocol.TypeBusy: true, protocol.TypePromoted: true, protocol.TypeReleased: true,
		protocol.TypeRefused: true, protocol.TypeRevoked: true, protocol.TypeSessionError: true, protocol.TypeRangeAnswer: true,
		protocol.TypeRingMember: true, protocol.TypeRingEnd: true, protocol.TypeDetached: true,
		protocol.TypeProclaimed: true, protocol.TypeChange: true}
	v1Types = map[protocol.Type]bool{protocol.TypeAcquire: true, protocol.TypeHeartbeat: true,
		protocol.TypeWaiting: true, protocol.TypeAcquired: true, protocol.TypeError: true}
)

// TestV2TypeListsComplete: every type the package names is in exactly
// one of the lists the stream fuzzers judge by, so a new frame type
// cannot be left out of them (it was, twice: DETACH, then WATCH).
func TestV2TypeListsComplete(t *testing.T) {
	for i := range 256 {
		typ := protocol.Type(i)
		n := 0
		for _, set := range []map[protocol.Type]bool{v2ClientTypes, v2ServerTypes, v1Types} {
			if set[typ] {
				n++
			}
		}
		if named := typ.String() != "UNKNOWN"; named && n != 1 || !named && n != 0 {
			t.Errorf("type 0x%02x (%v) is in %d of the fuzzers' type lists, want exactly 1", i, typ, n)
		}
	}
}

// FuzzV2ServerStream feeds arbitrary bytes to a version 2 client's
// decoders: the answer to the opening, then server frames.
func FuzzV2ServerStream(f *testing.F) {
	welcome := protocol.AppendWelcome(nil, 7)
	f.Add(welcome)
	f.Add([]byte{})
	f.Add(protocol.AppendError(nil, protocol.CodeUnsupportedVersion, ""))
	f.Add([]byte{0x13, 0x10, 0x05, 'a'})
	for _, tt := range v2Cases() {
		if tt.r.name == serverReader.name {
			f.Add(append(slices.Clone(welcome), tt.enc...))
		}
	}
	for _, tt := range v2ErrCases() {
		if tt.r.name == serverReader.name || tt.r.name == answerReader.name {
			f.Add(append(slices.Clone(welcome), tt.bytes...))
			f.Add(tt.bytes)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		evs := v2Stream(bytes.NewReader(data), protocol.ReadHelloAnswer, protocol.ReadServerFrameV2)
		one := v2Stream(iotest.OneByteReader(bytes.NewReader(data)), protocol.ReadHelloAnswer, protocol.ReadServerFrameV2)
		parsed := v2Parse(data, protocol.ParseHelloAnswer, protocol.ParseServerFrameV2)
		checkV2Stream(t, data, evs, one, parsed)
		for i, ev := range evs {
			if ev.err != "" {
				continue
			}
			if ev.f.Type == protocol.TypeError && (i != 0 || data[0] != 0x13) {
				t.Fatalf("a version 1 ERROR accepted as frame %d", i)
			}
			if ev.f.Type.String() == "UNKNOWN" || !v2ServerTypes[ev.f.Type] && ev.f.Type != protocol.TypeError {
				t.Fatalf("server frame accepted as %v", ev.f.Type)
			}
		}
	})
}
