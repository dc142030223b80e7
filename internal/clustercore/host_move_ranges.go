package clustercore

import (
	"slices"
	"time"
)

// The host's side of a range-lock move around each key's own rules
// (relay_ranges.go, RangeMove): which keys it asks about, when the
// session ends, and where a key's locks are taken up.
// server/rangemove.go keeps the upstreams, timers and range table.

// HostRangeRetry is what a retry of a session's moving keys does
// (HostRangeRetryFor).
type HostRangeRetry struct {
	// Keys are the moving keys whose adoption is not in flight, sorted:
	// the host routes each now.
	Keys []string
	// End: a key has moved for too long (RangeMove.Expired): the session
	// ends with ERROR 0x03, its client must stop believing in range locks
	// nobody may keep.
	End bool
}

// HostRangeRetryFor decides a retry at now of moves, a session's moving
// keys, where inFlight says whether a key's adoption or re-assertions are
// in flight. The caller passes each key's RangeMove through get.
func HostRangeRetryFor[M any](moves map[string]M, get func(M) (rm *RangeMove, inFlight bool),
	now time.Time, lease time.Duration) HostRangeRetry {
	var r HostRangeRetry
	for key, m := range moves {
		rm, inFlight := get(m)
		if rm.Expired(now, lease) {
			r.End = true
		}
		if !inFlight {
			r.Keys = append(r.Keys, key)
		}
	}
	if r.End {
		return HostRangeRetry{End: true}
	}
	slices.Sort(r.Keys)
	return r
}

// HostRangeStep is what the host does with a moving key where its ring
// routes it now (RangeMove.HostStep).
type HostRangeStep uint8

const (
	// HostRangeWait: no node serves it yet: asked again later.
	HostRangeWait HostRangeStep = iota
	// HostRangeSend: another node serves it: the key's Requests go on
	// the upstream there.
	HostRangeSend
	// HostRangeHere: this node owns it: the locks are taken up here, a
	// planned change's from their stand-in, a failover's installed as
	// the session's own.
	HostRangeHere
)

// HostStep decides what the host does with moving key rm where route
// says the key goes.
func (rm *RangeMove) HostStep(route MoveRoute) HostRangeStep {
	switch {
	case route == MoveRouteThere:
		return HostRangeSend
	case route.Owns():
		return HostRangeHere
	}
	return HostRangeWait
}

// HostTakenHere says what follows the take-up of rm's locks here (ok:
// every one is the session's now): done, the key no longer moves (a
// failover's key is done either way: its locks cannot be asked again);
// end, the session ends (ERROR 0x03), its locks no longer kept.
func (rm *RangeMove) HostTakenHere(ok bool) (done, end bool) {
	return ok || rm.Failover, !ok
}

// HostResumeRange decides where a RANGE resume on a key goes, which
// re-asserts a lock of an earlier session of the client: relayed to the
// key's owner when another node serves it and the session is a client's
// own; served here when this node owns the key, warming it up included
// (the lock was held before the take-over, as a re-asserted claim's);
// else not now, asked again later. A planned change's gate does not
// stop it here: the install refuses a gated key (HandoffInstalled).
func HostResumeRange(route MoveRoute, forwarded bool) RangeWay {
	switch {
	case route == MoveRouteThere && !forwarded:
		return RangeRelay
	case !route.Owns():
		return RangeNotNow
	}
	return RangeServe
}
