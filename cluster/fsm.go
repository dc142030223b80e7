package cluster

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// MemberState is where a member is in its life in the cluster.
type MemberState string

// Member states. Only serving members are in the ring.
const (
	// Joining: in the Raft configuration, not yet in the ring (the prior
	// owners of the names it will own hand them over first).
	Joining MemberState = "joining"
	// Serving: in the ring. A serving member that dies stays in the ring,
	// owning its names (fail closed), until it is removed.
	Serving MemberState = "serving"
	// Leaving: a planned leave in progress; still in the ring until its
	// names are handed over, then removed.
	Leaving MemberState = "leaving"
	// Stopped: a member that handed its names over and left the ring
	// when it was stopped (SIGTERM), still a Raft voter; it comes back
	// into the ring when it starts again.
	Stopped MemberState = "stopped"
)

// Member is one node of the cluster, as recorded through Raft.
type Member struct {
	ID           string      `json:"id"`
	RaftAddr     string      `json:"raft_addr"`     // inter-node Raft transport
	ProtocolAddr string      `json:"protocol_addr"` // clients' lock protocol
	AdminAddr    string      `json:"admin_addr"`    // admin HTTP (and this package's Handler)
	State        MemberState `json:"state"`
}

func (m Member) inRing() bool { return m.State == Serving || m.State == Leaving }

// Metadata is the cluster's state held by Raft: small, and written only on
// membership changes, epoch acquisitions and lease raises, never per lock
// operation.
type Metadata struct {
	// ClusterID is drawn at random when the cluster is formed
	// (Bootstrap) and never changes: a node whose applied state changes
	// it was taken over by another cluster (checkIncarnation). Empty
	// for a cluster formed before cluster ids existed.
	ClusterID string            `json:"cluster_id,omitempty"`
	Members   map[string]Member `json:"members"`
	// RingVersion increases with every change of the ring's members;
	// RingCommittedAt is the leader's clock when that change was proposed.
	RingVersion     uint64    `json:"ring_version"`
	RingCommittedAt time.Time `json:"ring_committed_at"`
	// LastEpoch is the largest token epoch handed out; Epochs is each
	// node's current one.
	LastEpoch uint64            `json:"last_epoch"`
	Epochs    map[string]uint64 `json:"epochs"`
	// LeaseBound holds the largest lease granted (MaxLease), the bound of
	// a take-over's warm-up, and the operator's ceiling (leasebound.go).
	LeaseBound
	// Pending is a planned ring change in progress (handoff.go): the ring
	// it will commit, and the prior owners that have handed their moving
	// names over. Nil when none is.
	Pending *Pending `json:"pending,omitempty"`
	// RingHandedOver tells whether the current ring was committed after
	// every prior owner had handed over the names it moved: its new
	// owners need no warm-up for them.
	RingHandedOver bool `json:"ring_handed_over,omitempty"`
}

func (md *Metadata) clone() Metadata {
	c := *md
	c.Members = maps.Clone(md.Members)
	c.Epochs = maps.Clone(md.Epochs)
	c.LeaseBound = md.LeaseBound.clone()
	if c.Members == nil {
		c.Members = map[string]Member{}
	}
	if c.Epochs == nil {
		c.Epochs = map[string]uint64{}
	}
	if md.Pending != nil {
		p := md.Pending.clone()
		c.Pending = &p
	}
	return c
}

// ring returns the ring of md's serving (and leaving) members.
func (md *Metadata) ring() *Ring {
	var ids []string
	for _, m := range md.Members {
		if m.inRing() {
			ids = append(ids, m.ID)
		}
	}
	return NewRing(md.RingVersion, ids)
}

// memberIDs returns the members' ids.
func (md *Metadata) memberIDs() []string { return slices.Collect(maps.Keys(md.Members)) }

// MemberList returns the members sorted by id.
func (md *Metadata) MemberList() []Member {
	out := slices.Collect(maps.Values(md.Members))
	slices.SortFunc(out, func(a, b Member) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return out
}

// Command kinds of the Raft log.
const (
	opPutMember    = "put_member"    // add or update a member (Member)
	opRemoveMember = "remove_member" // ID
	opEpoch        = "epoch"         // ID: a fresh epoch for node ID
	opRaiseLease   = "raise_lease"   // Lease
	opPending      = "pending"       // Pending: propose a planned ring change
	opHanded       = "handed"        // ID, Version: ID handed its moving names over
	opLeaseCeiling = "lease_ceiling" // Lease: the operator's ceiling (0: none)
	opLeaseAck     = "lease_ack"     // ID, Lease: ID acknowledges a lowering to Lease
)

// MaxRecordedLease is the largest lease the log records as the cluster's
// largest: the protocol's largest (lease_ms is a u32), about 49.7 days.
// A larger one can come from no client, and would overflow the warm-up.
const MaxRecordedLease = math.MaxUint32 * time.Millisecond

// command is one Raft log entry. At is the proposer's clock, so that every
// node records the same commit time for a ring change.
type command struct {
	Op     string        `json:"op"`
	Member Member        `json:"member,omitzero"`
	ID     string        `json:"id,omitempty"`
	Lease  time.Duration `json:"lease,omitempty"`
	At     time.Time     `json:"at"`
	// EpochFloor is the smallest epoch the first opEpoch may hand out
	// (set at bootstrap from the wall clock, so that epoch tokens start
	// above the clock-based tokens of a single server; see Tokens).
	EpochFloor uint64 `json:"epoch_floor,omitempty"`
	// Pending (opPending) and Version (opHanded): handoff.go.
	Pending *Pending `json:"pending,omitempty"`
	Version uint64   `json:"version,omitempty"`
	// ClusterID is the id of the cluster whose leader appended the entry
	// (Metadata.ClusterID; set by the first entry, Bootstrap's): an
	// entry of another cluster tells the node it now follows that one.
	ClusterID string `json:"cluster_id,omitempty"`
}

// applyResult is what Apply returns to the proposer.
type applyResult struct {
	Epoch uint64 `json:"epoch,omitempty"`
	// RingVersion, for an epoch, is the ring version when it was
	// committed: the epoch covers every ring change up to it.
	RingVersion uint64 `json:"ring_version,omitempty"`
	Error       string `json:"error,omitempty"`
}

// fsm is the Raft state machine. Reads take a copy under mu; apply
// notifies waiters of each new applied index.
type fsm struct {
	mu      sync.Mutex
	md      Metadata
	index   uint64        // last applied log index
	changed chan struct{} // closed and replaced on every apply
	history *History
	ring    *Ring // the applied ring; nil before the first
	// onRing is called under mu when the ring changes, with the ring
	// before and after, so that whoever reads the new ring also sees what
	// the hook recorded. It must not call back into the fsm.
	onRing func(prev, cur *Ring)
	// onEvent, when set, receives the membership and ring events of each
	// apply, after mu is released, in log order (Raft applies from one
	// goroutine).
	onEvent func(Event)
	// replayTo is the last log index in the store when the node opened:
	// entries up to it are applied again from the node's own log.
	// opening is set while Open restores the node's last snapshot.
	replayTo uint64
	opening  bool
	pending  []Event // events of the apply in progress, under mu
	// beforeApply, when set by a test, runs before each log entry is
	// applied, outside mu: it may block to make the node fall behind.
	beforeApply atomic.Pointer[func()]
	// onPending is called under mu when the pending change is set,
	// changes or ends (handoff.go), with the new one (nil: none). It must
	// not call back into the fsm.
	onPending func(p *Pending)
	// onCeiling is called under mu after every apply and restore with the
	// lease ceiling, so that a node enforces a ceiling before it serves
	// anything the log holds after it. It must not block.
	onCeiling func(time.Duration)
	// committedPrior is, while onRing runs for a ring that a log entry
	// commits after a complete hand-off, the prior owners that handed it
	// over; nil otherwise (a ring restored from a snapshot included).
	committedPrior []string
	// onApplied, when set, is called under mu after each entry or
	// snapshot is applied, with the metadata, whether the entry or
	// snapshot came from another cluster than the one applied before
	// (its cluster id differs), and whether it was a snapshot. It must
	// not call back into the fsm.
	onApplied func(md *Metadata, foreign, snapshot bool)
}

func newFSM() *fsm {
	return &fsm{md: (&Metadata{}).clone(), changed: make(chan struct{}), history: NewHistory(DefaultHistory)}
}

// Apply implements raft.FSM.
func (f *fsm) Apply(l *raft.Log) any {
	if hook := f.beforeApply.Load(); hook != nil {
		(*hook)()
	}
	if l.Type != raft.LogCommand {
		f.mu.Lock()
		f.advance(l.Index)
		f.mu.Unlock()
		return nil
	}
	var c command
	if err := json.Unmarshal(l.Data, &c); err != nil {
		f.mu.Lock()
		f.advance(l.Index)
		f.mu.Unlock()
		return applyResult{Error: fmt.Sprintf("cluster: undecodable log entry %d: %v", l.Index, err)}
	}
	f.mu.Lock()
	// An entry stamped with another cluster's id: this node's log was
	// overwritten by another cluster's leader (it formed a cluster of its
	// own, then the one it belonged to reached it). Its applied state
	// mixes both clusters from here; the node stops serving until it has
	// a fresh epoch of the cluster it follows now (Node.checkIncarnation).
	// An entry without an id proves nothing: a leader that has not
	// applied its log yet (just elected after a restart) stamps none.
	foreign := c.ClusterID != "" && f.md.ClusterID != "" && c.ClusterID != f.md.ClusterID
	if c.ClusterID != "" {
		f.md.ClusterID = c.ClusterID
	}
	res := f.apply(&c)
	if f.onApplied != nil {
		f.onApplied(&f.md, foreign, false)
	}
	f.advance(l.Index)
	events := f.pending
	f.pending = nil
	f.mu.Unlock()
	f.emit(events, l.Index, l.Index <= f.replayTo)
	return res
}

// emit passes events to onEvent, outside mu.
func (f *fsm) emit(events []Event, index uint64, replayed bool) {
	if f.onEvent == nil {
		return
	}
	for _, e := range events {
		e.Index, e.Replayed = index, replayed
		f.onEvent(e)
	}
}

func (f *fsm) advance(index uint64) {
	f.index = max(f.index, index)
	if f.onCeiling != nil {
		f.onCeiling(f.md.Ceiling)
	}
	close(f.changed)
	f.changed = make(chan struct{})
}

// apply applies c under f.mu.
func (f *fsm) apply(c *command) applyResult {
	md := &f.md
	before := md.ring()
	if f.onEvent != nil {
		prev, known := md.Members[c.Member.ID]
		if c.Op == opRemoveMember {
			prev, known = md.Members[c.ID]
		}
		if e, ok := memberEvent(c, prev, known); ok {
			f.pending = append(f.pending, e)
		}
	}
	switch c.Op {
	case opPutMember:
		if c.Member.ID == "" {
			return applyResult{Error: "cluster: member without an id"}
		}
		if c.EpochFloor > MaxEpoch {
			// Such a floor would make the next epochs' tokens wrap.
			return applyResult{Error: fmt.Sprintf("cluster: epoch floor %d above the largest epoch %d", c.EpochFloor, MaxEpoch)}
		}
		md.Members[c.Member.ID] = c.Member
		if c.EpochFloor > md.LastEpoch {
			md.LastEpoch = c.EpochFloor - 1
		}
	case opRemoveMember:
		if p := md.Pending; p != nil && p.Member == c.ID && !md.ring().Has(c.ID) {
			md.Pending = nil // a joining node removed: its join is abandoned
			f.pendingChanged()
		}
		delete(md.Members, c.ID)
		md.MemberRemoved(c.ID, md.memberIDs())
		// The removed node's epoch stays consumed: LastEpoch never goes
		// back, and a node that rejoins takes a fresh one.
		delete(md.Epochs, c.ID)
	case opEpoch:
		if md.LastEpoch >= MaxEpoch {
			return applyResult{Error: fmt.Sprintf("cluster: token epochs used up (the last is %d, the largest %d)", md.LastEpoch, MaxEpoch)}
		}
		md.LastEpoch++
		md.Epochs[c.ID] = md.LastEpoch
		return applyResult{Epoch: md.LastEpoch, RingVersion: md.RingVersion}
	case opRaiseLease:
		if c.Lease <= 0 || c.Lease > MaxRecordedLease {
			return applyResult{Error: fmt.Sprintf("cluster: lease %v out of range (0, %v]", c.Lease, MaxRecordedLease)}
		}
		md.Raise(c.Lease)
		return applyResult{}
	case opLeaseCeiling:
		if c.Lease < 0 || c.Lease > MaxRecordedLease {
			return applyResult{Error: fmt.Sprintf("cluster: lease ceiling %v out of range [0, %v]", c.Lease, MaxRecordedLease)}
		}
		md.SetCeiling(c.Lease)
		return applyResult{}
	case opLeaseAck:
		if err := md.Ack(c.ID, c.Lease, md.memberIDs()); err != nil {
			return applyResult{Error: err.Error()}
		}
		return applyResult{}
	case opPending:
		return f.applyPending(c)
	case opHanded:
		return f.applyHanded(c)
	default:
		return applyResult{Error: fmt.Sprintf("cluster: unknown command %q", c.Op)}
	}
	after := md.ring()
	if slices.Equal(before.Members(), after.Members()) {
		return applyResult{}
	}
	md.RingVersion++
	md.RingCommittedAt = c.At
	f.ringCommitted(after.Members())
	f.setRing(NewRing(md.RingVersion, after.Members()), c.At)
	f.committedPrior = nil
	return applyResult{}
}

// setRing records a new ring under f.mu and calls the hook.
func (f *fsm) setRing(r *Ring, at time.Time) {
	prev := f.ring
	if prev == nil {
		prev = NewRing(0, nil)
	}
	if r.Version() <= prev.Version() && f.ring != nil {
		return
	}
	f.ring = r
	f.history.Add(r, at)
	if f.onRing != nil {
		f.onRing(prev, r)
	}
	if f.onEvent != nil {
		f.pending = append(f.pending, Event{Kind: EventRing, RingVersion: r.Version(), Ring: r.Members(), CommittedAt: at})
	}
}

// currentRing returns the applied ring (an empty one before the first).
func (f *fsm) currentRing() *Ring {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ring == nil {
		return NewRing(0, nil)
	}
	return f.ring
}

// member returns the applied record of id.
func (f *fsm) member(id string) (Member, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.md.Members[id]
	return m, ok
}

// maxLease returns the largest lease recorded.
func (f *fsm) maxLease() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.md.MaxLease
}

// read returns a copy of the metadata and the last applied index.
func (f *fsm) read() (Metadata, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.md.clone(), f.index
}

// wait returns a channel closed at the next apply, and the index now.
func (f *fsm) wait() (<-chan struct{}, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changed, f.index
}

// Snapshot implements raft.FSM.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &fsmSnapshot{md: f.md.clone()}, nil
}

// Restore implements raft.FSM: it replaces the state with a snapshot's.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var md Metadata
	if err := json.NewDecoder(rc).Decode(&md); err != nil {
		return fmt.Errorf("cluster: restore snapshot: %w", err)
	}
	md = md.clone()
	f.mu.Lock()
	foreign := f.md.ClusterID != "" && md.ClusterID != f.md.ClusterID
	f.md = md
	if f.onApplied != nil {
		f.onApplied(&f.md, foreign, true)
	}
	f.setRing(md.ring(), md.RingCommittedAt)
	f.pendingChanged()
	f.advance(0)
	events, opening := f.pending, f.opening
	f.pending = nil
	f.mu.Unlock()
	f.emit(events, 0, opening)
	return nil
}

type fsmSnapshot struct{ md Metadata }

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := json.NewEncoder(sink).Encode(&s.md); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("cluster: persist snapshot: %w", err)
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() {}
