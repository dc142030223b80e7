package locktable_test

// Scenario tests replay plain-text files from testdata/scenarios, in the
// spirit of etcd-io/raft's datadriven tests. A file is a sequence of
// blocks; each block is one command, a line "----", and the expected
// output, which ends at a blank line or the end of the file. Lines that
// start with '#' and blank lines between blocks are comments:
//
//	# owner, then a waiter
//	acquire t=0 c=1 lock=a lease=1s addr=10.0.0.1:1
//	----
//	status owner token=1 deadline=1s
//	event granted lock=a c=1 addr=10.0.0.1:1 token=1 waited=0s
//
// Arguments are key=value. A value may be a Go-quoted string, optionally
// repeated: lock="é"*128 is a 256-byte name. Times (t=) are offsets from
// the scenario's epoch, never go back, and default to the previous
// command's time. Times and leases are Go durations, a bare integer
// meaning milliseconds.
//
// Commands (every table operation, plus setup and queries):
//
//	new [tokens=counter|clock] [wall=UNIX] [start=UNIX]
//	                                        fresh table (a file starts with tokens=counter);
//	                                        clock tokens began at start (default 0) and
//	                                        their waits advance the wall clock
//	wall unix=UNIX                          set the wall clock of tokens=clock
//	acquire [t=] c= lock= lease= [addr=] [id=]
//	heartbeat [t=] c=
//	end [t=] c= [reason=graceful|expired|io_timeout|force|shutdown|kick|protocol_error]
//	expire [t=] c=
//	force-release [t=] lock=
//	kick [t=] lock= addr=
//	revoke [t=] deny= [owners=yes]          end claims whose identity is deny (as an ACL reload)
//	shutdown [t=]
//	snapshot [prefix=]                      every lock (with that name prefix)
//	lock name=                              one lock
//	counts
//
// and the general (version 2) operations, where s= is a session and c= a
// claim of that session; mode= is exclusive (the default), shared or
// semaphore (with limit=):
//
//	open [t=] s= lease= [addr=] [id=] [label=]
//	claim [t=] s= c= lock= [mode=] [limit=] [nowait=yes]
//	touch [t=] s=                           session heartbeat
//	status s= c=
//	release [t=] s= c=
//	close [t=] s= [reason=]
//	expire-session [t=] s=
//	force-release [t=] lock= s= c=          ForceReleaseClaim
//	kick [t=] lock= s= c=                   KickClaim
//	sizes                                   Counts, Holders and Sessions
//
// In the output a version 1 claim is c=SESSION (its claim id is always
// V1Claim), a version 2 claim s=SESSION c=CLAIM; modes other than
// exclusive, labels and semaphore limits are printed when present.
//
// After every command the runner also checks that Counts, Snapshot and
// Lock agree and that grant tokens only increase.
//
// To accept the current behaviour as the expected output:
//
//	go test ./internal/locktable -run Scenario -rewrite

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/batonlock/baton/internal/locktable"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected outputs of testdata/scenarios")

func TestScenarios(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "scenarios", "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no scenario files")
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			runScenarioFile(t, file)
		})
	}
}

// A chunk is either verbatim text (comments, blank lines) or a block.
type chunk struct {
	text  string // verbatim, when block is nil
	block *block
}

type block struct {
	line int // of the command, 1-based
	cmd  string
	want []string
	got  []string
}

func parseScenario(t *testing.T, file string) []chunk {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	var chunks []chunk
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			chunks = append(chunks, chunk{text: line})
			continue
		}
		b := &block{line: i + 1, cmd: line}
		if i+1 >= len(lines) || lines[i+1] != "----" {
			t.Fatalf("%s:%d: command %q is not followed by ----", file, i+1, line)
		}
		i += 2
		for ; i < len(lines) && strings.TrimSpace(lines[i]) != ""; i++ {
			b.want = append(b.want, lines[i])
		}
		i-- // the blank line, if any, is a verbatim chunk
		chunks = append(chunks, chunk{block: b})
	}
	return chunks
}

func runScenarioFile(t *testing.T, file string) {
	chunks := parseScenario(t, file)
	s := newScenario(t)
	for _, c := range chunks {
		b := c.block
		if b == nil {
			continue
		}
		s.where = fmt.Sprintf("%s:%d", file, b.line)
		b.got = s.run(b.cmd)
		if !*rewrite && strings.Join(b.got, "\n") != strings.Join(b.want, "\n") {
			t.Errorf("%s: %s\n--- want\n%s\n--- got\n%s", s.where, b.cmd,
				strings.Join(b.want, "\n"), strings.Join(b.got, "\n"))
		}
	}
	if !*rewrite {
		return
	}
	var out strings.Builder
	for _, c := range chunks {
		if c.block == nil {
			out.WriteString(c.text + "\n")
			continue
		}
		out.WriteString(c.block.cmd + "\n----\n")
		for _, l := range c.block.got {
			out.WriteString(l + "\n")
		}
	}
	if err := os.WriteFile(file, []byte(out.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// epoch is the scenario's time zero: any instant works, since the table
// only ever compares and subtracts the times it is given.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type scenario struct {
	t         *testing.T
	where     string
	table     *locktable.Table
	now       time.Duration
	wall      time.Time // of tokens=clock
	lastToken uint64
}

func newScenario(t *testing.T) *scenario {
	return &scenario{t: t, table: locktable.New(&locktable.CounterTokens{})}
}

// args parses key=value arguments.
type args struct {
	s    *scenario
	cmd  string
	vals map[string]string
}

func (s *scenario) parseArgs(line string) (string, args) {
	a := args{s: s, vals: map[string]string{}}
	rest := strings.TrimSpace(line)
	first := true
	for rest != "" {
		end := strings.IndexFunc(rest, unicode.IsSpace)
		if end < 0 {
			end = len(rest)
		}
		if first {
			a.cmd, rest, first = rest[:end], strings.TrimSpace(rest[end:]), false
			continue
		}
		key, val, ok := strings.Cut(rest, "=")
		if !ok || strings.ContainsFunc(key, unicode.IsSpace) {
			s.t.Fatalf("%s: expected key=value at %q", s.where, rest)
		}
		if strings.HasPrefix(val, `"`) {
			q, err := strconv.QuotedPrefix(val)
			if err != nil {
				s.t.Fatalf("%s: bad quoted value %s: %v", s.where, val, err)
			}
			str, _ := strconv.Unquote(q)
			val = val[len(q):]
			if strings.HasPrefix(val, "*") {
				end := strings.IndexFunc(val, unicode.IsSpace)
				if end < 0 {
					end = len(val)
				}
				n, err := strconv.Atoi(val[1:end])
				if err != nil {
					s.t.Fatalf("%s: bad repeat count %q", s.where, val[:end])
				}
				str, val = strings.Repeat(str, n), val[end:]
			}
			a.vals[key] = str
			rest = strings.TrimSpace(val)
		} else {
			end := strings.IndexFunc(val, unicode.IsSpace)
			if end < 0 {
				end = len(val)
			}
			a.vals[key], rest = val[:end], strings.TrimSpace(val[end:])
		}
	}
	return a.cmd, a
}

func (a args) has(key string) bool { _, ok := a.vals[key]; return ok }

func (a args) str(key string) string {
	v, ok := a.vals[key]
	if !ok {
		a.s.t.Fatalf("%s: %s needs %s=", a.s.where, a.cmd, key)
	}
	return v
}

func (a args) dur(key string) time.Duration {
	v := a.str(key)
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return time.Duration(n) * time.Millisecond
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		a.s.t.Fatalf("%s: bad duration %s=%s", a.s.where, key, v)
	}
	return d
}

func (a args) int(key string) int64 {
	n, err := strconv.ParseInt(a.str(key), 10, 64)
	if err != nil {
		a.s.t.Fatalf("%s: bad integer %s=%s", a.s.where, key, a.vals[key])
	}
	return n
}

func (a args) claim() locktable.SessionID {
	n, err := strconv.ParseUint(a.str("c"), 10, 64)
	if err != nil {
		a.s.t.Fatalf("%s: bad claim c=%s", a.s.where, a.vals["c"])
	}
	return locktable.SessionID(n)
}

func (a args) session() locktable.SessionID { return locktable.SessionID(a.uint("s")) }

func (a args) key() locktable.Key {
	return locktable.Key{Session: a.session(), Claim: locktable.ClaimID(a.uint("c"))}
}

func (a args) uint(key string) uint64 {
	n, err := strconv.ParseUint(a.str(key), 10, 64)
	if err != nil {
		a.s.t.Fatalf("%s: bad %s=%s", a.s.where, key, a.vals[key])
	}
	return n
}

func (a args) reason() locktable.Reason {
	if !a.has("reason") {
		return locktable.ReasonGraceful
	}
	r, ok := reasons[a.str("reason")]
	if !ok {
		a.s.t.Fatalf("%s: unknown reason %q", a.s.where, a.str("reason"))
	}
	return r
}

var modes = map[string]locktable.Mode{"exclusive": locktable.Exclusive, "shared": locktable.Shared,
	"semaphore": locktable.Semaphore, "bogus": 99}

// at advances the scenario's clock to t= when given.
func (a args) at() time.Time {
	if a.has("t") {
		t := a.dur("t")
		if t < a.s.now {
			a.s.t.Fatalf("%s: t=%v is before the previous command's t=%v", a.s.where, t, a.s.now)
		}
		a.s.now = t
	}
	return epoch.Add(a.s.now)
}

var reasons = map[string]locktable.Reason{}

func init() {
	for _, r := range locktable.Reasons {
		reasons[r.String()] = r
	}
}

func (s *scenario) run(line string) []string {
	cmd, a := s.parseArgs(line)
	var out output
	switch cmd {
	case "new":
		var src locktable.TokenSource = &locktable.CounterTokens{}
		if a.has("tokens") && a.str("tokens") == "clock" {
			s.wall = time.Unix(0, 0)
			if a.has("wall") {
				s.wall = time.Unix(a.int("wall"), 0)
			}
			start := time.Unix(0, 0)
			if a.has("start") {
				start = time.Unix(a.int("start"), 0)
			}
			src = &locktable.ClockTokens{Now: func() time.Time { return s.wall }, Start: start,
				Sleep: func(d time.Duration) { s.wall = s.wall.Add(d) }}
		} else if a.has("tokens") && a.str("tokens") != "counter" {
			s.t.Fatalf("%s: unknown token source %q", s.where, a.str("tokens"))
		}
		s.table, s.now, s.lastToken = locktable.New(src), 0, 0
	case "wall":
		s.wall = time.Unix(a.int("unix"), 0)
	case "acquire":
		req := locktable.Request{Name: a.str("lock"), Lease: a.dur("lease"),
			Peer: locktable.Peer{Addr: a.vals["addr"], Identity: a.vals["id"]}}
		st, res, err := s.table.Acquire(a.at(), a.claim(), req)
		out.status(st, err)
		out.result(res)
	case "heartbeat":
		st, err := s.table.Heartbeat(a.at(), a.claim())
		out.status(st, err)
	case "end":
		out.result(s.table.End(a.at(), a.claim(), a.reason()))
	case "expire":
		res, err := s.table.Expire(a.at(), a.claim())
		out.err(err)
		out.result(res)
	case "force-release":
		var res locktable.Result
		var err error
		if a.has("s") {
			res, err = s.table.ForceReleaseClaim(a.at(), a.str("lock"), a.key())
		} else {
			res, err = s.table.ForceRelease(a.at(), a.str("lock"))
		}
		out.err(err)
		out.result(res)
	case "kick":
		var res locktable.Result
		var err error
		if a.has("s") {
			res, err = s.table.KickClaim(a.at(), a.str("lock"), a.key())
		} else {
			res, err = s.table.Kick(a.at(), a.str("lock"), a.str("addr"))
		}
		out.err(err)
		out.result(res)
	case "open":
		out.err(s.table.Open(a.at(), a.session(), locktable.SessionParams{Lease: a.dur("lease"),
			Peer: locktable.Peer{Addr: a.vals["addr"], Identity: a.vals["id"]}, Label: a.vals["label"]}))
	case "claim":
		req := locktable.ClaimRequest{Name: a.str("lock"), Mode: locktable.Exclusive,
			NoWait: a.has("nowait") && a.str("nowait") == "yes"}
		if a.has("mode") {
			m, ok := modes[a.str("mode")]
			if !ok {
				s.t.Fatalf("%s: unknown mode %q", s.where, a.str("mode"))
			}
			req.Mode = m
		}
		if a.has("limit") {
			req.Limit = uint32(a.uint("limit"))
		}
		st, res, err := s.table.Claim(a.at(), a.session(), locktable.ClaimID(a.uint("c")), req)
		out.status(st, err)
		out.result(res)
	case "touch":
		d, err := s.table.Touch(a.at(), a.session())
		out.err(err)
		if err == nil {
			out.add("deadline=" + rel(d))
		}
	case "status":
		st, err := s.table.ClaimStatus(a.key())
		out.status(st, err)
	case "release":
		res, err := s.table.Release(a.at(), a.key())
		out.err(err)
		out.result(res)
	case "close":
		out.result(s.table.CloseSession(a.at(), a.session(), a.reason()))
	case "expire-session":
		res, err := s.table.ExpireSession(a.at(), a.session())
		out.err(err)
		out.result(res)
	case "sizes":
		c := s.table.Counts()
		out.add(fmt.Sprintf("sizes locks=%d holders=%d waiters=%d sessions=%d", c.Locks, s.table.Holders(), c.Waiters, s.table.Sessions()))
	case "revoke":
		deny := a.str("deny")
		allow := func(p locktable.Peer, _ string) bool { return p.Identity != deny }
		out.result(s.table.Revoke(a.at(), allow, a.has("owners") && a.str("owners") == "yes"))
	case "shutdown":
		out.result(s.table.Shutdown(a.at()))
		if !s.table.ShuttingDown() {
			out.add("ShuttingDown() is false after Shutdown")
		}
	case "snapshot":
		var match func(string) bool
		if a.has("prefix") {
			p := a.str("prefix")
			match = func(name string) bool { return strings.HasPrefix(name, p) }
		}
		infos := s.table.Snapshot(match)
		for _, info := range infos {
			out.lock(info)
		}
		if len(infos) == 0 {
			out.add("no locks")
		}
	case "lock":
		if info, ok := s.table.Lock(a.str("name")); ok {
			out.lock(info)
		} else {
			out.add("no lock " + quote(a.str("name")))
		}
	case "counts":
		c := s.table.Counts()
		out.add(fmt.Sprintf("counts locks=%d waiters=%d", c.Locks, c.Waiters))
	default:
		s.t.Fatalf("%s: unknown command %q", s.where, cmd)
	}
	s.check(out.granted)
	if len(out.lines) == 0 {
		out.add("ok")
	}
	return out.lines
}

// check verifies what must hold after every command.
func (s *scenario) check(granted []uint64) {
	for _, tok := range granted {
		if tok <= s.lastToken {
			s.t.Errorf("%s: token %d granted after token %d", s.where, tok, s.lastToken)
		}
		s.lastToken = tok
	}
	snap := s.table.Snapshot(nil)
	var waiters, holders int
	for _, info := range snap {
		waiters += len(info.Waiters)
		holders += len(info.Holders)
		if l, ok := s.table.Lock(info.Name); !ok || l.Name != info.Name || l.Holder != info.Holder || len(l.Waiters) != len(info.Waiters) {
			s.t.Errorf("%s: Lock(%q) = %+v, %v; Snapshot has %+v", s.where, info.Name, l, ok, info)
		}
		if len(info.Holders) == 0 || info.Holders[0] != info.Holder {
			s.t.Errorf("%s: lock %q: Holder %+v is not the first of Holders %+v", s.where, info.Name, info.Holder, info.Holders)
		}
	}
	if c := s.table.Counts(); c.Locks != len(snap) || c.Waiters != waiters || s.table.Holders() != holders {
		s.t.Errorf("%s: Counts() = %+v, Snapshot has %d locks and %d waiters", s.where, c, len(snap), waiters)
	}
}

type output struct {
	lines   []string
	granted []uint64
}

func (o *output) add(s string) { o.lines = append(o.lines, s) }

func (o *output) err(err error) {
	if err != nil {
		o.add("error: " + err.Error())
	}
}

func (o *output) status(st locktable.Status, err error) {
	if err != nil {
		o.err(err)
		if st != (locktable.Status{}) {
			o.add(fmt.Sprintf("status %+v returned with the error", st))
		}
		return
	}
	line := "status " + st.State.String()
	if st.State == locktable.Owner || st.Token != 0 {
		line += fmt.Sprintf(" token=%d", st.Token)
	}
	o.add(line + " deadline=" + rel(st.Deadline))
}

func (o *output) result(res locktable.Result) {
	for _, snd := range res.Sends {
		switch snd.Kind {
		case locktable.SendAcquired:
			o.add(fmt.Sprintf("send acquired %s token=%d", who(snd.Session, snd.Claim), snd.Token))
		case locktable.SendError:
			o.add(fmt.Sprintf("send error %s code=0x%02x", who(snd.Session, snd.Claim), uint8(snd.Code)))
		case locktable.SendSessionError:
			o.add(fmt.Sprintf("send session-error s=%d code=0x%02x", snd.Session, uint8(snd.Code)))
		default:
			o.add(fmt.Sprintf("send %+v", snd))
		}
	}
	for _, ev := range res.Events {
		line := fmt.Sprintf("event %s lock=%s %s%s%s", ev.Kind, quote(ev.Lock), who(ev.Session, ev.Claim),
			mode(ev.Mode), peer(ev.Peer, ev.Label))
		switch ev.Kind {
		case locktable.EventGranted:
			line += fmt.Sprintf(" token=%d waited=%v", ev.Token, ev.Waited)
			o.granted = append(o.granted, ev.Token)
		case locktable.EventReleased:
			line += fmt.Sprintf(" token=%d reason=%s held=%v", ev.Token, ev.Reason, ev.Held)
		case locktable.EventDequeued:
			line += fmt.Sprintf(" reason=%s", ev.Reason)
		}
		o.add(line)
	}
}

func (o *output) lock(info locktable.LockInfo) {
	limit := ""
	if info.Limit > 0 {
		limit = fmt.Sprintf(" limit=%d", info.Limit)
	}
	for i, h := range info.Holders {
		prefix := "lock " + quote(info.Name) + limit + " holder"
		if i > 0 {
			prefix = "  holder"
		}
		o.add(fmt.Sprintf("%s %s%s%s token=%d since=%s lease=%v last=%s", prefix,
			who(h.Session, h.Claim), mode(h.Mode), peer(h.Peer, h.Label), h.Token, rel(h.Since), h.Lease, rel(h.LastSeen)))
	}
	for _, w := range info.Waiters {
		o.add(fmt.Sprintf("  waiter %s%s%s queued=%s lease=%v last=%s",
			who(w.Session, w.Claim), mode(w.Mode), peer(w.Peer, w.Label), rel(w.QueuedAt), w.Lease, rel(w.LastSeen)))
	}
}

// who names a claim: c=SESSION for a version 1 claim, s=SESSION c=CLAIM
// otherwise.
func who(s locktable.SessionID, c locktable.ClaimID) string {
	if c == locktable.V1Claim {
		return fmt.Sprintf("c=%d", s)
	}
	return fmt.Sprintf("s=%d c=%d", s, c)
}

func mode(m locktable.Mode) string {
	if m == locktable.Exclusive {
		return ""
	}
	return " mode=" + m.String()
}

func peer(p locktable.Peer, label ...string) string {
	var s string
	if p.Addr != "" {
		s += " addr=" + p.Addr
	}
	if p.Identity != "" {
		s += " id=" + quote(p.Identity)
	}
	for _, l := range label {
		if l != "" {
			s += " label=" + quote(l)
		}
	}
	return s
}

// rel prints an instant as its offset from the epoch.
func rel(t time.Time) string { return t.Sub(epoch).String() }

// quote leaves plain names bare and quotes the rest; long names are
// shortened to their first bytes and their length.
func quote(s string) string {
	if len(s) > 32 {
		n := 16
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		return fmt.Sprintf("%s...(%d bytes)", quote(s[:n]), len(s))
	}
	if s == "" || !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool {
		return r == '"' || r == '=' || r == '\\' || !unicode.IsPrint(r) || unicode.IsSpace(r)
	}) {
		return strconv.Quote(s)
	}
	return s
}
