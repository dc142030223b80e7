package server

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

// The prior owner's side of a planned change's hand-off (docs/cluster.md,
// "Planned changes: the hand-off" and "Continuing version 2 claims across
// a planned change"). Export tells the version 1 holders on the moving
// names and waits for them to go (tellMoving), ends the claims that do
// not continue, and takes the others out of the table with their
// sessions' origins, encoding a moveState for each new owner. Its
// upstream sessions tell their relaying nodes MOVED for the claims that
// left (sendMovedLocked) and answer a RELEASE of one MOVED too.
// The new owner's side is in move_install.go, the host's in move_host.go.

// continues reports whether the claims of session sid continue across a
// move: an open version 2 session, of a client connected to this node or
// relayed by another (whose origin the hop header named). Called with
// srv.mu held.
func (srv *Server) continues(sid locktable.SessionID) bool {
	s := srv.claims[sid]
	if s == nil || s.v2 == nil || s.closing.Load() || srv.isKeptLocked(sid) || srv.Router == nil {
		return false
	}
	_, ok := s.origin()
	return ok
}

// movesOn reports whether the claims of session sid are handed over in
// a planned change rather than ended: those of a session that continues,
// and those of a kept session (resume.go, or claims a planned change
// installed here that nobody adopted yet). A kept session's client
// cannot be told, so its claims go to the new owner as they are, still
// kept for the session's origin, expiring a lease after it was last
// heard (the continuation model hands abandoned records over the same
// way; its mutation export-drops-abandoned ends them instead). Called
// with srv.mu held.
func (srv *Server) movesOn(sid locktable.SessionID) bool {
	return srv.Router != nil && (srv.isKeptLocked(sid) || srv.continues(sid))
}

// origin returns the origin a session stands for: this node and its id,
// or, for a relayed session, the relaying node and the client's session
// there (from the hop header).
func (s *session) origin() (locktable.Origin, bool) {
	if !s.forwarded {
		return locktable.Origin{Node: s.srv.NodeID, Session: uint64(s.id)}, true
	}
	via := s.peer.Via
	i := strings.LastIndexByte(via, '/')
	if i <= 0 {
		return locktable.Origin{}, false
	}
	n, err := strconv.ParseUint(via[i+1:], 10, 64)
	if err != nil {
		return locktable.Origin{}, false
	}
	return locktable.Origin{Node: via[:i], Session: n}, true
}

// relaysFor reports whether s is the upstream session that origin o's
// node opened for o's client session.
func (s *session) relaysFor(o locktable.Origin) bool {
	if !s.forwarded {
		return false
	}
	so, ok := s.origin()
	return ok && so == o
}

// sendMovedLocked tells the relaying node of upstream session s that its
// claims ids moved (MOVED, in order with everything else s is sent), and
// remembers them: a RELEASE of one read later is answered MOVED too.
// Called with srv.mu held, in the critical section of the export.
func (s *session) sendMovedLocked(ids []locktable.ClaimID) {
	v := s.v2
	if v.movedIDs == nil {
		v.movedIDs = map[uint32]bool{}
	}
	for _, id := range ids {
		v.movedIDs[uint32(id)] = true
		v.appendPushOut(s, func(b []byte) []byte { return protocol.AppendRevoked(b, uint32(id), codeMoved, "moved") })
	}
}

// answerMoved answers RELEASE(id) MOVED when claim id of this upstream
// session was handed over: the claim lives on at the new owner, where
// the relaying node sends the RELEASE next. Called by the reader with
// srv.mu held.
func (s *session) answerMoved(id uint32) bool {
	v := s.v2
	if !v.movedIDs[id] {
		return false
	}
	delete(v.movedIDs, id)
	v.appendOut(s, func(b []byte) []byte { return protocol.AppendRevoked(b, id, codeMoved, "moved") })
	return true
}

// claimUses forgets that id was handed over: a CLAIM uses it again.
func (s *session) claimUses(id uint32) {
	if v := s.v2; v.movedIDs != nil {
		delete(v.movedIDs, id)
	}
}

// Export hands over the claims on the names newOwner maps to another
// node ("" for a name that stays): the version 2 claims of this node's
// own sessions continue (they are exported and their sessions adopt them
// at the new owner); the others are ended for the reason "moved", as
// before: version 1 sessions get ERROR 0x01 and are closed, other
// version 2 claims REVOKED(claim, 0x03). It returns the state to install
// on each new owner.
func (srv *Server) Export(newOwner func(name string) string) (map[string]json.RawMessage, error) {
	srv.init()
	moving := func(name string) bool { return newOwner(name) != "" }
	if n := srv.tellMoving(moving); n > 0 {
		return nil, exportLater{holders: n}
	}
	srv.mu.Lock()
	now := time.Now()
	handedRanges, gates, rangeSessions, rangeDs := srv.exportRangesLocked(now, newOwner)
	res := srv.table.EvictExcept(now, moving, srv.movesOn, protocol.CodeShuttingDown, protocol.CodeNotOwner)
	ended := len(res.Events)
	ds := srv.commit(now, res)
	locks := srv.table.Export(now, moving)
	ds = append(ds, srv.commit(now, srv.table.Evict(now, moving, 0, 0))...)
	plan := srv.planExportLocked(locks, newOwner)
	hashes, delivered, keptDs := srv.handOverSessionsLocked(now, plan.perSession)
	ds = append(ds, keptDs...)
	out, err := plan.encode(hashes, gates, handedRanges)
	srv.mu.Unlock()
	if err != nil {
		return nil, err
	}
	srv.deliverAll(ds)
	srv.deliver(delivered)
	srv.deliver(rangeDs)
	for _, s := range rangeSessions {
		s.closeWithError(protocol.CodeShuttingDown)
	}
	for sid := range plan.perSession {
		if s := srv.session(sid); s != nil && !s.forwarded {
			s.kickMoving()
		}
	}
	if ended > 0 || plan.claims > 0 {
		srv.Logger.Info("planned change: claims on names moving to another node handed over", "continuing", plan.claims, "ended", ended)
	}
	return out, nil
}

// exportPlan is what Export hands over: the state for each new owner,
// and the exported claims of each session.
type exportPlan struct {
	states     map[string]*moveState // by new owner
	perSession map[locktable.SessionID][]moveClaim
	sessionsOf map[string]map[locktable.SessionID]bool // by new owner
	claims     int                                     // the claims exported
}

// planExportLocked sorts the exported locks by new owner and their
// claims by session. A continuing session is heard from by its host
// until its claims are adopted, so their idle time becomes zero; a kept
// one keeps the time it was last heard. Called with srv.mu held.
func (srv *Server) planExportLocked(locks []locktable.LockState, newOwner func(name string) string) *exportPlan {
	p := &exportPlan{
		states:     map[string]*moveState{},
		perSession: map[locktable.SessionID][]moveClaim{},
		sessionsOf: map[string]map[locktable.SessionID]bool{},
	}
	for _, ls := range locks {
		to := newOwner(ls.Name)
		st := p.states[to]
		if st == nil {
			st = &moveState{}
			p.states[to] = st
			p.sessionsOf[to] = map[locktable.SessionID]bool{}
		}
		for _, claims := range [][]locktable.ClaimState{ls.Holders, ls.Waiters} {
			for i := range claims {
				if !srv.isKeptLocked(claims[i].Session) {
					claims[i].Idle = 0
				}
				cs := claims[i]
				p.perSession[cs.Session] = append(p.perSession[cs.Session], moveClaim{cs, ls.Name, ls.Limit})
				p.sessionsOf[to][cs.Session] = true
			}
		}
		p.claims += len(ls.Holders) + len(ls.Waiters)
		st.Locks = append(st.Locks, ls)
	}
	return p
}

// handOverSessionsLocked marks the exported claims of each session as
// handed over, and returns what the new owners install for each: a kept
// session's origin and hashes (the session ends here when it has no
// claim left, with the deliveries kept), a relayed session's (its
// relaying node is told MOVED, delivered), and those of a session on
// this node, whose claims start moving (startMoving). Called with srv.mu
// held.
func (srv *Server) handOverSessionsLocked(now time.Time, perSession map[locktable.SessionID][]moveClaim) (
	hashes map[locktable.SessionID]moveSession, delivered, kept []delivery) {
	hashes = map[locktable.SessionID]moveSession{}
	for sid, cs := range perSession {
		if k := srv.resume.byID[sid]; k != nil {
			hashes[sid] = k.handedOver()
			if len(srv.table.SessionClaims(sid)) == 0 {
				kept = append(kept, srv.endKeptLocked(now, k, locktable.ReasonMoved)...)
			}
			continue
		}
		s := srv.claims[sid]
		o, _ := s.origin()
		ms := moveSession{Session: sid, Origin: o}
		if s.forwarded {
			ids := make([]locktable.ClaimID, len(cs))
			for i, c := range cs {
				ids[i] = c.cs.Claim
			}
			s.sendMovedLocked(ids)
			delivered = append(delivered, delivery{to: s, flush: true})
		} else {
			hash := s.startMoving(now, cs)
			ms.Adopt = hash[:]
		}
		if r := s.v2.resume; r != nil {
			ms.Resume = r.hash[:]
		}
		hashes[sid] = ms
	}
	return hashes, delivered, kept
}

// encode adds the sessions (by id), the range gates and the handed-over
// ranges to the state of each new owner, and encodes it.
func (p *exportPlan) encode(hashes map[locktable.SessionID]moveSession, gates map[string][]rangeGate,
	ranges map[string][]movedRange) (map[string]json.RawMessage, error) {
	stateFor := func(to string) *moveState {
		if p.states[to] == nil {
			p.states[to] = &moveState{}
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
			st.Sessions = append(st.Sessions, hashes[sid])
		}
		b, err := json.Marshal(st)
		if err != nil {
			return nil, err
		}
		out[to] = b
	}
	return out, nil
}

// tellMoving tells the version 1 holders on the moving names that the
// name moves (ERROR 0x01), once, and reports how many holders of moving
// names that are not handed over are still there. Export hands nothing
// on while any is: a holder learns of its loss only when the ERROR
// arrives, so a claim granted at once (here, to a continuing claim, or
// at the new owner) could overlap it. Each told holder ends when its
// client hangs up (about one round trip) or its lease runs out. Kept
// sessions (resume.go) are not waited for: their claims are handed over
// as they are (movesOn). Names that move are frozen meanwhile, so no new
// claim enters.
func (srv *Server) tellMoving(moving func(name string) bool) (left int) {
	srv.mu.Lock()
	now := time.Now()
	res, told := srv.table.TellMoving(now, moving, srv.movesOn, protocol.CodeShuttingDown, protocol.CodeNotOwner)
	for _, sid := range told {
		if s := srv.claims[sid]; s != nil && !s.gone.Load() {
			left++
			if !s.movedOut.Swap(true) {
				srv.Logger.Debug("planned change: version 1 holder told; waiting for it to hang up", "remote_addr", s.peer.Addr)
			}
		}
	}
	var ds []delivery
	for _, d := range srv.commit(now, res) {
		if d.to.movedOut.Load() && d.to.closing.Load() {
			continue // told before
		}
		ds = append(ds, d)
	}
	srv.mu.Unlock()
	srv.deliverAll(ds)
	return left
}

// exportLater is Export's error while holders of moving names that do
// not continue are still there (tellMoving): the hand-off is tried again
// after RetryAfter, and meanwhile whatever else a node must do (end the
// claims on names it no longer owns once the change commits without its
// hand-off) is not held up.
type exportLater struct{ holders int }

func (e exportLater) Error() string {
	return fmt.Sprintf("server: %d holders of moving names told, not gone yet", e.holders)
}

// RetryAfter is how soon Export may be called again. Each call scans
// the table for the moving names under srv.mu, so not too often: a told
// holder hangs up in about a round trip, and the move waits at most this
// much longer.
func (exportLater) RetryAfter() time.Duration { return 20 * time.Millisecond }

// session returns open session sid, or nil.
func (srv *Server) session(sid locktable.SessionID) *session {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return srv.claims[sid]
}

// moveClaim is one exported claim of a session, with its lock's name and
// limit.
type moveClaim struct {
	cs    locktable.ClaimState
	name  string
	limit uint32
}
