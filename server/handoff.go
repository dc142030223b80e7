package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

// The server side of a cluster node's planned changes (docs/cluster.md,
// "Planned moves"; cluster.Mover): the node freezes the names that move
// (its Router stops answering serve for them), then asks the server to
// export them, and the new owner's server installs what it gets.
//
// In this version no claim continues across a move: Export ends every
// claim on the moving names. A version 1 connection, holder or waiter,
// is sent ERROR 0x01 and closed (the client acquires again, on any node,
// and its ACQUIRE reaches the new owner); a version 2 claim is sent
// REVOKED(claim, 0x03), and its session lives on (the client claims again
// and the session relays or refuses as for any name it does not serve).
// So the state handed over is empty, and the new owner, which serves the
// names only once the ring has switched, grants them to the next claims
// with tokens of its own fresh epoch, above every token before.

// errMoved is acquire's error when the Router stopped serving the name
// between the routing of an ACQUIRE and its entry into the table (a
// planned change froze it).
var errMoved = errors.New("server: the lock is moving to another node")

// servesLocked asks the Router again, under srv.mu, whether the name is
// still this node's: a planned change freezes names before it exports
// them under srv.mu, so a claim routed before the freeze never enters the
// table after the export. (A hold is not a move: a longer warm-up, after
// the claim's own lease was recorded, does not refuse it.)
func (srv *Server) servesLocked(name string, forwarded bool) bool {
	if srv.Router == nil {
		return true
	}
	switch srv.Router.Route(name, 0, forwarded).Action {
	case RouteMoving, RouteForward, RouteNotOwner:
		return false
	}
	return true
}

// Export ends every claim on the names newOwner maps to another node (""
// for a name that stays) for the reason "moved": version 1 sessions get
// ERROR 0x01 and are closed, version 2 claims REVOKED(claim, 0x03). It
// returns the state to install on each new owner: none, since no claim
// continues in this version.
func (srv *Server) Export(newOwner func(name string) string) (map[string]json.RawMessage, error) {
	srv.init()
	n := srv.evict(func(name string) bool { return newOwner(name) != "" })
	if n > 0 {
		srv.Logger.Info("planned change: claims on names moving to another node ended", "claims", n)
	}
	return nil, nil
}

// Evict ends every claim on the names gone reports, as Export does: names
// this node no longer owns (a change committed without its hand-off).
func (srv *Server) Evict(gone func(name string) bool) {
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

// Install installs a state another node exported for this one. Export
// hands over no claims in this version, so a state with locks is refused:
// installing claims whose sessions are elsewhere needs those sessions to
// continue through this node, which is not available yet.
func (srv *Server) Install(from string, state json.RawMessage) error {
	var locks []locktable.LockState
	if err := json.Unmarshal(state, &locks); err != nil {
		return fmt.Errorf("server: hand-off from %s: %w", from, err)
	}
	if len(locks) > 0 {
		return fmt.Errorf("server: hand-off from %s carries %d locks; this version installs none", from, len(locks))
	}
	return nil
}
