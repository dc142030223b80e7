package locktable

import (
	"time"

	"github.com/batonlock/baton/protocol"
)

// The operations of protocol version 1, where a connection is a session
// with one exclusive, waiting claim (V1Claim) whose end ends the session.
// They are thin forms of the general operations, keeping version 1's
// order of checks and its frames.

// Acquire opens session id with its one claim for req: owner at once when
// the lock is free, otherwise at the back of the lock's queue. It returns
// the status to answer with (WAITING or ACQUIRED). After Shutdown it
// returns ErrShutdown; an invalid lease or name returns the protocol
// sentinel, checked in the protocol's order (lease first); a live
// session id returns ErrClaimExists; a lock whose queue is full
// (SetLimits) returns ErrTooManyWaiters and opens no session.
func (t *Table) Acquire(now time.Time, id SessionID, req Request) (Status, Result, error) {
	switch {
	case t.shutdown:
		return Status{}, Result{}, ErrShutdown
	case req.Lease <= 0:
		return Status{}, Result{}, protocol.ErrInvalidLease
	}
	if err := protocol.ValidateName(req.Name); err != nil {
		return Status{}, Result{}, err
	}
	if t.sessions[id] != nil {
		return Status{}, Result{}, ErrClaimExists
	}
	s := &session{id: id, lease: req.Lease, lastSeen: now, peer: req.Peer, v1: true}
	t.sessions[id] = s
	st, res, err := t.Claim(now, id, V1Claim, ClaimRequest{Name: req.Name, Mode: Exclusive})
	if err != nil {
		// A semaphore name refuses it (ErrModeConflict), a full queue
		// too (ErrTooManyWaiters).
		delete(t.sessions, id)
	}
	return st, res, err
}

// Heartbeat records that version 1 session id was heard from at now and
// returns the status of its claim.
func (t *Table) Heartbeat(now time.Time, id SessionID) (Status, error) {
	s := t.sessions[id]
	if s == nil || !s.v1 {
		return Status{}, ErrNoClaim
	}
	s.lastSeen = now
	return s.one.status(), nil
}

// End ends session id and its claims for reason: a holder releases its
// lock and the waiters it blocked are granted; a waiter leaves its queue.
// Ending an unknown or already ended session does nothing.
func (t *Table) End(now time.Time, id SessionID, reason Reason) Result {
	return t.CloseSession(now, id, reason)
}

// Expire ends session id with ReasonExpired if more than its lease has
// passed since it was last heard from, and returns ErrNotExpired if not,
// ErrNoClaim if there is no such session.
func (t *Table) Expire(now time.Time, id SessionID) (Result, error) {
	res, err := t.ExpireSession(now, id)
	if err == ErrNoSession {
		err = ErrNoClaim
	}
	return res, err
}

// ForceRelease takes the lock name from its holder, which is sent
// ERROR(0x02) (a version 1 session is closed); the waiters it blocked are
// granted at once. A lock with several (shared or semaphore) holders
// returns ErrManyHolders: use ForceReleaseClaim.
func (t *Table) ForceRelease(now time.Time, name string) (Result, error) {
	l := t.locks[name]
	if l == nil {
		return Result{}, ErrNoLock
	}
	switch {
	case l.held > 1:
		return Result{}, ErrManyHolders
	case l.held == 0: // waiters for the gate alone (SetGate)
		return Result{}, ErrNoHolder
	}
	return t.adminEnd(now, l.holders.head, ReasonForce), nil
}

// Kick removes the first waiter of lock name whose address is addr; it is
// sent ERROR(0x02), and the other waiters keep their order.
func (t *Table) Kick(now time.Time, name, addr string) (Result, error) {
	l := t.locks[name]
	if l == nil {
		return Result{}, ErrNoLock
	}
	for w := l.queue.head; w != nil; w = w.next {
		if w.sess.peer.Addr == addr {
			return t.adminEnd(now, w, ReasonKick), nil
		}
	}
	return Result{}, ErrNoWaiter
}
