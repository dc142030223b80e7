package cluster

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
)

// Sentinel errors.
var (
	// ErrNoLeader is returned when no leader is known within the caller's
	// context: the cluster has no quorum, or an election is under way.
	ErrNoLeader = errors.New("cluster: no leader")
	// ErrNotLeader is answered by a node that receives a forwarded write
	// and is not the leader (any more): it never forwards it again.
	ErrNotLeader = errors.New("cluster: not the leader")
	// ErrExistingState is returned by Bootstrap on a node whose data
	// directory already holds a cluster.
	ErrExistingState = errors.New("cluster: the data directory already holds a cluster")
	// ErrUnknownMember is returned for a member id the cluster does not
	// have.
	ErrUnknownMember = errors.New("cluster: no such member")
	// ErrClosed is returned after Shutdown.
	ErrClosed = errors.New("cluster: node shut down")
)

// Config configures a Node. Only ID, RaftAddr and DataDir are required.
type Config struct {
	// ID names the node in the cluster; it must be stable across restarts.
	ID string
	// RaftAddr is the inter-node address the Raft transport listens on
	// (host:port; port 0 picks one, see Node.RaftAddr). Peers dial it.
	RaftAddr string
	// ProtocolAddr and AdminAddr are the addresses clients and operators
	// reach this node on; they are recorded for the other members.
	// AdminAddr must serve Handler: a member forwards writes and joins
	// to the leader there.
	ProtocolAddr string
	AdminAddr    string
	// DataDir holds the Raft log and stable store (raft.db) and the
	// snapshots. A node started again on the same DataDir rejoins by
	// itself.
	DataDir string
	// Logger receives the node's and Raft's logs; nil discards them.
	Logger *slog.Logger
	// HTTPClient carries forwarded writes and joins to other members'
	// AdminAddr; nil means a client with a 10 s timeout. Scheme is "http"
	// (default) or "https" when HTTPClient has TLS.
	HTTPClient *http.Client
	Scheme     string
	// ServerTLS and ClientTLS, both or neither, make the Raft transport
	// mutual TLS (see PeerTLS): ServerTLS serves the Raft listener and
	// must require and verify client certificates; ClientTLS dials the
	// other members. The member API calls go through HTTPClient, which
	// then needs ClientTLS too, with Scheme "https".
	ServerTLS, ClientTLS *tls.Config
	// RaftAdvertise is the Raft address recorded for the other members
	// to dial, when it differs from RaftAddr (a node that binds every
	// interface, or is known by a DNS name); port 0 means RaftAddr's
	// bound port.
	RaftAdvertise string
	// OnEvent, when set, receives every membership and ring change this
	// node applies, in log order (for an audit log). It must not block
	// for long: Raft's apply waits for it.
	OnEvent func(Event)
	// Raft timing; zero means raft.DefaultConfig's (1 s heartbeat and
	// election timeouts, 500 ms leader lease).
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	// GateSlack is added to the largest lease granted to make the warm-up
	// of names this node takes without their state (docs/design/2026-12-02-cluster-fail-closed-model.md,
	// "Fail closed"); zero means DefaultGateSlack.
	GateSlack time.Duration
	// SnapshotThreshold and SnapshotInterval: zero means Raft's defaults.
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	// HandoffTimeout bounds the leader's wait for the hand-offs of a
	// planned change (handoff.go); zero means DefaultHandoffTimeout.
	HandoffTimeout time.Duration
	// SelfStop is T_self: after this long on its own clock without quorum
	// contact a node serves nothing (contact.go); zero means
	// DefaultSelfStop. RemoveAfter is T: the leader removes a member it
	// has not heard from for this long; zero means DefaultRemoveAfter.
	// Open refuses a pair ValidateFailover refuses.
	SelfStop    time.Duration
	RemoveAfter time.Duration
	// OnAutoRemove, when set, is called on the leader after it removed a
	// silent member, with how long it had been silent.
	OnAutoRemove func(id string, silent time.Duration)
	// Secret, when not empty, is the cluster's shared secret: every
	// member API request this node sends carries it (SetRequestSecret),
	// and its Handler refuses a POST that does not (401, or 403 for
	// another).
	// Every member must have the same one. Empty: writes are not
	// authenticated by a secret (with TLS, the members' certificates
	// still are). OldSecrets are accepted too, never sent: the previous
	// secret while a new one is rolled out (Node.SetSecret).
	Secret     []byte
	OldSecrets [][]byte
	// OnRefused, when set, is called for each request the Handler
	// refuses, with the reason (RefusedSecret, RefusedContentType,
	// RefusedInvalid): for a metric. It must not block.
	OnRefused func(reason string)
	// OnClusterChanged, when set, is called (on a goroutine of its own)
	// when this node finds its applied state replaced by another
	// cluster's (checkIncarnation): it has stopped serving and ends
	// its sessions there. It must not block for long.
	OnClusterChanged func(ClusterChange)
	// Now is the clock written into ring changes (their commit time) and
	// used once at bootstrap for the epoch floor; nil means time.Now.
	Now func() time.Time
}

// Node is one member of a cluster: it runs Raft over the cluster's
// metadata and answers, from its applied state, who owns a lock name.
// It never touches lock semantics and never writes to Raft per lock
// operation.
type Node struct {
	cfg      Config
	log      *slog.Logger
	raft     *raft.Raft
	trans    *raft.NetworkTransport
	store    *raftboltdb.BoltStore
	fsm      *fsm
	client   *http.Client
	existing bool
	// secrets is what requests carry and what the Handler accepts
	// (SetSecret).
	secrets atomic.Pointer[secrets]

	obsCh    chan raft.Observation
	observer *raft.Observer
	obsDone  chan struct{}

	mu          sync.Mutex
	unreachable map[string]time.Time // leader's view: peer -> last contact
	closed      bool
	// Routing state (route.go), kept under mu and updated in the same
	// critical section of the fsm as the ring.
	startedAt  time.Time
	hasEpoch   bool       // an epoch was committed in this incarnation
	epochRing  uint64     // the ring version that epoch covers
	gainedAt   uint64     // the last ring version that gave this node names
	takeovers  []takeover // recent ring changes that gave this node names
	handedOver map[uint64]bool
	// Planned changes (handoff.go).
	mover       Mover
	pending     *Pending // the pending change applied, or nil
	pendingRing *Ring    // its ring
	handoffCh   chan struct{}
	// installedFrom records the hand-offs this incarnation accepted, by
	// ring version and sender; cameBack is set when this incarnation came
	// into the ring by a change every prior owner handed over to it (a
	// join, or a return after a planned stop: it then owns no name whose
	// state it lost). formed is set when it formed a new cluster
	// (Bootstrap): nobody held anything before it. Otherwise it warms up
	// every name it owns from its start, whether it restarted on its
	// data directory or on a wiped one (new Raft state, rejoining under
	// its old id: its old record may still own names).
	installedFrom map[uint64]map[string]bool
	cameBack      bool
	formed        bool
	// usedEpoch, once this node's applied state was replaced by another
	// cluster's (checkIncarnation), is the epoch it held then: the next it
	// takes must be above it. changes counts those replacements.
	usedEpoch uint64
	changes   uint64
	// mixed is set when another cluster's entries were applied on top of
	// this node's own (checkIncarnation): it serves nothing until it is
	// started again on an empty data directory.
	mixed atomic.Bool

	// contact is the quorum contact and, on the leader, the members'
	// silence (contact.go).
	contact contactState

	// leaseSessions is the server a lowering of the largest lease waits
	// for (leaselower.go).
	leaseSessions atomic.Pointer[LeaseSessions]

	tokens  *Tokens
	renewCh chan struct{} // Tokens running low: commit the next epoch
	done    chan struct{} // closed by Shutdown
	renewWG sync.WaitGroup
}

// Open opens (or creates) the node's data directory, listens on RaftAddr
// and starts Raft. A node whose data directory holds a cluster rejoins it
// by itself; a new one waits for Bootstrap or Join.
func Open(cfg Config) (*Node, error) {
	if cfg.ID == "" || cfg.RaftAddr == "" || cfg.DataDir == "" {
		return nil, errors.New("cluster: Config needs ID, RaftAddr and DataDir")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Scheme == "" {
		cfg.Scheme = "http"
	}
	if cfg.SelfStop == 0 {
		cfg.SelfStop = DefaultSelfStop
	}
	if cfg.RemoveAfter == 0 {
		cfg.RemoveAfter = DefaultRemoveAfter
	}
	if err := ValidateFailover(cfg.SelfStop, cfg.RemoveAfter); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("node", cfg.ID)
	hlog := hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Info, Output: io.Discard})
	if cfg.Logger != nil {
		hlog = hclog.FromStandardLogger(slog.NewLogLogger(logger.Handler(), slog.LevelInfo), &hclog.LoggerOptions{Name: "raft", Level: hclog.Info})
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("cluster: data dir: %w", err)
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.Logger = hlog
	if cfg.HeartbeatTimeout > 0 {
		rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	}
	if cfg.ElectionTimeout > 0 {
		rc.ElectionTimeout = cfg.ElectionTimeout
	}
	if cfg.LeaderLeaseTimeout > 0 {
		rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	}
	if cfg.SnapshotThreshold > 0 {
		rc.SnapshotThreshold = cfg.SnapshotThreshold
		rc.TrailingLogs = cfg.SnapshotThreshold
	}
	if cfg.SnapshotInterval > 0 {
		rc.SnapshotInterval = cfg.SnapshotInterval
	}
	// Keep Raft's own shutdown of a removed node out of our way: a
	// removed node stays up, serving nothing, until it is stopped.
	rc.ShutdownOnRemove = false
	if err := raft.ValidateConfig(rc); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}

	store, err := raftboltdb.New(raftboltdb.Options{
		Path:        filepath.Join(cfg.DataDir, "raft.db"),
		BoltOptions: &bbolt.Options{Timeout: 2 * time.Second},
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: open raft.db: %w", err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, 2, hlog)
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("cluster: snapshot store: %w", err)
	}
	existing, err := raft.HasExistingState(store, store, snaps)
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("cluster: read data dir: %w", err)
	}
	stream, err := newStreamLayer(cfg.RaftAddr, cfg.RaftAdvertise, cfg.ServerTLS, cfg.ClientTLS)
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("cluster: raft listener: %w", err)
	}
	trans := raft.NewNetworkTransportWithLogger(stream, 3, 5*time.Second, hlog)
	lastIndex, err := store.LastIndex()
	if err != nil {
		trans.Close()
		store.Close()
		return nil, fmt.Errorf("cluster: read data dir: %w", err)
	}
	n := &Node{
		cfg: cfg, log: logger, trans: trans, store: store, fsm: newFSM(), existing: existing,
		client: cfg.HTTPClient, unreachable: map[string]time.Time{},
		startedAt: time.Now(), handedOver: map[uint64]bool{},
		renewCh: make(chan struct{}, 1), done: make(chan struct{}), handoffCh: make(chan struct{}, 1),
		installedFrom: map[uint64]map[string]bool{},
		obsCh:         make(chan raft.Observation, 64), obsDone: make(chan struct{}),
	}
	if n.client == nil {
		n.client = &http.Client{Timeout: 10 * time.Second}
	}
	n.SetSecret(cfg.Secret, cfg.OldSecrets...)
	n.contact.init(cfg)
	n.fsm.onRing = n.ringChanged
	n.fsm.onEvent = func(e Event) {
		n.noteEvent(e)
		if cfg.OnEvent != nil {
			cfg.OnEvent(e)
		}
	}
	n.fsm.replayTo = lastIndex
	n.fsm.opening = true
	n.fsm.onPending = n.pendingApplied
	n.fsm.onCeiling = n.applyCeiling
	n.fsm.onApplied = n.checkIncarnation
	n.tokens = NewTokens(0, func() {
		select {
		case n.renewCh <- struct{}{}:
		default:
		}
	})
	r, err := raft.NewRaft(rc, n.fsm, store, store, snaps, trans)
	if err != nil {
		trans.Close()
		store.Close()
		return nil, fmt.Errorf("cluster: start raft: %w", err)
	}
	n.raft = r
	n.fsm.mu.Lock()
	n.fsm.opening = false
	n.fsm.mu.Unlock()
	// Raft answers heartbeats on the transport's goroutines (a fast path
	// that skips its main loop). Shutdown does not wait for those, so a
	// heartbeat that passed Raft's shutdown check could write the term to
	// the store after Shutdown closed it, and Raft panics on that error.
	// Without the fast path heartbeats go through the main loop, which
	// Shutdown does wait for; this log is small and rarely written, so
	// the main loop is never slow to answer.
	trans.SetHeartbeatHandler(nil)
	n.observer = raft.NewObserver(n.obsCh, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.FailedHeartbeatObservation, raft.ResumedHeartbeatObservation, raft.RaftState:
			return true
		}
		return false
	})
	r.RegisterObserver(n.observer)
	go n.observe()
	n.renewWG.Add(4)
	go n.leaseLoop()
	go n.renew()
	go n.handoffLoop()
	go n.contactLoop()
	return n, nil
}

// observe keeps the leader's view of unreachable peers from Raft's
// heartbeat observations.
func (n *Node) observe() {
	defer close(n.obsDone)
	for o := range n.obsCh {
		n.mu.Lock()
		switch d := o.Data.(type) {
		case raft.FailedHeartbeatObservation:
			n.unreachable[string(d.PeerID)] = d.LastContact
		case raft.ResumedHeartbeatObservation:
			delete(n.unreachable, string(d.PeerID))
		case raft.RaftState:
			if d != raft.Leader {
				clear(n.unreachable)
			}
		}
		n.mu.Unlock()
	}
}

// ID returns the node's id.
func (n *Node) ID() string { return n.cfg.ID }

// RaftAddr returns the address the Raft transport listens on.
func (n *Node) RaftAddr() string { return string(n.trans.LocalAddr()) }

// Restarted reports whether Open found a cluster in the data directory.
func (n *Node) Restarted() bool { return n.existing }

func (n *Node) self() Member {
	return Member{ID: n.cfg.ID, RaftAddr: n.RaftAddr(), ProtocolAddr: n.cfg.ProtocolAddr, AdminAddr: n.cfg.AdminAddr, State: Serving}
}

// Bootstrap forms a new cluster of this node alone and puts it in the
// ring. It fails with ErrExistingState on a data directory that already
// holds a cluster (such a node has rejoined by itself).
func (n *Node) Bootstrap(ctx context.Context) error {
	if n.existing {
		return ErrExistingState
	}
	f := n.raft.BootstrapCluster(raft.Configuration{Servers: []raft.Server{
		{Suffrage: raft.Voter, ID: raft.ServerID(n.cfg.ID), Address: n.trans.LocalAddr()},
	}})
	if err := f.Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
		return fmt.Errorf("cluster: bootstrap: %w", err)
	}
	id, err := newClusterID()
	if err != nil {
		return fmt.Errorf("cluster: bootstrap: %w", err)
	}
	n.mu.Lock()
	n.formed = true
	n.mu.Unlock()
	// The floor is written here, on the only member, never over the
	// member API (which has no way to set one).
	for attempt := 0; !n.IsLeader(); attempt++ {
		if err := sleepCtx(ctx, backoff(attempt)); err != nil {
			return fmt.Errorf("cluster: bootstrap: waiting to lead the new cluster: %w", err)
		}
	}
	timeout := 10 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(dl), time.Millisecond)
	}
	return n.applyLocal(command{Op: opPutMember, Member: n.self(), EpochFloor: EpochFloor(n.cfg.Now()), At: n.cfg.Now(), ClusterID: id}, timeout)
}

// newClusterID draws a cluster id: 16 random bytes, in hex.
func newClusterID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// Join asks the member whose admin address is addr to add this node to
// its cluster, and waits until this node has applied its own entry. Any
// member will do: a follower forwards the request to the leader, once.
// A node restarted from its data directory needs no Join; it calls Join
// again only to record new protocol or admin addresses (its place in the
// ring stays). Its Raft address must not change while other members
// cannot reach it under the new one: keep it stable.
func (n *Node) Join(ctx context.Context, addr string) error {
	body, _ := json.Marshal(n.self())
	for attempt := 0; ; attempt++ {
		err := n.post(ctx, addr, pathJoin, body, false, nil)
		if err == nil {
			break
		}
		if !retryable(err) || ctx.Err() != nil {
			return fmt.Errorf("cluster: join via %s: %w", addr, err)
		}
		if err := sleepCtx(ctx, backoff(attempt)); err != nil {
			return fmt.Errorf("cluster: join via %s: %w (last: %v)", addr, err, ctx.Err())
		}
	}
	return n.waitFor(ctx, func(md *Metadata) bool { return md.Members[n.cfg.ID].State == Serving })
}

// Leave is a planned leave: this node asks the leader to mark it leaving
// (still in the ring: the point where its names are to be handed over),
// then to take it out of the ring and the Raft configuration. A leader
// first hands leadership to another member.
func (n *Node) Leave(ctx context.Context) error {
	if n.raft.State() == raft.Leader {
		if err := n.raft.LeadershipTransfer().Error(); err != nil {
			return fmt.Errorf("cluster: leave: leadership transfer: %w", err)
		}
	}
	return n.remove(ctx, n.cfg.ID, true, false)
}

// Remove takes member id out of the ring and the Raft configuration,
// through the leader. It is how a dead node's names get a live owner
// again; until then they have none (fail closed).
func (n *Node) Remove(ctx context.Context, id string) error { return n.remove(ctx, id, false, false) }

// Stop is the planned leave of a node that will come back (SIGTERM of
// 'baton serve'): this node's names are handed over and it leaves the
// ring, marked stopped, but stays a Raft voter; started again on its data
// directory it comes back into the ring (Rejoin). A leader first hands
// leadership to another member.
func (n *Node) Stop(ctx context.Context) error {
	if n.raft.State() == raft.Leader {
		if err := n.raft.LeadershipTransfer().Error(); err != nil {
			return fmt.Errorf("cluster: stop: leadership transfer: %w", err)
		}
	}
	return n.remove(ctx, n.cfg.ID, true, true)
}

// Rejoin puts a node restarted from its data directory back into the
// ring if it is out of it (it stopped, or its join was cut short), with
// its current addresses, through the leader; a member in the ring is left
// as it is. It waits until the node is serving.
func (n *Node) Rejoin(ctx context.Context) error {
	body, _ := json.Marshal(n.self())
	if err := n.toLeader(ctx, pathJoin, body, nil); err != nil {
		return fmt.Errorf("cluster: rejoin: %w", err)
	}
	return n.waitFor(ctx, func(md *Metadata) bool { return md.Members[n.cfg.ID].State == Serving })
}

func (n *Node) remove(ctx context.Context, id string, planned, stop bool) error {
	body, _ := json.Marshal(removeRequest{ID: id, Planned: planned, Stop: stop})
	err := n.toLeader(ctx, pathRemove, body, nil)
	var he *httpError
	if errors.As(err, &he) && he.Status == http.StatusNotFound {
		return fmt.Errorf("%w: %s", ErrUnknownMember, id)
	}
	return err
}

// AcquireEpoch commits a fresh token epoch for this node through Raft,
// waits until this node has applied the log up to it (so that its ring is
// at least as recent as the epoch), and installs it in Tokens. Only then
// does Route count the epoch. A node calls it before it serves after a
// start and when Route answers NotReady (a ring change gave it names).
func (n *Node) AcquireEpoch(ctx context.Context) (uint64, error) {
	var res applyResult
	for attempt := 0; ; attempt++ {
		var err error
		res, err = n.propose(ctx, pathEpoch, epochRequest{ID: n.cfg.ID})
		if err != nil {
			return 0, err
		}
		n.mu.Lock()
		used := n.usedEpoch
		n.mu.Unlock()
		if res.Epoch > used {
			break
		}
		// This node held epoch used in a cluster whose state it lost to
		// the one it follows now, which has not reached it yet: never
		// take an epoch at or below one this node used. Each request
		// raises the cluster's last epoch by one.
		if attempt >= maxEpochCatchUp {
			return 0, fmt.Errorf("cluster: the cluster's epoch %d is still below %d, the one this node used before its state was replaced; restart it on an empty data directory", res.Epoch, used)
		}
	}
	// A concurrent call may have installed a later epoch already: keep it.
	if err := n.tokens.SetEpoch(res.Epoch); err != nil && !errors.Is(err, ErrEpochNotAbove) {
		return 0, err
	}
	n.mu.Lock()
	if res.Epoch <= n.usedEpoch {
		// A replacement came in between: this epoch is not above the
		// one held then.
		n.mu.Unlock()
		return 0, fmt.Errorf("cluster: epoch %d committed while this node's state was replaced; ask again", res.Epoch)
	}
	if res.RingVersion >= n.epochRing {
		n.epochRing, n.hasEpoch = res.RingVersion, true
	}
	n.mu.Unlock()
	return res.Epoch, nil
}

// Tokens returns this node's fencing-token source (a
// locktable.TokenSource): tokens under the epoch AcquireEpoch installed
// last. When half of an epoch is used the node commits the next one in
// the background.
func (n *Node) Tokens() *Tokens { return n.tokens }

// renew commits a fresh epoch whenever asked (Tokens running low), until
// Shutdown.
func (n *Node) renew() {
	defer n.renewWG.Done()
	ctx, cancel := n.untilShutdown()
	defer cancel()
	for {
		select {
		case <-n.done:
			return
		case <-n.renewCh:
		}
		for attempt := 0; ; attempt++ {
			e, err := n.AcquireEpoch(ctx)
			if err == nil {
				n.log.Info("token epoch renewed", "epoch", e)
				break
			}
			n.log.Warn("token epoch renewal failed", "err", err)
			if sleepCtx(ctx, backoff(attempt)) != nil {
				return
			}
		}
	}
}

// RaiseLease records that a client was granted lease, when it is above the
// largest recorded; it writes to Raft only then. The lease is rounded up
// to a millisecond; one above MaxRecordedLease is refused.
func (n *Node) RaiseLease(ctx context.Context, lease time.Duration) error {
	if md, _ := n.fsm.read(); lease <= md.MaxLease {
		return nil
	}
	if lease <= 0 || lease > MaxRecordedLease {
		return fmt.Errorf("cluster: lease %v out of range (0, %v]", lease, MaxRecordedLease)
	}
	_, err := n.propose(ctx, pathLease, leaseRequest{LeaseMS: uint64((lease + time.Millisecond - 1) / time.Millisecond)})
	return err
}

// Metadata returns a copy of the metadata this node has applied.
func (n *Node) Metadata() Metadata { md, _ := n.fsm.read(); return md }

// Ring returns the ring this node has applied.
func (n *Node) Ring() *Ring { return n.fsm.currentRing() }

// AppliedRingVersion is the version of the ring this node has applied (0
// before the first). A node is ready to serve when it has applied the
// latest ring (see WaitRing).
func (n *Node) AppliedRingVersion() uint64 { return n.Ring().Version() }

// History returns the recent rings this node applied, with their commit
// times, oldest first.
func (n *Node) History() []RingEntry {
	n.fsm.mu.Lock()
	defer n.fsm.mu.Unlock()
	return n.fsm.history.Entries()
}

// Owner returns the member that owns name in this node's applied ring,
// and false for an empty ring. A dead member that is not removed yet
// still owns its names: no other node may grant them (fail closed).
func (n *Node) Owner(name string) (Member, bool) {
	id := n.Ring().Owner(name)
	if id == "" {
		return Member{}, false
	}
	return n.fsm.member(id)
}

// Serves reports whether this node owns name in the ring it has applied.
func (n *Node) Serves(name string) bool { return n.Ring().Owner(name) == n.cfg.ID }

// Leader returns the leader's member record, and false when no leader is
// known or its record is not applied yet.
func (n *Node) Leader() (Member, bool) {
	_, id := n.raft.LeaderWithID()
	if id == "" {
		return Member{}, false
	}
	return n.fsm.member(string(id))
}

// IsLeader reports whether this node is the Raft leader.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// Unreachable returns, on the leader, the members it has failed to
// heartbeat since it became leader, with their last contact; on a
// follower, nothing. Such a member still owns its names until it is
// removed.
func (n *Node) Unreachable() map[string]time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[string]time.Time, len(n.unreachable))
	for k, v := range n.unreachable {
		out[k] = v
	}
	return out
}

// WaitRing waits until this node has applied a ring of at least version.
func (n *Node) WaitRing(ctx context.Context, version uint64) error {
	return n.waitFor(ctx, func(md *Metadata) bool { return md.RingVersion >= version })
}

// waitFor waits until cond holds on the applied metadata.
func (n *Node) waitFor(ctx context.Context, cond func(*Metadata) bool) error {
	for {
		ch, _ := n.fsm.wait()
		if md, _ := n.fsm.read(); cond(&md) {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// waitIndex waits until this node has applied log index.
func (n *Node) waitIndex(ctx context.Context, index uint64) error {
	for {
		ch, applied := n.fsm.wait()
		if applied >= index {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Shutdown stops Raft and closes the data directory without leaving the
// cluster: to the others this node is dead until it comes back or is
// removed.
func (n *Node) Shutdown() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	n.mu.Unlock()
	close(n.done)
	n.renewWG.Wait()
	err := n.raft.Shutdown().Error()
	n.raft.DeregisterObserver(n.observer)
	close(n.obsCh)
	<-n.obsDone
	// Close the pooled outbound connections too: Close alone leaves them
	// open, and the peers' goroutines serving them wait on them.
	n.trans.CloseStreams()
	if cerr := n.trans.Close(); err == nil {
		err = cerr
	}
	if cerr := n.store.Close(); err == nil {
		err = cerr
	}
	return err
}

// propose commits the typed write req at path (pathEpoch, pathLease,
// pathHanded) through the leader (this node, or the leader's Handler, one
// hop) and waits until this node has applied it.
func (n *Node) propose(ctx context.Context, path string, req any) (applyResult, error) {
	data, err := json.Marshal(req)
	if err != nil {
		return applyResult{}, err
	}
	var res applyReply
	if err := n.toLeader(ctx, path, data, &res); err != nil {
		return applyResult{}, err
	}
	if res.Error != "" {
		return res.applyResult, errors.New(res.Error)
	}
	if err := n.waitIndex(ctx, res.Index); err != nil {
		return res.applyResult, fmt.Errorf("cluster: wait for entry %d to apply: %w", res.Index, err)
	}
	return res.applyResult, nil
}

// toLeader runs the write at path on the leader: locally when this node
// leads, else by one forwarded request to the leader's Handler. It
// retries, within ctx, while there is no leader or leadership moves.
func (n *Node) toLeader(ctx context.Context, path string, body []byte, out any) error {
	var last error = ErrNoLeader
	for attempt := 0; ; attempt++ {
		n.mu.Lock()
		closed := n.closed
		n.mu.Unlock()
		if closed {
			return ErrClosed
		}
		var err error
		if n.raft.State() == raft.Leader {
			err = n.leaderDo(ctx, path, body, out)
		} else if m, ok := n.Leader(); ok && m.AdminAddr != "" {
			err = n.post(ctx, m.AdminAddr, path, body, true, out)
		} else {
			err = ErrNoLeader
		}
		if err == nil || !retryable(err) {
			return err
		}
		last = err
		if sleepCtx(ctx, backoff(attempt)) != nil {
			return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		}
	}
}

func backoff(attempt int) time.Duration {
	return min(10*time.Millisecond<<min(attempt, 5), 250*time.Millisecond)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// retryable reports errors after which the same write may succeed on a
// new leader.
func retryable(err error) bool {
	var he *httpError
	if errors.As(err, &he) {
		return he.Status == http.StatusServiceUnavailable
	}
	var ne net.Error
	return errors.Is(err, ErrNoLeader) || errors.Is(err, ErrNotLeader) ||
		errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) ||
		errors.Is(err, raft.ErrLeadershipTransferInProgress) || errors.As(err, &ne) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

// leaderDo runs a write on this node, which must be the leader.
func (n *Node) leaderDo(ctx context.Context, path string, body []byte, out any) error {
	if n.raft.State() != raft.Leader {
		return ErrNotLeader
	}
	timeout := 10 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(dl), time.Millisecond)
	}
	op, err := parseWrite(path, body)
	if err != nil {
		return &httpError{Status: http.StatusBadRequest, Msg: err.Error()}
	}
	switch op := op.(type) {
	case Member:
		return n.addMember(ctx, op, timeout)
	case removeRequest:
		return n.removeMember(ctx, op.ID, op.Planned, op.Stop, timeout)
	}
	c, err := n.opCommand(op)
	if err != nil {
		return err
	}
	c.At = n.cfg.Now()
	res, index, err := n.applyEntry(c, timeout)
	if err != nil {
		return err
	}
	if out != nil {
		// The entry's own error goes back in the reply, to the member
		// that forwarded the write.
		*out.(*applyReply) = applyReply{applyResult: res, Index: index}
	}
	return nil
}

// addMember, on the leader: record the member as joining, add it to the
// Raft configuration as a voter, then, once the prior owners of the names
// it will own have handed them over (handoff.go, at most the hand-off
// timeout), put it in the ring. A member that is out of the ring (it
// stopped, Stop) comes back the same way.
func (n *Node) addMember(ctx context.Context, m Member, timeout time.Duration) error {
	md, _ := n.fsm.read()
	cur, known := md.Members[m.ID]
	if known && cur.State == Serving && cur.RaftAddr == m.RaftAddr &&
		cur.ProtocolAddr == m.ProtocolAddr && cur.AdminAddr == m.AdminAddr {
		return nil // already in: a retried join
	}
	// A serving member that joins again (restarted on other addresses)
	// keeps its place in the ring: only its record and Raft address change.
	if !known || cur.State != Serving {
		m.State = Joining
		if err := n.applyLocal(command{Op: opPutMember, Member: m, At: n.cfg.Now()}, timeout); err != nil {
			return err
		}
	}
	if err := n.raft.AddVoter(raft.ServerID(m.ID), raft.ServerAddress(m.RaftAddr), 0, timeout).Error(); err != nil {
		return err
	}
	serve := func() error {
		m.State = Serving
		return n.applyLocal(command{Op: opPutMember, Member: m, At: n.cfg.Now()}, timeout)
	}
	if known && cur.State == Serving {
		return serve()
	}
	members := append(md.ring().Members(), m.ID)
	return n.proposeChange(ctx, members, m.ID, timeout, serve)
}

// removeMember, on the leader. A planned leave (planned) marks the member
// leaving, still in the ring, and once it has handed its names over
// (handoff.go, at most the hand-off timeout) takes it out of the ring and
// the metadata, then out of the Raft configuration; with stop, it stays
// a voter, out of the ring ("stopped"), and comes back into the ring
// when it starts again (Rejoin). A removal that is not planned (a dead
// node) takes it out at once: its names are gated on their new owners.
func (n *Node) removeMember(ctx context.Context, id string, planned, stop bool, timeout time.Duration) error {
	md, _ := n.fsm.read()
	m, ok := md.Members[id]
	if !ok {
		return &httpError{Status: http.StatusNotFound, Msg: ErrUnknownMember.Error() + ": " + id}
	}
	remove := func() error {
		if err := n.applyLocal(command{Op: opRemoveMember, ID: id, At: n.cfg.Now()}, timeout); err != nil {
			return err
		}
		return n.raft.RemoveServer(raft.ServerID(id), 0, timeout).Error()
	}
	if planned && stop && m.State == Stopped {
		return nil // a retried stop
	}
	if !planned || !m.inRing() {
		if stop {
			return nil // out of the ring already (joining): nothing to hand over
		}
		return remove()
	}
	if m.State == Serving {
		m.State = Leaving
		if err := n.applyLocal(command{Op: opPutMember, Member: m, At: n.cfg.Now()}, timeout); err != nil {
			return err
		}
	}
	commit := remove
	if stop {
		commit = func() error {
			m.State = Stopped
			return n.applyLocal(command{Op: opPutMember, Member: m, At: n.cfg.Now()}, timeout)
		}
	}
	members := slices.DeleteFunc(md.ring().Members(), func(x string) bool { return x == id })
	return n.proposeChange(ctx, members, id, timeout, commit)
}

func (n *Node) applyLocal(c command, timeout time.Duration) error {
	_, err := n.applyLocalResult(c, timeout)
	return err
}

// applyEntry appends c to the log on this node, the leader, and returns
// the entry's result and index; the result's own Error is the caller's.
func (n *Node) applyEntry(c command, timeout time.Duration) (applyResult, uint64, error) {
	if c.ClusterID == "" {
		// Every entry says which cluster appended it (Metadata.ClusterID).
		c.ClusterID = n.ClusterID()
	}
	data, err := json.Marshal(c)
	if err != nil {
		return applyResult{}, 0, err
	}
	f := n.raft.Apply(data, timeout)
	if err := f.Error(); err != nil {
		return applyResult{}, 0, err
	}
	res, _ := f.Response().(applyResult)
	return res, f.Index(), nil
}

// Members returns the members this node has applied, sorted by id.
func (n *Node) Members() []Member { md, _ := n.fsm.read(); return md.MemberList() }

// Voters returns the ids in the Raft configuration, sorted.
func (n *Node) Voters() ([]string, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	var ids []string
	for _, s := range f.Configuration().Servers {
		ids = append(ids, string(s.ID))
	}
	slices.Sort(ids)
	return ids, nil
}

// ErrBehind is returned by CaughtUp for a node that has not applied the
// leader's ring yet.
var ErrBehind = errors.New("cluster: behind the leader")

// CaughtUp reports whether this node has applied the latest ring: the
// ring version the leader has applied, asked of the leader over the
// member API (read locally on the leader). It returns nil when the node
// has, ErrNoLeader when it knows no leader (or has not applied the
// leader's member record yet), and an error wrapping ErrBehind or the
// failure to ask the leader otherwise.
func (n *Node) CaughtUp(ctx context.Context) error {
	mine := n.AppliedRingVersion()
	if n.IsLeader() {
		if mine == 0 {
			return fmt.Errorf("%w: no ring applied yet", ErrBehind)
		}
		return nil
	}
	leader, ok := n.Leader()
	if !ok || leader.AdminAddr == "" {
		return ErrNoLeader
	}
	var st Status
	if err := n.do(ctx, http.MethodGet, leader.AdminAddr, pathStatus, nil, false, &st); err != nil {
		return fmt.Errorf("cluster: asking the leader %s for its ring: %w", leader.ID, err)
	}
	if mine < st.AppliedRingVersion || mine == 0 {
		return fmt.Errorf("%w: ring version %d applied here, %d on the leader %s", ErrBehind, mine, st.AppliedRingVersion, leader.ID)
	}
	return nil
}

// WaitAdded waits until this node is a serving member: a node that was
// started neither to bootstrap nor to join waits there until an operator
// has a member add it ('baton cluster join').
func (n *Node) WaitAdded(ctx context.Context) error {
	return n.waitFor(ctx, func(md *Metadata) bool { return md.Members[n.cfg.ID].State == Serving })
}
