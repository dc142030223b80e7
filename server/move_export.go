package server

import (
	"encoding/json"
	"time"

	"github.com/batonlock/baton/internal/clustercore"
	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

// The prior owner's side of a planned change's hand-off (docs/design/2026-12-02-cluster-handoff.md,
// "Planned changes: the hand-off" and "Continuing version 2 claims across
// a planned change"). Export tells the version 1 holders on the moving
// names and waits for them to go (tellMoving), ends the claims that do
// not continue, and takes the others out of the table with their
// sessions' origins, encoding a state for each new owner as the core
// plans it (clustercore.HandoffExport). Its upstream sessions tell their
// relaying nodes MOVED for the claims that left (sendMovedLocked) and
// answer a RELEASE of one MOVED too.
// The new owner's side is in move_install.go, the host's in move_host.go.

// handoffFactsLocked is what the hand-off's rules need to know of
// session sid (clustercore.HandoffSessionFacts). Called with srv.mu held.
func (srv *Server) handoffFactsLocked(sid locktable.SessionID) clustercore.HandoffSessionFacts {
	f := clustercore.HandoffSessionFacts{Clustered: srv.Router != nil, Kept: srv.isKeptLocked(sid)}
	if s := srv.claims[sid]; s != nil {
		f.Closing, f.V2, f.Forwarded = s.closing.Load(), s.v2 != nil, s.forwarded
		_, f.HasOrigin = s.origin()
	}
	return f
}

// movesOn reports whether the claims of session sid are handed over in
// a planned change rather than ended (clustercore's MovesOn). Called
// with srv.mu held.
func (srv *Server) movesOn(sid locktable.SessionID) bool {
	return srv.handoffFactsLocked(sid).MovesOn()
}

// origin returns the origin a session stands for: this node and its id,
// or, for a relayed session, the relaying node and the client's session
// there (from the hop header).
// (clustercore.HandoffOrigin).
func (s *session) origin() (locktable.Origin, bool) {
	return clustercore.HandoffOrigin(s.srv.NodeID, uint64(s.id), s.forwarded, s.peer.Via)
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
	v.movedIDs = clustercore.HandoffMoved(v.movedIDs).Mark(ids)
	for _, id := range ids {
		v.appendPushOut(s, func(b []byte) []byte { return clustercore.AppendMoved(b, uint32(id)) })
	}
}

// answerMoved answers RELEASE(id) MOVED when claim id of this upstream
// session was handed over: the claim lives on at the new owner, where
// the relaying node sends the RELEASE next. Called by the reader with
// srv.mu held.
func (s *session) answerMoved(id uint32) bool {
	moved := clustercore.HandoffMoved(s.v2.movedIDs).Release(id)
	if moved == nil {
		return false
	}
	s.v2.appendOut(s, func(b []byte) []byte { return append(b, moved...) })
	return true
}

// claimUses forgets that id was handed over: a CLAIM uses it again.
func (s *session) claimUses(id uint32) {
	clustercore.HandoffMoved(s.v2.movedIDs).Claimed(id)
}

// exportNames hands over the claims on the names newOwner maps to another
// node ("" for a name that stays): the version 2 claims of this node's
// own sessions continue (they are exported and their sessions adopt them
// at the new owner); the others are ended for the reason "moved", as
// before: version 1 sessions get ERROR 0x01 and are closed, other
// version 2 claims REVOKED(claim, 0x03). It returns the state to install
// on each new owner. What leaves, and how, is clustercore's
// (handoff_export.go); this takes it out of the tables and tells the
// sessions.
func (srv *Server) exportNames(newOwner func(name string) string) (map[string]json.RawMessage, error) {
	srv.init()
	moving := func(name string) bool { return newOwner(name) != "" }
	if n := srv.tellMoving(moving); n > 0 {
		return nil, clustercore.HandoffLater{Holders: n}
	}
	srv.mu.Lock()
	now := time.Now()
	rx, rangeSessions, rangeDs := srv.exportRangesLocked(now, newOwner)
	res := srv.table.EvictExcept(now, moving, srv.movesOn, protocol.CodeShuttingDown, protocol.CodeNotOwner)
	ended := len(res.Events)
	ds := srv.commit(now, res)
	locks := srv.table.Export(now, moving)
	ds = append(ds, srv.commit(now, srv.table.Evict(now, moving, 0, 0))...)
	plan := clustercore.PlanHandoffExport(locks, newOwner, srv.isKeptLocked)
	hashes, delivered, keptDs := srv.handOverSessionsLocked(now, plan)
	ds = append(ds, keptDs...)
	out, err := plan.Encode(hashes, rx.Gates, rx.Handed)
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
	for sid := range plan.PerSession {
		if s := srv.session(sid); s != nil && !s.forwarded {
			s.kickMoving()
		}
	}
	if ended > 0 || plan.Claims > 0 {
		srv.Logger.Info("planned change: claims on names moving to another node handed over", "continuing", plan.Claims, "ended", ended)
	}
	return out, nil
}

// handOverSessionsLocked marks the exported claims of each session as
// handed over, and returns what the new owners install for each: a kept
// session's origin and hashes (the session ends here when it has no
// claim left, with the deliveries kept), a relayed session's (its
// relaying node is told MOVED, delivered), and those of a session on
// this node, whose claims start moving (startMoving). Called with srv.mu
// held.
func (srv *Server) handOverSessionsLocked(now time.Time, plan *clustercore.HandoffExport) (
	hashes map[locktable.SessionID]moveSession, delivered, kept []delivery) {
	hashes = map[locktable.SessionID]moveSession{}
	for _, sid := range plan.Sessions() {
		tell := srv.handoffFactsLocked(sid).Tell()
		if tell == clustercore.HandoffAsKept {
			k := srv.resume.byID[sid]
			hashes[sid] = k.handedOver()
			if len(srv.table.SessionClaims(sid)) == 0 {
				kept = append(kept, srv.endKeptLocked(now, k, locktable.ReasonMoved)...)
			}
			continue
		}
		s := srv.claims[sid]
		o, _ := s.origin()
		ms := moveSession{Session: sid, Origin: o}
		if tell == clustercore.HandoffTellMoved {
			s.sendMovedLocked(plan.MovedIDs(sid))
			delivered = append(delivered, delivery{to: s, flush: true})
		} else {
			cs := make([]moveClaim, 0, len(plan.PerSession[sid]))
			for _, c := range plan.PerSession[sid] {
				cs = append(cs, moveClaim{c.State, c.Name, c.Limit})
			}
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

// session returns open session sid, or nil.
func (srv *Server) session(sid locktable.SessionID) *session {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return srv.claims[sid]
}
