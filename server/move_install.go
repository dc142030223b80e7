package server

import (
	"fmt"
	"slices"
	"time"

	"github.com/batonlock/baton/internal/clustercore"
	"github.com/batonlock/baton/internal/locktable"
)

// The new owner's side of a planned change's hand-off (docs/cluster.md,
// "Planned changes: the hand-off" and "Continuing version 2 claims across
// a planned change"). Install (handoff.go) decodes the prior owner's
// state (clustercore.HandoffState); installMoved puts every claim in the table detached, each
// origin a kept session that a re-assertion with the host's move secret
// adopts (resume.go) and that expires a lease after the export when
// nobody does; gateRanges holds back range locks on the keys that moved.
// The prior owner's side is in move_export.go, the host's in move_host.go.

// gateRanges gates the range locks of the keys a planned change moved
// here (Install).
func (srv *Server) gateRanges(gates []clustercore.HandoffRangeGate) {
	if len(gates) == 0 {
		return
	}
	srv.mu.Lock()
	now := time.Now()
	for _, g := range gates {
		srv.ranges.gateLocked(g.Key, now.Add(time.Duration(g.LeaseMS)*time.Millisecond))
	}
	srv.mu.Unlock()
	srv.Logger.Info("planned change: range locks of keys moved here are gated for their holders' lease", "keys", len(gates))
}

// installMoved installs a hand-off state from another node: every claim
// detached, each origin a kept session that a re-assertion with one of
// the state's secrets adopts.
func (srv *Server) installMoved(from string, ms *clustercore.HandoffState) error {
	srv.mu.Lock()
	now := time.Now()
	ids := map[locktable.SessionID]locktable.SessionID{}
	origins := map[locktable.SessionID]locktable.Origin{}
	for _, m := range ms.Sessions {
		if len(m.Adopt) != 0 && len(m.Adopt) != secretHashLen || len(m.Resume) != 0 && len(m.Resume) != secretHashLen {
			srv.mu.Unlock()
			return fmt.Errorf("server: hand-off from %s: bad secret hash for %+v", from, m.Origin)
		}
		sid, ok := srv.table.DetachedSession(m.Origin)
		if !ok {
			srv.nextID++
			sid = locktable.SessionID(srv.nextID)
		}
		ids[m.Session] = sid
		origins[sid] = m.Origin
	}
	locks := make([]locktable.LockState, len(ms.Locks))
	for i, ls := range ms.Locks {
		ls.Holders, ls.Waiters = slices.Clone(ls.Holders), slices.Clone(ls.Waiters)
		for j := range ls.Holders {
			ls.Holders[j].Session = ids[ls.Holders[j].Session]
		}
		for j := range ls.Waiters {
			ls.Waiters[j].Session = ids[ls.Waiters[j].Session]
		}
		locks[i] = ls
	}
	res, err := srv.table.ImportDetached(now, locks, origins)
	if err != nil {
		srv.mu.Unlock()
		return fmt.Errorf("server: hand-off from %s: %w", from, err)
	}
	ds := srv.commit(now, res)
	if srv.resume.kept == nil {
		srv.resume.kept = map[locktable.Origin]*keptSession{}
		srv.resume.byID = map[locktable.SessionID]*keptSession{}
	}
	for _, m := range ms.Sessions {
		sid := ids[m.Session]
		if _, ok := srv.table.DetachedSession(m.Origin); !ok {
			continue // it had no claim in these locks
		}
		k := srv.resume.kept[m.Origin]
		if k == nil {
			k = &keptSession{resumeKey: resumeKey{origin: m.Origin}, id: sid}
			if len(m.Resume) == secretHashLen {
				copy(k.hash[:], m.Resume)
			}
			srv.resume.kept[k.origin] = k
			srv.resume.byID[k.id] = k
		}
		if len(m.Adopt) == secretHashLen {
			var h [secretHashLen]byte
			copy(h[:], m.Adopt)
			k.moveHash = &h
		}
		srv.armKeptLocked(k)
	}
	srv.mu.Unlock()
	srv.deliverAll(ds)
	n := 0
	for _, ls := range ms.Locks {
		n += len(ls.Holders) + len(ls.Waiters)
	}
	srv.Logger.Info("planned change: claims handed over installed, detached until their hosts adopt them", "from", from, "claims", n, "sessions", len(ms.Sessions))
	return nil
}
