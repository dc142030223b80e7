package clientrule

import (
	"errors"
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
)

var t0 = time.Unix(1000, 0)

func ms(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

func open(t *testing.T, m Mutation) *Session {
	t.Helper()
	s := NewSessionMutant(time.Second, 0, m)
	s.SentHello(ms(0))
	mustRecv(t, s, protocol.Frame{Type: protocol.TypeWelcome, Session: 1}, ms(10))
	return s
}

func mustRecv(t *testing.T, s *Session, f protocol.Frame, at time.Time) Event {
	t.Helper()
	ev, err := s.Received(f, at)
	if err != nil {
		t.Fatalf("%v at %v: %v", f, at.Sub(t0), err)
	}
	return ev
}

func TestSessionAnchorIsSendTimeOfLatestAnswered(t *testing.T) {
	s := NewSession(time.Second, 0)
	s.SentHello(ms(0))
	if s.Deadline() != ms(800) || s.CloseBy() != ms(1000) {
		t.Fatalf("before WELCOME: deadline %v closeBy %v", s.Deadline().Sub(t0), s.CloseBy().Sub(t0))
	}
	if err := s.SentClaim(1, false, ms(5)); err != nil { // pipelined behind HELLO
		t.Fatal(err)
	}
	mustRecv(t, s, protocol.Frame{Type: protocol.TypeWelcome}, ms(50))
	if s.Anchor() != ms(0) || s.State() != SessionOpen {
		t.Fatalf("anchor %v", s.Anchor().Sub(t0))
	}
	mustRecv(t, s, protocol.Frame{Type: protocol.TypeQueued, Claim: 1}, ms(60))
	if s.Anchor() != ms(5) || s.Deadline() != ms(805) {
		t.Fatalf("anchor %v, want the CLAIM's send time", s.Anchor().Sub(t0))
	}
	// A push, however late, does not move the anchor.
	ev := mustRecv(t, s, protocol.Frame{Type: protocol.TypePromoted, Claim: 1, Token: 9}, ms(700))
	if s.Anchor() != ms(5) || ev.Token != 9 {
		t.Fatalf("anchor %v after PROMOTED", s.Anchor().Sub(t0))
	}
	if st, tok := s.Claim(1); st != ClaimHeld || tok != 9 {
		t.Fatalf("claim %v %d", st, tok)
	}
	// After the deadline every frame is a give-up.
	if _, err := s.Received(protocol.Frame{Type: protocol.TypePong, Seq: 1}, ms(806)); !errors.Is(err, ErrExpired) {
		t.Fatalf("late frame: %v", err)
	}
	if s.State() != SessionClosed || s.CloseBy() != ms(1005) {
		t.Fatalf("state %v closeBy %v", s.State(), s.CloseBy().Sub(t0))
	}
}

func TestSessionMutantsMoveTheAnchor(t *testing.T) {
	s := open(t, MutAnchorAtReceive)
	if s.Anchor() != ms(10) {
		t.Fatalf("MutAnchorAtReceive: anchor %v, want the arrival", s.Anchor().Sub(t0))
	}
	s = open(t, MutAnchorOnPush)
	s.SentClaim(1, false, ms(20))
	mustRecv(t, s, protocol.Frame{Type: protocol.TypeQueued, Claim: 1}, ms(30))
	mustRecv(t, s, protocol.Frame{Type: protocol.TypePromoted, Claim: 1, Token: 2}, ms(500))
	if s.Anchor() != ms(500) {
		t.Fatalf("MutAnchorOnPush: anchor %v", s.Anchor().Sub(t0))
	}
}

func TestSessionExpire(t *testing.T) {
	s := open(t, NoMutation)
	if s.Expire(ms(800)) {
		t.Fatal("expired at the deadline")
	}
	if !s.Expire(ms(801)) || s.Live() {
		t.Fatal("not expired after the deadline")
	}
	if s.SentClaim(1, false, ms(802)) == nil {
		t.Fatal("CLAIM on a closed session")
	}
}

func TestSessionClaimIDsFree(t *testing.T) {
	s := open(t, NoMutation)
	s.SentClaim(1, false, ms(20))
	if s.Free(1) || s.SentClaim(1, false, ms(21)) == nil {
		t.Fatal("id 1 free while its CLAIM is unanswered")
	}
	mustRecv(t, s, protocol.Frame{Type: protocol.TypeGranted, Claim: 1, Token: 3}, ms(30))
	if err := s.SentRelease(1, ms(40)); err != nil {
		t.Fatal(err)
	}
	if s.SentRelease(1, ms(41)) == nil {
		t.Fatal("second RELEASE accepted")
	}
	// REVOKED crossing the RELEASE: ended, but not free until RELEASED.
	ev := mustRecv(t, s, protocol.Frame{Type: protocol.TypeRevoked, Claim: 1, Code: 2}, ms(45))
	if !ev.Releasing {
		t.Fatal("REVOKED for a releasing claim not marked")
	}
	if s.Free(1) {
		t.Fatal("id free while its RELEASE is unanswered")
	}
	mustRecv(t, s, protocol.Frame{Type: protocol.TypeReleased, Claim: 1}, ms(50))
	if !s.Free(1) || s.Claims() != 0 {
		t.Fatal("id not free after RELEASED")
	}
	// BUSY and REFUSED free the id at once.
	s.SentClaim(1, true, ms(60))
	mustRecv(t, s, protocol.Frame{Type: protocol.TypeBusy, Claim: 1}, ms(61))
	s.SentClaim(1, false, ms(62))
	mustRecv(t, s, protocol.Frame{Type: protocol.TypeRefused, Claim: 1, Code: 0x21}, ms(63))
	if !s.Free(1) {
		t.Fatal("not free after BUSY/REFUSED")
	}
	// RELEASE before the CLAIM's answer.
	s.SentClaim(2, false, ms(70))
	s.SentRelease(2, ms(71))
	ev = mustRecv(t, s, protocol.Frame{Type: protocol.TypeQueued, Claim: 2}, ms(72))
	if !ev.Releasing {
		t.Fatal("QUEUED for a releasing claim not marked")
	}
	mustRecv(t, s, protocol.Frame{Type: protocol.TypePromoted, Claim: 2, Token: 5}, ms(73))
	mustRecv(t, s, protocol.Frame{Type: protocol.TypeReleased, Claim: 2}, ms(74))
	if !s.Free(2) || s.Pending() != 0 {
		t.Fatal("not free")
	}
}

func TestSessionViolationsRule(t *testing.T) {
	for _, tc := range []struct {
		name string
		prep func(s *Session)
		f    protocol.Frame
	}{
		{"answer with nothing unanswered", nil, protocol.Frame{Type: protocol.TypePong, Seq: 1}},
		{"PONG with the wrong seq", func(s *Session) { s.SentPing(ms(300)) }, protocol.Frame{Type: protocol.TypePong, Seq: 2}},
		{"GRANTED for another claim", func(s *Session) { s.SentClaim(1, false, ms(20)) }, protocol.Frame{Type: protocol.TypeGranted, Claim: 2}},
		{"RELEASED answering a CLAIM", func(s *Session) { s.SentClaim(1, false, ms(20)) }, protocol.Frame{Type: protocol.TypeReleased, Claim: 1}},
		{"GRANTED answering a PING", func(s *Session) { s.SentPing(ms(300)) }, protocol.Frame{Type: protocol.TypeGranted, Claim: 1}},
		{"WELCOME answering a CLAIM", func(s *Session) { s.SentClaim(1, false, ms(20)) }, protocol.Frame{Type: protocol.TypeWelcome}},
		{"QUEUED for a no-wait claim", func(s *Session) { s.SentClaim(1, true, ms(20)) }, protocol.Frame{Type: protocol.TypeQueued, Claim: 1}},
		{"BUSY for a claim that waits", func(s *Session) { s.SentClaim(1, false, ms(20)) }, protocol.Frame{Type: protocol.TypeBusy, Claim: 1}},
		{"PROMOTED for a pending claim", func(s *Session) { s.SentClaim(1, false, ms(20)) }, protocol.Frame{Type: protocol.TypePromoted, Claim: 1}},
		{"PROMOTED for no claim", nil, protocol.Frame{Type: protocol.TypePromoted, Claim: 1}},
		{"PROMOTED twice", func(s *Session) {
			s.SentClaim(1, false, ms(20))
			s.Received(protocol.Frame{Type: protocol.TypeQueued, Claim: 1}, ms(30))
			s.Received(protocol.Frame{Type: protocol.TypePromoted, Claim: 1}, ms(40))
		}, protocol.Frame{Type: protocol.TypePromoted, Claim: 1}},
		{"REVOKED for a pending claim", func(s *Session) { s.SentClaim(1, false, ms(20)) }, protocol.Frame{Type: protocol.TypeRevoked, Claim: 1}},
		{"REVOKED after RELEASED", func(s *Session) {
			s.SentClaim(1, false, ms(20))
			s.Received(protocol.Frame{Type: protocol.TypeGranted, Claim: 1}, ms(30))
			s.SentRelease(1, ms(40))
			s.Received(protocol.Frame{Type: protocol.TypeReleased, Claim: 1}, ms(50))
		}, protocol.Frame{Type: protocol.TypeRevoked, Claim: 1}},
		{"a client frame", nil, protocol.Frame{Type: protocol.TypePing}},
		{"a version 1 frame", nil, protocol.Frame{Type: protocol.TypeAcquired}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t, NoMutation)
			if tc.prep != nil {
				tc.prep(s)
			}
			if _, err := s.Received(tc.f, ms(400)); !errors.Is(err, ErrViolation) {
				t.Fatalf("%v: %v, want a violation", tc.f, err)
			}
			if s.State() != SessionClosed {
				t.Fatal("not closed")
			}
		})
	}
	s := NewSession(time.Second, 0)
	s.SentHello(ms(0))
	if _, err := s.Received(protocol.Frame{Type: protocol.TypeWelcome, Flags: 1}, ms(1)); !errors.Is(err, ErrViolation) {
		t.Fatalf("WELCOME with flags: %v", err)
	}
}

func TestSessionPingSchedule(t *testing.T) {
	s := open(t, NoMutation)
	next, ok := s.NextPing()
	if !ok || next != ms(250) { // HELLO at 0 counts as the previous send; base = 250
		t.Fatalf("first PING due %v %v", next.Sub(t0), ok)
	}
	if s.SentPing(ms(250)) != 1 {
		t.Fatal("seq")
	}
	if _, ok := s.NextPing(); ok {
		t.Fatal("two PINGs in flight")
	}
	mustRecv(t, s, protocol.Frame{Type: protocol.TypePong, Seq: 1}, ms(290))
	// srtt 40ms: interval 250 - 80 = 170
	if next, _ := s.NextPing(); next != ms(420) || s.SRTT() != 40*time.Millisecond {
		t.Fatalf("next %v srtt %v", next.Sub(t0), s.SRTT())
	}
	// A PONG later than the interval: the next PING goes out at once.
	s.SentPing(ms(420))
	mustRecv(t, s, protocol.Frame{Type: protocol.TypePong, Seq: 2}, ms(700))
	if next, _ := s.NextPing(); next != ms(700) {
		t.Fatalf("next %v", next.Sub(t0))
	}
}

// The rule's FIFO does not grow without bound under steady pipelining.
func TestSessionFIFOCompacts(t *testing.T) {
	s := NewSession(time.Hour, 0)
	s.SentHello(t0)
	mustRecv(t, s, protocol.Frame{Type: protocol.TypeWelcome}, t0)
	for i := range uint32(100000) {
		s.SentClaim(i+1, true, t0)
		if i > 0 {
			mustRecv(t, s, protocol.Frame{Type: protocol.TypeBusy, Claim: i}, t0)
		}
	}
	if cap(s.pending) > 64 {
		t.Fatalf("FIFO capacity %d with one request unanswered", cap(s.pending))
	}
}

// A watch takes a claim id: its current holders are pushes, the synced
// that follows answers the WATCH (and moves the anchor), later changes
// are pushes, and RELEASED ends it. A PROCLAIM is answered PROCLAIMED,
// or REFUSED 0x24, which leaves its claim held.
func TestSessionWatchAndProclaim(t *testing.T) {
	s := open(t, NoMutation)
	if err := s.SentClaim(1, false, ms(20)); err != nil {
		t.Fatal(err)
	}
	mustRecv(t, s, protocol.Frame{Type: protocol.TypeGranted, Claim: 1, Token: 5}, ms(30))
	if err := s.SentWatch(1, ms(40)); err == nil {
		t.Fatal("WATCH with the id of a held claim accepted")
	}
	if err := s.SentWatch(2, ms(40)); err != nil {
		t.Fatal(err)
	}
	mustRecv(t, s, protocol.Frame{Type: protocol.TypeChange, Claim: 2, Change: protocol.ChangeHeld, Token: 5}, ms(50))
	if s.Anchor() != ms(20) {
		t.Fatalf("anchor %v moved by a held push", s.Anchor().Sub(t0))
	}
	ev := mustRecv(t, s, protocol.Frame{Type: protocol.TypeChange, Claim: 2, Change: protocol.ChangeSynced}, ms(60))
	if ev.Answers != ReqWatch || s.Anchor() != ms(40) {
		t.Fatalf("synced: answers %v, anchor %v", ev.Answers, s.Anchor().Sub(t0))
	}
	if err := s.SentProclaim(2, ms(65)); err == nil {
		t.Fatal("PROCLAIM of a watch accepted")
	}
	if err := s.SentProclaim(1, ms(70)); err != nil {
		t.Fatal(err)
	}
	mustRecv(t, s, protocol.Frame{Type: protocol.TypeChange, Claim: 2, Change: protocol.ChangeValue, Token: 5, Value: "x"}, ms(75))
	ev = mustRecv(t, s, protocol.Frame{Type: protocol.TypeProclaimed, Claim: 1}, ms(80))
	if ev.Answers != ReqProclaim || s.Anchor() != ms(70) {
		t.Fatalf("PROCLAIMED: answers %v, anchor %v", ev.Answers, s.Anchor().Sub(t0))
	}
	if err := s.SentProclaim(1, ms(90)); err != nil {
		t.Fatal(err)
	}
	mustRecv(t, s, protocol.Frame{Type: protocol.TypeRefused, Claim: 1, Code: protocol.CodeValueTooLong}, ms(95))
	if st, tok := s.Claim(1); st != ClaimHeld || tok != 5 {
		t.Fatalf("after a refused PROCLAIM: claim %v %d", st, tok)
	}
	if err := s.SentRelease(2, ms(100)); err != nil {
		t.Fatal(err)
	}
	mustRecv(t, s, protocol.Frame{Type: protocol.TypeChange, Claim: 2, Change: protocol.ChangeFreed, Token: 5}, ms(105))
	mustRecv(t, s, protocol.Frame{Type: protocol.TypeReleased, Claim: 2}, ms(110))
	if !s.Free(2) {
		t.Fatal("watch id not free after RELEASED")
	}
	// A watch dropped before its synced was sent: the REVOKED answers
	// the WATCH.
	if err := s.SentWatch(3, ms(120)); err != nil {
		t.Fatal(err)
	}
	ev = mustRecv(t, s, protocol.Frame{Type: protocol.TypeRevoked, Claim: 3, Code: protocol.CodeSlowWatcher}, ms(130))
	if ev.Answers != ReqWatch || s.Anchor() != ms(120) || !s.Free(3) || s.Pending() != 0 {
		t.Fatalf("REVOKED of a new watch: answers %v, anchor %v, free %v, pending %d", ev.Answers, s.Anchor().Sub(t0), s.Free(3), s.Pending())
	}
}

// Frames about watches that do not fit are violations.
func TestSessionWatchViolations(t *testing.T) {
	cases := []struct {
		name string
		send func(s *Session)
		f    protocol.Frame
	}{
		{"CHANGE for a claim", func(s *Session) {
			s.SentClaim(1, false, ms(20))
			s.Received(protocol.Frame{Type: protocol.TypeGranted, Claim: 1, Token: 5}, ms(30))
		}, protocol.Frame{Type: protocol.TypeChange, Claim: 1, Change: protocol.ChangeHeld, Token: 5}},
		{"CHANGE for no id", func(s *Session) {}, protocol.Frame{Type: protocol.TypeChange, Claim: 3, Change: protocol.ChangeSynced}},
		{"PROCLAIMED unasked", func(s *Session) {
			s.SentClaim(1, false, ms(20))
			s.Received(protocol.Frame{Type: protocol.TypeGranted, Claim: 1, Token: 5}, ms(30))
		}, protocol.Frame{Type: protocol.TypeProclaimed, Claim: 1}},
		{"PROMOTED for a watch", func(s *Session) { s.SentWatch(2, ms(20)) }, protocol.Frame{Type: protocol.TypePromoted, Claim: 2, Token: 1}},
		{"REFUSED 0x18 for a PROCLAIM", func(s *Session) {
			s.SentClaim(1, false, ms(20))
			s.Received(protocol.Frame{Type: protocol.TypeGranted, Claim: 1, Token: 5}, ms(30))
			s.SentProclaim(1, ms(40))
		}, protocol.Frame{Type: protocol.TypeRefused, Claim: 1, Code: protocol.CodeNotAuthorized}},
	}
	for _, c := range cases {
		s := open(t, NoMutation)
		c.send(s)
		if _, err := s.Received(c.f, ms(50)); !errors.Is(err, ErrViolation) {
			t.Errorf("%s: %v, want a violation", c.name, err)
		}
	}
}
