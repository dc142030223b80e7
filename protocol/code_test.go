package protocol_test

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/batonlock/baton/protocol"
)

// codeRow is one row of an error code table of docs/protocol.md.
type codeRow struct {
	code protocol.Code
	byte uint8
	err  error
}

// The error code table of docs/protocol.md.
var wantCodes = []codeRow{
	{protocol.CodeShuttingDown, 0x01, protocol.ErrShuttingDown},
	{protocol.CodeClosedByAdmin, 0x02, protocol.ErrClosedByAdmin},
	{protocol.CodeNotOwner, 0x03, protocol.ErrNotOwner},
	{protocol.CodeLimitReached, 0x07, protocol.ErrLimitReached},
	{protocol.CodeUnsupportedVersion, 0x10, protocol.ErrUnsupportedVersion},
	{protocol.CodeFirstNotAcquire, 0x11, protocol.ErrFirstNotAcquire},
	{protocol.CodeDuplicateAcquire, 0x12, protocol.ErrDuplicateAcquire},
	{protocol.CodeUnknownMessage, 0x13, protocol.ErrUnknownMessage},
	{protocol.CodeEmptyName, 0x14, protocol.ErrEmptyName},
	{protocol.CodeNameTooLong, 0x15, protocol.ErrNameTooLong},
	{protocol.CodeInvalidName, 0x16, protocol.ErrInvalidName},
	{protocol.CodeInvalidLease, 0x17, protocol.ErrInvalidLease},
	{protocol.CodeNotAuthorized, 0x18, protocol.ErrNotAuthorized},
}

func TestCodeValues(t *testing.T) {
	if len(protocol.Codes) != len(wantCodes) {
		t.Fatalf("Codes has %d entries, docs/protocol.md defines %d", len(protocol.Codes), len(wantCodes))
	}
	for i, w := range wantCodes {
		if uint8(w.code) != w.byte {
			t.Errorf("code constant %v is 0x%02x, want 0x%02x", w.code, uint8(w.code), w.byte)
		}
		if protocol.Codes[i] != w.code {
			t.Errorf("Codes[%d] = %v, want %v", i, protocol.Codes[i], w.code)
		}
	}
	if !slices.IsSorted(protocol.Codes) {
		t.Errorf("Codes is not in numeric order: %v", protocol.Codes)
	}
}

// The error code table of docs/protocol.md, version 2: the version 1 codes
// it shares, then its own.
var wantCodesV2 = []codeRow{
	{protocol.CodeShuttingDown, 0x01, protocol.ErrShuttingDown},
	{protocol.CodeClosedByAdmin, 0x02, protocol.ErrClosedByAdmin},
	{protocol.CodeNotOwner, 0x03, protocol.ErrNotOwner},
	{protocol.CodeReassertRefused, 0x04, protocol.ErrReassertRefused},
	{protocol.CodeStaleRing, 0x05, protocol.ErrStaleRing},
	{protocol.CodeLimitReached, 0x07, protocol.ErrLimitReached},
	{protocol.CodeSlowWatcher, 0x08, protocol.ErrSlowWatcher},
	{protocol.CodeUnsupportedVersion, 0x10, protocol.ErrUnsupportedVersion},
	{protocol.CodeUnknownMessage, 0x13, protocol.ErrUnknownMessage},
	{protocol.CodeEmptyName, 0x14, protocol.ErrEmptyName},
	{protocol.CodeInvalidName, 0x16, protocol.ErrInvalidName},
	{protocol.CodeInvalidLease, 0x17, protocol.ErrInvalidLease},
	{protocol.CodeNotAuthorized, 0x18, protocol.ErrNotAuthorized},
	{protocol.CodeInvalidFrame, 0x19, protocol.ErrInvalidFrame},
	{protocol.CodeFrameTooLong, 0x1a, protocol.ErrFrameTooLong},
	{protocol.CodeFirstNotHello, 0x1b, protocol.ErrFirstNotHello},
	{protocol.CodeDuplicateHello, 0x1c, protocol.ErrDuplicateHello},
	{protocol.CodeInvalidLabel, 0x1d, protocol.ErrInvalidLabel},
	{protocol.CodeUnsupportedFeature, 0x1e, protocol.ErrUnsupportedFeature},
	{protocol.CodeClaimInUse, 0x1f, protocol.ErrClaimInUse},
	{protocol.CodeUnknownMode, 0x20, protocol.ErrUnknownMode},
	{protocol.CodeInvalidLimit, 0x21, protocol.ErrInvalidLimit},
	{protocol.CodeLimitMismatch, 0x22, protocol.ErrLimitMismatch},
	{protocol.CodeModeConflict, 0x23, protocol.ErrModeConflict},
	{protocol.CodeValueTooLong, 0x24, protocol.ErrValueTooLong},
}

func TestCodeValuesV2(t *testing.T) {
	if len(protocol.CodesV2) != len(wantCodesV2) {
		t.Fatalf("CodesV2 has %d entries, docs/protocol.md defines %d", len(protocol.CodesV2), len(wantCodesV2))
	}
	for i, w := range wantCodesV2 {
		if uint8(w.code) != w.byte {
			t.Errorf("code constant %v is 0x%02x, want 0x%02x", w.code, uint8(w.code), w.byte)
		}
		if protocol.CodesV2[i] != w.code {
			t.Errorf("CodesV2[%d] = %v, want %v", i, protocol.CodesV2[i], w.code)
		}
		if w.code.Err() != w.err {
			t.Errorf("%v.Err() = %v, want the sentinel %v", w.code, w.code.Err(), w.err)
		}
		if c, ok := protocol.CodeOf(w.err); !ok || c != w.code {
			t.Errorf("CodeOf(%v) = %v, %v", w.err, c, ok)
		}
		if !w.code.Temporary() && (w.err == protocol.ErrShuttingDown || w.err == protocol.ErrClosedByAdmin) {
			t.Errorf("%v is a server condition", w.code)
		}
	}
	if !slices.IsSorted(protocol.CodesV2) {
		t.Errorf("CodesV2 is not in numeric order: %v", protocol.CodesV2)
	}
	// Version 1's code list is unchanged: the v2 codes are not in it.
	for _, c := range protocol.Codes {
		if c > protocol.CodeNotAuthorized {
			t.Errorf("Codes holds %v, a version 2 code", c)
		}
	}
	// Every v2 sentinel is distinct from every other.
	for _, a := range wantCodesV2 {
		for _, b := range wantCodesV2 {
			if a.code != b.code && errors.Is(a.err, b.err) {
				t.Errorf("%v matches the sentinel of %v", a.err, b.code)
			}
		}
	}
}

func TestCodeTemporaryByRange(t *testing.T) {
	for i := 0; i < 256; i++ {
		c := protocol.Code(i)
		if want := i < 0x10; c.Temporary() != want {
			t.Errorf("Code(0x%02x).Temporary() = %v, want %v", i, c.Temporary(), want)
		}
	}
}

func TestCodeErrRoundTrip(t *testing.T) {
	for _, w := range wantCodes {
		err := w.code.Err()
		if err != w.err {
			t.Errorf("%v.Err() = %v, want the sentinel %v", w.code, err, w.err)
		}
		if code, ok := protocol.CodeOf(err); !ok || code != w.code {
			t.Errorf("CodeOf(%v) = %v, %v; want %v, true", err, code, ok, w.code)
		}
		wrapped := fmt.Errorf("session 7: %w", err)
		if code, ok := protocol.CodeOf(wrapped); !ok || code != w.code {
			t.Errorf("CodeOf(wrapped %v) = %v, %v; want %v, true", err, code, ok, w.code)
		}
		if !errors.Is(wrapped, w.err) {
			t.Errorf("errors.Is(wrapped, %v) = false", w.err)
		}
		for _, other := range wantCodes {
			if other.code != w.code && errors.Is(err, other.err) {
				t.Errorf("%v matches the sentinel of %v", err, other.code)
			}
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "baton: ") || !strings.HasSuffix(msg, w.code.Reason()) {
			t.Errorf("%v.Err().Error() = %q, want \"baton: \" + %q", w.code, msg, w.code.Reason())
		}
	}
}

func TestUnknownCodes(t *testing.T) {
	known := map[protocol.Code]bool{}
	for _, c := range append(slices.Clone(protocol.Codes), protocol.CodesV2...) {
		known[c] = true
	}
	for i := 0; i < 256; i++ {
		c := protocol.Code(i)
		if known[c] {
			continue
		}
		if err := c.Err(); err != nil {
			t.Errorf("Code(0x%02x).Err() = %v, want nil", i, err)
		}
		want := "unknown client error"
		if i < 0x10 {
			want = "unknown server condition"
		}
		if got := c.Reason(); got != want {
			t.Errorf("Code(0x%02x).Reason() = %q, want %q", i, got, want)
		}
	}
	for _, err := range []error{nil, io.EOF, errors.New("baton: server shutting down")} {
		if code, ok := protocol.CodeOf(err); ok {
			t.Errorf("CodeOf(%v) = %v, true; want false", err, code)
		}
	}
}

func TestCodeString(t *testing.T) {
	tests := map[protocol.Code]string{
		protocol.CodeShuttingDown:  "0x01 (server shutting down)",
		protocol.CodeNotAuthorized: "0x18 (not authorized for lock)",
		protocol.Code(0x0f):        "0x0f (unknown server condition)",
		protocol.Code(0xff):        "0xff (unknown client error)",
	}
	for c, want := range tests {
		if got := c.String(); got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
	}
}
