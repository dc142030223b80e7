package clustercore

import (
	"fmt"
	"time"

	"github.com/batonlock/baton/protocol"
)

// Where a WATCH and a valued CLAIM are served on a cluster node, what a
// relayed watch's upstream session sends and reads, and what an attempt's
// end does to the watch. server/watch.go and server/relaywatch.go hold
// the table calls, the connection and the goroutines.
// User docs: docs/cluster.md, "Watches in a cluster".

// WatchStep is where a watch is served on the Router's answer for its
// name.
type WatchStep uint8

const (
	// WatchRefuse: the name is warming up, moving or not served here:
	// a new WATCH is refused 0x03 (the client retries; a watch must not
	// start from a state that is not the name's yet), one that follows
	// its name waits and asks again.
	WatchRefuse WatchStep = iota
	// WatchHere: this node's table serves it.
	WatchHere
	// WatchRelay: another node owns the name: watched through it.
	WatchRelay
)

// WatchRoute is where a watch on a name is served on the Router's answer
// r.
func WatchRoute(r RouteAction) WatchStep {
	switch r {
	case RouteServe:
		return WatchHere
	case RouteForward:
		return WatchRelay
	}
	return WatchRefuse
}

// ValuedServed reports whether a node serves a valued CLAIM on the
// Router's answer r, itself or through the claim relay; else the claim
// is refused 0x03: its name is warming up or moving (the client retries).
func ValuedServed(r RouteAction) bool {
	return r == RouteServe || r == RouteForward
}

// WatchLimit is the bound a new relayed watch would pass.
type WatchLimit uint8

const (
	WatchNoLimit WatchLimit = iota
	// WatchLimitClaims: the session's claims bound (MaxSessionClaims).
	WatchLimitClaims
	// WatchLimitRelayed: the node's relayed watches bound
	// (MaxRelayedWatches; WatchRelayRoom).
	WatchLimitRelayed
)

// WatchBounds are the bounds of a new relayed watch, with what they
// count now; a bound of 0 is none.
type WatchBounds struct {
	MaxClaims int // the session's claims
	Claims    int // the session's claims in the table, and its watches
	// MaxRelayed bounds the node's relayed watches.
	MaxRelayed int
	Relayed    int64
}

// Relay is the bound a new relayed WATCH passes, if any: it is refused
// 0x07 then. A relayed watch counts against the session's claims, as one
// in the table does.
func (b WatchBounds) Relay() WatchLimit {
	switch {
	case b.MaxClaims > 0 && b.Claims >= b.MaxClaims:
		return WatchLimitClaims
	case !WatchRelayRoom(b.MaxRelayed, b.Relayed):
		return WatchLimitRelayed
	}
	return WatchNoLimit
}

// WatchUpstream is the client's session that a relayed watch's upstream
// session speaks for.
type WatchUpstream struct {
	Addr, Identity string // the client's address and TLS identity
	Node           string // this node's ID
	Session        uint64 // the client's session here
	Lease          time.Duration
	Label          string
}

// Opening is what the upstream session to the owner opens with for
// watch id on name: a version 2 hop header naming this node and the
// client's session, without a resume hash (the owner keeps nothing of
// the session when it ends), the preamble, HELLO with the values flag,
// and the WATCH with the client's id.
func (u WatchUpstream) Opening(id uint32, name string) []byte {
	b := protocol.AppendHopV2(nil, u.Addr, u.Identity, u.Node, u.Session)
	b = protocol.AppendPreamble(b)
	b = protocol.AppendFrame(b, protocol.Frame{Type: protocol.TypeHello, LeaseMS: protocol.LeaseMS(u.Lease),
		Flags: protocol.HelloValues, Label: u.Label})
	return protocol.AppendWatch(b, id, name)
}

// PingEvery is how often the upstream session is sent a PING: a third
// of the lease, as a client's heartbeats go.
func (u WatchUpstream) PingEvery() time.Duration { return u.Lease / 3 }

// WatchReader reads the owner's frames on a relayed watch's upstream
// session: the answer to HELLO first, then the frames of a values
// session; it remembers whether the owner served the watch (sent its
// synced), which starts the backoff again (WatchBackoff).
type WatchReader struct {
	opened bool // the answer to HELLO was read
	served bool
}

// Parse parses the owner's next frame at the start of b, as
// protocol.ParseServerFrameV2Max does (n == 0: read more).
func (r *WatchReader) Parse(b []byte) (f protocol.Frame, n int, err error) {
	if r.opened {
		f, n, err = protocol.ParseServerFrameV2Max(b, protocol.MaxValuesFrameLen)
	} else {
		f, n, err = protocol.ParseHelloAnswer(b)
	}
	if err != nil || n == 0 {
		return f, n, err
	}
	r.opened = true
	if f.Type == protocol.TypeChange && f.ChangeOf().Kind == protocol.ChangeSynced {
		r.served = true
	}
	return f, n, nil
}

// Ended is the attempt's outcome a, which ended it, with whether the
// owner served the watch.
func (r *WatchReader) Ended(a WatchAttempt) WatchAttempt {
	a.Served = r.served
	return a
}

// Broke is the attempt's outcome when the upstream broke with err
// (lease: the owner was silent for the lease; it answers every PING):
// the watch is watched again where its name lives.
func (r *WatchReader) Broke(err error, lease bool) WatchAttempt {
	if lease {
		err = fmt.Errorf("the owner was silent for the lease: %w", err)
	}
	return WatchAttempt{Again: true, Served: r.served, Err: err}
}

// Malformed is the attempt's outcome when the owner sent bytes that are
// no frame: the watch is watched again where its name lives.
func (r *WatchReader) Malformed(err error) WatchAttempt {
	return WatchAttempt{Again: true, Served: r.served, Err: fmt.Errorf("reading from the owner: %w", err)}
}

// Attempted applies a, the outcome of an attempt to watch w at its
// name's owner: nothing once w has ended; w ends for good with a.Code
// when a does not say to watch again (ended: the caller forgets it);
// else the client is sent a reset, and w is watched again where its name
// lives.
func (w *Watch) Attempted(a WatchAttempt) (out WatchOut, ended bool) {
	switch {
	case w.Ended:
		return out, false
	case !a.Again:
		return w.Fail(a.Code)
	}
	return w.Reset(), false
}

// Changed is what the owner's CHANGE does to relayed watch w, when
// the client's session is a slow watcher (over its backlog bound) or
// not: nothing once w has ended (stop: the upstream ends); over the
// bound, w ends with REVOKED 0x08 (slow: the caller reports the limit
// and forgets w); else the change is passed on.
func (w *Watch) Changed(c protocol.Change, over bool) (out WatchOut, stop, slow bool) {
	switch {
	case w.Ended:
		return out, true, false
	case over:
		out, _ = w.Fail(protocol.CodeSlowWatcher)
		return out, true, true
	}
	return w.Pass(c), false, false
}
