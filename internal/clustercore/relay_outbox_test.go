package clustercore

import (
	"bytes"
	"testing"
	"time"
)

var relayT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// relayAt is relayT0 plus n seconds.
func relayAt(n int) time.Time { return relayT0.Add(time.Duration(n) * time.Second) }

// relayConf builds a Confirmation from upstreams' confirmations (the
// ones that hold something) and whether anything moves.
func relayConf(blocked bool, confirmed ...time.Time) Confirmation {
	var c Confirmation
	if blocked {
		c.Block()
	}
	for _, t := range confirmed {
		c.Upstream(t, true)
	}
	return c
}

func TestConfirmationAfter(t *testing.T) {
	idle := Confirmation{}
	idle.Upstream(relayAt(0), false) // holds nothing: protects nothing
	for _, tc := range []struct {
		name string
		c    Confirmation
		at   time.Time
		want bool
	}{
		{"no upstream", Confirmation{}, relayAt(5), true},
		{"an upstream without claims protects nothing", idle, relayAt(5), true},
		{"confirmed after", relayConf(false, relayAt(6)), relayAt(5), true},
		{"confirmed at", relayConf(false, relayAt(5)), relayAt(5), true},
		{"confirmed before", relayConf(false, relayAt(4)), relayAt(5), false},
		{"the earliest upstream decides", relayConf(false, relayAt(9), relayAt(4), relayAt(7)), relayAt(5), false},
		{"every upstream after", relayConf(false, relayAt(9), relayAt(6)), relayAt(5), true},
		{"a claim moving blocks", relayConf(true, relayAt(9)), relayAt(5), false},
		{"a claim moving blocks with no upstream", relayConf(true), relayAt(5), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.c.After(tc.at); got != tc.want {
				t.Fatalf("After(%v) = %v, want %v", tc.at, got, tc.want)
			}
		})
	}
}

// relayUp names an upstream in the outbox tests.
type relayUp string

func relayEntry(b string, at time.Time, pending bool, up relayUp, claim uint32) *Entry[relayUp] {
	return &Entry[relayUp]{B: []byte(b), At: at, Pending: pending, Up: up, Claim: claim}
}

// relayHeld lists the frames the outbox holds, in order.
func relayHeld(o *Outbox[relayUp]) string {
	var b bytes.Buffer
	for _, e := range o.q {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		if e.Pending {
			b.WriteString("?")
		}
		b.Write(e.B)
	}
	return b.String()
}

func TestOutboxAdd(t *testing.T) {
	for _, tc := range []struct {
		name     string
		before   []*Entry[relayUp]
		e        *Entry[relayUp]
		c        Confirmation
		out, box string
	}{
		{"a push with nothing before leaves", nil, relayEntry("P", time.Time{}, false, "a", 1), relayConf(false, relayAt(0)), "P", ""},
		{"an answer confirmed leaves", nil, relayEntry("A", relayAt(5), false, "", 0), relayConf(false, relayAt(5)), "A", ""},
		{"an answer not confirmed waits", nil, relayEntry("A", relayAt(5), false, "", 0), relayConf(false, relayAt(4)), "", "A"},
		{"an answer waits while a claim moves", nil, relayEntry("A", relayAt(5), false, "", 0), relayConf(true), "", "A"},
		{"a pending answer waits", nil, relayEntry("A", relayAt(5), true, "a", 1), relayConf(false, relayAt(9)), "", "?A"},
		{"a push never overtakes", []*Entry[relayUp]{relayEntry("A", relayAt(5), true, "a", 1)},
			relayEntry("P", time.Time{}, false, "", 2), relayConf(false, relayAt(9)), "", "?A P"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var o Outbox[relayUp]
			for _, e := range tc.before {
				o.Add(nil, e, tc.c)
			}
			out := o.Add(nil, tc.e, tc.c)
			if string(out) != tc.out || relayHeld(&o) != tc.box {
				t.Fatalf("out %q, held %q; want %q, %q", out, relayHeld(&o), tc.out, tc.box)
			}
		})
	}
}

func TestOutboxRelease(t *testing.T) {
	for _, tc := range []struct {
		name     string
		q        []*Entry[relayUp]
		c        Confirmation
		out, box string
	}{
		{"the known prefix leaves", []*Entry[relayUp]{
			relayEntry("A", relayAt(1), false, "a", 1), relayEntry("B", relayAt(2), false, "a", 2), relayEntry("C", relayAt(3), true, "a", 3), relayEntry("D", relayAt(3), false, "", 0),
		}, relayConf(false, relayAt(9)), "AB", "?C D"},
		{"an answer not confirmed stops the rest", []*Entry[relayUp]{
			relayEntry("A", relayAt(1), false, "a", 1), relayEntry("B", relayAt(5), false, "a", 2), relayEntry("P", time.Time{}, false, "a", 1),
		}, relayConf(false, relayAt(4)), "A", "B P"},
		{"pushes leave without confirmation", []*Entry[relayUp]{
			relayEntry("P", time.Time{}, false, "a", 1), relayEntry("Q", time.Time{}, false, "b", 2),
		}, relayConf(true), "PQ", ""},
		{"nothing leaves while a claim moves", []*Entry[relayUp]{
			relayEntry("A", relayAt(1), false, "a", 1),
		}, relayConf(true, relayAt(9)), "", "A"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Outbox[relayUp]{q: tc.q}
			out := o.Release([]byte("x"), tc.c)
			if string(out) != "x"+tc.out || relayHeld(&o) != tc.box {
				t.Fatalf("out %q, held %q; want %q, %q", out, relayHeld(&o), "x"+tc.out, tc.box)
			}
		})
	}
}

func TestOutboxLastAt(t *testing.T) {
	var o Outbox[relayUp]
	c := relayConf(false, relayAt(0))
	o.Add(nil, relayEntry("A", relayAt(5), true, "a", 1), c)
	o.Add(nil, relayEntry("B", relayAt(3), true, "a", 2), c)
	o.Add(nil, relayEntry("P", time.Time{}, false, "a", 1), c)
	if got := o.LastAt(); !got.Equal(relayAt(5)) {
		t.Fatalf("LastAt = %v, want the latest answer's read time %v", got, relayAt(5))
	}
}

func TestOutboxReadTimes(t *testing.T) {
	var o Outbox[relayUp]
	if got := o.AnswerAt(relayAt(7)); !got.Equal(relayAt(7)) {
		t.Fatalf("AnswerAt before any batch = %v, want now", got)
	}
	if got := o.Relaying(relayAt(3)); !got.Equal(relayAt(3)) {
		t.Fatalf("Relaying on a fresh outbox = %v, want %v", got, relayAt(3))
	}
	o.Read(relayAt(4))
	if got := o.Relaying(relayAt(2)); !got.Equal(relayAt(4)) {
		t.Fatalf("Relaying from an earlier batch = %v, want the batch's %v", got, relayAt(4))
	}
	if got := o.AnswerAt(relayAt(9)); !got.Equal(relayAt(4)) {
		t.Fatalf("AnswerAt = %v, want the batch's read time", got)
	}
}

func TestOutboxPush(t *testing.T) {
	for _, tc := range []struct {
		name     string
		q        []*Entry[relayUp]
		e        *Entry[relayUp]
		out, box string
	}{
		{"before the owner's first answer not sent", []*Entry[relayUp]{
			relayEntry("A", relayAt(1), false, "b", 1), relayEntry("B", relayAt(1), true, "b", 2), relayEntry("C", relayAt(1), true, "a", 3), relayEntry("D", relayAt(1), true, "a", 4),
		}, relayEntry("P", time.Time{}, false, "a", 9), "", "A ?B P ?C ?D"},
		{"behind everything when that owner owes nothing", []*Entry[relayUp]{
			relayEntry("A", relayAt(1), true, "b", 1),
		}, relayEntry("P", time.Time{}, false, "a", 9), "", "?A P"},
		{"straight out when nothing is held", nil, relayEntry("P", time.Time{}, false, "a", 9), "P", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Outbox[relayUp]{q: tc.q}
			out := o.Push(nil, tc.e, relayConf(false, relayAt(0)))
			if string(out) != tc.out || relayHeld(&o) != tc.box {
				t.Fatalf("out %q, held %q; want %q, %q", out, relayHeld(&o), tc.out, tc.box)
			}
		})
	}
}

func TestOutboxPlaceLoss(t *testing.T) {
	o := Outbox[relayUp]{q: []*Entry[relayUp]{
		relayEntry("A", relayAt(1), false, "", 0),
		relayEntry("B", relayAt(1), false, "a", 5),
		relayEntry("C", relayAt(1), false, "b", 6),
		relayEntry("D", relayAt(1), false, "", 0),
	}}
	front := 0
	// Claims 2 and 3 have no frame held: first, in the order placed.
	o.PlaceLoss(relayEntry("R2", time.Time{}, false, "a", 2), &front)
	o.PlaceLoss(relayEntry("R3", time.Time{}, false, "a", 3), &front)
	// Claim 5 has one from its upstream: right after it.
	o.PlaceLoss(relayEntry("R5", time.Time{}, false, "a", 5), &front)
	// Claim 6's frame is from another upstream: it does not count.
	o.PlaceLoss(relayEntry("R6", time.Time{}, false, "a", 6), &front)
	if got, want := relayHeld(&o), "R2 R3 R6 A B R5 C D"; got != want {
		t.Fatalf("held %q, want %q", got, want)
	}
}

func TestOutboxGiveUp(t *testing.T) {
	for _, tc := range []struct {
		name     string
		q        []*Entry[relayUp]
		out, box string
	}{
		{"after the last frame from an owner about it", []*Entry[relayUp]{
			relayEntry("A", relayAt(1), false, "a", 4), relayEntry("B", relayAt(1), false, "", 0), relayEntry("C", relayAt(1), false, "b", 4), relayEntry("D", relayAt(1), false, "", 0),
		}, "", "A B C R D"},
		{"after a push about it", []*Entry[relayUp]{
			relayEntry("A", relayAt(1), false, "", 0), relayEntry("P", time.Time{}, false, "", 4), relayEntry("D", relayAt(1), false, "", 0),
		}, "", "A P R D"},
		{"not after this node's own answer naming it", []*Entry[relayUp]{
			relayEntry("A", relayAt(1), false, "", 4), relayEntry("D", relayAt(1), false, "", 0),
		}, "", "R A D"},
		{"straight out when nothing is held", nil, "R", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Outbox[relayUp]{q: tc.q}
			out := o.GiveUp(nil, relayEntry("R", time.Time{}, false, "", 4), relayConf(true))
			if string(out) != tc.out || relayHeld(&o) != tc.box {
				t.Fatalf("out %q, held %q; want %q, %q", out, relayHeld(&o), tc.out, tc.box)
			}
		})
	}
}

func TestOutboxBacklogClear(t *testing.T) {
	o := Outbox[relayUp]{q: []*Entry[relayUp]{relayEntry("AB", relayAt(1), false, "", 0), relayEntry("CDE", relayAt(1), true, "a", 1)}}
	if o.Backlog() != 5 || o.Len() != 2 {
		t.Fatalf("Backlog %d, Len %d; want 5, 2", o.Backlog(), o.Len())
	}
	o.Clear()
	if o.Backlog() != 0 || o.Len() != 0 {
		t.Fatalf("after Clear: Backlog %d, Len %d", o.Backlog(), o.Len())
	}
}
