package server

import (
	"errors"
	"time"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/internal/rangelock"
	"github.com/batonlock/baton/internal/rangemirror"
	"github.com/batonlock/baton/protocol"
)

// rangeState is the server's POSIX range-lock table (docs/protocol-v2-ranges.md,
// "v2 range locks"), guarded by srv.mu like the named-lock table, with
// the labels of the sessions that have used it (for conflict answers).
type rangeState struct {
	table  *rangelock.Table
	labels map[rangelock.SessionID]string
	// leases are those sessions' leases, for the gate of a key that
	// moves (exportRangesLocked).
	leases map[rangelock.SessionID]time.Duration
	// gates are the keys a planned change moved here with range locks on
	// them, and until when none is granted (relayranges.go).
	gates map[string]time.Time
	// kept are the range locks of resumable sessions whose connection
	// broke, by origin, until their client re-asserts them or the lease
	// passes (rangeresume.go).
	kept map[locktable.Origin]*keptRanges
	// standIns hold the range locks a planned change handed over here,
	// by the origin whose host adopts them (rangemove.go).
	standIns    map[locktable.Origin]*standIn
	lastStandIn uint64
}

// gatedLocked reports whether key's range locks are gated at now.
func (rs *rangeState) gatedLocked(key string, now time.Time) bool {
	until, ok := rs.gates[key]
	if ok && !now.Before(until) {
		delete(rs.gates, key)
		return false
	}
	return ok
}

// gateLocked gates key's range locks until until, or later.
func (rs *rangeState) gateLocked(key string, until time.Time) {
	if rs.gates == nil {
		rs.gates = map[string]time.Time{}
	}
	if until.After(rs.gates[key]) {
		rs.gates[key] = until
	}
}

func newRangeState(tokens locktable.TokenSource) rangeState {
	return rangeState{table: rangelock.New(tokens), labels: map[rangelock.SessionID]string{},
		leases: map[rangelock.SessionID]time.Duration{}}
}

// rangeOp applies one RANGE frame of session s to the range table and
// appends the answer, and the pushes it causes, to the sessions' output.
// It is called by the reader with srv.mu held; the deliveries flush the
// other sessions that got a push.
func (s *session) rangeOp(now time.Time, f protocol.Frame) []delivery {
	srv := s.srv
	switch f.Op {
	case protocol.RangeAdopt:
		s.adoptRanges(f)
		return nil
	case protocol.RangeReassert:
		s.reassertRange(now, f)
		return nil
	}
	// A client's re-assertion passes the access check as any RANGE set
	// does (and as a CLAIM's re-assertion does): a key the rules no
	// longer allow is refused 0x0f, and the kept lock stays kept.
	if s.rangeDenied(now, f) {
		return nil
	}
	if f.Op == protocol.RangeResume {
		return s.resumeRange(now, f)
	}
	if srv.Router != nil && s.routeRange(now, f) {
		return nil
	}
	return s.rangeHere(now, f)
}

// rangeReply is the answer to a RANGE request: its status, a grant's
// token, the conflicting lock, and whether it is sent now.
type rangeReply struct {
	st       protocol.RangeStatus
	token    uint64
	conflict protocol.Frame
	answer   bool
}

// rangeHere applies RANGE request f to this node's range table and
// answers it. Called with srv.mu held.
func (s *session) rangeHere(now time.Time, f protocol.Frame) []delivery {
	srv := s.srv
	rs := &srv.ranges
	sid := rangelock.SessionID(s.id)
	if _, ok := rs.labels[sid]; !ok {
		rs.labels[sid] = s.v2.label
		rs.leases[sid] = s.v2.lease
	}
	ns, o, r := rangemirror.Target(f, sid)
	rep, res, err := s.rangeApply(now, f, ns, o, r)
	if err != nil {
		rep.st = rangelock.ErrStatus(err)
	}
	if reason := rangelock.Refusal(err); reason != "" {
		srv.notify(Event{Kind: EventRangeRefused, Time: now, Lock: f.Name, Peer: Peer(s.peer), Action: reason,
			Protocol: protocol.Version2, Session: SessionID(s.id), Label: s.v2.label})
	}
	if rep.answer {
		s.v2.appendOut(s, func(b []byte) []byte {
			return protocol.AppendRangeAnswer(b, f.Claim, rep.st, rep.token, rep.conflict)
		})
	}
	return srv.rangePushes(res, s)
}

// rangeApply calls the range table for request f on owner o's range r
// of namespace ns. Called with srv.mu held.
func (s *session) rangeApply(now time.Time, f protocol.Frame, ns rangelock.Namespace, o rangelock.Owner, r rangelock.Range) (rep rangeReply, res rangelock.Result, err error) {
	rs := &s.srv.ranges
	rep = rangeReply{st: protocol.RangeDone, answer: true}
	switch f.Op {
	case protocol.RangeSet:
		return s.rangeSet(now, f, ns, o, r)
	case protocol.RangeUnlock:
		res, err = rs.table.Unlock(now, f.Name, ns, o, r)
	case protocol.RangeQuery:
		var l rangelock.Lock
		var found bool
		l, found, err = rs.table.Query(f.Name, ns, o, rangelock.Type(f.LockType), r)
		rep.st = protocol.RangeFree
		if found {
			rep.st, rep.conflict = protocol.RangeLocked, rs.lockFrame(l)
		}
	case protocol.RangeRelease:
		res, err = rs.table.ReleaseOwner(now, f.Name, ns, o)
	case protocol.RangeCancel:
		res, err = rs.table.Cancel(now, o.Session, uint64(f.Claim))
		rep.st = protocol.RangeCancelled
		if errors.Is(err, rangelock.ErrNoWaiter) {
			// Its final answer is already on the way: nothing to say.
			rep.answer, err = false, nil
		}
	default:
		err = rangelock.ErrInvalidType
	}
	return rep, res, err
}

// rangeSet sets the range lock f asks for (rangeApply's arguments).
// Called with srv.mu held.
func (s *session) rangeSet(now time.Time, f protocol.Frame, ns rangelock.Namespace, o rangelock.Owner, r rangelock.Range) (rep rangeReply, res rangelock.Result, err error) {
	srv := s.srv
	rs := &srv.ranges
	rep = rangeReply{st: protocol.RangeDone, answer: true}
	var a rangelock.Answer
	a, res, err = rs.table.Set(now, rangelock.Request{Key: f.Name, NS: ns, Owner: o,
		Type: rangelock.Type(f.LockType), Range: r, Wait: f.Flags&protocol.RangeWait != 0, Tag: uint64(f.Claim)})
	if err != nil {
		return rep, res, err
	}
	rep.st, rep.answer = a.Status(f.Flags&protocol.RangeWait != 0)
	switch a.State {
	case rangelock.Granted:
		rep.token = a.Token
		// Reported in table order: a flock conversion's release of
		// the old lock first, the promotions the set allowed after.
		srv.rangeEventsLocked(now, rangelock.Result{Released: res.Released}, "", nil)
		res.Released = nil
		srv.notifyRangeGrant(now, f.Name, ns, o, rangelock.Type(f.LockType), r, a.Token, 0)
	case rangelock.Conflict:
		rep.conflict = rs.lockFrame(a.Conflict)
	}
	return rep, res, err
}

// rangeDenied answers RANGE frame f RangeDenied, and reports it, when the
// access-control list refuses the session's identity its key: range keys
// are lock names, under the same rules as CLAIM and ACQUIRE. A cancel
// names only the session's own waiting request and is never refused.
func (s *session) rangeDenied(now time.Time, f protocol.Frame) bool {
	a := s.srv.Authorizer
	if a == nil || f.Op == protocol.RangeCancel || a.Allow(s.peer.Identity, f.Name) {
		return false
	}
	s.srv.notify(Event{Kind: EventDenied, Time: now, Lock: f.Name, Peer: Peer(s.peer), Protocol: protocol.Version2,
		Session: SessionID(s.id), Label: s.v2.label})
	s.v2.appendOut(s, func(b []byte) []byte {
		return protocol.AppendRangeAnswer(b, f.Claim, protocol.RangeDenied, 0, protocol.Frame{})
	})
	return true
}

// RangeRefusals are the reasons of EventRangeRefused: a range set
// refused by a cap (answered 0x0e), or as a deadlock because the
// deadlock search reached its bound (0x08). They are the range table's
// (TestRangeRefusalsAreTheTables).
var RangeRefusals = []string{"waiting_per_session", "waiting_per_owner", "owners_per_session", "search_bound"}

// rangeUnavailable answers RANGE frame f, which a cluster node neither
// serves nor relays now (relayranges.go), RangeUnavailable: nothing
// changed.
func (s *session) rangeUnavailable(f protocol.Frame) {
	s.v2.appendOut(s, func(b []byte) []byte {
		return protocol.AppendRangeAnswer(b, f.Claim, protocol.RangeUnavailable, 0, protocol.Frame{})
	})
}

// lockFrame is a conflicting lock as an ANSWER's lock fields.
func (rs *rangeState) lockFrame(l rangelock.Lock) protocol.Frame {
	t := uint8(l.Type)
	return protocol.Frame{LockType: t, Owner: uint64(l.Owner.ID), Session: uint64(l.Owner.Session),
		Start: l.Range.Start, End: l.Range.End, Label: rs.labels[l.Owner.Session]}
}

// rangePushes appends the PROMOTED and CANCELLED answers a range-table
// result asks for to their sessions' output, under srv.mu, and returns
// the flushes of sessions other than self (nil: all of them). It reports
// the result's releases and grants (rangeEventsLocked).
func (srv *Server) rangePushes(res rangelock.Result, self *session) []delivery {
	return srv.rangePushesFor(res, self, "", nil)
}

// rangePushesFor is rangePushes with the reason of the releases and the
// session that has ended, as rangeEventsLocked takes them.
func (srv *Server) rangePushesFor(res rangelock.Result, self *session, reason string, gone *session) []delivery {
	srv.rangeEventsLocked(time.Now(), res, reason, gone)
	var ds []delivery
	push := func(sid rangelock.SessionID, tag uint64, st protocol.RangeStatus, token uint64) {
		to := srv.claims[locktable.SessionID(sid)]
		if to == nil || to.v2 == nil {
			return
		}
		to.v2.appendPushOut(to, func(b []byte) []byte {
			return protocol.AppendRangeAnswer(b, uint32(tag), st, token, protocol.Frame{})
		})
		if to != self {
			if n := len(ds); n == 0 || ds[n-1].to != to {
				ds = append(ds, delivery{to: to, flush: true})
			}
		}
	}
	for _, c := range res.Cancelled {
		push(c.Owner.Session, c.Tag, protocol.RangeCancelled, 0)
	}
	for _, g := range res.Grants {
		push(g.Owner.Session, g.Tag, g.Status(), g.Token)
	}
	return ds
}

// dropRangesLater drops the range locks of session s once it has ended:
// at once, or, for an upstream session of another node and for a
// resumable session whose connection broke, once its lease has passed
// since it was last heard from. The owner cannot tell the relaying
// node's death, or a cut, from a client that still believes
// (relayranges.go); a resumable session's client re-asserts them
// (rangeresume.go). Called by the session's reader.
func (s *session) dropRangesLater() {
	if s.v2 == nil {
		s.dropRanges()
		return
	}
	srv := s.srv
	srv.mu.Lock()
	if !s.forwarded && !s.v2.keepRanges {
		srv.mu.Unlock()
		s.dropRanges()
		return
	}
	_, has := srv.ranges.labels[rangelock.SessionID(s.id)]
	var ds []delivery
	if has && s.v2.resume != nil {
		ds = srv.keepRangesLocked(s)
	}
	srv.mu.Unlock()
	srv.deliver(ds)
	if !has {
		return
	}
	time.AfterFunc(time.Until(s.v2.seen.Add(s.v2.lease))+time.Millisecond, s.dropRanges)
}

// dropRanges ends session s in the range table once it has ended: all
// its locks and waiting requests go at once and the waiters that now fit
// are granted.
func (s *session) dropRanges() {
	srv := s.srv
	srv.mu.Lock()
	sid := rangelock.SessionID(s.id)
	if _, ok := srv.ranges.labels[sid]; !ok {
		srv.mu.Unlock()
		return
	}
	delete(srv.ranges.labels, sid)
	delete(srv.ranges.leases, sid)
	if r := s.v2; r != nil && r.resume != nil {
		srv.forgetKeptRangesLocked(r.resume.origin, sid)
	}
	res := srv.ranges.table.CloseSession(time.Now(), sid)
	res.Cancelled = nil // to the session that has gone
	ds := srv.rangePushesFor(res, s, "", s)
	srv.mu.Unlock()
	srv.deliver(ds)
}
