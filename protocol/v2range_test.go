package protocol_test

import (
	"bytes"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/batonlock/baton/protocol"
)

func init() {
	v2TypeByName["RANGE"] = protocol.TypeRange
	v2TypeByName["ANSWER"] = protocol.TypeRangeAnswer
}

// rangeExampleField sets the range-frame field key of an example line in
// docs/protocol-v2-ranges.md; it reports whether key is one.
func rangeExampleField(f *protocol.Frame, key string, n uint64) bool {
	switch key {
	case "req":
		f.Claim = uint32(n)
	case "op":
		f.Op = protocol.RangeOp(n)
	case "type":
		f.LockType = uint8(n)
	case "owner":
		f.Owner = n
	case "start":
		f.Start = n
	case "end":
		f.End = n
	case "status":
		f.Status = protocol.RangeStatus(n)
	default:
		return false
	}
	return true
}

func TestRangeRoundTrip(t *testing.T) {
	frames := []protocol.Frame{
		{Type: protocol.TypeRange, Claim: 1, Op: protocol.RangeSet, Flags: protocol.RangeWait, LockType: protocol.LockWrite,
			Owner: 1<<64 - 1, Start: 5, End: protocol.MaxRangeEnd, Name: "dir/file.db"},
		{Type: protocol.TypeRange, Claim: 2, Op: protocol.RangeRelease, Flags: protocol.RangeFlock, Owner: 3, Name: "k"},
		{Type: protocol.TypeRange, Claim: 3, Op: protocol.RangeResume, LockType: protocol.LockRead, Owner: 2,
			Start: 10, End: 20, Name: "dir/file.db", Session: 77, Secret: [protocol.SecretLen]byte{1, 2, 3}, Node: "n2"},
		{Type: protocol.TypeRangeAnswer, Claim: 1, Status: protocol.RangeConflict, LockType: protocol.LockRead,
			Owner: 9, Session: 4, Start: 1, End: 2, Label: "host-a"},
		{Type: protocol.TypeRangeAnswer, Claim: 7, Status: protocol.RangePromoted, Token: 42},
		{Type: protocol.TypeRangeAnswer, Claim: 8, Status: protocol.RangeUnavailable},
	}
	for _, f := range frames {
		b := protocol.AppendFrame(nil, f)
		parse := protocol.ParseServerFrameV2
		if f.Type == protocol.TypeRange {
			parse = protocol.ParseClientFrame
		}
		g, n, err := parse(b)
		if err != nil || n != len(b) || g != f {
			t.Errorf("%v: decoded %v, %d, %v", f, g, n, err)
		}
		if _, _, err := parse(b[:len(b)-1]); err != nil {
			t.Errorf("%v: a frame cut short is an error %v, want more bytes", f, err)
		}
	}
}

// TestRangeResumeMalformed: a RangeResume whose earlier session is cut
// short, or whose node runs past the frame, is malformed; the same bytes
// under another op are a frame with trailing bytes, malformed too.
func TestRangeResumeMalformed(t *testing.T) {
	f := protocol.Frame{Type: protocol.TypeRange, Claim: 3, Op: protocol.RangeResume, LockType: protocol.LockWrite,
		Owner: 2, Name: "k", Session: 9, Node: "n1"}
	b := protocol.AppendFrame(nil, f)
	// The frame's length prefix stays; its payload loses the node.
	short := protocol.AppendFrame(nil, protocol.Frame{Type: protocol.TypeRange, Claim: 3, Op: protocol.RangeSet,
		LockType: protocol.LockWrite, Owner: 2, Name: "k"})
	short = append(short, make([]byte, 8+protocol.SecretLen)...) // session, secret, no node_len
	fix := func(b []byte, op protocol.RangeOp) []byte {
		b = bytes.Clone(b)
		b[0], b[1] = byte((len(b)-2)>>8), byte(len(b)-2) // the length prefix
		b[3+4] = byte(op)                                // after the prefix and type: req, then op
		return b
	}
	for name, bad := range map[string][]byte{
		"no node_len":       fix(short, protocol.RangeResume),
		"node past the end": fix(append(bytes.Clone(b[:len(b)-2]), 9), protocol.RangeResume),
		"trailing bytes":    fix(b, protocol.RangeSet),
	} {
		if _, _, err := protocol.ParseClientFrame(bad); !errors.Is(err, protocol.ErrInvalidFrame) {
			t.Errorf("%s: %v, want ErrInvalidFrame", name, err)
		}
	}
}

// TestRangeStatusNames: every status of docs/protocol-v2-ranges.md has its name,
// through 0x0c (unavailable: a cluster node cannot serve the key now),
// the hop-only 0x0d (moved), 0x0e (limit) and 0x0f (denied).
func TestRangeStatusNames(t *testing.T) {
	want := []string{"granted", "queued", "conflict", "promoted", "done", "free", "locked",
		"deadlock", "cancelled", "invalid", "req-in-use", "unavailable", "moved", "limit", "denied"}
	for i, name := range want {
		if got := protocol.RangeStatus(i + 1).String(); got != name {
			t.Errorf("status 0x%02x is %q, want %q", i+1, got, name)
		}
	}
	if protocol.RangeUnavailable != 0x0c {
		t.Errorf("RangeUnavailable is 0x%02x, want 0x0c", uint8(protocol.RangeUnavailable))
	}
	if protocol.RangeMoved != 0x0d || protocol.RangeAdopt != 0x06 {
		t.Errorf("RangeMoved is 0x%02x, RangeAdopt 0x%02x, want 0x0d and 0x06", uint8(protocol.RangeMoved), uint8(protocol.RangeAdopt))
	}
	if protocol.RangeLimit != 0x0e {
		t.Errorf("RangeLimit is 0x%02x, want 0x0e", uint8(protocol.RangeLimit))
	}
	if protocol.RangeDenied != 0x0f {
		t.Errorf("RangeDenied is 0x%02x, want 0x0f", uint8(protocol.RangeDenied))
	}
	if got := protocol.RangeStatus(0x10).String(); got != "status(0x10)" {
		t.Errorf("status 0x10 is %q", got)
	}
}

func TestRangeRefusals(t *testing.T) {
	set := protocol.AppendFrame(nil, protocol.Frame{Type: protocol.TypeRange, Op: protocol.RangeSet, LockType: 1, Name: "k"})
	// A reserved flag is refused at session level.
	bad := bytes.Clone(set)
	bad[3+5] = 0x80
	if _, _, err := protocol.ParseClientFrame(bad); !errors.Is(err, protocol.ErrUnsupportedFeature) {
		t.Errorf("reserved flag: %v, want ErrUnsupportedFeature", err)
	}
	// A key length running past the payload is malformed.
	bad = bytes.Clone(set)
	bad[len(bad)-2] = 2
	if _, _, err := protocol.ParseClientFrame(bad); !errors.Is(err, protocol.ErrInvalidFrame) {
		t.Errorf("key past the end: %v, want ErrInvalidFrame", err)
	}
	// Each direction's frame from the other is an unknown message.
	if _, _, err := protocol.ParseServerFrameV2(set); !errors.Is(err, protocol.ErrUnknownMessage) {
		t.Errorf("RANGE from the server: %v", err)
	}
	ans := protocol.AppendRangeAnswer(nil, 1, protocol.RangeDone, 0, protocol.Frame{})
	if _, _, err := protocol.ParseClientFrame(ans); !errors.Is(err, protocol.ErrUnknownMessage) {
		t.Errorf("ANSWER from the client: %v", err)
	}
}

// FuzzV2Range feeds arbitrary payloads to the range decoders of both
// directions: no panic, and a frame accepted re-encodes to its bytes.
func FuzzV2Range(f *testing.F) {
	f.Add(byte(protocol.TypeRange), protocol.AppendFrame(nil, protocol.Frame{Type: protocol.TypeRange, Op: 1, LockType: 2, Name: "k"})[3:])
	f.Add(byte(protocol.TypeRangeAnswer), protocol.AppendRangeAnswer(nil, 3, protocol.RangeLocked, 0, protocol.Frame{Label: "x", End: 9})[3:])
	f.Add(byte(protocol.TypeRangeAnswer), protocol.AppendRangeAnswer(nil, 4, protocol.RangeUnavailable, 0, protocol.Frame{})[3:])
	f.Fuzz(func(t *testing.T, typ byte, payload []byte) {
		if len(payload) > protocol.MaxFrameLen-1 {
			return
		}
		b := []byte{byte((len(payload) + 1) >> 8), byte(len(payload) + 1), typ}
		b = append(b, payload...)
		for _, parse := range []func([]byte) (protocol.Frame, int, error){protocol.ParseClientFrame, protocol.ParseServerFrameV2} {
			g, n, err := parse(b)
			if err != nil || (g.Type != protocol.TypeRange && g.Type != protocol.TypeRangeAnswer) {
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

// TestV2DocRangeStatuses checks the status table of "v2 range locks" in
// docs/protocol-v2-ranges.md against the RangeStatus constants: every status, in
// order, by its name, and none more.
func TestV2DocRangeStatuses(t *testing.T) {
	sec := section(t, v2Doc(t), "v2 range locks")
	row := regexp.MustCompile("(?m)^\\| `0x([0-9a-f]{2})` \\| ([a-z][a-z ]*) \\|")
	rows := row.FindAllStringSubmatch(sec, -1)
	for i, m := range rows {
		n, _ := strconv.ParseUint(m[1], 16, 8)
		if n != uint64(i+1) {
			t.Errorf("status row %d is 0x%s, want 0x%02x", i, m[1], i+1)
		}
		if name := strings.ReplaceAll(m[2], " ", "-"); protocol.RangeStatus(n).String() != name {
			t.Errorf("doc status 0x%s is %q; the code calls it %v", m[1], m[2], protocol.RangeStatus(n))
		}
	}
	if last := protocol.RangeDenied; len(rows) != int(last) {
		t.Errorf("doc lists %d range statuses, the code defines %d (through %v)", len(rows), last, last)
	}
}
