package cluster

import (
	"time"
)

// Routing: what a node does with a request for a lock name. It serves a
// name it owns in its applied ring once its token epoch is committed (else
// NotReady); a name it took without its state is gated until the warm-up
// has passed (Queue, fail closed); any other name is forwarded one hop,
// marked forwarded, and never a second (NotOwner). The rules are the
// cluster model's: docs/design/2026-12-02-cluster-fail-closed-model.md#clusterroutego.

// Action is the outcome of Route.
type Action int

// Actions.
const (
	// Serve: this node owns the name and may grant it.
	Serve Action = iota
	// Queue: this node owns the name but took it without its state and is
	// warming up: claims may queue, nothing is granted before Until.
	Queue
	// NotReady: this node owns the name but has no epoch covering the
	// ring change that gave it; answer a retryable error (and commit one
	// with AcquireEpoch).
	NotReady
	// Forward: another node owns the name; forward the request to Owner,
	// marked forwarded.
	Forward
	// NotOwner: a forwarded request for a name this node does not own:
	// answer the retryable error, do not forward again.
	NotOwner
	// NoOwner: the ring is empty (the node has not joined a cluster yet).
	NoOwner
	// Frozen: this node owns the name but a planned change moves it to
	// another node (handoff.go): nothing is granted here; hold the
	// request and ask again (after the change it is forwarded).
	Frozen
	// NoContact: this node has no quorum contact (contact.go): it serves
	// nothing, forwards nothing; answer the retryable error.
	NoContact
)

var actionNames = [...]string{"serve", "queue", "not-ready", "forward", "not-owner", "no-owner", "frozen", "no-contact"}

func (a Action) String() string {
	if a >= 0 && int(a) < len(actionNames) {
		return actionNames[a]
	}
	return "unknown"
}

// Decision is Route's answer.
type Decision struct {
	Action      Action
	Owner       Member    // the owner in this node's ring (Forward: where to)
	RingVersion uint64    // the ring the decision was taken on
	Until       time.Time // Queue: when the warm-up of this name ends
	// Since (Queue): the ring version in which this node took the name
	// over from a removed node; 0 when it is gated because this node
	// restarted. A re-assertion naming an older ring is refused.
	Since uint64
}

// DefaultGateSlack is added to the largest lease, scaled for clock drift
// (WarmupFor), to make the warm-up; it covers the client's heartbeat
// round trip and timer lateness. Part of the timing argument of a node's
// death (docs/high-availability.md).
const DefaultGateSlack = 2 * time.Second

// maxTakeovers bounds the recent ring changes remembered for gating; the
// history keeps DefaultHistory rings, and a gate whose rings are no longer
// kept stays closed until its warm-up ends anyway.
const maxTakeovers = 16

// takeover is a ring change that gave this node names, applied at (this
// node's clock, monotonic), and the largest lease granted then. A prior
// owner grants a lease only once Raft has recorded it (RaiseLease), so
// every lease it granted was recorded before the change: a lease raised
// later does not lengthen this change's warm-up.
type takeover struct {
	version uint64
	at      time.Time
	lease   time.Duration
}

// until is when the warm-up of t ends.
func (t takeover) until(slack time.Duration) time.Time {
	return t.at.Add(WarmupFor(t.lease, slack))
}

// ringChanged is the fsm's hook, called under the fsm's mutex with the
// rings before and after a change.
func (n *Node) ringChanged(prev, cur *Ring) {
	gained := false
	if cur.Has(n.cfg.ID) {
		// With rendezvous hashing this node gains names exactly when it
		// enters the ring or another member leaves it.
		gained = !prev.Has(n.cfg.ID)
		for _, id := range prev.Members() {
			if !cur.Has(id) {
				gained = true
			}
		}
	}
	handed := n.fsm.md.RingHandedOver && n.fsm.md.RingVersion == cur.Version()
	n.mu.Lock()
	if !cur.Has(n.cfg.ID) {
		// Out of the ring, this node owns no name: the gates of earlier
		// take-overs are over. (It handed those names over only after
		// they had passed, handoff.go, or it is not serving: dead or
		// removed.) Coming back is a gain of its own. Without this, a
		// node replaying its log at a restart would gate the names
		// handed back to it by the take-overs of rings long past, timed
		// from the replay.
		n.takeovers = nil
	}
	if gained {
		n.gainedAt = cur.Version()
		n.takeovers = append(n.takeovers, takeover{version: cur.Version(), at: time.Now(), lease: n.fsm.md.MaxLease})
		if len(n.takeovers) > maxTakeovers {
			n.takeovers = n.takeovers[len(n.takeovers)-maxTakeovers:]
		}
		if handed {
			// Committed after every prior owner handed its moving names
			// over (handoff.go): no warm-up for them.
			n.handedOver[cur.Version()] = true
		}
		if prior := n.fsm.committedPrior; handed && len(prior) > 0 && !prev.Has(n.cfg.ID) && n.installedAll(cur.Version(), prior) {
			// A node that was out of the ring (new, or it stopped) and
			// came in by a change this incarnation applied, with every
			// name handed over to this incarnation, lost no name's state:
			// no start warm-up. (A ring restored from a snapshot, or one
			// that had no members before, does not count.)
			n.cameBack = true
		}
	}
	n.mu.Unlock()
	n.kickHandoff()
	n.log.Info("ring applied", "version", cur.Version(), "members", cur.Members(), "gained_names", gained, "handed_over", handed)
}

// installedAll reports, under n.mu, whether this incarnation accepted the
// hand-off of ring version from each of prior.
func (n *Node) installedAll(version uint64, prior []string) bool {
	for _, id := range prior {
		if !n.installedFrom[version][id] {
			return false
		}
	}
	return true
}

// HandedOver records that the state of the names this node gained with
// ring version (holders with tokens, queues) has been installed from their
// prior owner, so they need no warm-up.
func (n *Node) HandedOver(version uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.handedOver[version] = true
}

// Warmup is the current warm-up of a name taken without its state: the
// largest lease granted, scaled by (1+ρ)/(1−ρ), plus the gate slack
// (WarmupFor).
func (n *Node) Warmup() time.Duration {
	return WarmupFor(n.fsm.maxLease(), n.slack())
}

// Route decides what this node does with a request for name; forwarded
// tells whether the request was forwarded by another member. now is this
// node's clock (only compared with its own earlier readings); the quorum
// contact is judged at the real present (NoContact), whatever now says.
func (n *Node) Route(name string, forwarded bool, now time.Time) Decision {
	n.fsm.mu.Lock()
	r := n.fsm.ring
	if r == nil {
		r = NewRing(0, nil)
	}
	ownerID := r.Owner(name)
	owner := n.fsm.md.Members[ownerID]
	var prevRings map[uint64]*Ring
	n.mu.Lock()
	ready := n.hasEpoch && n.epochRing >= n.gainedAt
	if n.hasEpoch && !ready && ownerID == n.cfg.ID {
		// Names this node has owned without a break since its epoch was
		// committed keep being served under it: only names gained since
		// need the fresh epoch (another node may have issued tokens for
		// them under a later epoch, even if this node owned them before).
		ready = n.ownedSince(name, n.epochRing, r.Version())
	}
	var open []takeover
	if ownerID == n.cfg.ID && ready {
		for _, t := range n.takeovers {
			if !n.handedOver[t.version] && now.Before(t.until(n.slack())) {
				open = append(open, t)
			}
		}
		if len(open) > 0 {
			prevRings = map[uint64]*Ring{}
			for _, t := range open {
				if e, ok := n.fsm.history.Previous(t.version); ok {
					prevRings[t.version] = e.Ring
				}
			}
		}
	}
	frozen := ownerID == n.cfg.ID && n.pendingRing != nil && n.pendingRing.Owner(name) != n.cfg.ID
	restarted := !n.formed && !n.cameBack
	startedAt := n.startedAt
	w := WarmupFor(n.fsm.md.MaxLease, n.slack())
	n.mu.Unlock()
	n.fsm.mu.Unlock()

	d := Decision{Owner: owner, RingVersion: r.Version()}
	switch {
	case !n.InContact(time.Now()):
		// Read before the gate of a lapse below: contactAt sets that
		// gate before the anchor that makes this true.
		d.Action = NoContact
	case ownerID == "":
		d.Action = NoOwner
	case ownerID != n.cfg.ID && forwarded:
		d.Action = NotOwner
	case ownerID != n.cfg.ID:
		d.Action = Forward
	case frozen:
		d.Action = Frozen
	case !ready:
		d.Action = NotReady
	default:
		d.Action = Serve
		// A started node lost the state of every name it owns, its data
		// directory kept or wiped, unless they were all handed over to it
		// (or it formed the cluster); so did a node whose quorum contact
		// lapsed (it ended its sessions).
		if restarted && now.Before(startedAt.Add(w)) {
			d.Action, d.Until = Queue, startedAt.Add(w)
		}
		if until, gated := n.resumedGate(now, w); gated && until.After(d.Until) {
			d.Action, d.Until = Queue, until
		}
		for _, t := range open {
			prev, ok := prevRings[t.version]
			// A name is gated if this change gave it to this node; when the
			// ring before is no longer kept, every name is (fail closed).
			if !ok || prev.Owner(name) != n.cfg.ID {
				if until := t.until(n.slack()); until.After(d.Until) {
					d.Action, d.Until = Queue, until
				}
				d.Since = max(d.Since, t.version)
			}
		}
	}
	return d
}

// gatedUntil is when the last warm-up gate of this node ends, whatever
// name it is on: its restart's, a lapse of its quorum contact's, or a
// take-over's (Route gates each name by the ones that apply to it). It is
// now or earlier when nothing is gated.
func (n *Node) gatedUntil(now time.Time) time.Time {
	n.fsm.mu.Lock()
	w := WarmupFor(n.fsm.md.MaxLease, n.slack())
	n.mu.Lock()
	until := now
	if !n.formed && !n.cameBack {
		until = later(until, n.startedAt.Add(w))
	}
	for _, t := range n.takeovers {
		if !n.handedOver[t.version] {
			until = later(until, t.until(n.slack()))
		}
	}
	n.mu.Unlock()
	n.fsm.mu.Unlock()
	if r, gated := n.resumedGate(now, w); gated {
		until = later(until, r)
	}
	return until
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func (n *Node) slack() time.Duration {
	if n.cfg.GateSlack > 0 {
		return n.cfg.GateSlack
	}
	return DefaultGateSlack
}

// ownedSince reports whether this node owned name in every ring from
// version from to version to, under fsm.mu. A ring no longer kept counts
// as not owned (fail closed).
func (n *Node) ownedSince(name string, from, to uint64) bool {
	for v := from; v <= to; v++ {
		e, ok := n.fsm.history.Get(v)
		if !ok || e.Ring.Owner(name) != n.cfg.ID {
			return false
		}
	}
	return true
}
