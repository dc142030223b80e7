package clustercore

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/internal/rangelock"
	"github.com/batonlock/baton/protocol"
)

// The new owner's side of a planned change's hand-off (docs/design/2026-12-02-cluster-handoff.md,
// "Planned changes: the hand-off" and "Continuing version 2 claims across
// a planned change"): DecodeHandoff reads and checks the prior owner's
// HandoffState; PlanHandoffInstall says what goes into the lock table:
// every claim detached, with its token, ticket and queue place, each
// origin a kept session that a re-assertion with one of the state's
// secrets adopts, and that expires a lease after the export when nobody
// does; PlanHandoffStandIns says under which stand-in each origin's range
// locks are kept until its host adopts them, and for how long.

// ErrHandoffState is DecodeHandoff's error for a state that is not one a
// prior owner exports.
var ErrHandoffState = errors.New("bad hand-off state")

// DecodeHandoff decodes and checks the state a prior owner exported for
// this node. A state of the previous version (a list of locks) must be
// empty, and decodes as an empty state. Nothing the state says can make
// the install crash: an error names what is wrong, and wraps
// ErrHandoffState.
func DecodeHandoff(state []byte) (*HandoffState, error) {
	if len(state) > 0 && state[0] == '[' {
		var locks []locktable.LockState
		if err := json.Unmarshal(state, &locks); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrHandoffState, err)
		}
		if len(locks) > 0 {
			return nil, fmt.Errorf("%w: it carries %d locks without their sessions", ErrHandoffState, len(locks))
		}
		return &HandoffState{}, nil
	}
	var st HandoffState
	if err := json.Unmarshal(state, &st); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrHandoffState, err)
	}
	if err := st.check(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrHandoffState, err)
	}
	return &st, nil
}

// check reports what, in st, no prior owner exports: secret hashes of
// the wrong size, a session listed twice, a claim of a session the state
// does not list (it would be installed without an origin to adopt it).
func (st *HandoffState) check() error {
	badHash := func(h []byte) bool { return len(h) != 0 && len(h) != protocol.SecretHashLen }
	listed := map[locktable.SessionID]bool{}
	for _, m := range st.Sessions {
		if badHash(m.Adopt) || badHash(m.Resume) {
			return fmt.Errorf("bad secret hash for session %s/%d", m.Origin.Node, m.Origin.Session)
		}
		if listed[m.Session] {
			return fmt.Errorf("session %d listed twice", m.Session)
		}
		listed[m.Session] = true
	}
	for _, ls := range st.Locks {
		for _, cs := range append(slices.Clip(ls.Holders), ls.Waiters...) {
			if !listed[cs.Session] {
				return fmt.Errorf("lock %q: a claim of session %d, which the state does not list", ls.Name, cs.Session)
			}
		}
	}
	for _, r := range st.Ranges {
		if badHash(r.Hash) {
			return fmt.Errorf("range lock on %q: bad secret hash", r.Key)
		}
	}
	return nil
}

// Claims counts the state's claims.
func (st *HandoffState) Claims() int {
	n := 0
	for _, ls := range st.Locks {
		n += len(ls.Holders) + len(ls.Waiters)
	}
	return n
}

// HandoffKept is a kept session an install sets up (or updates) for an
// origin: its host adopts the origin's claims with the secret whose hash
// is Adopt, or the client itself, reconnecting, with Resume's.
type HandoffKept struct {
	Origin  locktable.Origin
	Session locktable.SessionID // the origin's session id in the table
	Adopt   *[protocol.SecretHashLen]byte
	Resume  *[protocol.SecretHashLen]byte
}

// HandoffInstall is what an install puts in the lock table
// (locktable.ImportDetached) and which kept sessions it sets up.
type HandoffInstall struct {
	Locks   []locktable.LockState // with this node's session ids
	Origins map[locktable.SessionID]locktable.Origin
	Kept    []HandoffKept // one per origin, in the state's order
	LastID  uint64        // the last session id the install took
}

// PlanHandoffInstall maps the state's sessions to this node's, one per
// origin: an origin that has a detached session here already (the same
// state installed again) keeps it, the others take new ids after lastID.
// Sessions of one origin become one (a kept session and the upstream
// session that replaced it, both with claims when the export came): the
// table keeps one detached session per origin, and a second would hold
// its claims with nobody to adopt or expire them. Either's secret adopts
// them. The locks are copied with those ids; the state is not changed.
func PlanHandoffInstall(st *HandoffState, detached func(locktable.Origin) (locktable.SessionID, bool), lastID uint64) *HandoffInstall {
	in := &HandoffInstall{Origins: map[locktable.SessionID]locktable.Origin{}, LastID: lastID}
	ids := map[locktable.SessionID]locktable.SessionID{}
	kept := map[locktable.Origin]int{} // index in in.Kept
	for _, m := range st.Sessions {
		if i, ok := kept[m.Origin]; ok {
			k := &in.Kept[i]
			ids[m.Session] = k.Session
			k.Adopt = cmp.Or(handoffHash(m.Adopt), k.Adopt)
			k.Resume = cmp.Or(k.Resume, handoffHash(m.Resume))
			continue
		}
		sid, ok := detached(m.Origin)
		if !ok {
			in.LastID++
			sid = locktable.SessionID(in.LastID)
		}
		ids[m.Session] = sid
		in.Origins[sid] = m.Origin
		in.Kept = append(in.Kept, HandoffKept{Origin: m.Origin, Session: sid,
			Adopt: handoffHash(m.Adopt), Resume: handoffHash(m.Resume)})
		kept[m.Origin] = len(in.Kept) - 1
	}
	in.Locks = make([]locktable.LockState, len(st.Locks))
	for i, ls := range st.Locks {
		ls.Holders, ls.Waiters = slices.Clone(ls.Holders), slices.Clone(ls.Waiters)
		for j := range ls.Holders {
			ls.Holders[j].Session = ids[ls.Holders[j].Session]
		}
		for j := range ls.Waiters {
			ls.Waiters[j].Session = ids[ls.Waiters[j].Session]
		}
		in.Locks[i] = ls
	}
	return in
}

// handoffHash returns a copy of a secret hash of the right size, or nil.
func handoffHash(h []byte) *[protocol.SecretHashLen]byte {
	if len(h) != protocol.SecretHashLen {
		return nil
	}
	c := [protocol.SecretHashLen]byte(h)
	return &c
}

// HandoffStandInBit marks the range-table session ids of stand-ins: the
// real sessions' ids count up from 1 and never reach it.
const HandoffStandInBit = 1 << 63

// HandoffStandIn holds, at a new owner, the range locks handed over for
// one origin until its host adopts them (the stand-in conflicts with
// everyone as the holder did); it is dropped Lease after the install
// unless the origin's host adopts them first.
type HandoffStandIn struct {
	Origin locktable.Origin
	Lease  time.Duration // the longest of the origin's ranges
	Hash   *[protocol.SecretHashLen]byte
	Locks  []rangelock.KeyLock // owned by session 0: the caller sets the stand-in's id
}

// Label is the stand-in's label in the range table's views.
func (st *HandoffStandIn) Label() string {
	return fmt.Sprintf("%s/%d (moving)", st.Origin.Node, st.Origin.Session)
}

// StandInID is the range-table session id of the n-th stand-in.
func StandInID(n uint64) rangelock.SessionID { return rangelock.SessionID(HandoffStandInBit | n) }

// PlanHandoffStandIns groups handed-over range locks by origin, in the
// order of each origin's first lock: the hash of a resumable session's
// secret comes with its first lock.
func PlanHandoffStandIns(ranges []HandoffRange) []*HandoffStandIn {
	var out []*HandoffStandIn
	at := map[locktable.Origin]*HandoffStandIn{}
	for _, mr := range ranges {
		st := at[mr.Origin]
		if st == nil {
			st = &HandoffStandIn{Origin: mr.Origin, Hash: handoffHash(mr.Hash)}
			at[mr.Origin] = st
			out = append(out, st)
		}
		st.Lease = max(st.Lease, time.Duration(mr.LeaseMS)*time.Millisecond)
		ns := rangelock.POSIX
		if mr.Flock {
			ns = rangelock.Flock
		}
		st.Locks = append(st.Locks, rangelock.KeyLock{Key: mr.Key, NS: ns, Lock: rangelock.Lock{
			Owner: rangelock.Owner{ID: rangelock.OwnerID(mr.Owner)},
			Type:  rangelock.Type(mr.Type), Range: rangelock.Range{Start: mr.Start, End: mr.End}}})
	}
	return out
}
