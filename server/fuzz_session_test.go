package server_test

// FuzzSession: arbitrary byte streams against a whole server session over
// real TCP. Identifiers here start with fuzz/Fuzz: the rest of the
// package's helpers belong to the other test files.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

const (
	// fuzzIOTimeout is the server's io-timeout: small, so that an input
	// that leaves a frame unfinished costs little.
	fuzzIOTimeout = 50 * time.Millisecond
	// fuzzHeld is the lock a separate client holds throughout: inputs
	// that claim it must queue, and it must survive every input.
	fuzzHeld = "fuzz-held"
	// fuzzMaxInput caps an input; longer ones are cut. It is twice the
	// server's drain limit (64 KiB), so that a stream after an ERROR can
	// end before the limit or run past it.
	fuzzMaxInput = 128 << 10
	// fuzzBound bounds every wait: for the connection to close after the
	// input, for the session count to drop back, for the holder's reply.
	// Far above what any of them takes, so that a loaded machine does not
	// fail the target.
	fuzzBound = 5 * time.Second
	// fuzzStrictLease is the smallest lease for which the whole expected
	// reply sequence must arrive: below it, the server may end the
	// session by expiry before it has read the whole input.
	fuzzStrictLease = 10 * time.Second
	// fuzzStrictReplies bounds the replies of an input that must arrive
	// in full: they fit in the socket buffers, so no write of the server
	// can time out while the reader is slow.
	fuzzStrictReplies = 32 << 10
	// fuzzHeapSlack is how much the live heap may grow over a fuzzing
	// process's life, measured every fuzzHeapEvery inputs; the sessions
	// themselves keep nothing, so a leak of a few hundred bytes per input
	// shows within a few hundred thousand inputs, one of a buffer at once.
	fuzzHeapSlack = 64 << 20
	fuzzHeapEvery = 1000
)

// FuzzSession feeds each input to a new connection of a long-lived server
// (one per fuzzing process), then half-closes it so that the server sees
// EOF. For every input:
//
//   - the server does not panic (a panic in a session kills the process);
//   - its replies are well-formed frames and a prefix of what
//     docs/protocol.md prescribes for the input (one reply per valid frame,
//     WAITING for the held lock, ACQUIRED with one token otherwise, the
//     ERROR of the first broken rule, last), and the whole of it when
//     nothing can cut the session short;
//   - the server closes the connection within fuzzBound, and its session
//     count and lock table return to the baseline: nothing of the session
//     is kept, no session goroutine is left;
//   - the separate client holding fuzzHeld still holds it and its
//     heartbeat is answered with its token;
//
// and over the process's life the live heap stays within fuzzHeapSlack of
// where it was after the first fuzzHeapEvery inputs. The package's TestMain checks for leaked goroutines
// once the server is shut down.
func FuzzSession(f *testing.F) {
	for _, seed := range fuzzSeeds() {
		f.Add(seed)
	}
	fs := fuzzStart(f)
	var execs int
	var heap0 uint64
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > fuzzMaxInput {
			in = in[:fuzzMaxInput]
		}
		fs.session(t, in)
		fs.checkBaseline(t, in)
		execs++
		if execs%fuzzHeapEvery == 0 {
			// The first measurement is taken once the fuzzing engine of
			// this process has made its own buffers (about 100 MB).
			var ms runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms)
			if execs == fuzzHeapEvery {
				heap0 = ms.HeapAlloc
			} else if ms.HeapAlloc > heap0+fuzzHeapSlack {
				t.Fatalf("live heap %d bytes after %d inputs, %d after %d", ms.HeapAlloc, execs, heap0, fuzzHeapEvery)
			}
		}
	})
}

// fuzzServer is the long-lived server and the client holding fuzzHeld.
type fuzzServer struct {
	srv      *server.Server
	addr     string
	holder   net.Conn
	token    uint64
	baseline int // sessions: the holder's
}

// fuzzServe serves srv on 127.0.0.1 port 0 for the fuzzing process's
// life and returns its address; at the end it shuts srv down, checks
// Serve's result and runs then.
func fuzzServe(f *testing.F, srv *server.Server, then func()) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	f.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), fuzzBound)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			f.Errorf("Shutdown: %v", err)
		}
		if err := <-served; !errors.Is(err, server.ErrServerClosed) {
			f.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
		then()
	})
	return ln.Addr().String()
}

func fuzzStart(f *testing.F) *fuzzServer {
	fs := &fuzzServer{srv: &server.Server{IOTimeout: fuzzIOTimeout, Logger: slog.New(slog.DiscardHandler)}}
	fs.addr = fuzzServe(f, fs.srv, func() {
		if fs.holder != nil {
			fs.holder.Close()
		}
	})
	var err error

	// The holder: its whole ACQUIRE must arrive within the short
	// io-timeout, which a loaded machine may miss; try a few times.
	for attempt := 1; ; attempt++ {
		if fs.holder, fs.token, err = fuzzHold(fs.addr); err == nil {
			break
		}
		if attempt == 5 {
			f.Fatalf("holder of %q: %v", fuzzHeld, err)
		}
	}
	fs.baseline = 1
	if err := fuzzEventually(fs.baselineErr); err != nil {
		f.Fatal(err)
	}
	return fs
}

func fuzzHold(addr string) (net.Conn, uint64, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, 0, err
	}
	c.SetDeadline(time.Now().Add(fuzzBound))
	frame := protocol.AppendAcquire(nil, protocol.Acquire{Version: protocol.Version, LeaseMS: uint32(time.Hour / time.Millisecond), Name: fuzzHeld})
	if _, err := c.Write(frame); err != nil {
		c.Close()
		return nil, 0, err
	}
	fr, err := protocol.ReadServerFrame(c)
	if err != nil || fr.Type != protocol.TypeAcquired {
		c.Close()
		return nil, 0, fmt.Errorf("reply %v, %v; want ACQUIRED", fr, err)
	}
	return c, fr.Token, nil
}

// session runs one input and checks the replies.
func (fs *fuzzServer) session(t *testing.T, in []byte) {
	c, err := net.Dial("tcp", fs.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(fuzzBound))

	type result struct {
		frames []protocol.ServerFrame
		err    error // what ended the reading: nil for EOF
	}
	done := make(chan result, 1)
	go func() { // read while writing, so that replies never back up
		var r result
		if fuzzIsV2(in) { // FuzzSessionV2 judges these
			_, err := io.Copy(io.Discard, c)
			if err != nil && !errors.Is(err, syscall.ECONNRESET) {
				r.err = err
			}
			done <- r
			return
		}
		for {
			fr, err := protocol.ReadServerFrame(c)
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
					r.err = err
				}
				done <- r
				return
			}
			r.frames = append(r.frames, fr)
		}
	}()
	// The server may close before it has read everything (an ERROR and
	// a full drain, expiry): then the write fails, which is fine.
	if _, err := c.Write(in); err == nil {
		c.(*net.TCPConn).CloseWrite()
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("input % x: after %v, reading ended with %v; want EOF within %v", fuzzShort(in), r.frames, r.err, fuzzBound)
	}
	if err := fuzzCheckReplies(in, r.frames, fs.token); err != nil {
		t.Fatalf("input % x: %v", fuzzShort(in), err)
	}
}

// checkBaseline waits until the server is back where it was before the
// input and checks that the holder still holds.
func (fs *fuzzServer) checkBaseline(t *testing.T, in []byte) {
	if err := fuzzEventually(fs.baselineErr); err != nil {
		t.Fatalf("input % x: %v", fuzzShort(in), err)
	}
	fs.holder.SetDeadline(time.Now().Add(fuzzBound))
	if _, err := fs.holder.Write(protocol.AppendHeartbeat(nil)); err != nil {
		t.Fatalf("input % x: the holder's heartbeat: %v", fuzzShort(in), err)
	}
	if fr, err := protocol.ReadServerFrame(fs.holder); err != nil || fr.Type != protocol.TypeAcquired || fr.Token != fs.token {
		t.Fatalf("input % x: the holder's heartbeat was answered %v, %v; want ACQUIRED(%d)", fuzzShort(in), fr, err, fs.token)
	}
}

// baselineErr describes how the server differs from its state between
// inputs: the holder's session only, fuzzHeld held by it, nobody queued.
func (fs *fuzzServer) baselineErr() error {
	if n := fs.srv.Sessions(); n != fs.baseline {
		return fmt.Errorf("%d sessions open, want %d (the holder's)", n, fs.baseline)
	}
	if c := fs.srv.Counts(); c != (server.Counts{Locks: 1}) {
		return fmt.Errorf("lock table counts %+v, want the held lock only", c)
	}
	info, ok := fs.srv.Lock(fuzzHeld)
	if !ok || info.Holder.Token != fs.token || info.Holder.Peer.Addr != fs.holder.LocalAddr().String() || len(info.Waiters) != 0 {
		return fmt.Errorf("lock %q is %+v (held: %v), want held by %s with token %d and no waiters",
			fuzzHeld, info, ok, fs.holder.LocalAddr(), fs.token)
	}
	return nil
}

// fuzzEventually retries check until it passes or fuzzBound passes.
func fuzzEventually(check func() error) error {
	deadline := time.Now().Add(fuzzBound)
	for {
		err := check()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(time.Millisecond)
	}
}

// fuzzExpect is what docs/protocol.md prescribes for a connection that sends
// in and then ends: the replies in order (ACQUIRED with token 0, for any
// token), and the lease of its ACQUIRE if it had a valid one.
func fuzzExpect(in []byte) (replies []protocol.ServerFrame, lease time.Duration) {
	fail := func(code protocol.Code) []protocol.ServerFrame {
		return append(replies, protocol.ServerFrame{Type: protocol.TypeError, Code: code})
	}
	if len(in) == 0 {
		return nil, 0
	}
	switch protocol.Type(in[0]) {
	case protocol.TypeAcquire:
	case protocol.TypeHeartbeat:
		return fail(protocol.CodeFirstNotAcquire), 0
	default:
		return fail(protocol.CodeUnknownMessage), 0
	}
	// Each rule is checked as soon as its field has arrived; a frame
	// cut short by the end of the stream gets no reply.
	if len(in) < 2 {
		return nil, 0
	}
	if in[1] == protocol.Version2 {
		// The version 2 preamble: judged by FuzzSessionV2; its other
		// forms are refused once all eight bytes are in.
		if len(in) < protocol.PreambleLen || fuzzIsV2(in) {
			return nil, 0
		}
		return fail(protocol.CodeUnsupportedVersion), 0
	}
	if in[1] != protocol.Version {
		return fail(protocol.CodeUnsupportedVersion), 0
	}
	if len(in) < protocol.AcquireHeaderLen {
		return nil, 0
	}
	leaseMS := binary.BigEndian.Uint32(in[2:6])
	n := int(binary.BigEndian.Uint16(in[6:8]))
	switch {
	case leaseMS == 0:
		return fail(protocol.CodeInvalidLease), 0
	case n == 0:
		return fail(protocol.CodeEmptyName), 0
	case n > protocol.MaxNameLen:
		return fail(protocol.CodeNameTooLong), 0
	}
	if len(in) < protocol.AcquireHeaderLen+n {
		return nil, 0
	}
	name := in[protocol.AcquireHeaderLen : protocol.AcquireHeaderLen+n]
	if !utf8.Valid(name) {
		return fail(protocol.CodeInvalidName), 0
	}
	lease = time.Duration(leaseMS) * time.Millisecond
	state := protocol.ServerFrame{Type: protocol.TypeAcquired}
	if string(name) == fuzzHeld {
		state = protocol.ServerFrame{Type: protocol.TypeWaiting}
	}
	replies = append(replies, state)
	for _, b := range in[protocol.AcquireHeaderLen+n:] {
		switch protocol.Type(b) {
		case protocol.TypeHeartbeat:
			replies = append(replies, state)
		case protocol.TypeAcquire:
			return fail(protocol.CodeDuplicateAcquire), lease
		default:
			return fail(protocol.CodeUnknownMessage), lease
		}
	}
	return replies, lease
}

// fuzzIsV2 reports whether in opens with the version 2 preamble.
func fuzzIsV2(in []byte) bool {
	return len(in) >= protocol.PreambleLen && bytes.Equal(in[:protocol.PreambleLen], protocol.AppendPreamble(nil))
}

// fuzzCheckReplies checks the frames a connection received against
// fuzzExpect: a prefix of it always (the first ACQUIRE may miss the
// io-timeout on a loaded machine, a short lease may expire mid-stream),
// the whole of it when neither can happen; every ACQUIRED with the same
// token, newer than the holder's.
func fuzzCheckReplies(in []byte, got []protocol.ServerFrame, holderToken uint64) error {
	want, lease := fuzzExpect(in)
	if len(got) > len(want) {
		return fmt.Errorf("replies %v; want %v (one per valid frame, then the ERROR if any)", fuzzFrames(got), fuzzFrames(want))
	}
	var token uint64
	for i, g := range got {
		w := want[i]
		switch {
		case g.Type != w.Type, g.Type == protocol.TypeError && g.Code != w.Code:
			return fmt.Errorf("reply %d is %v; want the replies %v", i+1, g, fuzzFrames(want))
		case g.Type == protocol.TypeAcquired && token == 0:
			if g.Token <= holderToken {
				return fmt.Errorf("ACQUIRED(%d), not newer than the holder's token %d", g.Token, holderToken)
			}
			token = g.Token
		case g.Type == protocol.TypeAcquired && g.Token != token:
			return fmt.Errorf("ACQUIRED(%d) after ACQUIRED(%d) on one connection", g.Token, token)
		}
	}
	strict := (lease == 0 || lease >= fuzzStrictLease) && len(want)*protocol.AcquiredLen <= fuzzStrictReplies
	if strict && len(got) > 0 && len(got) < len(want) {
		return fmt.Errorf("replies %v; want all of %v: nothing could cut this session short", fuzzFrames(got), fuzzFrames(want))
	}
	return nil
}

func fuzzFrames(fs []protocol.ServerFrame) string {
	if len(fs) > 8 {
		return fmt.Sprintf("%v … (%d frames)", fs[:8], len(fs))
	}
	return fmt.Sprint(fs)
}

func fuzzShort(in []byte) []byte {
	if len(in) > 64 {
		return in[:64]
	}
	return in
}

// fuzzSeeds are the interesting inputs of docs/protocol.md; the files under
// testdata/fuzz/FuzzSession add the ones found worth keeping.
func fuzzSeeds() [][]byte {
	acq := func(version uint8, leaseMS uint32, name string) []byte {
		return protocol.AppendAcquire(nil, protocol.Acquire{Version: version, LeaseMS: leaseMS, Name: name})
	}
	hb := func(n int) []byte { return bytes.Repeat([]byte{byte(protocol.TypeHeartbeat)}, n) }
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	return [][]byte{
		{},
		acq(1, 2000, "job"),                 // the docs/protocol.md example
		cat(acq(1, 60000, "a"), hb(3)),      // owner, heartbeats
		cat(acq(1, 60000, fuzzHeld), hb(3)), // waiter, heartbeats
		cat(acq(1, 1, "short"), hb(50)),     // a lease that expires mid-stream
		{byte(protocol.TypeHeartbeat)},      // 0x11
		{0x7f},                              // 0x13
		acq(2, 2000, "job"),                 // 0x10
		{byte(protocol.TypeAcquire), 2},     // the start of a version 2 preamble: no answer
		{byte(protocol.TypeAcquire), 2, 0, 0, 0, 0, 0, 1}, // 0x10: not the preamble
		acq(1, 0, "job"),                                   // 0x17
		acq(1, 0, ""),                                      // 0x17 before 0x14
		acq(1, 2000, ""),                                   // 0x14
		cat(acq(1, 2000, "x")[:6], []byte{1, 0}),           // 0x15: name_len 256
		cat(acq(1, 2000, "x")[:6], []byte{0xff, 0xff}),     // 0x15: name_len 65535
		acq(1, 2000, "\xff\xfe"),                           // 0x16
		cat(acq(1, 2000, "a"), acq(1, 2000, "a")),          // 0x12
		cat(acq(1, 2000, fuzzHeld), hb(2), []byte{0x12}),   // waiter, then 0x13
		acq(1, 2000, "job")[:5],                            // cut in the header
		acq(1, 2000, "job")[:9],                            // cut in the name
		cat(acq(1, 2000, "a"), []byte{0x13}, hb(70<<10)),   // an ERROR, then more than the drain limit
		cat([]byte{0x00}, bytes.Repeat([]byte{0xff}, 300)), // noise
	}
}

// TestFuzzCheckReplies shows that FuzzSession's judge of replies can fail.
func TestFuzzCheckReplies(t *testing.T) {
	acq := func(lease time.Duration, name string) []byte {
		return protocol.AppendAcquire(nil, protocol.Acquire{Version: protocol.Version, LeaseMS: uint32(lease / time.Millisecond), Name: name})
	}
	owned := append(acq(time.Minute, "a"), 0x02, 0x02, 0x7f) // ACQUIRED ×3, ERROR 0x13
	short := append(acq(time.Second, "a"), 0x02, 0x02)       // a lease short enough to expire
	waiting := append(acq(time.Minute, fuzzHeld), 0x02)      // WAITING ×2
	ok := func(tok uint64) protocol.ServerFrame {
		return protocol.ServerFrame{Type: protocol.TypeAcquired, Token: tok}
	}
	wait := protocol.ServerFrame{Type: protocol.TypeWaiting}
	fail := func(c protocol.Code) protocol.ServerFrame {
		return protocol.ServerFrame{Type: protocol.TypeError, Code: c}
	}
	for _, tt := range []struct {
		name string
		in   []byte
		got  []protocol.ServerFrame
		pass bool
	}{
		{"all", owned, []protocol.ServerFrame{ok(9), ok(9), ok(9), fail(protocol.CodeUnknownMessage)}, true},
		{"nothing: the first ACQUIRE missed the io-timeout", owned, nil, true},
		{"cut short without cause", owned, []protocol.ServerFrame{ok(9), ok(9)}, false},
		{"cut short by a short lease", short, []protocol.ServerFrame{ok(9)}, true},
		{"one reply too many", short, []protocol.ServerFrame{ok(9), ok(9), ok(9), ok(9)}, false},
		{"wrong code", owned, []protocol.ServerFrame{ok(9), ok(9), ok(9), fail(protocol.CodeDuplicateAcquire)}, false},
		{"token changes", owned, []protocol.ServerFrame{ok(9), ok(10), ok(10), fail(protocol.CodeUnknownMessage)}, false},
		{"token not newer than the holder's", short, []protocol.ServerFrame{ok(5)}, false},
		{"WAITING for a free lock", short, []protocol.ServerFrame{wait}, false},
		{"waiting", waiting, []protocol.ServerFrame{wait, wait}, true},
		{"ACQUIRED for the held lock", waiting, []protocol.ServerFrame{ok(9), wait}, false},
		{"ERROR for a frame cut short", acq(time.Minute, "abc")[:9], []protocol.ServerFrame{fail(protocol.CodeEmptyName)}, false},
		{"version first", []byte{0x01, 0x03}, []protocol.ServerFrame{fail(protocol.CodeUnsupportedVersion)}, true},
		{"a version 2 preamble cut short", []byte{0x01, 0x02}, []protocol.ServerFrame{fail(protocol.CodeUnsupportedVersion)}, false},
		{"not the version 2 preamble", []byte{0x01, 0x02, 0, 0, 0, 0, 0, 1}, []protocol.ServerFrame{fail(protocol.CodeUnsupportedVersion)}, true},
	} {
		err := fuzzCheckReplies(tt.in, tt.got, 5)
		if (err == nil) != tt.pass {
			t.Errorf("%s: % x answered %v: error %v, want pass %v", tt.name, tt.in, tt.got, err, tt.pass)
		}
	}
}
