package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/batonlock/baton/internal/clustercore"
	"github.com/batonlock/baton/protocol"
)

// The server side of a cluster node's planned changes (docs/design/2026-12-02-cluster-fail-closed-model.md,
// "Planned moves"; cluster.Mover): the node freezes the names that move
// (its Router stops answering serve for them), then asks the server to
// export them, and the new owner's server installs what it gets.
//
// Version 1 connections do not continue across a move: Export ends them
// (ERROR 0x01, and the client acquires again, reaching the new owner).
// Version 2 claims of open sessions continue at the new owner with their
// tokens (move.go); the new owner serves the names only once the ring
// has switched, and grants new claims with tokens of its own fresh
// epoch, above every token before.

// errMoved is acquire's error when the Router stopped serving the name
// between the routing of an ACQUIRE and its entry into the table (a
// planned change froze it).
var errMoved = errors.New("server: the lock is moving to another node")

// servesLocked asks the Router again, under srv.mu, whether the name is
// still this node's (clustercore.HandoffStillServes).
func (srv *Server) servesLocked(name string, forwarded bool) bool {
	if srv.Router == nil {
		return true
	}
	a := srv.Router.Route(name, 0, forwarded).Action
	return clustercore.HandoffStillServes(a == RouteMoving, a == RouteForward, a == RouteNotOwner)
}

// evictNames ends every claim on the names gone reports, as exportNames
// does: names this node no longer owns (a change committed without its
// hand-off).
func (srv *Server) evictNames(gone func(name string) bool) {
	srv.init()
	if n := srv.evict(gone); n > 0 {
		srv.Logger.Info("claims on names this node no longer owns ended", "claims", n)
	}
}

func (srv *Server) evict(gone func(name string) bool) int {
	srv.mu.Lock()
	now := time.Now()
	res := srv.table.Evict(now, gone, protocol.CodeShuttingDown, protocol.CodeNotOwner)
	ds := srv.commit(now, res)
	srv.mu.Unlock()
	srv.deliverAll(ds)
	return len(res.Events)
}

// installState installs a state another node exported for this one: its
// version 2 claims, detached until their hosts adopt them
// (move_install.go), its range gates and ranges. The state is decoded
// and checked first (clustercore.DecodeHandoff): a bad one changes
// nothing.
func (srv *Server) installState(from string, state json.RawMessage) error {
	srv.init()
	ms, err := clustercore.DecodeHandoff(state)
	if err != nil {
		return fmt.Errorf("server: hand-off from %s: %w", from, err)
	}
	srv.gateRanges(ms.RangeGates)
	srv.installRanges(from, ms.Ranges)
	if len(ms.Locks) == 0 {
		return nil
	}
	return srv.installMoved(from, ms)
}
