package clustercore

import (
	"bytes"
	"testing"

	"github.com/batonlock/baton/protocol"
)

func TestRingViewAppend(t *testing.T) {
	two := RingView{Version: 7, Members: []RingMember{{ID: "a", Addr: "127.0.0.1:1", InRing: true}, {ID: "b", Addr: "127.0.0.1:2"}}}
	for _, tc := range []struct {
		name   string
		v      RingView
		pushed bool
		want   []byte
	}{
		{"not a cluster: an empty ring of version 0", RingView{}, false, protocol.AppendRingEnd(nil, 0, 0, 0)},
		{"an answer: each member, then RINGEND", two, false, protocol.AppendRingEnd(
			protocol.AppendRingMember(protocol.AppendRingMember(nil, "a", "127.0.0.1:1", true), "b", "127.0.0.1:2", false), 7, 2, 0)},
		{"a push says so in RINGEND", two, true, protocol.AppendRingEnd(
			protocol.AppendRingMember(protocol.AppendRingMember(nil, "a", "127.0.0.1:1", true), "b", "127.0.0.1:2", false), 7, 2, protocol.RingPushed)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.v.Append([]byte{0xee}, tc.pushed); !bytes.Equal(got, append([]byte{0xee}, tc.want...)) {
				t.Fatalf("got %x, want ee%x", got, tc.want)
			}
		})
	}
}

func TestRingWatches(t *testing.T) {
	if RingWatches(protocol.Frame{Type: protocol.TypeRing}) {
		t.Error("a RING without the watch flag watches")
	}
	if !RingWatches(protocol.Frame{Type: protocol.TypeRing, Flags: protocol.RingWatch}) {
		t.Error("a RING with the watch flag does not watch")
	}
}
