package audit_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/audit"
	"github.com/batonlock/baton/internal/opstest"
	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

var timeRE = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)

// parse decodes JSON lines strictly: every line one Record, no unknown
// fields, the common fields always present.
func parse(t *testing.T, b []byte) []audit.Record {
	t.Helper()
	var out []audit.Record
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var raw map[string]any
		if err := json.Unmarshal(sc.Bytes(), &raw); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		for _, k := range []string{"time", "event", "lock", "identity", "remote_addr"} {
			if _, ok := raw[k]; !ok {
				t.Fatalf("line %q lacks %q", sc.Text(), k)
			}
		}
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		var r audit.Record
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if !timeRE.MatchString(r.Time) {
			t.Fatalf("time %q is not RFC 3339 UTC with milliseconds", r.Time)
		}
		out = append(out, r)
	}
	return out
}

func startServer(t *testing.T, obs ...server.Observer) (*server.Server, *opstest.Recorder, string) {
	rec := &opstest.Recorder{}
	srv := &server.Server{Logger: slog.New(slog.DiscardHandler), Observer: append(server.Observers(obs), rec)}
	return srv, rec, opstest.StartServer(t, srv)
}

// TestOrderUnderConcurrency: 250 clients race for 5 locks; every client
// closes as soon as it is granted, so each lock changes hands 50 times.
// Per lock the log must alternate granted/released with matching tokens.
func TestOrderUnderConcurrency(t *testing.T) {
	const locks, perLock = 5, 50
	var out bytes.Buffer
	al := audit.New(&out, audit.Config{})
	srv, rec, addr := startServer(t, al)

	var wg sync.WaitGroup
	errs := make(chan error, locks*perLock)
	for i := range locks * perLock {
		name := string(rune('a' + i%locks))
		wg.Go(func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			if _, err := c.Write(opstest.AcquireFrame("lock-"+name, 30*time.Second)); err != nil {
				errs <- err
				return
			}
			for {
				f, err := opstest.ReadFrame(c)
				if err != nil {
					errs <- err
					return
				}
				if f.Type == protocol.TypeAcquired {
					return // release by closing
				}
				if f.Type != protocol.TypeWaiting {
					errs <- errors.New("unexpected " + f.String())
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	rec.WaitCount(t, server.EventReleased, locks*perLock)
	srv.Close()
	if err := al.Close(); err != nil {
		t.Fatal(err)
	}
	if d := al.Dropped(); d != 0 {
		t.Fatalf("Dropped() = %d, want 0", d)
	}

	type state struct {
		held   bool
		token  uint64
		grants int
	}
	per := map[string]*state{}
	var lastToken uint64
	for i, r := range parse(t, out.Bytes()) {
		st := per[r.Lock]
		if st == nil {
			st = &state{}
			per[r.Lock] = st
		}
		switch r.Event {
		case audit.Granted:
			if st.held {
				t.Fatalf("record %d: %s granted (token %d) while still held by token %d", i, r.Lock, r.Token, st.token)
			}
			if r.Token <= lastToken || r.WaitMS == nil {
				t.Fatalf("record %d: bad grant %+v after token %d", i, r, lastToken)
			}
			st.held, st.token, lastToken = true, r.Token, r.Token
			st.grants++
		case audit.Released:
			if !st.held || r.Token != st.token {
				t.Fatalf("record %d: %s released token %d, but held=%v token=%d", i, r.Lock, r.Token, st.held, st.token)
			}
			if r.Reason != "graceful" || r.HeldMS == nil {
				t.Fatalf("record %d: %+v", i, r)
			}
			st.held = false
		default:
			t.Fatalf("record %d: unexpected event %q", i, r.Event)
		}
	}
	if len(per) != locks {
		t.Fatalf("%d locks in the log, want %d", len(per), locks)
	}
	for name, st := range per {
		if st.grants != perLock || st.held {
			t.Errorf("%s: %d grants (want %d), held at end = %v", name, st.grants, perLock, st.held)
		}
	}
}

// TestAdminActions: a kick and a force release reach the affected clients
// as ERROR 0x02 and appear in the log, with a documented shape.
func TestAdminActions(t *testing.T) {
	var out bytes.Buffer
	al := audit.New(&out, audit.Config{})
	srv, rec, addr := startServer(t, al)

	owner := opstest.Dial(t, addr)
	owner.Acquire("jobs/nightly", 10*time.Second)
	tok := owner.Expect(protocol.TypeAcquired, 0).Token
	w1 := opstest.Dial(t, addr)
	w1.Acquire("jobs/nightly", 10*time.Second)
	w1.Expect(protocol.TypeWaiting, 0)
	w2 := opstest.Dial(t, addr)
	w2.Acquire("jobs/nightly", 10*time.Second)
	w2.Expect(protocol.TypeWaiting, 0)

	by := server.Peer{Identity: "spiffe://prod/sre", Addr: "127.0.0.1:50000"}
	if err := srv.KickBy("jobs/nightly", w2.Addr(), by); err != nil {
		t.Fatal(err)
	}
	w2.Expect(protocol.TypeError, protocol.CodeClosedByAdmin)
	if err := srv.ForceReleaseBy("jobs/nightly", by); err != nil {
		t.Fatal(err)
	}
	owner.Expect(protocol.TypeError, protocol.CodeClosedByAdmin)
	tok2 := w1.Expect(protocol.TypeAcquired, 0).Token
	w1.Close()
	rec.WaitCount(t, server.EventReleased, 2)
	srv.Close()
	al.Close()

	rs := parse(t, out.Bytes())
	want := []struct {
		event, addr, reason string
		token               uint64
	}{
		{audit.Granted, owner.Addr(), "", tok},
		{audit.KickWaiter, w2.Addr(), "", 0},
		{audit.ForceRelease, owner.Addr(), "", tok},
		{audit.Released, owner.Addr(), "force", tok},
		{audit.Granted, w1.Addr(), "", tok2},
		{audit.Released, w1.Addr(), "graceful", tok2},
	}
	if len(rs) != len(want) {
		t.Fatalf("got %d records, want %d:\n%s", len(rs), len(want), out.String())
	}
	for i, w := range want {
		r := rs[i]
		if r.Event != w.event || r.RemoteAddr != w.addr || r.Reason != w.reason || r.Token != w.token || r.Lock != "jobs/nightly" {
			t.Errorf("record %d = %+v, want %+v", i, r, w)
		}
	}
	if rs[4].WaitMS == nil || rs[0].WaitMS == nil || *rs[0].WaitMS != 0 {
		t.Errorf("wait_ms: first grant %v, promotion %v", rs[0].WaitMS, rs[4].WaitMS)
	}
	for _, i := range []int{1, 2} {
		if r := rs[i]; r.AdminIdentity == nil || *r.AdminIdentity != by.Identity || r.AdminAddr != by.Addr {
			t.Errorf("record %d (%s) does not name the administrator %+v: %+v", i, r.Event, by, r)
		}
	}
	if rs[3].AdminIdentity != nil || rs[3].AdminAddr != "" {
		t.Errorf("released names an administrator: %+v", rs[3])
	}
	if rs[1].WaitMS != nil || rs[1].HeldMS != nil || rs[3].HeldMS == nil {
		t.Errorf("fields that do not apply must be absent: %s", out.String())
	}
}

// blockingWriter blocks every Write until released.
type blockingWriter struct {
	started chan struct{}
	release chan struct{}
	mu      sync.Mutex
	buf     bytes.Buffer
}

func (w *blockingWriter) Write(p []byte) (int, error) {
	select {
	case w.started <- struct{}{}:
	default:
	}
	<-w.release
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func granted(lock string, token uint64) server.Event {
	return server.Event{Kind: server.EventGranted, Time: time.Now(), Lock: lock,
		Peer: server.Peer{Addr: "127.0.0.1:1"}, Token: token}
}

// TestSlowDiskDrops: with the writer stuck, Observe still returns at once;
// what does not fit the buffer is dropped, counted and logged.
func TestSlowDiskDrops(t *testing.T) {
	w := &blockingWriter{started: make(chan struct{}, 1), release: make(chan struct{})}
	var logs syncBuffer
	al := audit.New(w, audit.Config{Buffer: 2, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	al.Observe(granted("a", 1))
	<-w.started // the writer holds record 1 and is stuck in Write
	start := time.Now()
	for i := range 10 {
		al.Observe(granted("a", uint64(i+2)))
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Observe blocked for %v", d)
	}
	if d := al.Dropped(); d != 8 {
		t.Errorf("Dropped() = %d, want 8 (10 observed, 2 buffered)", d)
	}
	close(w.release)
	al.Close()
	if n := len(parse(t, w.buf.Bytes())); n != 3 {
		t.Errorf("%d records written, want 3", n)
	}
	if !strings.Contains(logs.String(), "audit buffer full") || !strings.Contains(logs.String(), "dropped=8") {
		t.Errorf("drop not logged: %q", logs.String())
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// fullDisk fails writes while full is set.
type fullDisk struct {
	full bool
	buf  bytes.Buffer
}

func (d *fullDisk) Write(p []byte) (int, error) {
	if d.full {
		return 0, &os.PathError{Op: "write", Path: "audit.log", Err: syscall.ENOSPC}
	}
	return d.buf.Write(p)
}

// TestFullDisk: records of a failed write are lost, counted and logged
// once per failure streak; writing resumes when the disk has room.
func TestFullDisk(t *testing.T) {
	d := &fullDisk{full: true}
	var logs syncBuffer
	al := audit.New(d, audit.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	for i := range 3 {
		al.Observe(granted("a", uint64(i+1)))
		al.Flush()
	}
	if got := al.Dropped(); got != 3 {
		t.Errorf("Dropped() = %d, want 3", got)
	}
	if n := strings.Count(logs.String(), "audit log write failed"); n != 1 {
		t.Errorf("failure logged %d times, want once: %q", n, logs.String())
	}
	d.full = false // Flush made the writer's accesses happen before this
	al.Observe(granted("a", 4))
	al.Close()
	if rs := parse(t, d.buf.Bytes()); len(rs) != 1 || rs[0].Token != 4 {
		t.Errorf("after recovery: %+v", rs)
	}
	if !strings.Contains(logs.String(), "succeed again") {
		t.Errorf("recovery not logged: %q", logs.String())
	}
}

// TestReopen: records before Reopen stay in the renamed file, records
// after it go to a new file at the path; a failed reopen keeps the old
// file.
func TestReopen(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	al, err := audit.Open(path, audit.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	al.Observe(granted("a", 1))
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	if err := al.Reopen(); err != nil {
		t.Fatal(err)
	}
	al.Observe(granted("a", 2))

	// Take the directory away: the reopen fails, the open file stays.
	moved := filepath.Join(t.TempDir(), "moved")
	if err := os.Rename(dir, moved); err != nil {
		t.Fatal(err)
	}
	if err := al.Reopen(); err == nil {
		t.Error("Reopen into a missing directory succeeded")
	}
	al.Observe(granted("a", 3))
	if err := al.Close(); err != nil {
		t.Fatal(err)
	}
	if err := al.Reopen(); !errors.Is(err, audit.ErrClosed) {
		t.Errorf("Reopen after Close = %v, want ErrClosed", err)
	}

	tokens := func(p string) []uint64 {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var ts []uint64
		for _, r := range parse(t, b) {
			ts = append(ts, r.Token)
		}
		return ts
	}
	if got := tokens(filepath.Join(moved, "audit.log.1")); len(got) != 1 || got[0] != 1 {
		t.Errorf("rotated file has tokens %v, want [1]", got)
	}
	if got := tokens(filepath.Join(moved, "audit.log")); len(got) != 2 || got[0] != 2 || got[1] != 3 {
		t.Errorf("new file has tokens %v, want [2 3]", got)
	}
}

func TestOpenStdoutAndErrors(t *testing.T) {
	if _, err := audit.Open(filepath.Join(t.TempDir(), "no", "such", "dir"), audit.Config{}); err == nil {
		t.Error("Open in a missing directory succeeded")
	}
	al, err := audit.Open("-", audit.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := al.Reopen(); err != nil {
		t.Errorf("Reopen of stdout = %v", err)
	}
	if err := al.Close(); err != nil {
		t.Errorf("Close of stdout = %v", err)
	}
	if _, err := os.Stdout.Write(nil); err != nil {
		t.Errorf("stdout was closed: %v", err)
	}
}

// TestRecordShapes pins the exact line of every event kind; events that
// are no ownership change leave no line.
func TestRecordShapes(t *testing.T) {
	var out bytes.Buffer
	al := audit.New(&out, audit.Config{})
	at := time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.FixedZone("CET", 3600))
	p := server.Peer{Identity: "spiffe://prod/worker", Addr: "10.0.0.7:41000"}
	sre := server.Peer{Identity: "spiffe://prod/sre", Addr: "127.0.0.1:50000"}
	for _, e := range []server.Event{
		{Kind: server.EventConnected, Time: at, Peer: p},
		{Kind: server.EventGranted, Time: at, Lock: "db<&>", Peer: p, Token: 7, Waited: 1500 * time.Millisecond},
		{Kind: server.EventHeartbeat, Time: at, Peer: p},
		{Kind: server.EventDequeued, Time: at, Lock: "db", Peer: p, Reason: server.ReasonGraceful},
		{Kind: server.EventKick, Time: at, Lock: "db", Peer: p, Admin: sre},
		{Kind: server.EventDequeued, Time: at, Lock: "db", Peer: p, Reason: server.ReasonKick},
		{Kind: server.EventReleased, Time: at, Lock: "db", Peer: p, Token: 7, Reason: server.ReasonExpired, Held: 2 * time.Second},
		{Kind: server.EventForceRelease, Time: at, Lock: "db", Peer: p, Token: 8, Admin: sre},
		{Kind: server.EventReleased, Time: at, Lock: "db", Peer: p, Token: 8, Reason: server.ReasonForce, Held: 10 * time.Millisecond},
		{Kind: server.EventDenied, Time: at, Lock: "secret", Peer: p},
		{Kind: server.EventAdminDenied, Time: at, Lock: "deploy/prod", Admin: server.Peer{Addr: "127.0.0.1:50001"}, Action: "release"},
	} {
		al.Observe(e)
	}
	al.Close()
	const common = `"time":"2025-03-01T11:00:00.123Z","event":`
	const peer = `"identity":"spiffe://prod/worker","remote_addr":"10.0.0.7:41000"`
	const admin = `"admin_identity":"spiffe://prod/sre","admin_addr":"127.0.0.1:50000"`
	want := strings.Join([]string{
		`{` + common + `"granted","lock":"db<&>",` + peer + `,"token":7,"wait_ms":1500}`,
		`{` + common + `"kick_waiter","lock":"db",` + peer + `,` + admin + `}`,
		`{` + common + `"released","lock":"db",` + peer + `,"token":7,"held_ms":2000,"reason":"expired"}`,
		`{` + common + `"force_release","lock":"db",` + peer + `,"token":8,` + admin + `}`,
		`{` + common + `"released","lock":"db",` + peer + `,"token":8,"held_ms":10,"reason":"force"}`,
		`{` + common + `"denied","lock":"secret",` + peer + `}`,
		`{` + common + `"admin_denied","lock":"deploy/prod","identity":"","remote_addr":"","admin_identity":"","admin_addr":"127.0.0.1:50001","action":"release"}`,
	}, "\n") + "\n"
	if got := out.String(); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}
