package rangelock

import (
	"errors"

	"github.com/batonlock/baton/protocol"
)

// How the table's answers read on the wire, as internal/locktable's
// effects carry their codes: the status of a RANGE request's ANSWER and
// of the pushes a Result asks for, and which bound a refusal hit. The
// server only writes them (server/ranges.go).
// Wire: docs/protocol-v2-ranges.md.

// ErrStatus is the ANSWER status of a request the table refused with
// err: a deadlock (or a search that reached its bound), a request id in
// use, a cap, or else invalid.
func ErrStatus(err error) protocol.RangeStatus {
	switch {
	case errors.Is(err, ErrDeadlock):
		return protocol.RangeDeadlock
	case errors.Is(err, ErrTagExists):
		return protocol.RangeReqInUse
	case errors.Is(err, ErrSessionWaiting), errors.Is(err, ErrOwnerWaiting), errors.Is(err, ErrOwners):
		return protocol.RangeLimit
	}
	return protocol.RangeInvalid
}

// Refusals name the bounds a refusal may hit (Refusal): a cap (answered
// RangeLimit), or the deadlock search's bound (answered RangeDeadlock).
var Refusals = []string{"waiting_per_session", "waiting_per_owner", "owners_per_session", "search_bound"}

// Refusal names the bound behind err, one of Refusals, or "".
func Refusal(err error) string {
	switch {
	case errors.Is(err, ErrSessionWaiting):
		return Refusals[0]
	case errors.Is(err, ErrOwnerWaiting):
		return Refusals[1]
	case errors.Is(err, ErrOwners):
		return Refusals[2]
	case errors.Is(err, ErrSearchBound):
		return Refusals[3]
	}
	return ""
}

// Status is the ANSWER status of a set that Set answered a, and whether
// it is answered now: a set without wait that queued before the token
// gate is answered granted when the gate opens (a Grant with NoWait).
// The token is a's; a Conflict's lock is a.Conflict.
func (a Answer) Status(wait bool) (st protocol.RangeStatus, now bool) {
	switch a.State {
	case Granted:
		return protocol.RangeGranted, true
	case Waiting:
		return protocol.RangeQueued, wait
	case Conflict:
		return protocol.RangeConflict, true
	}
	return protocol.RangeDone, true
}

// Status is the status of g's push: PROMOTED for a set that waited,
// GRANTED for the answer of one without wait that queued before the
// token gate.
func (g Grant) Status() protocol.RangeStatus {
	if g.NoWait {
		return protocol.RangeGranted
	}
	return protocol.RangePromoted
}
