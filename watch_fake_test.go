package baton

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
)

// Values and watches against the scripted fake: the fallback from an
// older server, the client-side bound on a value, PROCLAIM, and what a
// watch delivers when it starts again (a resume, a slow-watcher drop).

// openValues opens a session on the fake whose WELCOME grants values
// (and, with resumable, a resumable session with secret 0x11 on "n1").
func openValues(t *testing.T, fake *fakeV2, resumable bool) (*Session, *fakeV2Conn) {
	t.Helper()
	if resumable {
		return openResumableFlags(t, fake, SessionOptions{Lease: 2 * time.Second}, protocol.WelcomeValues)
	}
	type res struct {
		s   *Session
		err error
	}
	ch := make(chan res, 1)
	go func() {
		s, err := fake.client().OpenSession(context.Background(), SessionOptions{Lease: 2 * time.Second})
		ch <- res{s, err}
	}()
	fc, hello := fake.acceptV2()
	if hello.Flags != protocol.HelloValues {
		t.Fatalf("HELLO flags 0x%02x, want values", hello.Flags)
	}
	fc.send(protocol.AppendFrame(nil, protocol.Frame{Type: protocol.TypeWelcome, Session: 7, Flags: protocol.WelcomeValues}))
	r := wait(t, ch)
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { r.s.Close() })
	return r.s, fc
}

func change(watch uint32, kind protocol.ChangeKind, token uint64, value string) []byte {
	return protocol.AppendChange(nil, watch, protocol.Change{Kind: kind, Mode: protocol.ModeExclusive, Token: token, Value: value})
}

// goWatch starts s.Watch(name) and returns its result's channel.
func goWatch(s *Session, name string) chan struct {
	w   *Watch
	err error
} {
	ch := make(chan struct {
		w   *Watch
		err error
	}, 1)
	go func() {
		w, err := s.Watch(context.Background(), name)
		ch <- struct {
			w   *Watch
			err error
		}{w, err}
	}()
	return ch
}

// nextState returns the watch's next state.
func nextState(t *testing.T, w *Watch) []Holder {
	t.Helper()
	select {
	case st, ok := <-w.Changes():
		if !ok {
			t.Fatalf("watch ended: %v", w.Err())
		}
		return st
	case <-time.After(fakeTimeout):
		t.Fatal("no state")
		return nil
	}
}

// noState checks that the watch delivers nothing for a while.
func noState(t *testing.T, w *Watch) {
	t.Helper()
	select {
	case st := <-w.Changes():
		t.Fatalf("unexpected state %+v", st)
	case <-time.After(100 * time.Millisecond):
	}
}

func tokens(st []Holder) []uint64 {
	out := []uint64{}
	for _, h := range st {
		out = append(out, h.Token)
	}
	return out
}

// An older server refuses HELLO's values flag with ERROR 0x1e: the
// session opens again without it and serves claims, and every value and
// watch call fails at once with ErrValuesNotSupported, which is also
// protocol.ErrUnsupportedFeature.
func TestValuesOlderServer(t *testing.T) {
	fake := newFakeV2(t)
	type res struct {
		s   *Session
		err error
	}
	ch := make(chan res, 1)
	c := fake.client()
	go func() {
		s, err := c.OpenSession(context.Background(), SessionOptions{Lease: 2 * time.Second})
		ch <- res{s, err}
	}()
	fc, hello := fake.acceptV2()
	if hello.Flags != protocol.HelloValues {
		t.Fatalf("HELLO flags 0x%02x, want values", hello.Flags)
	}
	fc.send(protocol.AppendSessionError(nil, protocol.CodeUnsupportedFeature, "reserved flag"))
	fc2, hello := fake.acceptV2()
	if hello.Flags != 0 {
		t.Fatalf("second HELLO flags 0x%02x, want none", hello.Flags)
	}
	fc2.welcome()
	r := wait(t, ch)
	if r.err != nil {
		t.Fatal(r.err)
	}
	s := r.s
	defer s.Close()
	ctx := t.Context()
	if _, err := s.Watch(ctx, "db"); !errors.Is(err, ErrValuesNotSupported) || !errors.Is(err, protocol.ErrUnsupportedFeature) {
		t.Fatalf("Watch: %v, want ErrValuesNotSupported", err)
	}
	if _, err := s.AcquireValue(ctx, "db", Exclusive, "x"); !errors.Is(err, ErrValuesNotSupported) {
		t.Fatalf("AcquireValue: %v", err)
	}
	e := NewElection(s, "db")
	if err := e.Campaign(ctx, "x"); !errors.Is(err, ErrValuesNotSupported) {
		t.Fatalf("Campaign: %v", err)
	}
	if _, err := e.Leader(ctx); !errors.Is(err, ErrValuesNotSupported) {
		t.Fatalf("Leader: %v", err)
	}
	// Nothing of it reached the server; a plain claim works.
	res2 := goAcquire(ctx, s, "db", Exclusive, false)
	f := fc2.expect(protocol.TypeClaim)
	if f.HasValue() || f.Name != "db" {
		t.Fatalf("first frame after the refusals: %v", f)
	}
	fc2.send(protocol.AppendGranted(nil, f.Claim, 9))
	cl := wait(t, res2)
	if cl.err != nil {
		t.Fatal(cl.err)
	}
	if err := cl.cl.SetValue(ctx, "x"); !errors.Is(err, ErrValuesNotSupported) {
		t.Fatalf("SetValue: %v", err)
	}
	// The client remembers: its next session does not ask.
	go func() {
		s, err := c.OpenSession(context.Background(), SessionOptions{Lease: 2 * time.Second})
		ch <- res{s, err}
	}()
	fc3, hello := fake.acceptV2()
	if hello.Flags != 0 {
		t.Fatalf("later HELLO flags 0x%02x, want none", hello.Flags)
	}
	fc3.welcome()
	if r := wait(t, ch); r.err == nil {
		r.s.Close()
	}
}

// A value over protocol.MaxValueLen is refused before anything is sent,
// in a claim and in a PROCLAIM; the claim lives on.
func TestValueTooLongClientSide(t *testing.T) {
	fake := newFakeV2(t)
	s, fc := openValues(t, fake, false)
	ctx := t.Context()
	long := strings.Repeat("v", protocol.MaxValueLen+1)
	if _, err := s.AcquireValue(ctx, "db", Exclusive, long); !errors.Is(err, protocol.ErrValueTooLong) {
		t.Fatalf("AcquireValue: %v, want ErrValueTooLong", err)
	}
	if err := NewElection(s, "db").Campaign(ctx, long); !errors.Is(err, protocol.ErrValueTooLong) {
		t.Fatalf("Campaign: %v, want ErrValueTooLong", err)
	}
	res := make(chan claimResult, 1)
	go func() {
		cl, err := s.AcquireValue(ctx, "db", Exclusive, "10.0.0.5:5432")
		res <- claimResult{cl, err}
	}()
	f := fc.expect(protocol.TypeClaim)
	if !f.HasValue() || f.Value != "10.0.0.5:5432" {
		t.Fatalf("first frame: %v, want the claim with its value", f)
	}
	fc.send(protocol.AppendGranted(nil, f.Claim, 42))
	r := wait(t, res)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if err := r.cl.SetValue(ctx, long); !errors.Is(err, protocol.ErrValueTooLong) {
		t.Fatalf("SetValue: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- r.cl.SetValue(ctx, "10.0.0.6:5432") }()
	p := fc.expect(protocol.TypeProclaim)
	if p.Claim != f.Claim || p.Value != "10.0.0.6:5432" {
		t.Fatalf("next frame: %v, want the PROCLAIM of the short value", p)
	}
	fc.send(protocol.AppendProclaimed(nil, p.Claim, protocol.ProclaimSet))
	if err := wait(t, done); err != nil {
		t.Fatal(err)
	}
	// A PROCLAIM that crosses the claim's end is answered "not in use".
	go func() { done <- r.cl.SetValue(ctx, "x") }()
	p = fc.expect(protocol.TypeProclaim)
	fc.send(protocol.AppendRevoked(nil, p.Claim, protocol.CodeClosedByAdmin, "kicked"))
	fc.send(protocol.AppendProclaimed(nil, p.Claim, protocol.ProclaimNotInUse))
	if err := wait(t, done); !errors.Is(err, protocol.ErrClosedByAdmin) {
		t.Fatalf("SetValue across REVOKED: %v", err)
	}
	if s.Err() != nil {
		t.Fatalf("session ended: %v", s.Err())
	}
}

// A watch delivers a state only once synced, each change after, and when
// it starts again after a resume, nothing older than what it delivered:
// a stale holder is dropped, and the same state is not delivered twice.
func TestWatchResumeDeliversNothingOlder(t *testing.T) {
	fake := newFakeV2(t)
	s, fc := openValues(t, fake, true)
	wres := goWatch(s, "db")
	f := fc.expect(protocol.TypeWatch)
	if f.Name != "db" {
		t.Fatalf("WATCH %v", f)
	}
	fc.send(change(f.Claim, protocol.ChangeHeld, 42, "a"))
	fc.send(change(f.Claim, protocol.ChangeSynced, 0, ""))
	r := wait(t, wres)
	if r.err != nil {
		t.Fatal(r.err)
	}
	w := r.w
	defer w.Close()
	if st := nextState(t, w); len(st) != 1 || st[0].Token != 42 || st[0].Value != "a" {
		t.Fatalf("first state %+v", st)
	}
	fc.send(change(f.Claim, protocol.ChangeValue, 42, "b"))
	if st := nextState(t, w); len(st) != 1 || st[0].Value != "b" {
		t.Fatalf("after the value change %+v", st)
	}
	fc.send(change(f.Claim, protocol.ChangeFreed, 42, ""))
	if st := nextState(t, w); len(st) != 0 {
		t.Fatalf("after freed %+v", st)
	}
	fc.send(change(f.Claim, protocol.ChangeHeld, 50, "c"))
	if st := nextState(t, w); len(tokens(st)) != 1 || st[0].Token != 50 {
		t.Fatalf("after held %+v", st)
	}

	// The connection breaks: the watch is sent again on the new one.
	fc.c.Close()
	fc2 := resumeConnFlags(t, fake, 8, 0x22, 0, protocol.WelcomeValues)
	f2 := fc2.expect(protocol.TypeWatch)
	if f2.Name != "db" {
		t.Fatalf("re-sent WATCH %v", f2)
	}
	// A stale view (42, which was freed) and the current holder: the
	// state is the one delivered last, so nothing is delivered.
	fc2.send(change(f2.Claim, protocol.ChangeHeld, 42, "b"))
	fc2.send(change(f2.Claim, protocol.ChangeHeld, 50, "c"))
	fc2.send(change(f2.Claim, protocol.ChangeSynced, 0, ""))
	noState(t, w)
	fc2.send(change(f2.Claim, protocol.ChangeFreed, 50, ""))
	if st := nextState(t, w); len(st) != 0 {
		t.Fatalf("after the resume, freed: %+v", st)
	}
	fc2.send(change(f2.Claim, protocol.ChangeHeld, 60, "d"))
	if st := nextState(t, w); len(st) != 1 || st[0].Token != 60 {
		t.Fatalf("after the resume, held: %+v", st)
	}

	// Dropped as a slow watcher: a new WATCH on a new id, and its state
	// (the same) is not delivered again.
	fc2.send(protocol.AppendRevoked(nil, f2.Claim, protocol.CodeSlowWatcher, "slow"))
	f3 := fc2.expect(protocol.TypeWatch)
	if f3.Claim == f2.Claim || f3.Name != "db" {
		t.Fatalf("WATCH after the drop: %v", f3)
	}
	fc2.send(change(f3.Claim, protocol.ChangeHeld, 60, "d"))
	fc2.send(change(f3.Claim, protocol.ChangeSynced, 0, ""))
	noState(t, w)
	fc2.send(change(f3.Claim, protocol.ChangeValue, 60, "e"))
	if st := nextState(t, w); len(st) != 1 || st[0].Value != "e" {
		t.Fatalf("after the re-watch: %+v", st)
	}

	// Close releases the watch and closes the channel.
	w.Close()
	rel := fc2.expect(protocol.TypeRelease)
	if rel.Claim != f3.Claim {
		t.Fatalf("RELEASE %v", rel)
	}
	fc2.send(protocol.AppendReleased(nil, rel.Claim))
	if _, ok := <-w.Changes(); ok {
		t.Fatal("Changes open after Close")
	}
	if !errors.Is(w.Err(), ErrWatchClosed) {
		t.Fatalf("Err %v", w.Err())
	}
}

// A WATCH dropped as a slow watcher before its answer was sent is
// answered by its REVOKED: the client watches again and Watch returns
// once that is answered. A session lost before the answer fails Watch,
// and the watch does not live on.
func TestWatchDroppedBeforeAnswer(t *testing.T) {
	fake := newFakeV2(t)
	s, fc := openValues(t, fake, false)
	wres := goWatch(s, "db")
	f := fc.expect(protocol.TypeWatch)
	fc.send(protocol.AppendRevoked(nil, f.Claim, protocol.CodeSlowWatcher, "slow"))
	f2 := fc.expect(protocol.TypeWatch)
	if f2.Claim == f.Claim || f2.Name != "db" {
		t.Fatalf("WATCH after the drop: %v", f2)
	}
	fc.send(change(f2.Claim, protocol.ChangeHeld, 7, "v"))
	fc.send(change(f2.Claim, protocol.ChangeSynced, 0, ""))
	r := wait(t, wres)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if st := nextState(t, r.w); len(st) != 1 || st[0].Token != 7 {
		t.Fatalf("state %+v", st)
	}

	wres = goWatch(s, "other")
	fc.expect(protocol.TypeWatch)
	fc.send(protocol.AppendSessionError(nil, protocol.CodeShuttingDown, "bye"))
	if r := wait(t, wres); !errors.Is(r.err, protocol.ErrShuttingDown) {
		t.Fatalf("Watch on a lost session: %v", r.err)
	}
	if _, ok := <-r.w.Changes(); ok {
		t.Fatal("the first watch lives on after the session ended")
	}
	if !errors.Is(r.w.Err(), protocol.ErrShuttingDown) {
		t.Fatalf("first watch's Err: %v", r.w.Err())
	}
}

// A claim's value goes with its re-assertion after a broken connection:
// the latest one, also when a SetValue was cut off, which the grant of
// the re-assertion then answers.
func TestValueReasserted(t *testing.T) {
	fake := newFakeV2(t)
	s, fc := openValues(t, fake, true)
	ctx := t.Context()
	res := make(chan claimResult, 1)
	go func() {
		cl, err := s.AcquireValue(ctx, "db", Exclusive, "a")
		res <- claimResult{cl, err}
	}()
	f := fc.expect(protocol.TypeClaim)
	fc.send(protocol.AppendGranted(nil, f.Claim, 42))
	r := wait(t, res)
	if r.err != nil {
		t.Fatal(r.err)
	}
	done := make(chan error, 1)
	go func() { done <- r.cl.SetValue(ctx, "b") }()
	fc.expect(protocol.TypeProclaim)
	fc.c.Close() // before the PROCLAIMED

	fc2 := resumeConnFlags(t, fake, 8, 0x22, 0, protocol.WelcomeValues)
	ra := expectReassert(t, fc2, f.Claim, "db", 42, 0, 7, 0x11)
	if !ra.HasValue() || ra.Value != "b" {
		t.Fatalf("re-assertion %v, want the latest value b", ra)
	}
	fc2.send(protocol.AppendGranted(nil, ra.Claim, 42))
	if err := wait(t, done); err != nil {
		t.Fatalf("SetValue cut off by the break: %v", err)
	}
	if r.cl.Token() != 42 || r.cl.Err() != nil {
		t.Fatalf("claim after the resume: token %d, err %v", r.cl.Token(), r.cl.Err())
	}
}
