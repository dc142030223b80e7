package locktable

import "time"

// Detached claims (docs/design/2026-12-02-cluster-handoff.md, "Continuing version 2 claims across a
// planned change (design)"): the new owner of a moving name installs the
// claims handed over under sessions that no connection serves, one per
// origin (the node the client's session is on, and its id there), until
// that session adopts each claim through an upstream session. A detached
// session is sent nothing: a grant made while a claim is detached is kept
// in the claim and reported by Adopt. Its lease runs as any session's,
// from when the prior owner last heard it, so a claim never adopted
// expires (ExpireSession) and its queue is promoted.

// Origin names a client session across nodes: the node it is on and its
// session id there. A claim's move key is its Origin and its claim id.
type Origin struct {
	Node    string `json:"node"`
	Session uint64 `json:"session"`
}

// ImportDetached installs locks as Import does, with every claim detached:
// origins gives, for each session id of the import, the origin it stands
// for. Each such session must be new to the table, or a detached session
// of the same origin (importing the same state twice changes nothing),
// and an origin has one detached session. Version 1 claims are refused
// (ErrBadState): they never continue across a move. No frame is sent to
// a detached session. On an error nothing is changed.
func (t *Table) ImportDetached(now time.Time, locks []LockState, origins map[SessionID]Origin) (Result, error) {
	for _, ls := range locks {
		for _, cs := range append(ls.Holders[:len(ls.Holders):len(ls.Holders)], ls.Waiters...) {
			o, ok := origins[cs.Session]
			if !ok || cs.V1 {
				return Result{}, ErrBadState
			}
			if s := t.sessions[cs.Session]; s != nil && (s.origin == nil || *s.origin != o) {
				return Result{}, ErrBadState
			}
			if sid, ok := t.detached[o]; ok && sid != cs.Session {
				return Result{}, ErrBadState
			}
		}
	}
	t.importing = origins
	res, err := t.Import(now, locks)
	t.importing = nil
	return res, err
}

// Adopt attaches the detached claim (o, cid) to session into, which from
// then on holds it (its lease, its frames), and counts as hearing from
// into. The claim keeps its token, its place among the holders or in the
// queue. It returns the claim's status: Owner with its token when it was
// granted, before or while detached (the caller announces a grant its
// client has not been told), Waiting when queued. Errors: ErrNoClaim when
// no detached claim has that key (never installed, adopted already,
// expired or ended), ErrNoSession when into is not an open version 2
// session that is not detached, ErrClaimExists when into uses cid.
func (t *Table) Adopt(now time.Time, o Origin, cid ClaimID, into SessionID) (Status, error) {
	dsid, ok := t.detached[o]
	if !ok {
		return Status{}, ErrNoClaim
	}
	d := t.sessions[dsid]
	c := d.get(cid)
	if c == nil {
		return Status{}, ErrNoClaim
	}
	s := t.sessions[into]
	switch {
	case s == nil || s.v1 || s.origin != nil:
		return Status{}, ErrNoSession
	case s.get(cid) != nil:
		return Status{}, ErrClaimExists
	}
	d.remove(c)
	c.sess = s
	s.add(c)
	s.lastSeen = now
	if d.one == nil && len(d.claims) == 0 {
		t.closeSession(now, d, ReasonGraceful, &Result{})
	}
	return c.status(), nil
}

// Detached reports whether session sid is a detached session, and for
// which origin: a second move exports its claims with that origin.
func (t *Table) Detached(sid SessionID) (Origin, bool) {
	if s := t.sessions[sid]; s != nil && s.origin != nil {
		return *s.origin, true
	}
	return Origin{}, false
}
