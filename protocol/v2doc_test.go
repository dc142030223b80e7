package protocol_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/batonlock/baton/protocol"
)

// protocolPages are the pages of the protocol specification that follow
// docs/protocol.md (version 2, one page per part, the one that opens it
// first) and the implementer's guide, whose exchanges are examples too.
var protocolPages = []string{
	"protocol-v2.md", "protocol-v2-server.md", "protocol-v2-client.md",
	"protocol-v2-ranges.md", "protocol-v2-watches.md", "protocol-v2-resume.md",
	"protocol-v2-tickets.md", "protocol-v2-ring.md", "protocol-guide.md",
}

// docPage is one page of protocolPages and its text.
type docPage struct{ name, text string }

// v2Pages reads protocolPages and fails
// when docs/ has a protocol page the list leaves out, so that no page's
// examples go unchecked.
func v2Pages(t *testing.T) []docPage {
	t.Helper()
	all, err := filepath.Glob("../docs/protocol*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range all {
		if name := filepath.Base(p); name != "protocol.md" && !slices.Contains(protocolPages, name) {
			t.Errorf("docs/%s is not in protocolPages: its examples would go unchecked", name)
		}
	}
	var pages []docPage
	for _, name := range protocolPages {
		b, err := os.ReadFile("../docs/" + name)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(b), "# ") {
			t.Fatalf("docs/%s does not open with a title", name)
		}
		pages = append(pages, docPage{name, string(b)})
	}
	return pages
}

// v2Doc returns the pages of v2Pages as one text, without their titles:
// it opens with the first paragraph of docs/protocol-v2.md.
func v2Doc(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, p := range v2Pages(t) {
		_, text, _ := strings.Cut(p.text, "\n")
		b.WriteString(text)
		b.WriteString("\n")
	}
	return b.String()
}

// section returns the text of doc's section headed "## heading", up to
// the next heading of level 1 or 2.
func section(t *testing.T, doc, heading string) string {
	t.Helper()
	_, sec, ok := strings.Cut(doc, "\n## "+heading+"\n")
	if !ok {
		t.Fatalf("no %q section", heading)
	}
	if i := regexp.MustCompile(`\n##? `).FindStringIndex(sec); i != nil {
		sec = sec[:i[0]]
	}
	return sec
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
	seen := map[string]int{}
	lines := 0
	type refusal struct {
		page       string
		line       int
		err        error
		code       protocol.Code
		claimLevel bool
	}
	var pending *refusal
	for _, page := range v2Pages(t) {
		inBlock := false
		for i, line := range strings.Split(page.text, "\n") {
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
				t.Errorf("%s line %d is not an example this test understands: %q", page.name, i+1, line)
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
			case "V1-WAITING":
				got = protocol.AppendWaiting(nil)
			case "V1-HEARTBEAT":
				got = protocol.AppendHeartbeat(nil)
			case "V1-ACQUIRED":
				got = protocol.AppendAcquired(nil, exampleFrame(t, name, rest).Token)
			case "V1-ERROR":
				f := exampleFrame(t, name, rest)
				f.Type = protocol.TypeError
				got = protocol.AppendError(nil, f.Code, f.Reason)
				if d, n, err := protocol.ParseHelloAnswer(want); err != nil || d != f || n != len(want) {
					t.Errorf("%s:%d: ParseHelloAnswer = %v, %d, %v; want %v", page.name, i+1, d, n, err, f)
				}
			default:
				if _, ok := v2TypeByName[name]; !ok {
					t.Errorf("%s:%d: unknown frame name %s", page.name, i+1, name)
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
						t.Errorf("%s:%d: %v answers line %d, whose frame the decoder refuses with %v", page.name, i+1, f, pending.line, pending.err)
					}
					pending = nil
				}
				d, n, err := parse(want)
				if (err == nil && d != f) || n != len(want) {
					t.Errorf("%s:%d: decoded %v, %d, %v; want %v", page.name, i+1, d, n, err, f)
				}
				if err != nil {
					// An example of a refused request: the next REFUSED
					// or ERROR must carry the decoder's code.
					code, _ := protocol.CodeOf(err)
					var ce *protocol.ClaimError
					pending = &refusal{page.name, i + 1, err, code, errors.As(err, &ce)}
				}
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s:%d: %s %s\n  doc:     %s\n  encoder: %s", page.name, i+1, name, rest, spaced(want), spaced(got))
			}
		}
		if inBlock {
			t.Errorf("unterminated code block in %s", page.name)
		}
	}
	if pending != nil {
		t.Errorf("%s:%d: the decoder refuses it with %v, and no REFUSED or ERROR follows", pending.page, pending.line, pending.err)
	}
	for name := range v2TypeByName {
		if seen[name] == 0 {
			t.Errorf("no example of %s in the protocol pages", name)
		}
	}
	for _, name := range []string{"PREAMBLE", "V1-ACQUIRE", "V1-WAITING", "V1-HEARTBEAT", "V1-ACQUIRED", "V1-ERROR"} {
		if seen[name] == 0 {
			t.Errorf("no example of %s in the protocol pages: %v", name, seen)
		}
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

	codes := section(t, doc, "v2 error codes")
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
