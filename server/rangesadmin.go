package server

import (
	"cmp"
	"slices"
	"time"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/internal/rangelock"
	"github.com/batonlock/baton/protocol"
)

// RangeKeys returns every range-lock key (with its namespace) that has a
// holder or a waiting request, unsorted: the admin API's listing sorts
// and filters it outside the mutex.
func (srv *Server) RangeKeys() []RangeKey {
	srv.init()
	srv.mu.Lock()
	keys := srv.ranges.table.Keys()
	srv.mu.Unlock()
	out := make([]RangeKey, len(keys))
	for i, k := range keys {
		out[i] = rangeKeyOf(k)
	}
	return out
}

// RangeSession names a session of a range lock for the admin API.
type RangeSession struct {
	Peer  Peer
	Label string
}

// RangeView is one range-lock key as the admin API shows it: a page of
// its held ranges and waiting requests, their totals, and who their
// sessions are.
type RangeView struct {
	RangeKey
	Holders      []RangeHolder // by owner, then by start
	HeldTotal    int           // held ranges of every owner
	Waiters      []RangeWaiter // in queue order
	WaitingTotal int
	Sessions     map[SessionID]RangeSession // of every holder and waiter listed
}

// RangeViews describes the keys that still have a holder or a waiting
// request, each with at most held held ranges and waiting waiting
// requests: a key of any size costs one page under the mutex.
func (srv *Server) RangeViews(keys []RangeKey, held, waiting int) []RangeView {
	srv.init()
	srv.mu.Lock()
	defer srv.mu.Unlock()
	out := make([]RangeView, 0, len(keys))
	for _, k := range keys {
		v, ok := srv.ranges.table.View(k.Key, k.ns(), held, waiting)
		if !ok {
			continue
		}
		rv := RangeView{RangeKey: k, HeldTotal: v.HeldTotal, WaitingTotal: v.WaitingTotal, Sessions: map[SessionID]RangeSession{}}
		name := func(sid rangelock.SessionID) {
			if _, ok := rv.Sessions[SessionID(sid)]; !ok {
				rv.Sessions[SessionID(sid)] = srv.rangeSessionLocked(sid, nil)
			}
		}
		for _, h := range v.Holders {
			name(h.Owner.Session)
			rv.Holders = append(rv.Holders, rangeHolderOf(h.Owner, h.Type, h.Range))
		}
		for _, w := range v.Waiters {
			name(w.Owner.Session)
			rv.Waiters = append(rv.Waiters, RangeWaiter{RangeHolder: rangeHolderOf(w.Owner, w.Type, w.Range), Req: w.Tag, Since: w.Since})
		}
		out = append(out, rv)
	}
	return out
}

// RangeSessionCounts returns, by session, the held ranges and waiting
// range requests on keys (nil: on every key).
func (srv *Server) RangeSessionCounts(keys []RangeKey) map[SessionID]RangeSessionCount {
	srv.init()
	srv.mu.Lock()
	defer srv.mu.Unlock()
	out := map[SessionID]RangeSessionCount{}
	if keys == nil {
		for sid, c := range srv.ranges.table.SessionCounts() {
			out[SessionID(sid)] = RangeSessionCount(c)
		}
		return out
	}
	for _, k := range keys {
		for _, c := range srv.ranges.table.CountsOn(k.Key, k.ns()) {
			sc := out[SessionID(c.Session)]
			sc.Held += c.Held
			sc.Waiting += c.Waiting
			out[SessionID(c.Session)] = sc
		}
	}
	return out
}

// ReleaseRangesBy releases, on behalf of administrator by, every range
// lock and waiting range request of owner owner of session session on
// key, in both namespaces (fcntl and flock), and grants the waiters that
// now fit. Version 2 has no frame that revokes one range lock, so the
// session is then ended with ERROR 0x02 (closed by administrator), as a
// version 1 claim is on force-release: its client treats every lock of
// the session as lost (a mount fails I/O on the files it locked with
// EIO), and its other range locks and claims end with it. It returns
// ErrNoHolder when the owner holds nothing and waits for
// nothing on key.
func (srv *Server) ReleaseRangesBy(key string, session, owner uint64, by Peer) error {
	srv.init()
	srv.mu.Lock()
	now := time.Now()
	sid := rangelock.SessionID(session)
	o := rangelock.Owner{Session: sid, ID: rangelock.OwnerID(owner)}
	var res rangelock.Result
	found := false
	for _, ns := range []rangelock.Namespace{rangelock.POSIX, rangelock.Flock} {
		if !slices.Contains(srv.ranges.table.OwnersOn(key, ns, sid), o.ID) {
			continue
		}
		if !found {
			ev := srv.rangeEvent(EventRangeForceRelease, now, key, sid, nil, &RangeLock{Flock: ns == rangelock.Flock, Owner: owner})
			ev.Admin = by
			srv.notify(ev)
			found = true
		}
		r, _ := srv.ranges.table.ReleaseOwner(now, key, ns, o)
		res.Released = append(res.Released, r.Released...)
		res.Cancelled = append(res.Cancelled, r.Cancelled...)
		res.Grants = append(res.Grants, r.Grants...)
	}
	if !found {
		srv.mu.Unlock()
		return ErrNoHolder
	}
	srv.revokedLocked(now, "admin", res, o)
	ds := srv.rangePushesFor(res, nil, RangeReleaseReasons[4], nil)
	ds = append(ds, srv.endRangeSessionLocked(sid, protocol.CodeClosedByAdmin)...)
	srv.mu.Unlock()
	srv.deliver(ds)
	return nil
}

// revokedLocked reports EventRangeRevoked for what res ended of owner o:
// each held lock released and each waiting request cancelled.
func (srv *Server) revokedLocked(now time.Time, cause string, res rangelock.Result, o rangelock.Owner) {
	for _, r := range res.Released {
		if r.Owner == o {
			ev := srv.rangeEvent(EventRangeRevoked, now, r.Key, o.Session, nil, &RangeLock{Flock: r.NS == rangelock.Flock,
				Owner: uint64(o.ID), Type: r.Type.String(), Start: r.Range.Start, End: r.Range.End, Ranges: r.Ranges})
			ev.Action = cause
			srv.notify(ev)
		}
	}
	for _, c := range res.Cancelled {
		if c.Owner == o {
			ev := srv.rangeEvent(EventRangeRevoked, now, c.Key, o.Session, nil, &RangeLock{Flock: c.NS == rangelock.Flock,
				Owner: uint64(o.ID), Waiting: true})
			ev.Action = cause
			srv.notify(ev)
		}
	}
}

// endRangeSessionLocked ends session sid, whose range locks were taken
// from it, with a session-level ERROR code: its client then knows them
// lost. A session relayed by another cluster node is not ended (that
// would end every session the node relays); nor is a kept one, which
// has no connection: its resume finds the locks gone.
func (srv *Server) endRangeSessionLocked(sid rangelock.SessionID, code protocol.Code) []delivery {
	s := srv.claims[locktable.SessionID(sid)]
	if s == nil || s.v2 == nil || s.forwarded {
		return nil
	}
	return []delivery{{to: s, send: locktable.Send{Kind: locktable.SendSessionError, Session: s.id, Code: code}}}
}

// revokeRanges applies a changed Authorizer (after an ACL reload) to the
// range locks, as Revoke does to claims: every waiting range request on
// a key the new rules refuse its session's identity is answered 0x0f
// (denied); with holders, the owners holding range locks there lose
// them and their session is ended with ERROR 0x18, its client treating
// its locks as lost. It returns how many held locks (per owner and key)
// and waiting requests it ended; with no Authorizer it does nothing.
func (srv *Server) revokeRanges(holders bool) int {
	srv.init()
	a := srv.Authorizer
	if a == nil {
		return 0
	}
	srv.mu.Lock()
	now := time.Now()
	rs := &srv.ranges
	n := 0
	var ds []delivery
	ended := map[rangelock.SessionID]bool{}
	keys := rs.table.Keys()
	slices.SortFunc(keys, func(a, b rangelock.Key) int {
		return cmp.Or(cmp.Compare(a.Key, b.Key), cmp.Compare(a.NS, b.NS))
	})
	for _, k := range keys {
		for _, sid := range rs.table.SessionsOf(k.Key, k.NS) {
			s := srv.claims[locktable.SessionID(sid)]
			if s == nil || s.forwarded || a.Allow(s.peer.Identity, k.Key) {
				// A relayed session's identity is checked by the node
				// that relays it; a kept one re-asserts through the ACL.
				continue
			}
			for _, w := range rs.table.WaitingOn(k.Key, k.NS, sid) {
				res, err := rs.table.Cancel(now, sid, w.Tag)
				if err != nil {
					continue
				}
				n++
				tag := w.Tag
				ev := srv.rangeEvent(EventRangeRevoked, now, k.Key, sid, nil, &RangeLock{Flock: k.NS == rangelock.Flock,
					Owner: uint64(w.Owner.ID), Type: w.Type.String(), Start: w.Range.Start, End: w.Range.End, Waiting: true})
				ev.Action = "acl"
				srv.notify(ev)
				if s.v2 != nil {
					s.v2.appendPushOut(s, func(b []byte) []byte {
						return protocol.AppendRangeAnswer(b, uint32(tag), protocol.RangeDenied, 0, protocol.Frame{})
					})
					ds = append(ds, delivery{to: s, flush: true})
				}
				ds = append(ds, srv.rangePushes(res, nil)...)
			}
			if !holders {
				continue
			}
			for _, id := range rs.table.OwnersOn(k.Key, k.NS, sid) {
				o := rangelock.Owner{Session: sid, ID: id}
				res, err := rs.table.ReleaseOwner(now, k.Key, k.NS, o)
				if err != nil || len(res.Released) == 0 {
					continue
				}
				n += len(res.Released)
				srv.revokedLocked(now, "acl", rangelock.Result{Released: res.Released}, o)
				ds = append(ds, srv.rangePushesFor(res, nil, RangeReleaseReasons[5], nil)...)
				if !ended[sid] {
					ended[sid] = true
					ds = append(ds, srv.endRangeSessionLocked(sid, protocol.CodeNotAuthorized)...)
				}
			}
		}
	}
	srv.mu.Unlock()
	srv.deliver(ds)
	return n
}
