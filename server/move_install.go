package server

import (
	"fmt"
	"time"

	"github.com/batonlock/baton/internal/clustercore"
	"github.com/batonlock/baton/internal/locktable"
)

// The new owner's side of a planned change's hand-off (docs/design/2026-12-02-cluster-handoff.md,
// "Planned changes: the hand-off" and "Continuing version 2 claims across
// a planned change"). Install (handoff.go) has clustercore decode and
// check the prior owner's state (handoff_install.go); installMoved puts
// what the core plans in the table, every claim detached, each origin a
// kept session that a re-assertion with the host's move secret adopts
// (resume.go) and that expires a lease after the export when nobody
// does; gateRanges holds back range locks on the keys that moved.
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

// installMoved installs a hand-off's state from another node: every
// claim detached, each origin a kept session that a re-assertion with
// one of the state's secrets adopts.
func (srv *Server) installMoved(from string, ms *clustercore.HandoffState) error {
	srv.mu.Lock()
	now := time.Now()
	plan := clustercore.PlanHandoffInstall(ms, srv.table.DetachedSession, srv.nextID)
	res, err := srv.table.ImportDetached(now, plan.Locks, plan.Origins)
	if err != nil {
		srv.mu.Unlock()
		return fmt.Errorf("server: hand-off from %s: %w", from, err)
	}
	srv.nextID = plan.LastID
	ds := srv.commit(now, res)
	if srv.resume.kept == nil {
		srv.resume.kept = map[locktable.Origin]*keptSession{}
		srv.resume.byID = map[locktable.SessionID]*keptSession{}
	}
	for _, m := range plan.Kept {
		if _, ok := srv.table.DetachedSession(m.Origin); !ok {
			continue // it had no claim in these locks
		}
		k := srv.resume.kept[m.Origin]
		if k == nil {
			k = &keptSession{resumeKey: resumeKey{origin: m.Origin}, id: m.Session}
			if m.Resume != nil {
				k.hash = *m.Resume
			}
			srv.resume.kept[k.origin] = k
			srv.resume.byID[k.id] = k
		}
		if m.Adopt != nil {
			k.moveHash = m.Adopt
		}
		srv.armKeptLocked(k)
	}
	srv.mu.Unlock()
	srv.deliverAll(ds)
	srv.Logger.Info("planned change: claims handed over installed, detached until their hosts adopt them", "from", from, "claims", ms.Claims(), "sessions", len(ms.Sessions))
	return nil
}
