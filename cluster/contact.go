package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Quorum contact, self-stop and automatic removal. A node serves only
// while in contact with a Raft quorum, and that contact is anchored at a
// send time, like a client's lease (never at Raft's receive time, which
// the model's contact-at-receive mutation shows unsafe). After SelfStop
// without fresh contact it serves nothing; the leader removes a member it
// has not heard from for RemoveAfter, and the new owners gate its names.
// Design: docs/design/2026-12-01-ha-failover-design.md, rules 2 and 3; as
// built: docs/design/2026-12-07-ha-self-stop-and-removal.md#clustercontactgo.

// Drift is ρ, the bound on the rate drift of every process's clock that
// the failover timings assume: a clock runs at a rate within [1−ρ, 1+ρ]
// of real time.
const Drift = 0.01

// Defaults of the failover timings.
const (
	// DefaultSelfStop is T_self: a node that has had no quorum contact
	// for this long on its own clock serves nothing.
	DefaultSelfStop = 5 * time.Second
	// DefaultRemoveAfter is T: the leader removes a member it has not
	// heard a contact request from for this long on its own clock.
	DefaultRemoveAfter = 6 * time.Second
)

// maxContactInterval caps the interval between contact requests.
const maxContactInterval = 250 * time.Millisecond

// maxContactInFlight bounds a follower's contact requests waiting for an
// answer at once: with the default timings ten are sent in the timeout
// of one (half the self-stop time, one each interval).
const maxContactInFlight = 16

// ErrRemoved is returned by WaitContact once this node has applied its
// own removal: it gets no contact until it joins again.
var ErrRemoved = errors.New("cluster: this node was removed from the cluster")

// ErrFailoverTimings is returned for a RemoveAfter that is not safely
// above SelfStop.
var ErrFailoverTimings = errors.New("cluster: the removal timeout must exceed the self-stop timeout by the drift margin")

// ContactInterval is how often a node with self-stop timeout selfStop
// renews its quorum contact and the leader looks for silent members:
// selfStop/5, at most 250 ms. A healthy node's anchor is then at most an
// interval and a round trip old, so it loses four requests in a row
// before it comes near its self-stop, and the leader hears each member
// at most four times a second.
func ContactInterval(selfStop time.Duration) time.Duration {
	return min(selfStop/5, maxContactInterval)
}

// scaleDrift returns d·(1+ρ)/(1−ρ), rounded up: the longest a span of d
// on the slowest clock can last measured on the fastest.
func scaleDrift(d time.Duration) time.Duration {
	return time.Duration(float64(d)*(1+Drift)/(1-Drift)) + 1
}

// MinRemoveAfter is the smallest removal timeout T that is safe with the
// self-stop timeout selfStop: T must exceed
// selfStop·(1+ρ)/(1−ρ) + one ContactInterval (the leader's timer tick).
func MinRemoveAfter(selfStop time.Duration) time.Duration {
	return scaleDrift(selfStop) + ContactInterval(selfStop)
}

// ValidateFailover checks the failover timings: both positive, and
// removeAfter > selfStop·(1+ρ)/(1−ρ) + a tick, so that a node cut off
// from the quorum stops serving before the leader gives its names to
// another node (docs/design/2026-12-01-ha-failover-design.md, "The timing argument").
func ValidateFailover(selfStop, removeAfter time.Duration) error {
	switch {
	case selfStop <= 0:
		return fmt.Errorf("cluster: the self-stop timeout must be positive, not %v", selfStop)
	case removeAfter <= 0:
		return fmt.Errorf("cluster: the removal timeout must be positive, not %v", removeAfter)
	case removeAfter <= MinRemoveAfter(selfStop):
		return fmt.Errorf("%w: %v is not above %v (self-stop %v × (1+%g)/(1−%g) + a %v tick)",
			ErrFailoverTimings, removeAfter, MinRemoveAfter(selfStop), selfStop, Drift, Drift, ContactInterval(selfStop))
	}
	return nil
}

// WarmupFor is the warm-up of a name taken without its state, for the
// largest lease granted maxLease: maxLease·(1+ρ)/(1−ρ) + slack.
func WarmupFor(maxLease, slack time.Duration) time.Duration {
	if maxLease <= 0 {
		return slack
	}
	return scaleDrift(maxLease) + slack
}

// pathContact: a member's quorum contact request to the leader.
const pathContact = "/cluster/v1/contact"

type contactRequest struct {
	ID string `json:"id"`
}

// contactState is a node's quorum contact and, on the leader, the
// silence of the other members.
type contactState struct {
	selfStop, removeAfter, interval time.Duration
	// base is the monotonic reference of the anchors below.
	base time.Time
	// anchor is the send time of the latest contact the quorum answered,
	// in nanoseconds since base; 0 before the first.
	anchor atomic.Int64
	// resumed is when contact came back after a lapse (ns since base; 0:
	// never lapsed): the names this node owns are gated for the warm-up
	// from then on.
	resumed atomic.Int64
	// removed: this node has applied its own removal, not by its own
	// planned leave (it serves nothing unless a later join of it is
	// applied); left: it has applied the end of its own planned leave.
	removed, left atomic.Bool
	// lastLeader is the leader this node last knew of (Raft forgets it
	// when the node, cut off, starts an election): contact requests go on
	// to it, so that contact comes back as soon as a cut heals, not once
	// Raft, whose leader backs off from a silent follower, has found the
	// node again.
	lastLeader atomic.Pointer[Member]

	mu sync.Mutex
	// Leader side: when each member's contact request was last heard,
	// when its silence timer started (this node's leadership, or the
	// member's leaving the stopped state), on this node's clock.
	heard, watch map[string]time.Time
	leading      bool
	leaderSince  time.Time
	lastTick     time.Time // the leader's previous tick
	autoRemovals atomic.Int64
}

func (c *contactState) init(cfg Config) {
	c.selfStop, c.removeAfter = cfg.SelfStop, cfg.RemoveAfter
	c.interval = ContactInterval(c.selfStop)
	c.base = time.Now()
	c.heard, c.watch = map[string]time.Time{}, map[string]time.Time{}
}

// since is t on the contact clock (ns since base, at least 1).
func (c *contactState) since(t time.Time) int64 { return max(int64(t.Sub(c.base)), 1) }

// InContact reports whether this node may serve at now (its clock): it
// has had quorum contact within SelfStop and has not applied its own
// removal. A node that has left by its own planned leave needs no
// contact: it owns no name in the last ring it applied (it handed them
// over) and gets no later ring, so it only relays, and the owners it
// relays to answer for themselves.
func (n *Node) InContact(now time.Time) bool {
	c := &n.contact
	if c.removed.Load() || n.mixed.Load() {
		return false
	}
	if c.left.Load() {
		return true
	}
	a := c.anchor.Load()
	return a != 0 && c.since(now)-a < int64(c.selfStop)
}

// Removed reports whether this node has applied its own removal from the
// cluster: it serves nothing until it is started again.
func (n *Node) Removed() bool { return n.contact.removed.Load() }

// ContactAge is how long ago, on this node's clock, the send time of its
// latest answered contact was; -1 before the first.
func (n *Node) ContactAge() time.Duration {
	c := &n.contact
	a := c.anchor.Load()
	if a == 0 {
		return -1
	}
	return time.Duration(c.since(time.Now()) - a)
}

// AutoRemovals is how many silent members this node removed as leader.
func (n *Node) AutoRemovals() int64 { return n.contact.autoRemovals.Load() }

// SelfStop and RemoveAfter return the node's failover timings.
func (n *Node) SelfStop() time.Duration    { return n.contact.selfStop }
func (n *Node) RemoveAfter() time.Duration { return n.contact.removeAfter }

// WaitContact waits until this node is in quorum contact; it returns
// ErrRemoved once the node has applied its own removal.
func (n *Node) WaitContact(ctx context.Context) error {
	t := time.NewTicker(n.contact.interval / 5)
	defer t.Stop()
	for !n.InContact(time.Now()) {
		if n.Removed() {
			return ErrRemoved
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: no quorum contact: %w", ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// WaitServing is WaitContact for a node that is starting: one that the
// leader removed as silent while it came back (restarted just before the
// removal timeout, its join a no-op for a member still in the ring) is
// not in the cluster any more, so it joins again, once, through rejoin,
// and waits for contact anew. Its names warm up as after any restart.
func (n *Node) WaitServing(ctx context.Context, rejoin func(context.Context) error) error {
	err := n.WaitContact(ctx)
	if !errors.Is(err, ErrRemoved) {
		return err
	}
	n.log.Warn("this node was removed while it started: joining the cluster again")
	if err := rejoin(ctx); err != nil {
		return fmt.Errorf("cluster: joining again after a removal: %w", err)
	}
	return n.WaitContact(ctx)
}

// contactAt records a contact whose request was sent at sent. When the
// previous contact had lapsed (this node stopped serving meanwhile), the
// names it owns are gated for the warm-up from now: the gate is set
// before the new anchor can be seen.
func (n *Node) contactAt(sent time.Time) {
	c := &n.contact
	a := c.since(sent)
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.anchor.Load()
	if a <= old {
		return
	}
	if now := c.since(time.Now()); old != 0 && now-old >= int64(c.selfStop) {
		c.resumed.Store(now)
		n.log.Warn("quorum contact back after a lapse: serving again, the names this node owns gated for the warm-up",
			"lapse", time.Duration(now-old).Round(time.Millisecond), "warmup", n.Warmup())
	}
	c.anchor.Store(a)
}

// resumedGate is, under no lock, the end of the warm-up after a lapse of
// contact, and false when there is none at now.
func (n *Node) resumedGate(now time.Time, w time.Duration) (time.Time, bool) {
	c := &n.contact
	r := c.resumed.Load()
	if r == 0 {
		return time.Time{}, false
	}
	until := c.base.Add(time.Duration(r) + w)
	return until, now.Before(until)
}

// contactLoop renews this node's quorum contact every interval until
// Shutdown: as leader by VerifyLeader, removing silent members; as a
// follower by a contact request to the leader.
func (n *Node) contactLoop() {
	defer n.renewWG.Done()
	ctx, cancel := n.untilShutdown()
	defer cancel()
	c := &n.contact
	t := time.NewTicker(c.interval)
	defer t.Stop()
	body, _ := json.Marshal(contactRequest{ID: n.cfg.ID})
	// A follower sends a request every interval without waiting for the
	// ones before: one lost in a network cut hangs until its timeout
	// (half the self-stop time), and contact must come back with the
	// first request sent after the cut heals, not that much later.
	var asking sync.WaitGroup
	defer asking.Wait()
	var inFlight atomic.Int32
	for {
		if n.raft.State() == raft.Leader {
			n.lead(ctx)
		} else {
			c.mu.Lock()
			c.leading = false
			c.mu.Unlock()
			if inFlight.Load() < maxContactInFlight {
				inFlight.Add(1)
				asking.Go(func() {
					defer inFlight.Add(-1)
					n.askContact(ctx, body)
				})
			}
		}
		select {
		case <-n.done:
			return
		case <-t.C:
		}
	}
}

// noteEvent follows the membership events of this node in this run (not
// those replayed from its data directory): its own removal (it then
// serves nothing until it is started again), the end of its own planned
// leave, and its joining again after a leave.
func (n *Node) noteEvent(e Event) {
	if e.Member.ID != n.cfg.ID || e.Replayed {
		return
	}
	c := &n.contact
	switch e.Kind {
	case EventJoin:
		// Back in the cluster: a removal applied before this join (the
		// node was removed while it was down, and applied that while it
		// caught up after its restart) is over. Its names are gated as
		// after any restart or take-over.
		c.left.Store(false)
		if c.removed.Swap(false) {
			n.log.Info("this node joined the cluster again after its removal: it serves once its names have warmed up")
		}
	case EventRemove:
		if e.Member.State == Leaving {
			c.left.Store(true)
			n.log.Info("this node left the cluster: it owns no name and only relays")
		} else if !c.removed.Swap(true) {
			n.log.Warn("this node was removed from the cluster: it serves nothing until it is started again")
		}
	}
}

// lead is one tick of the leader: remove members silent for
// RemoveAfter, then renew this node's own contact.
func (n *Node) lead(ctx context.Context) {
	c := &n.contact
	now := time.Now()
	c.mu.Lock()
	if !c.leading || now.Sub(c.lastTick) > c.selfStop {
		// A new leadership: every silence timer starts now. So too after
		// a pause of this node (a freeze, a stalled machine) as long as
		// its self-stop: the others' silence was its own deafness.
		c.leading, c.leaderSince = true, now
	}
	c.lastTick = now
	c.mu.Unlock()
	n.removeSilent(ctx, now)
	start := time.Now()
	if err := n.raft.VerifyLeader().Error(); err == nil {
		n.contactAt(start)
	}
}

// askContact sends one contact request to the leader and records its
// send time if the leader answered OK.
func (n *Node) askContact(ctx context.Context, body []byte) {
	m, ok := n.Leader()
	if ok {
		n.contact.lastLeader.Store(&m)
	} else if last := n.contact.lastLeader.Load(); last != nil {
		// Safe: only a leader that a quorum still follows answers OK.
		m, ok = *last, true
	}
	if !ok || m.AdminAddr == "" || m.ID == n.cfg.ID {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, n.contact.selfStop/2)
	defer cancel()
	sent := time.Now()
	if err := n.post(ctx, m.AdminAddr, pathContact, body, false, nil); err != nil {
		return
	}
	n.contactAt(sent)
}

// serveContact answers a member's contact request: OK only on the leader,
// for a member, after a VerifyLeader begun after the request arrived
// (so a quorum followed this leader after it heard the request).
func (n *Node) serveContact(w http.ResponseWriter, r *http.Request) {
	var req contactRequest
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil || req.ID == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "a contact request needs an id"})
		return
	}
	heard := time.Now()
	if !n.IsLeader() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": ErrNotLeader.Error()})
		return
	}
	if md, _ := n.fsm.read(); md.Members[req.ID].ID == "" {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": ErrUnknownMember.Error() + ": " + req.ID})
		return
	}
	c := &n.contact
	c.mu.Lock()
	if heard.After(c.heard[req.ID]) {
		c.heard[req.ID] = heard
	}
	c.mu.Unlock()
	if err := n.raft.VerifyLeader().Error(); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, struct{}{})
}

// removeSilent, on the leader, removes the members it has not heard a
// contact request from for RemoveAfter, one per tick. A member's silence
// counts from the latest of its last contact request, this leadership's
// start and the moment the member left the stopped state; a stopped
// member (a planned stop) is never removed this way.
func (n *Node) removeSilent(ctx context.Context, now time.Time) {
	c := &n.contact
	md, _ := n.fsm.read()
	var victim string
	var silent time.Duration
	c.mu.Lock()
	for id := range c.watch {
		if m, ok := md.Members[id]; !ok || m.State == Stopped {
			delete(c.watch, id)
		}
	}
	for _, m := range md.MemberList() {
		if m.ID == n.cfg.ID || m.State == Stopped {
			continue
		}
		if _, ok := c.watch[m.ID]; !ok {
			c.watch[m.ID] = now
		}
		last := c.leaderSince
		for _, t := range []time.Time{c.heard[m.ID], c.watch[m.ID]} {
			if t.After(last) {
				last = t
			}
		}
		if d := now.Sub(last); d > c.removeAfter && d > silent {
			victim, silent = m.ID, d
		}
	}
	c.mu.Unlock()
	if victim == "" {
		return
	}
	n.log.Warn("removing a silent member", "member", victim, "silent", silent.Round(time.Millisecond), "remove_after", c.removeAfter)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := n.removeMember(ctx, victim, false, false, 10*time.Second); err != nil {
		n.log.Warn("could not remove a silent member", "member", victim, "err", err)
		return
	}
	c.autoRemovals.Add(1)
	c.mu.Lock()
	delete(c.watch, victim)
	delete(c.heard, victim)
	c.mu.Unlock()
	if f := n.cfg.OnAutoRemove; f != nil {
		f(victim, silent)
	}
}
