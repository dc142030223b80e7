package clustercore

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/internal/rangelock"
	"github.com/batonlock/baton/protocol"
)

// The prior owner's side of a planned change's hand-off (docs/design/2026-12-02-cluster-handoff.md,
// "Planned changes: the hand-off" and "Continuing version 2 claims across
// a planned change"): which claims and range locks leave for which new
// owner, what each session is told, and the state each new owner gets.
// The server takes the claims out of its tables under its mutex, asks
// this file what to do with them, and tells the sessions.

// HandoffState is the state a prior owner hands to one new owner, as
// JSON: the locks (claims named by the prior owner's session ids) and,
// per session, its origin and the hashes of the secrets that may adopt
// its claims. Both sides agree on it: it is the hand-off's wire format.
type HandoffState struct {
	Locks    []locktable.LockState `json:"locks"`
	Sessions []HandoffSession      `json:"sessions"`
	// RangeGates are the keys that move with range locks or waiting
	// requests on them, which the new owner grants no range lock on for
	// LeaseMS after the install: the prior owner ends the sessions that
	// held or waited for them, whose clients may believe until their
	// give-up.
	RangeGates []HandoffRangeGate `json:"range_gates,omitempty"`
	// Ranges are the range locks held on moving keys by sessions that
	// continue, which the new owner keeps for their hosts to adopt.
	Ranges []HandoffRange `json:"ranges,omitempty"`
}

// HandoffRangeGate is one key of HandoffState.RangeGates: the longest
// lease of the sessions that held or waited for range locks on it.
type HandoffRangeGate struct {
	Key     string `json:"key"`
	LeaseMS uint32 `json:"lease_ms"`
}

// HandoffSession is one session of a HandoffState.
type HandoffSession struct {
	Session locktable.SessionID `json:"session"` // as in Locks
	Origin  locktable.Origin    `json:"origin"`
	Adopt   []byte              `json:"adopt"`            // SHA-256 of the host's move secret
	Resume  []byte              `json:"resume,omitempty"` // SHA-256 of a resumable session's own secret
}

// HandoffRange is one held range lock of a HandoffState.
type HandoffRange struct {
	Key     string           `json:"key"`
	Flock   bool             `json:"flock,omitempty"`
	Origin  locktable.Origin `json:"origin"`
	Owner   uint64           `json:"owner"`
	Type    uint8            `json:"type"`
	Start   uint64           `json:"start"`
	End     uint64           `json:"end"`
	LeaseMS uint32           `json:"lease_ms"`
	// Hash is the secret hash of a resumable session: its client may
	// re-assert the ranges through another node.
	Hash []byte `json:"hash,omitempty"`
}

// HandoffLater is the export's error while holders of moving names that
// do not continue are still there: they learn of their loss only when
// the server's ERROR arrives, so a claim granted at once could overlap
// them. The hand-off is tried again after RetryAfter, and meanwhile
// whatever else a node must do (end the claims on names it no longer
// owns once the change commits without its hand-off) is not held up.
type HandoffLater struct{ Holders int }

func (e HandoffLater) Error() string {
	return fmt.Sprintf("server: %d holders of moving names told, not gone yet", e.Holders)
}

// RetryAfter is how soon the export may be tried again. Each try scans
// the table for the moving names under the server's mutex, so not too
// often: a told holder hangs up in about a round trip, and the move
// waits at most this much longer.
func (HandoffLater) RetryAfter() time.Duration { return 20 * time.Millisecond }

// HandoffSessionFacts is what the hand-off's rules need to know of a
// session with claims or range locks on moving names.
type HandoffSessionFacts struct {
	Clustered bool // the node is a cluster node (it has a router)
	V2        bool // a version 2 session registered here (it may be closing)
	Closing   bool
	// Kept: a kept session (its connection broke, or a planned change
	// installed its claims here and nobody adopted them yet).
	Kept      bool
	Forwarded bool // relayed by another node, its host
	HasOrigin bool // the origin it stands for is known (a relayed session's hop header named it)
}

// Continues reports whether the claims of the session continue across a
// move: an open version 2 session, of a client connected to this node or
// relayed by another (whose origin the hop header named).
func (f HandoffSessionFacts) Continues() bool {
	return f.Clustered && f.V2 && !f.Closing && !f.Kept && f.HasOrigin
}

// MovesOn reports whether the claims of the session are handed over in a
// planned change rather than ended: those of a session that continues,
// and those of a kept session. A kept session's client cannot be told,
// so its claims go to the new owner as they are, still kept for the
// session's origin, expiring a lease after it was last heard (the
// continuation model hands abandoned records over the same way; its
// mutation export-drops-abandoned ends them instead).
func (f HandoffSessionFacts) MovesOn() bool {
	return f.Clustered && (f.Kept || f.Continues())
}

// HandoffTell is how a session whose claims were exported hears of it.
type HandoffTell int

const (
	// HandoffAsKept: a kept session's record goes to the new owner as it
	// is (its origin and hashes); it ends here once it has no claim left.
	HandoffAsKept HandoffTell = iota
	// HandoffTellMoved: the relaying node of an upstream session is told
	// MOVED for each claim (MovedIDs), in order with everything else.
	HandoffTellMoved
	// HandoffStartMoving: the claims of a session on this node start
	// moving; its host adopts them at the new owner with a move secret,
	// whose hash the new owner gets.
	HandoffStartMoving
)

// Tell says how the session hears that its exported claims moved.
func (f HandoffSessionFacts) Tell() HandoffTell {
	switch {
	case f.Kept:
		return HandoffAsKept
	case f.Forwarded:
		return HandoffTellMoved
	}
	return HandoffStartMoving
}

// HandoffClaim is one exported claim of a session, with its lock's name
// and limit.
type HandoffClaim struct {
	State locktable.ClaimState
	Name  string
	Limit uint32
}

// HandoffExport is what an export hands over: the state for each new
// owner, and the exported claims of each session.
type HandoffExport struct {
	states     map[string]*HandoffState                // by new owner
	sessionsOf map[string]map[locktable.SessionID]bool // by new owner
	// PerSession are the exported claims of each session.
	PerSession map[locktable.SessionID][]HandoffClaim
	Claims     int // the claims exported
}

// PlanHandoffExport sorts the exported locks by new owner and their
// claims by session. A continuing session is heard from by its host
// until its claims are adopted, so their idle time becomes zero (the new
// owner's lease of a detached claim runs from the install, after every
// confirmation the client was given: late is safe); a kept one keeps the
// time it was last heard.
func PlanHandoffExport(locks []locktable.LockState, newOwner func(name string) string,
	kept func(locktable.SessionID) bool) *HandoffExport {
	p := &HandoffExport{
		states:     map[string]*HandoffState{},
		PerSession: map[locktable.SessionID][]HandoffClaim{},
		sessionsOf: map[string]map[locktable.SessionID]bool{},
	}
	for _, ls := range locks {
		to := newOwner(ls.Name)
		st := p.states[to]
		if st == nil {
			st = &HandoffState{}
			p.states[to] = st
			p.sessionsOf[to] = map[locktable.SessionID]bool{}
		}
		for _, claims := range [][]locktable.ClaimState{ls.Holders, ls.Waiters} {
			for i := range claims {
				if !kept(claims[i].Session) {
					claims[i].Idle = 0
				}
				cs := claims[i]
				p.PerSession[cs.Session] = append(p.PerSession[cs.Session], HandoffClaim{cs, ls.Name, ls.Limit})
				p.sessionsOf[to][cs.Session] = true
			}
		}
		p.Claims += len(ls.Holders) + len(ls.Waiters)
		st.Locks = append(st.Locks, ls)
	}
	return p
}

// Sessions returns the sessions with exported claims, in id order.
func (p *HandoffExport) Sessions() []locktable.SessionID {
	return slices.Sorted(maps.Keys(p.PerSession))
}

// MovedIDs returns the ids of session sid's exported claims: a relayed
// session's relaying node is told MOVED for each (REVOKED(claim, 0x06)
// on the upstream session, in order with everything else it is sent),
// and sends what it has of them to the new owner next.
func (p *HandoffExport) MovedIDs(sid locktable.SessionID) []locktable.ClaimID {
	cs := p.PerSession[sid]
	ids := make([]locktable.ClaimID, len(cs))
	for i, c := range cs {
		ids[i] = c.State.Claim
	}
	return ids
}

// Encode adds the sessions (by id; each new owner gets those with claims
// in its locks, in id order), the range gates and the handed-over ranges
// to the state of each new owner, and encodes it.
func (p *HandoffExport) Encode(sessions map[locktable.SessionID]HandoffSession, gates map[string][]HandoffRangeGate,
	ranges map[string][]HandoffRange) (map[string]json.RawMessage, error) {
	stateFor := func(to string) *HandoffState {
		if p.states[to] == nil {
			p.states[to] = &HandoffState{}
		}
		return p.states[to]
	}
	for to, gs := range gates {
		stateFor(to).RangeGates = gs
	}
	for to, rs := range ranges {
		stateFor(to).Ranges = rs
	}
	out := map[string]json.RawMessage{}
	for to, st := range p.states {
		for _, sid := range slices.Sorted(maps.Keys(p.sessionsOf[to])) {
			st.Sessions = append(st.Sessions, sessions[sid])
		}
		b, err := json.Marshal(st)
		if err != nil {
			return nil, err
		}
		out[to] = b
	}
	return out, nil
}

// HandoffRangeSession is what a range export needs to know of a session
// with range locks on a moving key.
type HandoffRangeSession struct {
	HandoffSessionFacts
	Origin locktable.Origin
	Lease  time.Duration
	Resume []byte // the hash of a resumable session's own secret, or nil
}

// HandoffKeyRanges are the range locks of one continuing session on one
// moving key.
type HandoffKeyRanges struct {
	Session rangelock.SessionID
	Key     string
	Locks   []rangelock.KeyLock
}

// HandoffRangeAnswer is a RANGE answer an export sends a continuing
// session, in this order: for the key a relayed session held locks on,
// RangeMoved with the key as label on request 0 (its relaying node, the
// host, takes over their adoption); for a waiting request,
// RangeUnavailable, or RangeMoved with the key to a relaying node, which
// answers its client unavailable (range waiters lose their place across
// a planned change: the client asks again, at the new owner).
type HandoffRangeAnswer struct {
	Session rangelock.SessionID
	Tag     uint32
	Status  protocol.RangeStatus
	Label   string
}

// HandoffRangeExport is what a range export does.
type HandoffRangeExport struct {
	Handed map[string][]HandoffRange     // by new owner
	Gates  map[string][]HandoffRangeGate // by new owner
	// Ending are the version 2 sessions that held or waited on a moving
	// key and do not continue: each is ended (ERROR 0x01).
	Ending []rangelock.SessionID
	// Moving are the held locks of the continuing sessions on this node,
	// by session and key, in the order of their first lock: each key
	// starts moving at the session, which adopts it at the new owner.
	Moving  []HandoffKeyRanges
	Answers []HandoffRangeAnswer
}

// PlanHandoffRanges decides a range export: on are the sessions on each
// moving key (rangelock SessionsOn), held and waiting what the server
// took out of its range table for those keys (TakeKeys), and session
// what it knows of each session.
func PlanHandoffRanges(on map[string][]rangelock.SessionID, held []rangelock.KeyLock, waiting []rangelock.Cancelled,
	newOwner func(key string) string, session func(rangelock.SessionID) HandoffRangeSession) *HandoffRangeExport {
	x := &HandoffRangeExport{}
	x.Gates, x.Ending = handoffRangeGates(on, newOwner, session)
	var relayed []HandoffKeyRanges
	x.Handed, relayed, x.Moving = handoffHeldRanges(held, newOwner, session)
	for _, m := range relayed {
		x.Answers = append(x.Answers, HandoffRangeAnswer{Session: m.Session, Status: protocol.RangeMoved, Label: m.Key})
	}
	// The waiting sets after the MOVED of their session's held ranges,
	// before which the relaying node still mirrors the key's locks.
	for _, w := range waiting {
		ss := session(w.Owner.Session)
		if !ss.Continues() {
			continue // it ends
		}
		a := HandoffRangeAnswer{Session: w.Owner.Session, Tag: uint32(w.Tag), Status: protocol.RangeUnavailable}
		if ss.Forwarded {
			a.Status, a.Label = protocol.RangeMoved, w.Key // the relaying node answers unavailable
		}
		x.Answers = append(x.Answers, a)
	}
	return x
}

// handoffRangeGates returns, per new owner, the gates of the moving keys
// where a session that does not continue held or waited, and the version
// 2 sessions among those, which end. A gate lasts the longest lease of
// those sessions: each such client stops believing within 0.8 of it
// after the send time of its last request answered here, which came
// before the export, so before the install. The waiters count too,
// although this node grants nothing on the key after the export: a
// session's lease is as long as its belief, whatever it held
// (cluster-ranges, range-gate-holders-only).
func handoffRangeGates(on map[string][]rangelock.SessionID, newOwner func(key string) string,
	session func(rangelock.SessionID) HandoffRangeSession) (gates map[string][]HandoffRangeGate, ending []rangelock.SessionID) {
	gates = map[string][]HandoffRangeGate{}
	ends := map[rangelock.SessionID]bool{}
	for _, key := range slices.Sorted(maps.Keys(on)) {
		var lease time.Duration
		for _, sid := range on[key] {
			ss := session(sid)
			if ss.Continues() {
				continue
			}
			lease = max(lease, ss.Lease)
			if ss.V2 && !ends[sid] {
				ends[sid] = true
				ending = append(ending, sid)
			}
		}
		if lease > 0 {
			to := newOwner(key)
			gates[to] = append(gates[to], HandoffRangeGate{Key: key, LeaseMS: protocol.LeaseMS(lease)})
		}
	}
	return gates, ending
}

// handoffHeldRanges returns, per new owner, the held range locks of the
// sessions that continue, and those locks by session and key, in the
// order of their first lock in held, apart for relayed sessions and
// sessions on this node. The others' sessions end, and their keys are
// gated.
func handoffHeldRanges(held []rangelock.KeyLock, newOwner func(key string) string,
	session func(rangelock.SessionID) HandoffRangeSession) (handed map[string][]HandoffRange, relayed, local []HandoffKeyRanges) {
	handed = map[string][]HandoffRange{}
	type sessionKey struct {
		sid rangelock.SessionID
		key string
	}
	var moved []HandoffKeyRanges
	at := map[sessionKey]int{} // index in moved
	for _, kl := range held {
		sid := kl.Lock.Owner.Session
		ss := session(sid)
		if !ss.Continues() {
			continue // its session ends; the key is gated
		}
		to := newOwner(kl.Key)
		handed[to] = append(handed[to], HandoffRange{Key: kl.Key, Flock: kl.NS == rangelock.Flock, Origin: ss.Origin,
			Owner: uint64(kl.Lock.Owner.ID), Type: uint8(kl.Lock.Type), Start: kl.Lock.Range.Start, End: kl.Lock.Range.End,
			LeaseMS: protocol.LeaseMS(ss.Lease), Hash: ss.Resume})
		sk := sessionKey{sid, kl.Key}
		i, ok := at[sk]
		if !ok {
			i = len(moved)
			at[sk] = i
			moved = append(moved, HandoffKeyRanges{Session: sid, Key: kl.Key})
		}
		moved[i].Locks = append(moved[i].Locks, kl)
	}
	for _, m := range moved {
		if session(m.Session).Forwarded {
			relayed = append(relayed, m)
		} else {
			local = append(local, m)
		}
	}
	return handed, relayed, local
}
