package clustercore

import (
	"bytes"
	"testing"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

func TestHandoffOrigin(t *testing.T) {
	for _, tc := range []struct {
		name      string
		forwarded bool
		via       string
		want      locktable.Origin
		ok        bool
	}{
		{"a client's own session: this node and its id", false, "", locktable.Origin{Node: "p", Session: 9}, true},
		{"a relayed session: the relaying node and the client's session there", true, "n2/17", locktable.Origin{Node: "n2", Session: 17}, true},
		{"a node id with a slash: the last one splits", true, "dc/n2/17", locktable.Origin{Node: "dc/n2", Session: 17}, true},
		{"a version 1 hop: no origin", true, "", locktable.Origin{}, false},
		{"no node", true, "/17", locktable.Origin{}, false},
		{"no session", true, "n2/", locktable.Origin{}, false},
		{"not a number", true, "n2/x", locktable.Origin{}, false},
		{"out of range", true, "n2/18446744073709551616", locktable.Origin{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, ok := HandoffOrigin("p", 9, tc.forwarded, tc.via)
			if o != tc.want || ok != tc.ok {
				t.Fatalf("origin %+v %v, want %+v %v", o, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestHandoffMoved(t *testing.T) {
	var m HandoffMoved
	if m.Release(3) != nil {
		t.Fatal("an empty set answers a RELEASE MOVED")
	}
	m = m.Mark([]locktable.ClaimID{3, 4})
	if got, want := m.Release(3), protocol.AppendRevoked(nil, 3, 0x06, "moved"); !bytes.Equal(got, want) {
		t.Fatalf("RELEASE of a handed-over claim answered %x, want MOVED %x", got, want)
	}
	if m.Release(3) != nil {
		t.Fatal("a second RELEASE of the id is answered MOVED again")
	}
	m.Claimed(4)
	if m.Release(4) != nil {
		t.Fatal("a RELEASE after a CLAIM reused the id is answered MOVED")
	}
	if m.Release(5) != nil {
		t.Fatal("a claim not handed over is answered MOVED")
	}
}
