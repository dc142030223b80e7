package protocol_test

import (
	"bytes"
	"errors"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/batonlock/baton/protocol"
)

// v2Doc returns the Version 2 part of docs/protocol.md.
func v2Doc(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile("../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	_, v2, ok := strings.Cut(string(doc), "\n# Version 2\n")
	if !ok {
		t.Fatal(`docs/protocol.md has no "# Version 2" section`)
	}
	return v2
}

var (
	exampleLine = regexp.MustCompile(`^(C→S|S→C)  ((?:[0-9a-f]{2} )*[0-9a-f]{2}) +([A-Z][A-Z0-9-]*)(.*)$`)
	exampleKV   = regexp.MustCompile(`(\w+)=("(?:[^"\\]|\\.)*"|\S+)`)
)

var v2TypeByName = map[string]protocol.Type{
	"HELLO": protocol.TypeHello, "PING": protocol.TypePing, "CLAIM": protocol.TypeClaim,
	"RELEASE": protocol.TypeRelease, "WELCOME": protocol.TypeWelcome, "PONG": protocol.TypePong,
	"GRANTED": protocol.TypeGranted, "QUEUED": protocol.TypeQueued, "BUSY": protocol.TypeBusy,
	"PROMOTED": protocol.TypePromoted, "RELEASED": protocol.TypeReleased, "REFUSED": protocol.TypeRefused,
	"REVOKED": protocol.TypeRevoked, "ERROR": protocol.TypeSessionError,
}

// exampleFrame builds the frame an example line describes, such as
// `CLAIM claim=1 flags=0 mode=exclusive limit=0 name="job"`.
func exampleFrame(t *testing.T, name, rest string) protocol.Frame {
	t.Helper()
	f := protocol.Frame{Type: v2TypeByName[name]}
	for _, kv := range exampleKV.FindAllStringSubmatch(rest, -1) {
		key, val := kv[1], kv[2]
		if strings.HasPrefix(val, `"`) {
			s, err := strconv.Unquote(val)
			if err != nil {
				t.Fatalf("%s: bad string %s: %v", name, val, err)
			}
			switch key {
			case "label":
				f.Label = s
			case "name":
				f.Name = s
			case "reason":
				f.Reason = s
			case "key":
				f.Name = s
			case "node":
				f.Node = s
			case "value":
				f.Value = s
			case "identity":
				f.Identity = s
			default:
				if !ringExampleString(&f, key, s) {
					t.Fatalf("%s: unknown string field %s", name, key)
				}
			}
			continue
		}
		if key == "mode" {
			for _, m := range []protocol.Mode{protocol.ModeExclusive, protocol.ModeShared, protocol.ModeSemaphore} {
				if m.String() == val {
					f.Mode = m
				}
			}
			if f.Mode == 0 {
				t.Fatalf("%s: unknown mode %s", name, val)
			}
			continue
		}
		if key == "secret" {
			b := unhex(t, strings.Join(regexp.MustCompile("..").FindAllString(strings.TrimPrefix(val, "0x"), -1), " "))
			if len(b) != protocol.SecretLen {
				t.Fatalf("%s: secret %s is not %d bytes", name, val, protocol.SecretLen)
			}
			f.Secret = [protocol.SecretLen]byte(b)
			continue
		}
		n, err := strconv.ParseUint(val, 0, 64)
		if err != nil {
			t.Fatalf("%s: bad number %s=%s", name, key, val)
		}
		switch key {
		case "lease_ms":
			f.LeaseMS = uint32(n)
		case "flags":
			f.Flags = uint8(n)
		case "seq":
			f.Seq = n
		case "claim":
			f.Claim = uint32(n)
		case "limit":
			f.Limit = uint32(n)
		case "session":
			f.Session = n
		case "token":
			f.Token = n
		case "ticket":
			f.Ticket = n
		case "ring":
			f.Ring = n
		case "code":
			f.Code = protocol.Code(n)
		case "kind":
			f.Change = protocol.ChangeKind(n)
		case "status" /* PROCLAIMED's; ANSWER's is the range helper's */ :
			if f.Type != protocol.TypeProclaimed {
				rangeExampleField(&f, key, n)
				continue
			}
			f.Proclaim = protocol.ProclaimStatus(n)
		default:
			if rangeExampleField(&f, key, n) || ringExampleField(&f, key, n) {
				continue
			}
			t.Fatalf("%s: unknown field %s", name, key)
		}
	}
	return f
}

// TestV2DocExamples checks every example line of the Version 2 part of
// docs/protocol.md against the encoders and the decoders, so that the
// document and the code cannot drift apart.
func TestV2DocExamples(t *testing.T) {
	doc := v2Doc(t)
	seen := map[string]int{}
	lines := 0
	inBlock := false
	type refusal struct {
		line       int
		err        error
		code       protocol.Code
		claimLevel bool
	}
	var pending *refusal
	for i, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "```") {
			inBlock = !inBlock
			continue
		}
		if !inBlock || !(strings.HasPrefix(line, "C→S") || strings.HasPrefix(line, "S→C")) {
			continue
		}
		if strings.Contains(line, "(close)") {
			continue
		}
		m := exampleLine.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("Version 2 line %d is not an example this test understands: %q", i+1, line)
			continue
		}
		lines++
		dir, hexText, name, rest := m[1], m[2], m[3], m[4]
		want := unhex(t, hexText)
		seen[name]++
		var got []byte
		switch name {
		case "PREAMBLE":
			got = protocol.AppendPreamble(nil)
		case "V1-ACQUIRE":
			f := exampleFrame(t, name, rest)
			got = protocol.AppendAcquire(nil, protocol.Acquire{Version: protocol.Version, LeaseMS: f.LeaseMS, Name: f.Name})
		case "V1-ERROR":
			f := exampleFrame(t, name, rest)
			f.Type = protocol.TypeError
			got = protocol.AppendError(nil, f.Code, f.Reason)
			if d, n, err := protocol.ParseHelloAnswer(want); err != nil || d != f || n != len(want) {
				t.Errorf("line %d: ParseHelloAnswer = %v, %d, %v; want %v", i+1, d, n, err, f)
			}
		default:
			if _, ok := v2TypeByName[name]; !ok {
				t.Errorf("line %d: unknown frame name %s", i+1, name)
				continue
			}
			f := exampleFrame(t, name, rest)
			got = protocol.AppendFrame(nil, f)
			parse := protocol.ParseServerFrameV2
			switch {
			case dir == "C→S" && name == "HELLO":
				parse = protocol.ParseHello
			case dir == "C→S":
				parse = protocol.ParseClientFrame
			}
			if pending != nil && (f.Type == protocol.TypeRefused || f.Type == protocol.TypeSessionError) {
				if f.Code != pending.code || (f.Type == protocol.TypeRefused) != pending.claimLevel {
					t.Errorf("line %d: %v answers line %d, whose frame the decoder refuses with %v", i+1, f, pending.line, pending.err)
				}
				pending = nil
			}
			d, n, err := parse(want)
			if (err == nil && d != f) || n != len(want) {
				t.Errorf("line %d: decoded %v, %d, %v; want %v", i+1, d, n, err, f)
			}
			if err != nil {
				// An example of a refused request: the next REFUSED
				// or ERROR must carry the decoder's code.
				code, _ := protocol.CodeOf(err)
				var ce *protocol.ClaimError
				pending = &refusal{i + 1, err, code, errors.As(err, &ce)}
			}
		}
		if !bytes.Equal(got, want) {
			t.Errorf("line %d: %s %s\n  doc:     %s\n  encoder: %s", i+1, name, rest, spaced(want), spaced(got))
		}
	}
	if pending != nil {
		t.Errorf("line %d: the decoder refuses it with %v, and no REFUSED or ERROR follows", pending.line, pending.err)
	}
	if inBlock {
		t.Errorf("unterminated code block in the Version 2 part")
	}
	for name := range v2TypeByName {
		if seen[name] == 0 {
			t.Errorf("no example of %s in the Version 2 part", name)
		}
	}
	if seen["PREAMBLE"] == 0 || seen["V1-ERROR"] == 0 {
		t.Errorf("no example of the preamble or of the fallback: %v", seen)
	}
	t.Logf("%d example lines checked", lines)
}

// TestV2DocTables checks the frame type and error code tables of the
// Version 2 part against the constants.
func TestV2DocTables(t *testing.T) {
	doc := v2Doc(t)
	if first, _, _ := strings.Cut(strings.TrimSpace(doc), "\n\n"); !strings.Contains(first, "server accepts it") {
		t.Errorf("the Version 2 part must say at its top that the server accepts it; it starts %q", first)
	}
	typeRow := regexp.MustCompile("(?m)^\\| `0x([0-9a-f]{2})` \\| ([A-Z]+) \\|")
	types := map[protocol.Type]bool{}
	for _, m := range typeRow.FindAllStringSubmatch(doc, -1) {
		n, _ := strconv.ParseUint(m[1], 16, 8)
		typ := protocol.Type(n)
		if typ.String() != m[2] || v2TypeByName[m[2]] != typ {
			t.Errorf("doc type 0x%s is %s; the code calls 0x%s %v", m[1], m[2], m[1], typ)
		}
		types[typ] = true
	}
	if len(types) != len(v2TypeByName) {
		t.Errorf("doc lists %d frame types, the code defines %d", len(types), len(v2TypeByName))
	}

	_, codes, ok := strings.Cut(doc, "\n## v2 error codes\n")
	if !ok {
		t.Fatal("no v2 error codes section")
	}
	codes, _, _ = strings.Cut(codes, "\n## ")
	codeRow := regexp.MustCompile(`(?m)^\| 0x([0-9a-f]{2}) \| ([^|]+) \|`)
	var listed []protocol.Code
	for _, m := range codeRow.FindAllStringSubmatch(codes, -1) {
		n, _ := strconv.ParseUint(m[1], 16, 8)
		c := protocol.Code(n)
		listed = append(listed, c)
		if meaning := strings.TrimSpace(m[2]); !strings.HasPrefix(meaning, c.Reason()) {
			t.Errorf("doc gives 0x%s as %q; the code's reason is %q", m[1], meaning, c.Reason())
		}
	}
	if len(listed) != len(protocol.CodesV2) {
		t.Fatalf("doc lists %d v2 codes %v, CodesV2 has %d", len(listed), listed, len(protocol.CodesV2))
	}
	for i, c := range listed {
		if protocol.CodesV2[i] != c {
			t.Errorf("doc code row %d is %v, CodesV2 has %v", i, c, protocol.CodesV2[i])
		}
	}
}
