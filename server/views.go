package server

import (
	"time"

	"github.com/batonlock/baton/internal/locktable"
)

// These views serve a paged dashboard at any table size: each holds the
// table mutex for a short walk without copying the locks' holders and
// queues (compare Snapshot, which copies all of them).

// LockNames returns the name of every lock with an owner, unsorted.
func (srv *Server) LockNames() []string {
	srv.init()
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return srv.table.Names()
}

// Locks describes the locks of names that are still held, in the order
// of names, each with at most its first waiters waiters, under one
// acquisition of the table mutex.
func (srv *Server) Locks(names []string, waiters int) []LockInfo {
	srv.init()
	srv.mu.Lock()
	found := make([]locktable.LockInfo, 0, len(names))
	for _, n := range names {
		if l, ok := srv.table.LockPage(n, 0, waiters); ok {
			found = append(found, l)
		}
	}
	srv.mu.Unlock()
	// Converted outside the mutex: the walk above is all it holds.
	return lockInfosOf(found)
}

// LockPage describes one lock with only its waiters from queue index
// offset, at most limit of them (LockInfo.WaiterCount counts them all),
// or reports false when nobody holds or waits for it.
func (srv *Server) LockPage(name string, offset, limit int) (LockInfo, bool) {
	srv.init()
	srv.mu.Lock()
	l, ok := srv.table.LockPage(name, offset, limit)
	srv.mu.Unlock()
	if !ok {
		return LockInfo{}, false
	}
	return lockInfoOf(l), true
}

// SessionInfos describes every session of the lock table with its
// numbers of held and waiting claims, unsorted.
func (srv *Server) SessionInfos() []SessionInfo {
	srv.init()
	srv.mu.Lock()
	infos := srv.table.SessionInfos()
	srv.mu.Unlock()
	out := make([]SessionInfo, len(infos))
	for i, s := range infos {
		out[i] = sessionInfoOf(s)
	}
	return out
}

// OldestQueued returns when the longest-waiting claim arrived; false when
// nobody waits.
func (srv *Server) OldestQueued() (time.Time, bool) {
	srv.init()
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return srv.table.OldestQueued()
}
