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
// locktable.ErrNoLock when nobody holds the lock.
func (srv *Server) ForceRelease(name string) error {
	return srv.adminOp(func(now time.Time, t *locktable.Table) (locktable.Result, error) {
		return t.ForceRelease(now, name)
	})
}

// Kick removes the waiter with remote address addr from the queue of lock
// name; it receives ERROR 0x02 and is closed, and the others keep their
// order. It returns locktable.ErrNoLock or locktable.ErrNoWaiter.
func (srv *Server) Kick(name, addr string) error {
	return srv.adminOp(func(now time.Time, t *locktable.Table) (locktable.Result, error) {
		return t.Kick(now, name, addr)
	})
}

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
