package server

import (
	"time"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

// Snapshot describes every lock with an owner whose name match accepts
// (nil accepts all), sorted by name.
//
// match runs after the table mutex is released, on a copy: a slow filter
// (an administrator's pattern) never stalls acquires and heartbeats.
func (srv *Server) Snapshot(match func(name string) bool) []LockInfo {
	srv.init()
	srv.mu.Lock()
	all := srv.table.Snapshot(nil)
	srv.mu.Unlock()
	if match != nil {
		kept := all[:0]
		for _, l := range all {
			if match(l.Name) {
				kept = append(kept, l)
			}
		}
		all = kept
	}
	return lockInfosOf(all)
}

// Lock describes one lock, or reports false when nobody holds it.
func (srv *Server) Lock(name string) (LockInfo, bool) {
	srv.init()
	srv.mu.Lock()
	l, ok := srv.table.Lock(name)
	srv.mu.Unlock()
	if !ok {
		return LockInfo{}, false
	}
	return lockInfoOf(l), true
}

// Counts returns the number of held locks and of waiters.
func (srv *Server) Counts() Counts {
	srv.init()
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return Counts(srv.table.Counts())
}

// ProtocolCount is the number of sessions and claims of one protocol
// version.
type ProtocolCount struct {
	Sessions int // open connections (version 1: every connection not version 2)
	Held     int // claims holding a lock
	Queued   int // claims in a queue
}

// RangeCount is the size of the POSIX range-lock table.
type RangeCount struct {
	Keys    int // keys (per namespace, fcntl or flock) with a holder or a waiting request
	Held    int // held ranges, over every key and owner
	Waiting int // waiting range requests
}

// RangeCounts returns the range-lock table's size, for metrics.
func (srv *Server) RangeCounts() RangeCount {
	srv.init()
	srv.mu.Lock()
	defer srv.mu.Unlock()
	c := srv.ranges.table.Counts()
	return RangeCount{Keys: c.Files, Held: c.Ranges, Waiting: c.Waiters}
}

// ProtocolCounts returns the sessions and claims of version 1 and
// version 2, for metrics.
func (srv *Server) ProtocolCounts() (v1, v2 ProtocolCount) {
	srv.init()
	srv.mu.Lock()
	defer srv.mu.Unlock()
	v1 = ProtocolCount{Sessions: len(srv.sessions) - srv.v2Sessions, Held: srv.held[1], Queued: srv.queued[1]}
	v2 = ProtocolCount{Sessions: srv.v2Sessions, Held: srv.held[2], Queued: srv.queued[2]}
	return v1, v2
}

// Sessions returns the number of open connections.
func (srv *Server) Sessions() int {
	srv.init()
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return len(srv.sessions)
}

// ForceReleaseBy takes lock name from its owner, who receives ERROR 0x02
// and is closed; the next waiter is promoted at once. Administrator by
// (the zero Peer: nobody named) is named in the EventForceRelease that
// precedes the release. It returns ErrNoLock when nobody holds the lock,
// and ErrManyHolders for a lock with several holders (shared or
// semaphore): name one with ForceReleaseClaimBy.
func (srv *Server) ForceReleaseBy(name string, by Peer) error {
	return srv.adminOp(func(now time.Time, t *locktable.Table) (locktable.Result, error) {
		info, held := t.Lock(name)
		res, err := t.ForceRelease(now, name)
		if err == nil && held {
			srv.notify(srv.holderEvent(EventForceRelease, now, name, info.Holder, by))
		}
		return res, err
	})
}

// ClaimRef names one claim of a lock for an administrator: a holder by
// its fencing token (unique on the server), or any claim, holder or
// waiter, by its session and claim id as Snapshot lists them (a version
// 1 connection's one claim has claim id 0).
type ClaimRef struct {
	Token   uint64 // when not 0, the holder granted this token
	Session SessionID
	Claim   ClaimID
}

func (r ClaimRef) matches(session locktable.SessionID, claim locktable.ClaimID, token uint64) bool {
	if r.Token != 0 {
		return token == r.Token && (r.Session == 0 || r.Session == SessionID(session) && r.Claim == ClaimID(claim))
	}
	return r.Session == SessionID(session) && r.Claim == ClaimID(claim)
}

// ForceReleaseClaimBy takes lock name from the one holder ref names. A
// version 2 claim is sent REVOKED(0x02) and its session lives on; a
// version 1 session is sent ERROR 0x02 and closed. The waiters it blocked
// are granted at once. It returns ErrNoLock when nobody holds
// the lock, ErrNoHolder when ref names none of its holders.
func (srv *Server) ForceReleaseClaimBy(name string, ref ClaimRef, by Peer) error {
	return srv.adminOp(func(now time.Time, t *locktable.Table) (locktable.Result, error) {
		info, held := t.Lock(name)
		if !held {
			return locktable.Result{}, locktable.ErrNoLock
		}
		for _, h := range info.Holders {
			if ref.matches(h.Session, h.Claim, h.Token) {
				res, err := t.ForceReleaseClaim(now, name, locktable.Key{Session: h.Session, Claim: h.Claim})
				if err == nil {
					srv.notify(srv.holderEvent(EventForceRelease, now, name, h, by))
				}
				return res, err
			}
		}
		return locktable.Result{}, locktable.ErrNoHolder
	})
}

// KickClaimBy removes the waiter ref names (by session and claim id) from
// the queue of lock name. A version 2 claim is sent REVOKED(0x02) and its
// session lives on; a version 1 session is sent ERROR 0x02 and closed.
// It returns ErrNoLock or ErrNoWaiter.
func (srv *Server) KickClaimBy(name string, ref ClaimRef, by Peer) error {
	return srv.adminOp(func(now time.Time, t *locktable.Table) (locktable.Result, error) {
		info, held := t.Lock(name)
		if !held {
			return locktable.Result{}, locktable.ErrNoLock
		}
		for _, w := range info.Waiters {
			if ref.Token == 0 && ref.matches(w.Session, w.Claim, 0) {
				res, err := t.KickClaim(now, name, locktable.Key{Session: w.Session, Claim: w.Claim})
				if err == nil {
					srv.notify(srv.waiterEvent(EventKick, now, name, w, by))
				}
				return res, err
			}
		}
		return locktable.Result{}, locktable.ErrNoWaiter
	})
}

// protocolOf is the protocol version of a claim's session.
func (srv *Server) protocolOf(v1 bool) uint8 {
	if v1 {
		return protocol.Version
	}
	return protocol.Version2
}

func (srv *Server) holderEvent(k EventKind, now time.Time, name string, h locktable.HolderInfo, by Peer) Event {
	return Event{Kind: k, Time: now, Lock: name, Peer: Peer(h.Peer), Token: h.Token, Admin: by,
		Protocol: srv.protocolOf(h.V1), Session: SessionID(h.Session), Claim: ClaimID(h.Claim), Mode: Mode(h.Mode), Label: h.Label}
}

func (srv *Server) waiterEvent(k EventKind, now time.Time, name string, w locktable.WaiterInfo, by Peer) Event {
	return Event{Kind: k, Time: now, Lock: name, Peer: Peer(w.Peer), Admin: by,
		Protocol: srv.protocolOf(w.V1), Session: SessionID(w.Session), Claim: ClaimID(w.Claim), Mode: Mode(w.Mode), Label: w.Label}
}

// KickBy removes the waiter with remote address addr from the queue of
// lock name; it receives ERROR 0x02 and is closed, and the others keep
// their order. Administrator by (the zero Peer: nobody named) is named in
// the EventKick that precedes the waiter's EventDequeued. It returns
// ErrNoLock or ErrNoWaiter.
func (srv *Server) KickBy(name, addr string, by Peer) error {
	return srv.adminOp(func(now time.Time, t *locktable.Table) (locktable.Result, error) {
		info, _ := t.Lock(name)
		res, err := t.Kick(now, name, addr)
		if err == nil {
			ev := Event{Kind: EventKick, Time: now, Lock: name, Peer: Peer{Addr: addr}, Admin: by}
			for _, w := range info.Waiters {
				if w.Peer.Addr == addr {
					ev = srv.waiterEvent(EventKick, now, name, w, by)
					break
				}
			}
			srv.notify(ev)
		}
		return res, err
	})
}

// adminOp runs op under the table mutex; events that op notifies reach
// the observers before those of the result it returns. The table's
// errors come back as the server's (ErrNoLock, ...).
func (srv *Server) adminOp(op func(time.Time, *locktable.Table) (locktable.Result, error)) error {
	srv.init()
	var opErr error
	srv.update(func(now time.Time, t *locktable.Table) locktable.Result {
		res, err := op(now, t)
		opErr = err
		return res
	})
	return adminErr(opErr)
}
