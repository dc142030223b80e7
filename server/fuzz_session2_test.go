package server_test

// FuzzSessionV2: arbitrary frames after the version 2 preamble against a
// whole server session over real TCP. Identifiers here start with
// fuzzV2/FuzzV2 beside those of fuzz_session_test.go.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/internal/rangelock"
	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// fuzzV2IOTimeout is generous: an input cut inside a frame ends with EOF
// (the client half-closes), never with a wait for the rest, so only a
// stalled machine could run into it.
const fuzzV2IOTimeout = time.Second

// FuzzSessionV2 feeds the version 2 preamble and then each input to a new
// connection of a long-lived server (one per fuzzing process), then
// half-closes it. For every input:
//
//   - the server does not panic;
//   - its frames are well-formed version 2 frames and a prefix of what
//     docs/protocol.md prescribes: the answers to the input's frames in
//     order, each as the lock table decides it (QUEUED or BUSY for the
//     lock a separate session holds, GRANTED, PROMOTED pushed when the
//     session's own RELEASE frees a lock for its own waiting claim,
//     REFUSED with the code of the first broken claim rule, the ERROR of
//     the first session-level fault, last), with strictly increasing
//     tokens, all newer than the holder's; the whole of it when nothing
//     can cut the session short (a lease of at least fuzzStrictLease);
//   - the server closes the connection within fuzzBound, and its session
//     count and lock table return to the baseline;
//   - the separate session holding fuzzHeld still holds it: its PING is
//     answered and the lock still has its token.
func FuzzSessionV2(f *testing.F) {
	for _, seed := range fuzzV2Seeds() {
		f.Add(seed)
	}
	fs := fuzzV2Start(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > fuzzMaxInput {
			in = in[:fuzzMaxInput]
		}
		fs.session(t, in)
		fs.checkBaseline(t, in)
	})
}

type fuzzV2Server struct {
	srv    *server.Server
	addr   string
	holder net.Conn
	token  uint64
}

func fuzzV2Start(f *testing.F) *fuzzV2Server {
	fs := &fuzzV2Server{srv: &server.Server{IOTimeout: fuzzV2IOTimeout, Logger: slog.New(slog.DiscardHandler)}}
	time.Sleep(time.Until(server.TokenGate(fs.srv)))
	fs.addr = fuzzServe(f, fs.srv, func() {
		if fs.holder != nil {
			fs.holder.Close()
		}
	})
	c, err := net.Dial("tcp", fs.addr)
	if err != nil {
		f.Fatal(err)
	}
	fs.holder = c
	c.SetDeadline(time.Now().Add(fuzzBound))
	c.Write(append(openingV2(time.Hour, "holder"), claimFrame(1, excl, 0, fuzzHeld)...))
	if fr, err := protocol.ReadHelloAnswer(c); err != nil || fr.Type != protocol.TypeWelcome {
		f.Fatalf("holder: opening answered %v, %v", fr, err)
	}
	fr, err := protocol.ReadServerFrameV2(c)
	if err != nil || fr.Type != protocol.TypeGranted {
		f.Fatalf("holder: CLAIM answered %v, %v", fr, err)
	}
	fs.token = fr.Token
	if err := fuzzEventually(fs.baselineErr); err != nil {
		f.Fatal(err)
	}
	return fs
}

func (fs *fuzzV2Server) session(t *testing.T, in []byte) {
	c, err := net.Dial("tcp", fs.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(fuzzBound))
	type result struct {
		frames []protocol.Frame
		err    error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		read := protocol.ReadHelloAnswer
		for {
			fr, err := read(c)
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
					r.err = err
				}
				done <- r
				return
			}
			read = protocol.ReadServerFrameV2
			if len(r.frames) == 0 && fr.Flags&protocol.WelcomeValues != 0 {
				read = func(r io.Reader) (protocol.Frame, error) {
					return protocol.ReadServerFrameV2Max(r, protocol.MaxValuesFrameLen)
				}
			}
			r.frames = append(r.frames, fr)
		}
	}()
	if _, err := c.Write(append(protocol.AppendPreamble(nil), in...)); err == nil {
		c.(*net.TCPConn).CloseWrite()
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("input % x: after %v, reading ended with %v; want EOF within %v", fuzzShort(in), fuzzV2Frames(r.frames), r.err, fuzzBound)
	}
	if err := fuzzV2Check(in, r.frames, fs.token); err != nil {
		t.Fatalf("input % x: %v", fuzzShort(in), err)
	}
}

func (fs *fuzzV2Server) checkBaseline(t *testing.T, in []byte) {
	if hello, n, err := protocol.ParseHello(in); err == nil && n > 0 && hello.Resumable() {
		// A resumable session whose client went away is kept for its
		// lease (docs/protocol.md): end it now, once its reader has.
		fuzzEventually(func() error {
			if fs.srv.Sessions() != 1 {
				return errors.New("the session is still open")
			}
			return nil
		})
		server.EndKept(fs.srv)
	}
	if err := fuzzEventually(fs.baselineErr); err != nil {
		t.Fatalf("input % x: %v", fuzzShort(in), err)
	}
	fs.holder.SetDeadline(time.Now().Add(fuzzBound))
	if _, err := fs.holder.Write(protocol.AppendPing(nil, 7)); err != nil {
		t.Fatalf("input % x: the holder's PING: %v", fuzzShort(in), err)
	}
	if fr, err := protocol.ReadServerFrameV2(fs.holder); err != nil || fr.Type != protocol.TypePong || fr.Seq != 7 {
		t.Fatalf("input % x: the holder's PING was answered %v, %v", fuzzShort(in), fr, err)
	}
}

func (fs *fuzzV2Server) baselineErr() error {
	if n := fs.srv.Sessions(); n != 1 {
		return fmt.Errorf("%d sessions open, want 1 (the holder's)", n)
	}
	if c := fs.srv.Counts(); c != (server.Counts{Locks: 1}) {
		return fmt.Errorf("lock table counts %+v, want the held lock only", c)
	}
	if c := server.RangeCounts(fs.srv); c != (rangelock.Counts{}) {
		return fmt.Errorf("range table counts %+v, want none", c)
	}
	info, ok := fs.srv.Lock(fuzzHeld)
	if !ok || len(info.Holders) != 1 || info.Holder.Token != fs.token || len(info.Waiters) != 0 {
		return fmt.Errorf("lock %q is %+v (held: %v), want held with token %d and no waiters", fuzzHeld, info, ok, fs.token)
	}
	return nil
}

// fuzzV2Expect is what docs/protocol.md prescribes for a session whose
// client sends the preamble, then in, then ends: the frames in order
// (tokens 0: any), decided by a lock table of its own in which another
// session holds fuzzHeld, and the session's lease if its HELLO was valid.
func fuzzV2Expect(in []byte) (want []protocol.Frame, lease time.Duration) {
	fail := func(err error) []protocol.Frame {
		code, _ := protocol.CodeOf(err)
		return append(want, protocol.Frame{Type: protocol.TypeSessionError, Code: code})
	}
	hello, n, err := protocol.ParseHello(in)
	switch {
	case err != nil:
		return fail(err), 0
	case n == 0:
		return nil, 0
	}
	now := time.Unix(1e9, 0)
	tbl := locktable.New(&locktable.CounterTokens{})
	tbl.Open(now, 1, locktable.SessionParams{Lease: time.Hour})
	tbl.Claim(now, 1, 1, locktable.ClaimRequest{Name: fuzzHeld, Mode: locktable.Exclusive})
	const sid = 2
	tbl.Open(now, sid, locktable.SessionParams{Lease: hello.Lease(), Label: hello.Label})
	want = append(want, protocol.Frame{Type: protocol.TypeWelcome})
	ranges := rangelock.New(&locktable.CounterTokens{})
	pushes := func(res locktable.Result) {
		for _, s := range res.Sends {
			switch {
			case s.Session != sid:
			case s.Kind == locktable.SendAcquired:
				want = append(want, protocol.Frame{Type: protocol.TypePromoted, Claim: uint32(s.Claim)})
			case s.Kind == locktable.SendChange:
				want = append(want, protocol.Frame{Type: protocol.TypeChange, Claim: uint32(s.Claim), Change: s.Change.Kind, Value: s.Change.Value})
			}
		}
	}
	values, maxLen := hello.Values(), protocol.MaxFrameLen
	if values {
		maxLen = protocol.MaxValuesFrameLen
	}
	for off := n; off < len(in); {
		f, n, err := protocol.ParseClientFrameMax(in[off:], maxLen)
		if n == 0 && err == nil {
			break // cut short by the end of the stream: no answer
		}
		var ce *protocol.ClaimError
		if err != nil && !errors.As(err, &ce) {
			return fail(err), hello.Lease()
		}
		off += n
		key := locktable.Key{Session: sid, Claim: locktable.ClaimID(f.Claim)}
		switch f.Type {
		case protocol.TypePing:
			want = append(want, protocol.Frame{Type: protocol.TypePong, Seq: f.Seq})
		case protocol.TypeRing:
			// A single server's ring is empty: no MEMBER, one RINGEND.
			want = append(want, protocol.Frame{Type: protocol.TypeRingEnd})
		case protocol.TypeDetach:
			want = append(want, protocol.Frame{Type: protocol.TypeDetached})
		case protocol.TypeRange:
			want = append(want, fuzzRangeExpect(ranges, now, sid, f)...)
		case protocol.TypeRelease:
			res, _ := tbl.Release(now, key)
			pushes(res)
			want = append(want, protocol.Frame{Type: protocol.TypeReleased, Claim: f.Claim})
		case protocol.TypeProclaim, protocol.TypeWatch:
			if !values {
				return fail(protocol.ErrUnknownMessage), hello.Lease()
			}
			if f.Type == protocol.TypeWatch {
				if _, err := tbl.ClaimStatus(key); err == nil || tbl.Watching(sid, key.Claim) {
					return fail(protocol.ErrClaimInUse), hello.Lease()
				}
			}
			if ce != nil {
				code, _ := protocol.CodeOf(ce.Err)
				want = append(want, protocol.Frame{Type: protocol.TypeRefused, Claim: f.Claim, Code: code})
				continue
			}
			if f.Type == protocol.TypeWatch {
				res, _ := tbl.Watch(now, sid, key.Claim, f.Name)
				pushes(res)
				continue
			}
			res, err := tbl.SetValue(now, key, f.Value)
			pushes(res)
			status := protocol.ProclaimSet
			if err != nil {
				status = protocol.ProclaimNotInUse
			}
			want = append(want, protocol.Frame{Type: protocol.TypeProclaimed, Claim: f.Claim, Proclaim: status})
		case protocol.TypeClaim:
			if _, err := tbl.ClaimStatus(key); err == nil || tbl.Watching(sid, key.Claim) {
				return fail(protocol.ErrClaimInUse), hello.Lease()
			}
			if ce != nil {
				code, _ := protocol.CodeOf(ce.Err)
				want = append(want, protocol.Frame{Type: protocol.TypeRefused, Claim: f.Claim, Code: code})
				continue
			}
			if f.HasValue() && !values {
				want = append(want, protocol.Frame{Type: protocol.TypeRefused, Claim: f.Claim, Code: protocol.CodeUnsupportedFeature})
				continue
			}
			if f.Reassert() {
				// No kept session here has the secret of an input.
				want = append(want, protocol.Frame{Type: protocol.TypeRefused, Claim: f.Claim, Code: protocol.CodeReassertRefused})
				continue
			}
			st, res, err := tbl.Claim(now, sid, key.Claim, locktable.ClaimRequest{
				Name: f.Name, Mode: locktable.Mode(f.Mode), Limit: f.Limit, NoWait: f.NoWait(), Value: f.Value})
			switch {
			case errors.Is(err, locktable.ErrModeConflict):
				want = append(want, protocol.Frame{Type: protocol.TypeRefused, Claim: f.Claim, Code: protocol.CodeModeConflict})
			case errors.Is(err, locktable.ErrLimitMismatch):
				want = append(want, protocol.Frame{Type: protocol.TypeRefused, Claim: f.Claim, Code: protocol.CodeLimitMismatch})
			case err != nil:
				panic(fmt.Sprintf("fuzzV2Expect: the table refused %v: %v", f, err))
			default:
				pushes(res)
				typ := map[locktable.State]protocol.Type{locktable.Owner: protocol.TypeGranted,
					locktable.Waiting: protocol.TypeQueued, locktable.Busy: protocol.TypeBusy}[st.State]
				want = append(want, protocol.Frame{Type: typ, Claim: f.Claim})
			}
		}
	}
	return want, hello.Lease()
}

// fuzzRangeExpect is what a single server sends for RANGE frame f of
// session sid (docs/protocol-v2-ranges.md, "v2 range locks"), decided by table:
// the ANSWER to f, unless f is a cancel that finds no waiting request,
// then the pushes it causes (CANCELLED, then PROMOTED). Only the frames'
// types and reqs are checked.
func fuzzRangeExpect(table *rangelock.Table, now time.Time, sid rangelock.SessionID, f protocol.Frame) []protocol.Frame {
	ns, r := rangelock.POSIX, rangelock.Range{Start: f.Start, End: f.End}
	if f.Flags&protocol.RangeFlock != 0 {
		ns, r = rangelock.Flock, rangelock.Whole
	}
	o := rangelock.Owner{Session: sid, ID: rangelock.OwnerID(f.Owner)}
	answer := func(req uint32) protocol.Frame { return protocol.Frame{Type: protocol.TypeRangeAnswer, Claim: req} }
	var res rangelock.Result
	out := []protocol.Frame{answer(f.Claim)}
	switch f.Op {
	case protocol.RangeSet:
		_, res, _ = table.Set(now, rangelock.Request{Key: f.Name, NS: ns, Owner: o, Type: rangelock.Type(f.LockType),
			Range: r, Wait: f.Flags&protocol.RangeWait != 0, Tag: uint64(f.Claim)})
	case protocol.RangeUnlock:
		res, _ = table.Unlock(now, f.Name, ns, o, r)
	case protocol.RangeRelease:
		res, _ = table.ReleaseOwner(now, f.Name, ns, o)
	case protocol.RangeResume:
		// Nothing is kept for another session here: held unless a
		// conflicting lock holds (waiters are not looked at).
		table.Install(rangelock.KeyLock{Key: f.Name, NS: ns, Lock: rangelock.Lock{Owner: o, Type: rangelock.Type(f.LockType), Range: r}})
	case protocol.RangeCancel:
		var err error
		if res, err = table.Cancel(now, sid, uint64(f.Claim)); errors.Is(err, rangelock.ErrNoWaiter) {
			out = nil
		}
	}
	for _, c := range res.Cancelled {
		out = append(out, answer(uint32(c.Tag)))
	}
	for _, g := range res.Grants {
		out = append(out, answer(uint32(g.Tag)))
	}
	return out
}

// fuzzV2Check checks the frames a session received against fuzzV2Expect:
// a prefix always (the HELLO may miss the io-timeout on a stalled
// machine, a short lease may expire mid-stream), the whole when neither
// can happen; tokens strictly increasing and newer than the holder's.
func fuzzV2Check(in []byte, got []protocol.Frame, holderToken uint64) error {
	want, lease := fuzzV2Expect(in)
	if len(got) > len(want) {
		return fmt.Errorf("frames %v; want %v", fuzzV2Frames(got), fuzzV2Frames(want))
	}
	hello, _, _ := protocol.ParseHello(in)
	last := holderToken
	for i, g := range got {
		w := want[i]
		// A QUEUED carries a ticket exactly when the session asked for
		// tickets (docs/protocol-v2-tickets.md, "v2 queue tickets").
		if g.Type == protocol.TypeQueued && (g.Ticket != 0) != hello.Tickets() {
			return fmt.Errorf("frame %d is %v, to a HELLO with flags 0x%02x", i+1, g, hello.Flags)
		}
		if g.Type != w.Type || g.Claim != w.Claim || g.Code != w.Code || g.Seq != w.Seq ||
			g.Change != w.Change || g.Value != w.Value || g.Proclaim != w.Proclaim ||
			(g.Type == protocol.TypeSessionError || g.Type == protocol.TypeRefused) && g.Reason != g.Code.Reason() {
			return fmt.Errorf("frame %d is %v; want the frames %v", i+1, g, fuzzV2Frames(want))
		}
		switch g.Type {
		case protocol.TypeWelcome:
			if g.Session == 0 {
				return errors.New("WELCOME with session 0")
			}
		case protocol.TypeGranted, protocol.TypePromoted:
			if g.Token <= last {
				return fmt.Errorf("%v: token not above %d, the previous grant's", g, last)
			}
			last = g.Token
		}
	}
	strict := (lease == 0 || lease >= fuzzStrictLease) && len(want)*32 <= fuzzStrictReplies
	if strict && len(got) > 0 && len(got) < len(want) {
		return fmt.Errorf("frames %v; want all of %v: nothing could cut this session short", fuzzV2Frames(got), fuzzV2Frames(want))
	}
	return nil
}

func fuzzV2Frames(fs []protocol.Frame) string {
	if len(fs) > 8 {
		return fmt.Sprintf("%v … (%d frames)", fs[:8], len(fs))
	}
	return fmt.Sprint(fs)
}

// fuzzV2Seeds: after the preamble, the interesting openings and sessions
// of docs/protocol.md.
func fuzzV2Seeds() [][]byte {
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	hello := protocol.AppendHello(nil, 60000, "fz")
	resumable := protocol.AppendFrame(nil, protocol.Frame{Type: protocol.TypeHello, LeaseMS: 60000, Flags: protocol.HelloResumable, Label: "fz"})
	tickets := protocol.AppendFrame(nil, protocol.Frame{Type: protocol.TypeHello, LeaseMS: 60000, Flags: protocol.HelloResumable | protocol.HelloTickets, Label: "fz"})
	detach := protocol.AppendFrame(nil, protocol.Frame{Type: protocol.TypeHello, LeaseMS: 60000, Flags: protocol.HelloResumable | protocol.HelloDetach, Label: "fz"})
	values := protocol.AppendFrame(nil, protocol.Frame{Type: protocol.TypeHello, LeaseMS: 60000, Flags: protocol.HelloValues, Label: "fz"})
	return [][]byte{
		cat(detach, claimFrame(1, excl, 0, "job"), claimFrame(2, excl, 0, fuzzHeld)),                                   // released at EOF
		cat(detach, claimFrame(1, excl, 0, "job"), protocol.AppendDetach(nil), claimFrame(2, excl, 0, "b")),            // kept at EOF
		cat(hello, protocol.AppendDetach(nil), protocol.AppendFrame(nil, protocol.Frame{Type: protocol.TypeDetached})), // 0x13
		{},
		hello,
		protocol.AppendHello(nil, 0, "fz"),      // 0x17
		protocol.AppendHello(nil, 2000, "\xff"), // 0x1d
		{0, 0},                                  // 0x19
		{0x02, 0x01},                            // 0x1a
		protocol.AppendPing(nil, 1),             // 0x1b
		cat(hello, hello),                       // 0x1c
		cat(hello, protocol.AppendPing(nil, 1), protocol.AppendPing(nil, 2)),
		cat(hello, claimFrame(1, excl, 0, "job"), claimFrame(2, shrd, 0, fuzzHeld), releaseFrame(1), releaseFrame(2)),
		cat(hello, claimFrame(1, excl, 0, "a"), claimFrame(2, shrd, 0, "a"), claimFrame(3, shrd, 0, "a"), releaseFrame(1)),
		cat(hello, claimFrame(1, sema, 2, "p"), claimFrame(2, sema, 2, "p"), claimFrame(3, sema, 2, "p"), noWaitFrame(4, sema, 2, "p"), releaseFrame(2)),
		cat(hello, claimFrame(1, sema, 3, "p"), claimFrame(2, sema, 2, "p"), claimFrame(3, excl, 0, "p")), // 0x22, 0x23
		cat(hello, claimFrame(1, 9, 0, "m"), claimFrame(2, excl, 1, "m"), claimFrame(3, excl, 0, "")),     // 0x20, 0x21, 0x14
		cat(hello, protocol.AppendClaim(nil, 1, excl, 0, 0x80, "x"), claimFrame(1, excl, 0, "x\xff")),     // 0x1e, 0x16
		cat(hello, claimFrame(1, excl, 0, "x"), claimFrame(1, shrd, 0, "y")),                              // 0x1f
		cat(hello, noWaitFrame(1, excl, 0, fuzzHeld), claimFrame(1, excl, 0, "free")),                     // BUSY, id reusable
		cat(hello, claimFrame(1, excl, 0, "job"))[:20],                                                    // cut in a frame
		cat(protocol.AppendHello(nil, 1, "short"), bytes.Repeat(protocol.AppendPing(nil, 3), 200)),        // expires mid-stream
		cat(resumable, claimFrame(1, excl, 0, "job"), claimFrame(2, excl, 0, fuzzHeld)),                   // kept at EOF
		cat(resumable, rangeFrame(1, protocol.RangeSet, 0, protocol.LockWrite, 1, 0, 9, "f"),
			rangeFrame(2, protocol.RangeSet, protocol.RangeWait, protocol.LockWrite, 2, 5, 5, "f")), // range locks kept at EOF
		cat(hello, rangeFrame(1, protocol.RangeSet, 0, protocol.LockRead, 1, 0, 9, "f"),
			protocol.AppendRange(nil, protocol.Frame{Claim: 2, Op: protocol.RangeResume, LockType: protocol.LockWrite, Owner: 2, Start: 5, End: 5, Name: "f", Session: 9}),
			protocol.AppendRange(nil, protocol.Frame{Claim: 3, Op: protocol.RangeResume, LockType: protocol.LockRead, Owner: 2, Start: 20, End: 30, Name: "f", Session: 9})), // conflict, then held
		cat(tickets, claimFrame(1, excl, 0, fuzzHeld), claimFrame(2, shrd, 0, fuzzHeld), releaseFrame(1)), // QUEUED with tickets
		cat(tickets, protocol.AppendFrame(nil, protocol.Frame{Type: protocol.TypeClaim, Claim: 1, Flags: protocol.ClaimReassert | protocol.ClaimTicket,
			Mode: excl, Name: fuzzHeld, Ticket: 3, Session: 1}), claimFrame(1, excl, 0, fuzzHeld)), // 0x04, then QUEUED with a ticket
		cat(hello, protocol.AppendFrame(nil, protocol.Frame{Type: protocol.TypeClaim, Claim: 1, Flags: protocol.ClaimReassert,
			Mode: excl, Name: "job", Token: 9, Session: 1}), claimFrame(1, excl, 0, "job")), // 0x04, id reusable
		cat(hello, protocol.AppendFrame(nil, protocol.Frame{Type: protocol.TypeRing})), // an empty ring
		cat(values, protocol.AppendWatch(nil, 1, fuzzHeld), protocol.AppendWatch(nil, 2, "w"),
			protocol.AppendClaimValue(nil, 3, excl, 0, 0, "w", "v1"), protocol.AppendProclaim(nil, 3, "v2"),
			protocol.AppendClaimValue(nil, 4, excl, 0, 0, "w", "v3"), releaseFrame(3), releaseFrame(2),
			protocol.AppendProclaim(nil, 9, "x"), protocol.AppendWatch(nil, 1, "again")), // values and watches, then 0x1f
		cat(hello, protocol.AppendClaimValue(nil, 1, excl, 0, 0, "w", "v"), protocol.AppendWatch(nil, 2, "w")),     // 0x1e, then 0x13
		cat(values, protocol.AppendWatch(nil, 1, ""), protocol.AppendProclaim(nil, 1, string(make([]byte, 1025)))), // 0x14, 0x24
		cat(hello, rangeFrame(1, protocol.RangeSet, 0, protocol.LockWrite, 1, 0, 9, "f"), // held by owner 1
			rangeFrame(2, protocol.RangeSet, protocol.RangeWait, protocol.LockWrite, 2, 5, 5, "f"), // owner 2 waits
			rangeFrame(3, protocol.RangeUnlock, 0, 0, 1, 0, 9, "f"),                                // promotes it
			rangeFrame(2, protocol.RangeCancel, 0, 0, 2, 0, 0, "f"),                                // too late: no answer
			rangeFrame(4, protocol.RangeAdopt, 0, 0, 0, 0, 0, "f")),                                // hop-only: invalid here
	}
}

// TestFuzzV2Check shows that FuzzSessionV2's judge can fail.
func TestFuzzV2Check(t *testing.T) {
	hello := protocol.AppendHello(nil, 60000, "fz")
	in := append(append(append([]byte(nil), hello...), claimFrame(1, excl, 0, "a")...), claimFrame(2, excl, 0, "a")...)
	in = append(in, releaseFrame(1)...)
	welcome := protocol.Frame{Type: protocol.TypeWelcome, Session: 3}
	granted := func(c uint32, tok uint64) protocol.Frame {
		return protocol.Frame{Type: protocol.TypeGranted, Claim: c, Token: tok}
	}
	queued := protocol.Frame{Type: protocol.TypeQueued, Claim: 2}
	promoted := func(tok uint64) protocol.Frame {
		return protocol.Frame{Type: protocol.TypePromoted, Claim: 2, Token: tok}
	}
	released := protocol.Frame{Type: protocol.TypeReleased, Claim: 1}
	for _, tt := range []struct {
		name string
		got  []protocol.Frame
		pass bool
	}{
		{"all", []protocol.Frame{welcome, granted(1, 9), queued, promoted(10), released}, true},
		{"nothing", nil, true},
		{"cut short without cause", []protocol.Frame{welcome, granted(1, 9)}, false},
		{"RELEASED before PROMOTED is not what the table says", []protocol.Frame{welcome, granted(1, 9), queued, released, promoted(10)}, false},
		{"token not increasing", []protocol.Frame{welcome, granted(1, 9), queued, promoted(9), released}, false},
		{"token not above the holder's", []protocol.Frame{welcome, granted(1, 4), queued, promoted(10), released}, false},
		{"wrong claim id", []protocol.Frame{welcome, granted(2, 9), queued, promoted(10), released}, false},
	} {
		err := fuzzV2Check(in, tt.got, 5)
		if (err == nil) != tt.pass {
			t.Errorf("%s: %v: error %v, want pass %v", tt.name, tt.got, err, tt.pass)
		}
	}
}
