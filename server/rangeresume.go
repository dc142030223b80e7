package server

import (
	"slices"
	"time"

	"github.com/batonlock/baton/internal/clustercore"
	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/internal/rangelock"
	"github.com/batonlock/baton/internal/rangemirror"
	"github.com/batonlock/baton/protocol"
)

// Range locks of resumable sessions: when such a session's connection
// breaks, the node holding its range locks keeps them under the session's
// origin and secret hash for the lease (dropRangesLater), and the resumed
// client re-asserts each with RANGE resume naming the earlier session. The
// key's owner moves the named session's ranges to the new one when the
// secret matches, unless a conflicting lock holds.
// Protocol: docs/protocol-v2-resume.md, "v2 resumable sessions and
// re-assertion"; design:
// docs/design/2026-12-02-cluster-range-locks.md#serverrangeresumego.

// keptRanges are the range locks of a resumable session whose
// connection broke.
type keptRanges struct {
	sid  rangelock.SessionID
	hash [secretHashLen]byte
}

// keepRangesLocked keeps the range locks of resumable session s, whose
// connection broke, for its client to re-assert, and ends its waiting
// sets. Called with srv.mu held; the caller delivers the pushes.
func (srv *Server) keepRangesLocked(s *session) []delivery {
	rs := &srv.ranges
	sid := rangelock.SessionID(s.id)
	o := s.v2.resume.origin
	if rs.kept == nil {
		rs.kept = map[locktable.Origin]*keptRanges{}
	}
	if old := rs.kept[o]; old != nil && old.sid != sid {
		// The same origin kept twice (a relaying node's upstream broke
		// again before it re-asserted everything): this session takes
		// the older one's ranges over, as it does its claims (keepLocked).
		for key, sids := range rs.table.SessionsOn(func(string) bool { return true }) {
			if slices.Contains(sids, old.sid) {
				rs.table.MoveSession(old.sid, sid, key)
			}
		}
		srv.forgetRangeSessionLocked(old.sid)
	}
	rs.kept[o] = &keptRanges{sid: sid, hash: s.v2.resume.hash}
	return srv.dropWaitingLocked(time.Now(), sid, s)
}

// dropWaitingLocked ends the waiting sets of session sid, whose client
// has gone (nothing is sent to it), and returns the flushes of the
// sessions but self whose waiters this lets in. Called with srv.mu held.
func (srv *Server) dropWaitingLocked(now time.Time, sid rangelock.SessionID, self *session) []delivery {
	res := srv.ranges.table.DropWaiting(now, sid)
	res.Cancelled = nil
	return srv.rangePushes(res, self)
}

// forgetKeptRangesLocked forgets the range locks kept for origin o when
// they are session sid's. Called with srv.mu held.
func (srv *Server) forgetKeptRangesLocked(o locktable.Origin, sid rangelock.SessionID) {
	if k := srv.ranges.kept[o]; k != nil && k.sid == sid {
		delete(srv.ranges.kept, o)
	}
}

// markRangesKept records that the connection of session s broke: a
// resumable session's range locks are then kept (dropRangesLater).
// Called by the reader.
func (s *session) markRangesKept() {
	if s.v2.resume == nil || s.closing.Load() {
		return
	}
	s.srv.mu.Lock()
	s.v2.keepRanges = true
	s.srv.mu.Unlock()
}

// resumeRange answers RANGE resume f of session s: on a cluster node it
// goes to the key's owner (relayed when that is another node, asked
// again later when no node serves the key now); the owner holds the
// lock for s (resumeRangeLocked). Called by the reader with srv.mu held.
func (s *session) resumeRange(now time.Time, f protocol.Frame) []delivery {
	srv := s.srv
	if srv.Router != nil {
		if s.rangeMoving(now, f) {
			return nil
		}
		rt := srv.Router.Route(f.Name, 0, s.forwarded)
		switch clustercore.HostResumeRange(moveRoute(rt), s.forwarded) {
		case clustercore.RangeRelay:
			s.relayRange(now, f, rt.Addr)
			return nil
		case clustercore.RangeNotNow:
			s.rangeUnavailable(f)
			return nil
		}
	}
	st, ds := srv.resumeRangeLocked(s, f, now)
	srv.Logger.Debug("range lock re-asserted", "session", s.id, "key", f.Name, "owner", f.Owner,
		"earlier_node", f.Node, "earlier_session", f.Session, "status", st)
	s.v2.appendOut(s, func(b []byte) []byte { return protocol.AppendRangeAnswer(b, f.Claim, st, 0, protocol.Frame{}) })
	return ds
}

// resumeRangeLocked holds for session s the range lock that RANGE resume
// f re-asserts: first the ranges on f's key of the earlier session f
// names become s's, when f has its secret (or s is the upstream session
// its relaying node opened again for it); then the lock is installed for
// s, which conflicts with nothing when it was among them. Called with
// srv.mu held; it returns the answer and the pushes to deliver.
func (srv *Server) resumeRangeLocked(s *session, f protocol.Frame, now time.Time) (protocol.RangeStatus, []delivery) {
	rs := &srv.ranges
	sid := rangelock.SessionID(s.id)
	o := locktable.Origin{Node: f.Node, Session: f.Session}
	h := s.reassertHolders(o, f.Secret)
	if k := rs.kept[o]; k != nil {
		h.Kept, h.KeptMatches = true, secretMatches(&k.hash, f.Secret)
	}
	if st := rs.standIns[o]; st != nil && st.hash != nil {
		h.StandIn, h.StandInMatches = true, secretMatches(st.hash, f.Secret)
	}
	var ds []delivery
	switch h.Holder() {
	case clustercore.HolderKept:
		srv.takeKeptRangesLocked(o, sid, f.Name)
	case clustercore.HolderLive:
		// Its client saw the connection break first: the session's
		// waiting sets end, its locks on the key are s's.
		from := rangelock.SessionID(srv.liveSession(o).id)
		ds = srv.dropWaitingLocked(now, from, s)
		rs.table.MoveSession(from, sid, f.Name)
	case clustercore.HolderStandIn:
		// A planned change handed them over here, and the node that
		// was to adopt them is gone.
		srv.adoptRangesLocked(s, o, f.Name)
	}
	ns, own, r := rangemirror.Target(f, sid)
	st := srv.installRangeLocked(s, rangelock.KeyLock{Key: f.Name, NS: ns,
		Lock: rangelock.Lock{Owner: own, Type: rangelock.Type(f.LockType), Range: r}}, now)
	return st, ds
}

// takeKeptRangesLocked gives session sid the ranges on key kept for
// origin o, and forgets them once none is left. Called with srv.mu held.
func (srv *Server) takeKeptRangesLocked(o locktable.Origin, sid rangelock.SessionID, key string) {
	rs := &srv.ranges
	k := rs.kept[o]
	if k == nil || k.sid == sid {
		return
	}
	rs.table.MoveSession(k.sid, sid, key)
	if !rs.table.HasSession(k.sid) {
		delete(rs.kept, o)
		srv.forgetRangeSessionLocked(k.sid)
	}
}

// forgetRangeSessionLocked forgets the label and lease of session sid,
// which holds no range lock any more: its timer (dropRangesLater) then
// finds nothing to drop. Called with srv.mu held.
func (srv *Server) forgetRangeSessionLocked(sid rangelock.SessionID) {
	delete(srv.ranges.labels, sid)
	delete(srv.ranges.leases, sid)
}
