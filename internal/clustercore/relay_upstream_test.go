package clustercore

import (
	"testing"
	"time"

	"github.com/batonlock/baton/protocol"
)

// relayReq is a request as the server keeps it: Sent and its own tag.
type relayReq struct {
	Sent
	tag string
}

func relaySent(kind protocol.Type, at time.Time, id uint32, tag string) relayReq {
	return relayReq{Sent: Sent{Kind: kind, At: at, ID: id}, tag: tag}
}

func TestAnswers(t *testing.T) {
	claim := Sent{Kind: protocol.TypeClaim, ID: 7}
	for _, tc := range []struct {
		name string
		r    Sent
		f    protocol.Frame
		want bool
	}{
		{"WELCOME answers HELLO", Sent{Kind: protocol.TypeHello}, protocol.Frame{Type: protocol.TypeWelcome}, true},
		{"WELCOME does not answer PING", Sent{Kind: protocol.TypePing}, protocol.Frame{Type: protocol.TypeWelcome}, false},
		{"PONG answers PING", Sent{Kind: protocol.TypePing}, protocol.Frame{Type: protocol.TypePong}, true},
		{"PONG does not answer CLAIM", claim, protocol.Frame{Type: protocol.TypePong}, false},
		{"GRANTED answers its CLAIM", claim, protocol.Frame{Type: protocol.TypeGranted, Claim: 7}, true},
		{"QUEUED answers its CLAIM", claim, protocol.Frame{Type: protocol.TypeQueued, Claim: 7}, true},
		{"BUSY answers its CLAIM", claim, protocol.Frame{Type: protocol.TypeBusy, Claim: 7}, true},
		{"REFUSED answers its CLAIM", claim, protocol.Frame{Type: protocol.TypeRefused, Claim: 7}, true},
		{"GRANTED of another claim does not", claim, protocol.Frame{Type: protocol.TypeGranted, Claim: 8}, false},
		{"RELEASED does not answer a CLAIM", claim, protocol.Frame{Type: protocol.TypeReleased, Claim: 7}, false},
		{"RELEASED answers its RELEASE", Sent{Kind: protocol.TypeRelease, ID: 7}, protocol.Frame{Type: protocol.TypeReleased, Claim: 7}, true},
		{"PROCLAIMED answers its PROCLAIM", Sent{Kind: protocol.TypeProclaim, ID: 7}, protocol.Frame{Type: protocol.TypeProclaimed, Claim: 7}, true},
		{"PROCLAIMED does not answer a CLAIM", claim, protocol.Frame{Type: protocol.TypeProclaimed, Claim: 7}, false},
		{"ANSWER answers its RANGE", Sent{Kind: protocol.TypeRange, ID: 3}, protocol.Frame{Type: protocol.TypeRangeAnswer, Claim: 3}, true},
		{"ANSWER of another req does not", Sent{Kind: protocol.TypeRange, ID: 3}, protocol.Frame{Type: protocol.TypeRangeAnswer, Claim: 4}, false},
		{"a push answers nothing", claim, protocol.Frame{Type: protocol.TypePromoted, Claim: 7}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Answers(tc.r, tc.f); got != tc.want {
				t.Fatalf("Answers = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestTicketed(t *testing.T) {
	for _, tc := range []struct {
		f    protocol.Frame
		want bool
	}{
		{protocol.Frame{Type: protocol.TypeWelcome, Flags: protocol.WelcomeTickets}, true},
		{protocol.Frame{Type: protocol.TypeWelcome}, false},
		{protocol.Frame{Type: protocol.TypeQueued, Ticket: 3}, true},
		{protocol.Frame{Type: protocol.TypeQueued}, false},
		{protocol.Frame{Type: protocol.TypeGranted, Ticket: 3}, false},
	} {
		if got := Ticketed(tc.f); got != tc.want {
			t.Errorf("Ticketed(%v) = %v, want %v", tc.f, got, tc.want)
		}
	}
}

func TestLedgerMatch(t *testing.T) {
	for _, tc := range []struct {
		name          string
		sent          []relayReq
		tickets       bool
		f             protocol.Frame
		ok            bool
		tag           string
		confirmed     time.Time
		left, pingsTo int
	}{
		{"the oldest is answered and confirms", []relayReq{
			relaySent(protocol.TypeClaim, relayAt(3), 1, "c1"), relaySent(protocol.TypeClaim, relayAt(4), 2, "c2"),
		}, false, protocol.Frame{Type: protocol.TypeGranted, Claim: 1}, true, "c1", relayAt(3), 1, 0},
		{"an answer to a later request does not fit", []relayReq{
			relaySent(protocol.TypeClaim, relayAt(3), 1, "c1"), relaySent(protocol.TypeClaim, relayAt(4), 2, "c2"),
		}, false, protocol.Frame{Type: protocol.TypeGranted, Claim: 2}, false, "", relayAt(0), 2, 0},
		{"nothing in flight", nil, false, protocol.Frame{Type: protocol.TypePong}, false, "", relayAt(0), 0, 0},
		{"a ticket not asked for does not fit", []relayReq{
			relaySent(protocol.TypeClaim, relayAt(3), 1, "c1"),
		}, false, protocol.Frame{Type: protocol.TypeQueued, Claim: 1, Ticket: 9}, false, "", relayAt(0), 1, 0},
		{"a ticket asked for fits", []relayReq{
			relaySent(protocol.TypeClaim, relayAt(3), 1, "c1"),
		}, true, protocol.Frame{Type: protocol.TypeQueued, Claim: 1, Ticket: 9}, true, "c1", relayAt(3), 0, 0},
		{"an answer sent before the opening confirms nothing earlier", []relayReq{
			relaySent(protocol.TypeClaim, relayAt(-1), 1, "c1"),
		}, false, protocol.Frame{Type: protocol.TypeGranted, Claim: 1}, true, "c1", relayAt(0), 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := OpenLedger[relayReq](relayAt(0), 10*time.Second)
			for _, r := range tc.sent {
				l.Send(r)
			}
			r, ok := l.Match(tc.f, tc.tickets)
			if ok != tc.ok || r.tag != tc.tag {
				t.Fatalf("Match = %q, %v; want %q, %v", r.tag, ok, tc.tag, tc.ok)
			}
			if !l.Confirmed().Equal(tc.confirmed) || len(l.InFlight()) != tc.left {
				t.Fatalf("confirmed %v, %d in flight; want %v, %d", l.Confirmed(), len(l.InFlight()), tc.confirmed, tc.left)
			}
		})
	}
}

func TestLedgerPing(t *testing.T) {
	for _, tc := range []struct {
		name string
		// confirmed and last sent before the PING question, and the
		// PINGs already in flight
		confirmed, lastSent time.Time
		pings               int
		lastAt              time.Time
		ok                  bool
	}{
		{"confirmed after the latest answer", relayAt(6), relayAt(1), 0, relayAt(5), false},
		{"confirmed at it", relayAt(5), relayAt(5), 0, relayAt(5), false},
		{"not confirmed, a request sent since", relayAt(1), relayAt(5), 0, relayAt(5), false},
		{"not confirmed, nothing sent since", relayAt(1), relayAt(4), 0, relayAt(5), true},
		{"one PING in flight: another", relayAt(1), relayAt(4), 1, relayAt(5), true},
		{"at most two in flight", relayAt(1), relayAt(4), MaxPings, relayAt(5), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := OpenLedger[relayReq](tc.confirmed, 10*time.Second)
			l.lastSent, l.pings, l.seq = tc.lastSent, tc.pings, 41
			seq, ok := l.Ping(tc.lastAt)
			if ok != tc.ok {
				t.Fatalf("Ping = %v, want %v", ok, tc.ok)
			}
			if ok && (seq != 42 || l.pings != tc.pings+1) {
				t.Fatalf("seq %d, pings %d; want 42, %d", seq, l.pings, tc.pings+1)
			}
		})
	}
}

func TestLedgerSendCounts(t *testing.T) {
	l := OpenLedger[relayReq](relayAt(0), 10*time.Second)
	l.Send(relaySent(protocol.TypeClaim, relayAt(5), 1, "c1"))
	// Not confirmed after 5, but a request sent at 5 is in flight: its
	// answer will confirm it.
	if _, ok := l.Ping(relayAt(5)); ok {
		t.Fatal("a PING while a request sent late enough is in flight")
	}
}

func TestLedgerPongCountsDown(t *testing.T) {
	l := OpenLedger[relayReq](relayAt(0), 10*time.Second)
	seq, ok := l.Ping(relayAt(1))
	if !ok || seq != 1 {
		t.Fatalf("Ping = %d, %v", seq, ok)
	}
	l.Send(relaySent(protocol.TypePing, relayAt(2), 0, "p"))
	if _, ok := l.Ping(relayAt(3)); !ok {
		t.Fatal("a second PING refused")
	}
	l.Send(relaySent(protocol.TypePing, relayAt(3), 0, "p"))
	if _, ok := l.Ping(relayAt(4)); ok {
		t.Fatal("a third PING in flight")
	}
	if _, ok := l.Match(protocol.Frame{Type: protocol.TypePong}, false); !ok {
		t.Fatal("PONG did not match")
	}
	// Confirmed at 2 only: not after 4, nothing sent after it, one PING in flight.
	if _, ok := l.Ping(relayAt(4)); !ok {
		t.Fatal("a PONG did not free a PING")
	}
}

func TestLedgerDeadlines(t *testing.T) {
	l := OpenLedger[relayReq](relayAt(0), 10*time.Second) // patience 5 s
	if d, overdue := l.Overdue(relayAt(100)); overdue || !d.IsZero() {
		t.Fatalf("idle: Overdue = %v, %v; want no deadline", d, overdue)
	}
	if d, first := l.Send(relaySent(protocol.TypeClaim, relayAt(1), 1, "c1")); !first || !d.Equal(relayAt(6)) {
		t.Fatalf("first Send = %v, %v; want the deadline %v", d, first, relayAt(6))
	}
	if _, first := l.Send(relaySent(protocol.TypeClaim, relayAt(2), 2, "c2")); first {
		t.Fatal("second Send reported first")
	}
	for _, tc := range []struct {
		now      time.Time
		deadline time.Time
		overdue  bool
	}{
		{relayAt(3), relayAt(6), false},
		{relayAt(6), time.Time{}, true},
		{relayAt(9), time.Time{}, true},
	} {
		if d, overdue := l.Overdue(tc.now); overdue != tc.overdue || !d.Equal(tc.deadline) {
			t.Fatalf("Overdue(%v) = %v, %v; want %v, %v", tc.now, d, overdue, tc.deadline, tc.overdue)
		}
	}
	l.Pop()
	if d, overdue := l.Overdue(relayAt(6)); overdue || !d.Equal(relayAt(7)) {
		t.Fatalf("after the first answer: Overdue = %v, %v; want the next request's %v", d, overdue, relayAt(7))
	}
	if rs := l.Drain(); len(rs) != 1 || rs[0].tag != "c2" || len(l.InFlight()) != 0 {
		t.Fatalf("Drain = %v, left %d", rs, len(l.InFlight()))
	}
}

func TestPatience(t *testing.T) {
	if got := Patience(10 * time.Second); got != 5*time.Second {
		t.Fatalf("Patience(10s) = %v, want half the lease", got)
	}
}
