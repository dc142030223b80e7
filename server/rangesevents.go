package server

import (
	"time"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/internal/rangelock"
	"github.com/batonlock/baton/protocol"
)

// RangeReleaseReasons are the reasons (Action) of EventRangeReleased:
// unlock (F_UNLCK, LOCK_UN), release (the owner's file was closed),
// convert (a flock conversion dropped the old lock), session (the
// session ended: closed, expired or lost), force (an administrator
// released the owner's ranges), revoked (a reloaded access-control list
// no longer allows the key).
var RangeReleaseReasons = []string{"unlock", "release", "convert", "session", "force", "revoked"}

// RangeRevokeCauses are the causes (Action) of EventRangeRevoked.
var RangeRevokeCauses = []string{"admin", "acl"}

// rangeEventsLocked reports the releases and then the grants of a
// range-table result, as the lock table's events are reported: under
// srv.mu, so that for each key a release comes before the grant it
// allowed. reason, when set, replaces the table's cause of the releases;
// gone is a session that has ended, for its peer and label.
func (srv *Server) rangeEventsLocked(now time.Time, res rangelock.Result, reason string, gone *session) {
	if srv.Observer == nil {
		return
	}
	for _, r := range res.Released {
		why := reason
		if why == "" {
			why = r.Cause.String()
		}
		ev := srv.rangeEvent(EventRangeReleased, now, r.Key, r.Owner.Session, gone, &RangeLock{Flock: r.NS == rangelock.Flock,
			Owner: uint64(r.Owner.ID), Type: r.Type.String(), Start: r.Range.Start, End: r.Range.End, Ranges: r.Ranges})
		ev.Action = why
		srv.notify(ev)
	}
	for _, g := range res.Grants {
		srv.notifyRangeGrant(now, g.Key, g.NS, g.Owner, g.Type, g.Range, g.Token, g.Waited)
	}
}

// notifyRangeGrant reports a range lock granted. Called with srv.mu held.
func (srv *Server) notifyRangeGrant(now time.Time, key string, ns rangelock.Namespace, o rangelock.Owner, typ rangelock.Type,
	r rangelock.Range, token uint64, waited time.Duration) {
	if srv.Observer == nil {
		return
	}
	ev := srv.rangeEvent(EventRangeGranted, now, key, o.Session, nil, &RangeLock{Flock: ns == rangelock.Flock,
		Owner: uint64(o.ID), Type: typ.String(), Start: r.Start, End: r.End})
	ev.Token, ev.Waited = token, waited
	srv.notify(ev)
}

// rangeEvent is an event about a range lock of session sid, named as
// rangeSessionLocked names it.
func (srv *Server) rangeEvent(k EventKind, now time.Time, key string, sid rangelock.SessionID, gone *session, r *RangeLock) Event {
	who := srv.rangeSessionLocked(sid, gone)
	return Event{Kind: k, Time: now, Lock: key, Protocol: protocol.Version2, Session: SessionID(sid),
		Peer: who.Peer, Label: who.Label, Range: r}
}

// rangeSessionLocked returns the peer and label of session sid: from the
// open session, else from gone (a session that has just ended), else
// the label the range table keeps (a kept or stand-in session).
func (srv *Server) rangeSessionLocked(sid rangelock.SessionID, gone *session) RangeSession {
	s := srv.claims[locktable.SessionID(sid)]
	if s == nil && gone != nil && gone.id == locktable.SessionID(sid) {
		s = gone
	}
	if s == nil {
		return RangeSession{Label: srv.ranges.labels[sid]}
	}
	who := RangeSession{Peer: Peer(s.peer)}
	if s.v2 != nil {
		who.Label = s.v2.label
	}
	return who
}
