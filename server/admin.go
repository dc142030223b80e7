package server

import (
	"time"

	"github.com/batonlock/baton/internal/locktable"
)

// Snapshot describes every lock with an owner whose name match accepts
// (nil accepts all), sorted by name.
//
// match runs after the table mutex is released, on a copy: a slow filter
// (an administrator's pattern) never stalls acquires and heartbeats.
func (srv *Server) Snapshot(match func(name string) bool) []locktable.LockInfo {
	srv.init()
	srv.mu.Lock()
	all := srv.table.Snapshot(nil)
	srv.mu.Unlock()
	if match == nil {
		return all
	}
	out := all[:0]
	for _, l := range all {
		if match(l.Name) {
			out = append(out, l)
		}
	}
	return out
}

// Lock describes one lock, or reports false when nobody holds it.
func (srv *Server) Lock(name string) (locktable.LockInfo, bool) {
	srv.init()
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return srv.table.Lock(name)
}

// Counts returns the number of held locks and of waiters.
func (srv *Server) Counts() locktable.Counts {
	srv.init()
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return srv.table.Counts()
}

// Sessions returns the number of open connections.
func (srv *Server) Sessions() int {
	srv.init()
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return len(srv.sessions)
}

// ForceRelease takes lock name from its owner, who receives ERROR 0x02 and
// is closed; the next waiter is promoted at once. It returns
// locktable.ErrNoLock when nobody holds the lock. It is ForceReleaseBy
// with no administrator named.
func (srv *Server) ForceRelease(name string) error {
	return srv.ForceReleaseBy(name, locktable.Peer{})
}

// ForceReleaseBy is ForceRelease on behalf of administrator by, who is
// named in the EventForceRelease that precedes the release.
func (srv *Server) ForceReleaseBy(name string, by locktable.Peer) error {
	return srv.adminOp(func(now time.Time, t *locktable.Table) (locktable.Result, error) {
		info, held := t.Lock(name)
		res, err := t.ForceRelease(now, name)
		if err == nil && held {
			srv.notify(Event{Kind: EventForceRelease, Time: now, Lock: name,
				Peer: info.Holder.Peer, Token: info.Holder.Token, Admin: by})
		}
		return res, err
	})
}

// Kick removes the waiter with remote address addr from the queue of lock
// name; it receives ERROR 0x02 and is closed, and the others keep their
// order. It returns locktable.ErrNoLock or locktable.ErrNoWaiter. It is
// KickBy with no administrator named.
func (srv *Server) Kick(name, addr string) error {
	return srv.KickBy(name, addr, locktable.Peer{})
}

// KickBy is Kick on behalf of administrator by, who is named in the
// EventKick that precedes the waiter's EventDequeued.
func (srv *Server) KickBy(name, addr string, by locktable.Peer) error {
	return srv.adminOp(func(now time.Time, t *locktable.Table) (locktable.Result, error) {
		info, _ := t.Lock(name)
		res, err := t.Kick(now, name, addr)
		if err == nil {
			peer := locktable.Peer{Addr: addr}
			for _, w := range info.Waiters {
				if w.Peer.Addr == addr {
					peer = w.Peer
				}
			}
			srv.notify(Event{Kind: EventKick, Time: now, Lock: name, Peer: peer, Admin: by})
		}
		return res, err
	})
}

// adminOp runs op under the table mutex; events that op notifies reach
// the observers before those of the result it returns.
func (srv *Server) adminOp(op func(time.Time, *locktable.Table) (locktable.Result, error)) error {
	srv.init()
	var opErr error
	srv.update(func(now time.Time, t *locktable.Table) locktable.Result {
		res, err := op(now, t)
		opErr = err
		return res
	})
	return opErr
}
