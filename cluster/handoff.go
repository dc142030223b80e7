package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// Planned ring changes: the leader proposes the new ring as pending; each
// prior owner freezes its moving names, hands their state to each new
// owner and records the hand-over through Raft; the leader then commits
// the ring, marked handed over (served at once), or after
// Config.HandoffTimeout without it (the names gated for the warm-up, fail
// closed). Every step is idempotent and re-runs from what Raft holds.
// Checked by internal/modelcheck/cluster.go. The steps in full:
// docs/design/2026-12-02-cluster-handoff.md#clusterhandoffgo.

// Pending is a planned ring change in progress.
type Pending struct {
	// Version is the ring version the change will commit; the hand-off
	// is based on Version-1.
	Version uint64 `json:"version"`
	// Members is the ring under Version.
	Members []string `json:"members"`
	// Member is the node that joins or leaves.
	Member string `json:"member"`
	// Prior lists the members that own names which move (every member of
	// the ring when one joins, the leaver when one leaves); Handed those
	// of them that have handed their moving names over.
	Prior      []string  `json:"prior"`
	Handed     []string  `json:"handed,omitempty"`
	ProposedAt time.Time `json:"proposed_at"`
}

func (p *Pending) clone() Pending {
	c := *p
	c.Members = slices.Clone(p.Members)
	c.Prior = slices.Clone(p.Prior)
	c.Handed = slices.Clone(p.Handed)
	return c
}

// Complete reports whether every prior owner has handed over.
func (p *Pending) Complete() bool {
	for _, id := range p.Prior {
		if !slices.Contains(p.Handed, id) {
			return false
		}
	}
	return true
}

// Ring returns the ring the change will commit.
func (p *Pending) Ring() *Ring { return NewRing(p.Version, p.Members) }

// priorOwners lists the members of cur that lose names in a ring of
// members next. With rendezvous hashing a member loses names exactly when
// it leaves the ring or another member joins it.
func priorOwners(cur *Ring, next []string) []string {
	nr := NewRing(0, next)
	joined := false
	for _, id := range nr.Members() {
		if !cur.Has(id) {
			joined = true
		}
	}
	var out []string
	for _, id := range cur.Members() {
		if joined || !nr.Has(id) {
			out = append(out, id)
		}
	}
	return out
}

// applyPending records a proposed change under f.mu. Proposing the change
// already pending again is a no-op (a leader that retries, or a new
// leader); another change while one is pending is refused.
func (f *fsm) applyPending(c *command) applyResult {
	md := &f.md
	if c.Pending == nil {
		return applyResult{Error: "cluster: pending change without a ring"}
	}
	cur := md.ring()
	next := NewRing(md.RingVersion+1, c.Pending.Members)
	if p := md.Pending; p != nil {
		if slices.Equal(p.Members, next.Members()) {
			return applyResult{RingVersion: p.Version}
		}
		return applyResult{Error: fmt.Sprintf("%s: ring version %d (member %s) is being handed over", errChangeInProgress, p.Version, p.Member)}
	}
	if slices.Equal(cur.Members(), next.Members()) {
		return applyResult{Error: "cluster: the pending ring is the current one"}
	}
	md.Pending = &Pending{Version: next.Version(), Members: next.Members(), Member: c.Pending.Member,
		Prior: priorOwners(cur, next.Members()), ProposedAt: c.At}
	f.pendingChanged()
	return applyResult{RingVersion: next.Version()}
}

// errChangeInProgress prefixes the refusal of a second planned change.
var errChangeInProgress = errors.New("cluster: a planned change is in progress")

// applyHanded records under f.mu that c.ID handed over its names moving
// under ring version c.Version.
func (f *fsm) applyHanded(c *command) applyResult {
	p := f.md.Pending
	if p == nil || p.Version != c.Version {
		return applyResult{Error: fmt.Sprintf("cluster: ring version %d is not pending", c.Version)}
	}
	if !slices.Contains(p.Handed, c.ID) {
		p.Handed = append(p.Handed, c.ID)
		slices.Sort(p.Handed)
		f.pendingChanged()
	}
	return applyResult{}
}

// ringCommitted, under f.mu, ends the pending change when the ring
// changes (to members, at md.RingVersion): the pending ring committed, or
// another change (a dead node's removal) that makes it stale. It records
// whether the committed ring was handed over in full.
func (f *fsm) ringCommitted(members []string) {
	md := &f.md
	p := md.Pending
	md.RingHandedOver = p != nil && p.Version == md.RingVersion && slices.Equal(p.Members, members) && p.Complete()
	f.committedPrior = nil
	if md.RingHandedOver {
		f.committedPrior = p.Prior // empty for a ring that had no members
	}
	if p != nil {
		md.Pending = nil
		f.pendingChanged()
	}
}

// pendingChanged calls the hook, under f.mu.
func (f *fsm) pendingChanged() {
	if f.onPending == nil {
		return
	}
	if p := f.md.Pending; p != nil {
		c := p.clone()
		f.onPending(&c)
		return
	}
	f.onPending(nil)
}

// Mover is the server side of a hand-off: it holds the lock table. A node
// calls it from one goroutine at a time.
type Mover interface {
	// Export ends or exports every claim on the names that newOwner maps
	// to another node ("" for a name that stays), and returns the state
	// to install on each new owner, by node id (an owner absent from the
	// map gets an empty state). Route answers Frozen for those names
	// before Export is called, so no claim on them enters the table
	// after it. It may instead return an error with a method
	// RetryAfter() time.Duration: it cannot export yet (holders that do
	// not continue are being told, and must have stopped first); it is
	// called again after that long.
	Export(newOwner func(name string) string) (map[string]json.RawMessage, error)
	// Install installs a state that node from exported for this node.
	Install(from string, state json.RawMessage) error
	// Evict ends every claim on the names gone reports: names this node
	// neither owns nor is receiving (a change committed without its
	// hand-off, or abandoned).
	Evict(gone func(name string) bool)
}

// SetMover sets the server side of hand-offs; call it before the node
// serves. Without one, a node hands over no state (it still freezes and
// records its hand-off, so a cluster without servers behaves the same).
func (n *Node) SetMover(m Mover) {
	n.mu.Lock()
	n.mover = m
	n.mu.Unlock()
	n.kickHandoff()
}

// DefaultHandoffTimeout bounds the leader's wait for the prior owners'
// hand-offs before it commits a planned change without them (fail
// closed: the new owners then gate the names for the warm-up).
const DefaultHandoffTimeout = 5 * time.Second

func (n *Node) handoffTimeout() time.Duration {
	if n.cfg.HandoffTimeout > 0 {
		return n.cfg.HandoffTimeout
	}
	return DefaultHandoffTimeout
}

// pendingApplied is the fsm's hook (under the fsm's mutex): Route reads
// the pending ring, and the hand-off loop looks at the change.
func (n *Node) pendingApplied(p *Pending) {
	n.mu.Lock()
	n.pending = p
	n.pendingRing = nil
	if p != nil {
		n.pendingRing = p.Ring()
	}
	n.mu.Unlock()
	n.kickHandoff()
}

func (n *Node) kickHandoff() {
	select {
	case n.handoffCh <- struct{}{}:
	default:
	}
}

// untilShutdown returns a context that ends at Shutdown.
func (n *Node) untilShutdown() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-n.done:
		case <-ctx.Done():
		}
		cancel()
	}()
	return ctx, cancel
}

// handoffLoop runs the prior owner's part of planned changes, and evicts
// claims on names this node no longer owns, until Shutdown.
func (n *Node) handoffLoop() {
	defer n.renewWG.Done()
	ctx, cancel := n.untilShutdown()
	defer cancel()
	var retry <-chan time.Time
	attempt := 0
	var kept exported
	for {
		select {
		case <-n.done:
			return
		case <-n.handoffCh:
		case <-retry:
		}
		retry = nil
		wait, err := n.handOff(ctx, &kept)
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			n.log.Warn("hand-off failed; retrying", "err", err)
			retry = time.After(backoff(attempt))
			attempt++
		case wait > 0:
			retry = time.After(wait)
		default:
			attempt = 0
		}
	}
}

// exported is what a prior owner exported for a pending change, kept by
// the hand-off loop until every new owner has acknowledged it: a retry
// (a POST that failed, a new owner that restarted before it
// acknowledged) resends this same state and never exports again. A
// second export for the same change would find the moving names empty
// (the first one took their claims out of the table) and hand over
// nothing, and the change would then commit handed over while the moved
// claims' clients still believe they hold them (docs/design/2026-12-02-cluster-handoff.md,
// "Failures"; the continuation model's mutation export-again).
type exported struct {
	version uint64
	states  map[string]json.RawMessage
	acked   map[string]bool // new owners that acknowledged the install
}

// handOff runs one round: evict what this node no longer owns, then, if
// it is a prior owner of the pending change that has not handed over,
// export (once per change: kept holds what it exported), send to each
// new owner that has not acknowledged yet, and record. It returns how
// long to wait before trying again when it must wait (a restarted node's
// warm-up).
func (n *Node) handOff(ctx context.Context, kept *exported) (time.Duration, error) {
	n.fsm.mu.Lock()
	md := n.fsm.md.clone()
	ring := n.fsm.ring
	n.fsm.mu.Unlock()
	if ring == nil {
		return 0, nil
	}
	n.mu.Lock()
	mover := n.mover
	n.mu.Unlock()
	self := n.cfg.ID
	p := md.Pending
	var next *Ring
	if p != nil {
		next = p.Ring()
	}
	if mover != nil {
		mover.Evict(func(name string) bool {
			return ring.Owner(name) != self && (next == nil || next.Owner(name) != self)
		})
	}
	if p == nil || kept.version != p.Version {
		*kept = exported{} // the change it was for is over
	}
	if p == nil || !slices.Contains(p.Prior, self) || slices.Contains(p.Handed, self) || ring.Version() != p.Version-1 {
		return 0, nil
	}
	// A name this node gates (it restarted, its quorum contact lapsed, or
	// it took the name over from a removed node) may still be believed
	// held by a holder the node does not know of until the warm-up has
	// passed; handing it over now would let the new owner serve it at
	// once. So hand over only once every gate has passed.
	if until := n.gatedUntil(time.Now()); time.Now().Before(until) {
		n.log.Info("planned change: handing over after this node's warm-up", "version", p.Version, "in", time.Until(until))
		return time.Until(until), nil
	}
	start := time.Now()
	if kept.version != p.Version {
		states := map[string]json.RawMessage{}
		if mover != nil {
			var err error
			states, err = mover.Export(func(name string) string {
				if o := next.Owner(name); ring.Owner(name) == self && o != self {
					return o
				}
				return ""
			})
			var later interface{ RetryAfter() time.Duration }
			if errors.As(err, &later) {
				// Holders that do not continue are being told; the names
				// stay frozen. Ask again soon, and meanwhile let the
				// loop do the rest (an eviction once the change commits
				// without this hand-off).
				return later.RetryAfter(), nil
			}
			if err != nil {
				return 0, err
			}
		}
		*kept = exported{version: p.Version, states: states, acked: map[string]bool{}}
	}
	// Every member that gains names from this one: the joiner, or, for
	// this node's own leave, every other member.
	var to []string
	for _, id := range next.Members() {
		if id != self && (!ring.Has(id) || !next.Has(self)) {
			to = append(to, id)
		}
	}
	for _, id := range to {
		if kept.acked[id] {
			continue
		}
		m, ok := md.Members[id]
		if !ok || m.AdminAddr == "" {
			return 0, fmt.Errorf("hand-off of ring version %d: no admin address for %s", p.Version, id)
		}
		state := kept.states[id]
		if state == nil {
			state = json.RawMessage("null")
		}
		body, _ := json.Marshal(handoffRequest{From: self, Version: p.Version, Base: p.Version - 1, State: state})
		if err := n.postLarge(ctx, m.AdminAddr, pathHandoff, body); err != nil {
			var he *httpError
			if errors.As(err, &he) && he.Status == http.StatusConflict {
				return 0, nil // no longer pending there: nothing to hand over
			}
			return 0, fmt.Errorf("hand-off of ring version %d to %s: %w", p.Version, id, err)
		}
		kept.acked[id] = true
	}
	if _, err := n.propose(ctx, pathHanded, handedRequest{ID: self, Version: p.Version}); err != nil {
		if md, _ := n.fsm.read(); md.Pending == nil || md.Pending.Version != p.Version {
			return 0, nil // committed (the wait ran out) or abandoned meanwhile
		}
		return 0, fmt.Errorf("recording the hand-off of ring version %d: %w", p.Version, err)
	}
	n.log.Info("planned change: names handed over", "version", p.Version, "to", to, "took", time.Since(start))
	return 0, nil
}

// handoffRequest is the body of POST /cluster/v1/handoff.
type handoffRequest struct {
	From    string          `json:"from"`
	Version uint64          `json:"version"` // the pending ring version
	Base    uint64          `json:"base"`    // the ring version the state is based on
	State   json.RawMessage `json:"state"`
}

// maxHandoffBody bounds a hand-off's body: the state of every claim on
// the names that move.
const maxHandoffBody = 1 << 30

// serveHandoff installs a hand-off: it applies the ring up to the
// hand-off's base first (so that applying an older ring cannot wipe what
// it installs), and refuses with 409 a change that is not pending here.
func (n *Node) serveHandoff(w http.ResponseWriter, r *http.Request) {
	var req handoffRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxHandoffBody)).Decode(&req); err != nil || req.From == "" || req.Version == 0 {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("a hand-off needs from, version and state: %v", err)})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), n.handoffTimeout())
	defer cancel()
	err := n.waitFor(ctx, func(md *Metadata) bool {
		return md.RingVersion >= req.Base && md.Pending != nil && md.Pending.Version == req.Version || md.RingVersion >= req.Version
	})
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "ring version " + fmt.Sprint(req.Base) + " or its pending change not applied here yet"})
		return
	}
	md, _ := n.fsm.read()
	if md.Pending == nil || md.Pending.Version != req.Version || md.RingVersion != req.Base {
		writeJSON(w, http.StatusConflict, map[string]string{"error": fmt.Sprintf("ring version %d is not pending here", req.Version)})
		return
	}
	n.mu.Lock()
	mover := n.mover
	n.mu.Unlock()
	if mover != nil && len(req.State) > 0 && string(req.State) != "null" {
		if err := mover.Install(req.From, req.State); err != nil {
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
			return
		}
	}
	n.mu.Lock()
	if n.installedFrom[req.Version] == nil {
		n.installedFrom[req.Version] = map[string]bool{}
	}
	n.installedFrom[req.Version][req.From] = true
	n.mu.Unlock()
	writeJSON(w, http.StatusOK, struct{}{})
}

// postLarge is post for a body that may exceed maxBody, with no client
// timeout of its own beyond ctx's and the hand-off's bound.
func (n *Node) postLarge(ctx context.Context, addr, path string, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, 2*n.handoffTimeout())
	defer cancel()
	return n.post(ctx, addr, path, body, false, nil)
}

// proposeChange, on the leader, runs a planned change to the ring of
// members: it proposes it as pending, waits (at most the hand-off
// timeout) until every prior owner has handed over, then commits it with
// commit. A pending change made stale by another ring change is proposed
// again.
func (n *Node) proposeChange(ctx context.Context, members []string, member string, timeout time.Duration, commit func() error) error {
	deadline := time.Now().Add(n.handoffTimeout())
	for attempt := 0; ; attempt++ {
		md, _ := n.fsm.read()
		if slices.Equal(md.ring().Members(), NewRing(0, members).Members()) {
			return commit() // committed before (a retried request)
		}
		res, err := n.applyLocalResult(command{Op: opPending, Pending: &Pending{Members: members, Member: member}, At: n.cfg.Now()}, timeout)
		if err != nil {
			if isChangeInProgress(err) {
				return &httpError{Status: http.StatusServiceUnavailable, Msg: err.Error()}
			}
			return err
		}
		v := res.RingVersion
		n.log.Info("planned change proposed", "version", v, "member", member, "members", members)
		wctx, cancel := context.WithDeadline(ctx, deadline)
		err = n.waitFor(wctx, func(md *Metadata) bool {
			return md.Pending == nil || md.Pending.Version != v || md.Pending.Complete()
		})
		cancel()
		md, _ = n.fsm.read()
		switch {
		case md.Pending != nil && md.Pending.Version == v && md.Pending.Complete():
			n.log.Info("planned change: every prior owner handed over; committing", "version", v, "member", member)
		case md.Pending != nil && md.Pending.Version == v:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			n.log.Warn("planned change: not every prior owner handed over in time; committing it gated (fail closed)",
				"version", v, "member", member, "prior", md.Pending.Prior, "handed", md.Pending.Handed, "err", err)
		case attempt < 3 && time.Now().Before(deadline):
			continue // made stale by another change: propose again
		}
		return commit()
	}
}

func isChangeInProgress(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), errChangeInProgress.Error())
}

// applyLocalResult is applyLocal returning the entry's result.
func (n *Node) applyLocalResult(c command, timeout time.Duration) (applyResult, error) {
	res, _, err := n.applyEntry(c, timeout)
	if err != nil {
		return applyResult{}, err
	}
	if res.Error != "" {
		return res, errors.New(res.Error)
	}
	return res, nil
}

// Pending returns the planned change this node has applied, or nil.
func (n *Node) Pending() *Pending {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.pending == nil {
		return nil
	}
	p := n.pending.clone()
	return &p
}
