package protocol_test

import (
	"bytes"
	"errors"
	"io"
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
