package clustercore

import "github.com/batonlock/baton/protocol"

// The ring a node answers RING with, and pushes to the sessions that
// watch it when it applies a new one (docs/protocol-v2-ring.md, "v2
// ring"): the view a client computes each name's owner from, and so
// where a planned change sends its claims next. server/ring2.go keeps
// the sessions and their writes.

// RingMember is one member of a cluster as a RING answer gives it.
type RingMember struct {
	// ID is the member's node id.
	ID string
	// Addr is the member's lock protocol address (host:port) as it
	// advertised it.
	Addr string
	// InRing is true for a member that owns names: the owner of a name
	// is computed over these members only.
	InRing bool
}

// RingView is the ring a node has applied: its version and every member.
// The zero view (version 0, no member) is what a node that is not a
// cluster's answers.
type RingView struct {
	Version uint64
	Members []RingMember
}

// Append appends the view's MEMBER frames and the RINGEND that closes
// them to b: an answer to RING, or, pushed, the ring a watching session
// is sent when the node applies a new one (RINGEND with RingPushed).
func (v RingView) Append(b []byte, pushed bool) []byte {
	for _, m := range v.Members {
		b = protocol.AppendRingMember(b, m.ID, m.Addr, m.InRing)
	}
	var flags uint8
	if pushed {
		flags = protocol.RingPushed
	}
	return protocol.AppendRingEnd(b, v.Version, len(v.Members), flags)
}

// RingWatches reports whether RING frame f asks for the ring's pushes.
func RingWatches(f protocol.Frame) bool { return f.Flags&protocol.RingWatch != 0 }
