package clustercore

import (
	"cmp"
	"maps"
	"slices"

	"github.com/batonlock/baton/protocol"
)

// The relaying node's bookkeeping of relayed range requests: the lock
// owners whose locks an upstream carries (released for a client that
// hangs up), the sets that wait at an owner (answered unavailable when
// its upstream fails), and what the client's request on a key whose
// range locks move does. server/relayranges.go holds the maps, the
// upstreams and the outbox.
// User docs: docs/cluster.md, "Range locks".

// RangeOwner is a lock owner of a session on one key, in one namespace.
type RangeOwner struct {
	Key   string
	Flock bool
	Owner uint64
}

// RangeOwnerOf is the lock owner RANGE request f is about.
func RangeOwnerOf(f protocol.Frame) RangeOwner {
	return RangeOwner{Key: f.Name, Flock: f.Flags&protocol.RangeFlock != 0, Owner: f.Owner}
}

// AppendRangeReleases appends, for each lock owner of owners, a RANGE
// release of its locks and waiting requests on the key: what a client
// that hangs up would have done itself, so that the owner ends them at
// once rather than a lease later. They go in key, namespace and owner
// order, so that what goes out does not depend on a map's order.
func AppendRangeReleases(b []byte, owners []RangeOwner) []byte {
	owners = slices.SortedFunc(slices.Values(owners), func(a, b RangeOwner) int {
		return cmp.Or(cmp.Compare(a.Key, b.Key), rangesFlockOrder(a.Flock, b.Flock), cmp.Compare(a.Owner, b.Owner))
	})
	for _, o := range owners {
		var flags uint8
		if o.Flock {
			flags = protocol.RangeFlock
		}
		b = protocol.AppendRange(b, protocol.Frame{Op: protocol.RangeRelease, Flags: flags, Owner: o.Owner, Name: o.Key})
	}
	return b
}

// rangesFlockOrder puts the POSIX namespace before the flock one.
func rangesFlockOrder(a, b bool) int {
	switch {
	case a == b:
		return 0
	case b:
		return -1
	}
	return 1
}

// RangeUnavailable is the answer to RANGE request req that no node
// serves now: nothing changed, the client asks again.
func RangeUnavailable(req uint32) []byte {
	return protocol.AppendRangeAnswer(nil, req, protocol.RangeUnavailable, 0, protocol.Frame{})
}

// RangeWaitsOn takes out of waits (the sets that wait at an owner, by
// request id, with the upstream they wait on) those that wait on u, and
// returns their ids in order: u failed, and each is answered
// RangeUnavailable (the client asks again, at the key's next owner).
func RangeWaitsOn[U comparable](waits map[uint32]U, u U) []uint32 {
	var reqs []uint32
	for _, req := range slices.Sorted(maps.Keys(waits)) {
		if waits[req] == u {
			delete(waits, req)
			reqs = append(reqs, req)
		}
	}
	return reqs
}

// RangeMoveStep is what the client's RANGE request on a key whose range
// locks move does (RangeMove.Request).
type RangeMoveStep uint8

const (
	// RangeMoveUnavailable: answered unavailable; the client asks
	// again once the locks are there.
	RangeMoveUnavailable RangeMoveStep = iota
	// RangeMoveRelay: sent on to the owner the locks are re-asserted
	// at, after the re-assertions in flight.
	RangeMoveRelay
	// RangeMoveDone: applied to what is to be re-asserted, and answered
	// done here.
	RangeMoveDone
)

// Request decides what the client's RANGE request f on the moving key
// does. An unlock or release of locks re-asserted after a failover
// applies to what is re-asserted (Drop), and goes on to the owner if
// re-assertions are in flight there (relaying); forget is true when
// nothing is left to re-assert then: the move is over.
func (rm *RangeMove) Request(f protocol.Frame, relaying bool) (step RangeMoveStep, forget bool) {
	if rm.Unavailable(f) {
		return RangeMoveUnavailable, false
	}
	left := rm.Drop(f)
	if relaying {
		return RangeMoveRelay, false
	}
	return RangeMoveDone, left == 0
}
