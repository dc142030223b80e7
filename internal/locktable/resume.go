package locktable

import (
	"errors"
	"time"
)

// Resumable sessions and re-assertion (docs/protocol-v2-resume.md, "v2 resumable
// sessions and re-assertion"). A resumable session whose connection
// broke is kept as a detached session (detached.go) standing for its own
// origin, the node it lives on and its id: its claims stay in their
// locks, a grant made meanwhile is kept in the claim, and its lease runs
// on from when it was last heard from (ExpireSession ends it). A new
// session takes a claim over with Adopt. A re-assertion on a node that
// took the name over without its state installs the claim with Reassert.

// ErrReassertConflict is Reassert's answer when a claim that conflicts
// with the re-asserted one holds the lock: the first accepted keeps it.
var ErrReassertConflict = errors.New("locktable: a conflicting claim holds the lock")

// ErrNoToken is Reassert's answer to a token of 0: only a held claim,
// whose token is never 0, is re-asserted as a holder.
var ErrNoToken = errors.New("locktable: a re-asserted holder needs its token")

// Detach keeps open version 2 session sid as a detached session standing
// for origin o: it is sent nothing from now on, its claims keep their
// places, its watches end, and its lease runs on from when it was last
// heard from. Errors,
// which change nothing: ErrNoSession when sid is not an open version 2
// session that is not detached, ErrNoClaim when it has no claim (there is
// nothing to keep), ErrBadState when another session stands for o.
func (t *Table) Detach(sid SessionID, o Origin) error {
	s := t.sessions[sid]
	switch {
	case s == nil || s.v1 || s.origin != nil:
		return ErrNoSession
	case s.one == nil && len(s.claims) == 0:
		return ErrNoClaim
	}
	if _, ok := t.detached[o]; ok {
		return ErrBadState
	}
	s.origin = &o
	t.detached[o] = sid
	t.EndWatches(sid) // a watch lives with its connection
	return nil
}

// Deadline returns the instant after which session sid expires unless
// it is heard from: a lease after it last was.
func (t *Table) Deadline(sid SessionID) (time.Time, error) {
	s := t.sessions[sid]
	if s == nil {
		return time.Time{}, ErrNoSession
	}
	return s.lastSeen.Add(s.lease), nil
}

// ClaimView is what a caller may check of a claim before it acts on it.
type ClaimView struct {
	Name   string
	Mode   Mode
	Limit  uint32 // the lock's semaphore limit; 0 for exclusive and shared
	Status Status
}

// DetachedClaim describes the detached claim (o, cid) that Adopt would
// move, or returns ErrNoClaim.
func (t *Table) DetachedClaim(o Origin, cid ClaimID) (ClaimView, error) {
	dsid, ok := t.detached[o]
	if !ok {
		return ClaimView{}, ErrNoClaim
	}
	c := t.sessions[dsid].get(cid)
	if c == nil {
		return ClaimView{}, ErrNoClaim
	}
	return ClaimView{Name: c.lock.name, Mode: c.mode, Limit: c.lock.limit, Status: c.status()}, nil
}

// DetachedSession returns the detached session that stands for o.
func (t *Table) DetachedSession(o Origin) (SessionID, bool) {
	sid, ok := t.detached[o]
	return sid, ok
}

// Reassert installs claim cid of session sid for req as a holder of its
// lock with token, the token a prior owner granted it: the re-assertion
// of a claim whose node is gone, on the node that took the name over. It
// takes nothing from the token source and ignores the gate (the claim
// was granted before), and it overtakes the lock's waiters, which
// arrived after that grant. It counts as hearing from sid. Errors, which
// change nothing: ErrShutdown, ErrNoSession (sid is not an open version 2
// session that is not detached), a protocol sentinel for an invalid name,
// ErrInvalidMode, ErrInvalidLimit, ErrNoToken, ErrClaimExists,
// ErrModeConflict, ErrLimitMismatch, and ErrReassertConflict when a
// holder conflicts with the claim.
func (t *Table) Reassert(now time.Time, sid SessionID, cid ClaimID, req ClaimRequest, token uint64) (Status, Result, error) {
	var res Result
	if t.shutdown {
		return Status{}, res, ErrShutdown
	}
	s := t.sessions[sid]
	if s == nil || s.v1 || s.origin != nil {
		return Status{}, res, ErrNoSession
	}
	if err := checkRequest(req); err != nil {
		return Status{}, res, err
	}
	switch {
	case token == 0:
		return Status{}, res, ErrNoToken
	case s.get(cid) != nil || t.watchOf(sid, cid) != nil:
		return Status{}, res, ErrClaimExists
	}
	l := t.locks[req.Name]
	if err := l.family(req); err != nil {
		return Status{}, res, err
	}
	if l != nil {
		if !l.admits(req.Mode) {
			return Status{}, res, ErrReassertConflict
		}
	} else {
		l = &lock{name: req.Name}
		if req.Mode == Semaphore {
			l.limit = req.Limit
		}
		t.locks[req.Name] = l
	}
	s.lastSeen = now
	c := &claim{id: cid, sess: s, lock: l, mode: req.Mode, queuedAt: now, grantedAt: now, holding: true, token: token}
	t.setValue(c, req.Value)
	l.holders.push(c)
	l.held++
	t.held++
	if c.mode == Exclusive {
		l.exclusives++
	}
	s.add(c)
	res.event(Event{Kind: EventGranted, Lock: l.name, Session: s.id, Claim: c.id, Mode: c.mode,
		Label: s.label, Peer: s.peer, Token: token})
	t.told(c, &res)
	return c.status(), res, nil
}
