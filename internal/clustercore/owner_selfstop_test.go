package clustercore

import (
	"bytes"
	"testing"

	"github.com/batonlock/baton/protocol"
)

func TestSelfStopBlocks(t *testing.T) {
	for _, tc := range []struct {
		inContact, closing, want bool
	}{
		{true, false, false},
		{true, true, false},
		{false, false, true}, // the answer would confirm its request
		{false, true, false}, // the closing ERROR goes out
	} {
		if got := SelfStopBlocks(tc.inContact, tc.closing); got != tc.want {
			t.Errorf("SelfStopBlocks(inContact %v, closing %v) = %v, want %v", tc.inContact, tc.closing, got, tc.want)
		}
	}
}

func TestSessionLastWrite(t *testing.T) {
	pong := protocol.AppendPong(nil, 7)
	for _, tc := range []struct {
		name      string
		v2        bool
		pending   []byte
		code      protocol.Code
		inContact bool
		want      []byte
	}{
		{"v1", false, nil, protocol.CodeShuttingDown, true, protocol.AppendError(nil, protocol.CodeShuttingDown, "")},
		{"v1 self-stop", false, nil, protocol.CodeNotOwner, false, protocol.AppendError(nil, protocol.CodeNotOwner, "")},
		{"v2, pending first", true, pong, protocol.CodeShuttingDown, true,
			protocol.AppendSessionError(protocol.AppendPong(nil, 7), protocol.CodeShuttingDown, "")},
		{"v2 out of contact drops pending", true, pong, protocol.CodeShuttingDown, false,
			protocol.AppendSessionError(nil, protocol.CodeShuttingDown, "")},
		{"v2 self-stop", true, nil, protocol.CodeNotOwner, false, protocol.AppendSessionError(nil, protocol.CodeNotOwner, "")},
	} {
		pending := bytes.Clone(tc.pending)
		if got := SessionLastWrite(pending, tc.v2, tc.code, tc.inContact); !bytes.Equal(got, tc.want) {
			t.Errorf("%s: SessionLastWrite = % x, want % x", tc.name, got, tc.want)
		}
	}
}
