package modelcheck

import (
	"fmt"
	"slices"
	"strings"
)

// The cluster-ownership model (package cluster): one lock name owned by
// one node of a ring that Raft commits and each node applies at its own
// pace. Requests are forwarded one hop to the believed owner; a planned
// move freezes the name and hands its state over before the ring commits;
// a dead owner fails closed until removed, and its names' new owner grants
// nothing until no client can still believe a dead incarnation's grant.
// It checks one holder, increasing tokens, no lost claim and no loop.
// Design: docs/design/2026-12-02-cluster-fail-closed-model.md and its
// #internalmodelcheckclustergo.

// ClusterConfig bounds the cluster-ownership model.
type ClusterConfig struct {
	Nodes    int // nodes (2..3)
	Clients  int // clients (1..3)
	Lives    int // acquisitions by each client, one after another (1..2)
	Changes  int // ring changes: planned moves and removals of a dead owner (0..3)
	Deaths   int // node deaths (0..2), at most one node down at a time
	Restarts int // restarts of a dead node from its data directory (0..2)
	// Wipes is how many of the restarts find the data directory wiped
	// (new Raft state, no epoch), counted among Restarts (0..Restarts).
	Wipes int
	// V1 is how many of the clients, counted from the last, speak
	// protocol version 1: their claims do not continue through a planned
	// move (0..Clients).
	V1 int
	// Mutation, when not empty, drops one rule so that the checker must
	// fail; see ClusterMutations.
	Mutation string
}

// DefaultClusterConfig is the configuration always checked: three nodes,
// two clients taking the lock once each, the second of them a version 1
// client, one ring change, one death and one restart. The tests check
// larger ones too (two ring changes).
func DefaultClusterConfig() ClusterConfig {
	return ClusterConfig{Nodes: 3, Clients: 2, Lives: 1, Changes: 1, Deaths: 1, Restarts: 1, V1: 1}
}

// Mutations of the cluster model.
const (
	// MutSwitchFirst commits the new ring when a planned move begins, before
	// the prior owner has handed the lock's state to the new owner.
	MutSwitchFirst = "switch-first"
	// MutForwardAgain lets a node forward a request that was already
	// forwarded, instead of answering a retryable error.
	MutForwardAgain = "forward-again"
	// MutNoWarmup opens the gate of a name taken over from a dead node (or
	// owned by a restarted node) at once.
	MutNoWarmup = "no-warmup"
	// MutWipedServes lets a node restarted on a wiped data directory (new
	// Raft state) serve the names it owns at once, with a fresh epoch but
	// without the warm-up of a restart: it has forgotten who held them
	// just as much (the node did this until a review found it).
	MutWipedServes = "wiped-serves"
	// MutWipedReusesEpoch lets a node restarted on a wiped data directory
	// take its first epoch from the clock floor, as a node that forms a
	// cluster does, instead of committing one above every epoch the
	// cluster used (the node did this until a review found it: its tokens
	// repeated ones already issued).
	MutWipedReusesEpoch = "wiped-reuses-epoch"
	// MutWipedForms lets a node restarted on a wiped data directory form
	// a cluster of its own while the members of its cluster exist (its
	// -bootstrap, or a -join naming itself, with the others out of reach
	// for a moment): it owns every name in its own ring, ungated, under
	// the clock floor's epoch. The rule it breaks: a node with new Raft
	// state forms a cluster only when every listed member answers that it
	// belongs to none, so never while a member of its cluster exists.
	MutWipedForms = "wiped-forms"
	// MutStaleEpoch lets a node that must take a fresh epoch (after a
	// restart or on taking a name) reuse the epoch in its data directory
	// instead of committing a new one through Raft.
	MutStaleEpoch = "stale-epoch"
	// MutMoveGated lets a prior owner begin a planned move of a name it
	// still gates (taken over from a dead node, or owned across a
	// restart): the new owner gets it handed over, ungated.
	MutMoveGated = "move-gated"
	// MutGrantBeforeTold ends a version 1 holder's claim on a moving name
	// when the prior owner sends it ERROR 0x01, instead of keeping it
	// until the client has hung up or its lease has run out: the claim
	// queued behind it is granted while the holder has not read the ERROR
	// (the server did this until the cluster fault suite found it).
	MutGrantBeforeTold = "grant-before-told"
	// MutHandoffBeforeHangup lets the prior owner hand over while a told
	// version 1 holder's claim is still there, ending it as the export
	// ends every claim that does not continue, instead of waiting until
	// the client has hung up or its lease has run out.
	MutHandoffBeforeHangup = "handoff-before-hangup"
)

// ClusterMutations lists the mutations of the cluster model.
var ClusterMutations = []string{MutSwitchFirst, MutForwardAgain, MutNoWarmup, MutStaleEpoch, MutMoveGated, MutGrantBeforeTold,
	MutHandoffBeforeHangup, MutWipedServes, MutWipedReusesEpoch, MutWipedForms}

func (c ClusterConfig) String() string {
	clients := plural(c.Clients, "client")
	if c.V1 > 0 {
		clients += fmt.Sprintf(" (%d version 1)", c.V1)
	}
	s := fmt.Sprintf("%s, %s × %s, %s, %s, %s",
		plural(c.Nodes, "node"), clients, plural(c.Lives, "acquisition"),
		plural(c.Changes, "ring change"), plural(c.Deaths, "death"), plural(c.Restarts, "restart"))
	if c.Wipes > 0 {
		s += fmt.Sprintf(" (%d on a wiped data directory)", c.Wipes)
	}
	if c.Mutation != "" {
		s += ", mutation " + c.Mutation
	}
	return s
}

// Validate reports bounds the checker cannot explore.
func (c ClusterConfig) Validate() error {
	switch {
	case c.Nodes < 2 || c.Nodes > clMaxNodes:
		return fmt.Errorf("nodes must be 2..%d, not %d", clMaxNodes, c.Nodes)
	case c.Clients < 1 || c.Clients > clMaxClients:
		return fmt.Errorf("clients must be 1..%d, not %d", clMaxClients, c.Clients)
	case c.Lives < 1 || c.Lives > 2:
		return fmt.Errorf("acquisitions must be 1..2, not %d", c.Lives)
	case c.Changes < 0 || c.Changes > clMaxChanges:
		return fmt.Errorf("ring changes must be 0..%d, not %d", clMaxChanges, c.Changes)
	case c.Deaths < 0 || c.Deaths > 2:
		return fmt.Errorf("deaths must be 0..2, not %d", c.Deaths)
	case c.Restarts < 0 || c.Restarts > 2:
		return fmt.Errorf("restarts must be 0..2, not %d", c.Restarts)
	case c.Wipes < 0 || c.Wipes > c.Restarts:
		return fmt.Errorf("restarts on a wiped data directory must be 0..%d (the restarts), not %d", c.Restarts, c.Wipes)
	case c.V1 < 0 || c.V1 > c.Clients:
		return fmt.Errorf("version 1 clients must be 0..%d (the clients), not %d", c.Clients, c.V1)
	case c.Mutation != "" && !slices.Contains(ClusterMutations, c.Mutation):
		return fmt.Errorf("mutation must be one of %s, not %q", strings.Join(ClusterMutations, ", "), c.Mutation)
	}
	return nil
}

// Property names reported by the cluster model.
const (
	PropClusterOneHolder = "never two holders of the lock"
	PropClusterTokens    = "tokens of the lock strictly increase across owner changes and restarts"
	PropClusterNoLost    = "no claim is lost: each held or queued claim is on exactly one live node"
	PropClusterNoLoop    = "a request is never forwarded back to a node it passed (no forwarding loop)"
)

const (
	clMaxNodes   = 3
	clMaxClients = 3
	clMaxChanges = 3
)

// Client states.
const (
	clIdle    uint8 = iota
	clSent          // a request is on its way to node to
	clWaiting       // queued on some node
	clHolding       // granted, and the grant is on record on a live node
	clOrphan        // granted by a node that died: still believes it holds
	clTold          // version 1 holder sent ERROR 0x01 by its node: still believes it holds until it reads it
)

type clLock struct {
	present bool // this node has the lock's state
	gated   bool // taken over without verifiable state: grants nothing
	frozen  bool // being handed to another node
	told    bool // the holder is a version 1 client told that the name moves
	holder  int8 // client, or -1
	nq      int8
	queue   [clMaxClients]int8
}

type clNode struct {
	alive     bool
	view      int8  // the ring version this node has applied
	epoch     uint8 // token epoch of this incarnation (kept in the data dir)
	ctr       uint8 // token counter under epoch
	needEpoch bool  // took a name or restarted: commit a fresh epoch first
	formed    bool  // formed a cluster of its own (MutWipedForms): owns the name in its own ring
	lk        clLock
}

type clClient struct {
	st      uint8
	lives   int8
	to      int8  // clSent: the node the request goes to
	fwd     bool  // clSent: already forwarded once
	visited uint8 // clSent: nodes the request passed
}

type clRing struct {
	owner int8
	gated bool // the owner takes the name over from a dead node
}

type clState struct {
	n        [clMaxNodes]clNode
	c        [clMaxClients]clClient
	ring     [clMaxChanges + 1]clRing
	nring    int8 // committed ring versions; the latest is nring-1
	maxEpoch uint8
	maxTok   uint16 // largest token granted, epoch<<8 | counter
	moveFrom int8   // a planned move in progress, or -1
	moveTo   int8
	deaths   int8
	restarts int8
	wipes    int8
}

// Step kinds.
const (
	clSend uint8 = iota
	clDeliver
	clPromote
	clRelease
	clGiveUp
	clApply
	clAcquireEpoch
	clMoveBegin
	clHandoff
	clDie
	clRemove
	clRestart
	clGateOpen
	clReadError
	clEndTold
)

type clStep struct {
	kind  uint8
	n, m  int8 // nodes
	c     int8 // client (clMoveBegin: the version 1 holder told; clHandoff: a told claim ended; or -1)
	what  uint8
	tok   uint16
	ended uint8 // clMoveBegin: the version 1 waiters ended
	once  bool  // clMoveBegin: the told holder's claim ended at once (MutGrantBeforeTold)
}

// What happened on a delivery.
const (
	clDown uint8 = iota
	clRetry
	clGrant
	clQueue
	clForward
	clNotOwner
)

func clNodeName(n int8) string { return string(rune('A' + n)) }

func clTok(t uint16) string { return fmt.Sprintf("(epoch %d, counter %d)", t>>8, t&0xff) }

func (st clStep) String() string {
	c := fmt.Sprintf("c%d", st.c+1)
	n, m := clNodeName(st.n), clNodeName(st.m)
	switch st.kind {
	case clSend:
		return c + " sends an acquire to node " + n
	case clDeliver:
		switch st.what {
		case clDown:
			return "node " + n + " is down: " + c + "'s request fails, it will retry"
		case clRetry:
			return "node " + n + " owns the name but cannot serve it yet: retryable error to " + c
		case clGrant:
			return "node " + n + " grants the lock to " + c + " with token " + clTok(st.tok)
		case clQueue:
			return "node " + n + " queues " + c
		case clForward:
			return "node " + n + " forwards " + c + "'s request to node " + m + ", marked forwarded"
		case clNotOwner:
			return "node " + n + " gets " + c + "'s forwarded request, does not own the name: retryable error"
		}
	case clPromote:
		return "node " + n + " grants the lock to the head of its queue, " + c + ", token " + clTok(st.tok)
	case clRelease:
		return c + " releases the lock on node " + n
	case clGiveUp:
		return c + " gives up the lock of a dead node (its lease ran out)"
	case clApply:
		return fmt.Sprintf("node %s applies ring version %d (owner %s)", n, st.what, m)
	case clAcquireEpoch:
		return fmt.Sprintf("node %s commits token epoch %d through Raft and catches up to ring version %d", n, st.tok, st.what)
	case clMoveBegin:
		s := "planned move: node " + n + " freezes the name and hands it to node " + m
		if st.what != 0 {
			s += "; the new ring (owner " + m + ") is committed at once"
		}
		if st.c >= 0 {
			s += "; sends ERROR 0x01 to " + c + ", its version 1 holder"
			if st.once {
				s += ", and ends its claim at once"
			} else {
				s += ", and keeps its claim until it hangs up"
			}
		}
		for w := range int8(clMaxClients) {
			if st.ended&(1<<w) != 0 {
				s += fmt.Sprintf("; ends c%d, a version 1 waiter, with ERROR 0x01", w+1)
			}
		}
		return s
	case clHandoff:
		s := "node " + m + " installs the state handed over by node " + n
		if st.c >= 0 {
			s += " (its export ended " + c + "'s told claim)"
		}
		if st.what != 0 {
			s += "; the new ring (owner " + m + ") is committed"
		}
		return s
	case clDie:
		return "node " + n + " dies, losing its lock state"
	case clRemove:
		return "dead node " + n + " is removed: the new ring gives the name to node " + m + ", gated"
	case clRestart:
		if st.what == 2 {
			return "node " + n + " restarts on a wiped data directory and forms a cluster of its own (it owns the name there, ungated, token epoch 1 from the clock floor)"
		}
		if st.what != 0 {
			return "node " + n + " restarts on a wiped data directory (new Raft state, no epoch) and rejoins under its id"
		}
		return "node " + n + " restarts from its data directory"
	case clGateOpen:
		return "node " + n + " opens the gate of the name (warm-up elapsed)"
	case clReadError:
		return c + " reads ERROR 0x01: it stops its work, no longer holds the lock and hangs up"
	case clEndTold:
		return "node " + n + " ends " + c + "'s told claim (the client hung up, or its lease ran out)"
	}
	return "?"
}

type clModel struct {
	cfg ClusterConfig
}

// v1 reports whether client c speaks protocol version 1.
func (m *clModel) v1(c int8) bool { return int(c) >= m.cfg.Clients-m.cfg.V1 }

// tell is the start of a planned move at node n for its version 1
// claims: waiters are ended, a holder is told and its record kept (ended
// at once under MutGrantBeforeTold). It returns the holder told, or -1,
// and the waiters ended.
func (m *clModel) tell(s *clState, n int8) (told int8, ended uint8) {
	lk := &s.n[n].lk
	told = -1
	if h := lk.holder; h >= 0 && !lk.told && m.v1(h) {
		told = h
		s.c[h].st = clTold
		if m.cfg.Mutation == MutGrantBeforeTold {
			lk.holder = -1
		} else {
			lk.told = true
		}
	}
	var q [clMaxClients]int8
	nq := int8(0)
	for _, c := range lk.queue[:lk.nq] {
		if m.v1(c) {
			ended |= 1 << c
			s.c[c].st = clIdle // it never held: it acquires again
			continue
		}
		q[nq] = c
		nq++
	}
	lk.queue, lk.nq = q, nq
	return told, ended
}

func (m *clModel) owner(s *clState, n int8) int8 {
	if s.n[n].formed {
		return n // its own cluster's ring has it alone
	}
	return s.ring[s.n[n].view].owner
}

func (m *clModel) ready(s *clState, n int8) bool {
	nd := &s.n[n]
	return nd.alive && m.owner(s, n) == n && nd.lk.present && !nd.lk.gated && !nd.lk.frozen && !nd.needEpoch
}

// grant gives the lock on node n to client c, checking the token.
func (m *clModel) grant(s *clState, n, c int8) (uint16, *failure) {
	nd := &s.n[n]
	nd.ctr++
	tok := uint16(nd.epoch)<<8 | uint16(nd.ctr)
	var f *failure
	if tok <= s.maxTok {
		f = fail(PropClusterTokens, "node %s grants token %s, not above the largest token granted before, %s",
			clNodeName(n), clTok(tok), clTok(s.maxTok))
	}
	s.maxTok = max(s.maxTok, tok)
	nd.lk.holder = c
	s.c[c].st = clHolding
	return tok, f
}

// apply makes node n apply ring version v.
func (m *clModel) apply(s *clState, n int8, v int8) {
	nd := &s.n[n]
	old, nw := m.owner(s, n), s.ring[v].owner
	nd.view = v
	switch {
	case nw == n && old != n:
		nd.needEpoch = true
		// A name taken without its state handed over (its owner died, or
		// this node restarted before applying the hand-off's ring) cannot
		// be verified: gated.
		if !nd.lk.present || s.ring[v].gated {
			nd.lk = clLock{present: true, gated: true, holder: -1}
		}
	case old == n && nw != n:
		// Without a hand-off any claim still here is lost; the checker
		// reports it (PropClusterNoLost).
		nd.lk = clLock{holder: -1}
	}
}

func (m *clModel) next(s clState) []succ[clState, clStep] {
	var out []succ[clState, clStep]
	emit := func(t clState, st clStep, f *failure) {
		out = append(out, succ[clState, clStep]{step: st, to: t, f: f})
	}
	nodes, clients := int8(m.cfg.Nodes), int8(m.cfg.Clients)
	orphans := false
	for c := range clients {
		if s.c[c].st == clOrphan {
			orphans = true
		}
	}
	// Clients.
	for c := range clients {
		cl := s.c[c]
		switch cl.st {
		case clIdle:
			if cl.lives == 0 {
				continue
			}
			for n := range nodes {
				if !s.n[n].alive {
					continue
				}
				t := s
				t.c[c] = clClient{st: clSent, lives: cl.lives, to: n, visited: 1 << n}
				emit(t, clStep{kind: clSend, n: n, c: c}, nil)
			}
		case clSent:
			t := s
			n := cl.to
			tc := &t.c[c]
			nd := &t.n[n]
			st := clStep{kind: clDeliver, n: n, c: c}
			var f *failure
			switch {
			case !nd.alive:
				st.what = clDown
				tc.st = clIdle
			case m.owner(&t, n) == n:
				switch {
				case !nd.lk.present || nd.lk.frozen || nd.needEpoch:
					st.what = clRetry
					tc.st = clIdle
				case !nd.lk.gated && nd.lk.holder < 0 && nd.lk.nq == 0:
					st.what = clGrant
					st.tok, f = m.grant(&t, n, c)
				default:
					st.what = clQueue
					nd.lk.queue[nd.lk.nq] = c
					nd.lk.nq++
					tc.st = clWaiting
				}
			case cl.fwd && m.cfg.Mutation != MutForwardAgain:
				st.what = clNotOwner
				tc.st = clIdle
			default:
				o := m.owner(&t, n)
				st.what, st.m = clForward, o
				if cl.visited&(1<<o) != 0 {
					f = fail(PropClusterNoLoop, "node %s forwards c%d's request back to node %s, which it already passed", clNodeName(n), c+1, clNodeName(o))
				}
				tc.to, tc.fwd, tc.visited = o, true, cl.visited|1<<o
			}
			emit(t, st, f)
		case clHolding:
			for n := range nodes {
				if s.n[n].alive && s.n[n].lk.present && s.n[n].lk.holder == c && !s.n[n].lk.told {
					t := s
					t.n[n].lk.holder = -1
					t.c[c].lives--
					t.c[c].st = clIdle
					emit(t, clStep{kind: clRelease, n: n, c: c}, nil)
				}
			}
		case clOrphan:
			t := s
			t.c[c].lives--
			t.c[c].st = clIdle
			emit(t, clStep{kind: clGiveUp, c: c}, nil)
		case clTold:
			t := s
			t.c[c].st = clIdle
			t.c[c].lives--
			emit(t, clStep{kind: clReadError, c: c}, nil)
		}
	}
	latest := s.nring - 1
	changesLeft := int(s.nring-1) < m.cfg.Changes
	down := int8(-1)
	for n := range nodes {
		if !s.n[n].alive {
			down = n
		}
	}
	for n := range nodes {
		nd := s.n[n]
		if nd.alive {
			// A told claim ends once its client no longer believes: its
			// hang-up arrives, or its lease runs out.
			if nd.lk.present && nd.lk.told && s.c[nd.lk.holder].st != clTold {
				t := s
				t.n[n].lk.holder, t.n[n].lk.told = -1, false
				emit(t, clStep{kind: clEndTold, n: n, c: nd.lk.holder}, nil)
			}
			if m.ready(&s, n) && nd.lk.holder < 0 && nd.lk.nq > 0 {
				t := s
				lk := &t.n[n].lk
				c := lk.queue[0]
				copy(lk.queue[:], lk.queue[1:])
				lk.nq--
				lk.queue[lk.nq] = 0
				tok, f := m.grant(&t, n, c)
				emit(t, clStep{kind: clPromote, n: n, c: c, tok: tok}, f)
			}
			if nd.view < latest && !nd.formed {
				t := s
				v := nd.view + 1
				m.apply(&t, n, v)
				emit(t, clStep{kind: clApply, n: n, m: s.ring[v].owner, what: uint8(v)}, nil)
			}
			if nd.needEpoch {
				t := s
				tn := &t.n[n]
				if m.cfg.Mutation == MutStaleEpoch && tn.epoch != 0 {
					// Reuses the epoch of its data directory.
					tn.ctr, tn.needEpoch = 0, false
				} else if m.cfg.Mutation == MutWipedReusesEpoch && tn.epoch == 0 {
					// A wiped node (no epoch kept) takes the clock floor's,
					// the first epoch the cluster used.
					tn.epoch, tn.ctr, tn.needEpoch = 1, 0, false
				} else {
					t.maxEpoch++
					tn.epoch, tn.ctr, tn.needEpoch = t.maxEpoch, 0, false
				}
				// AcquireEpoch returns once the node has applied the log up to
				// the epoch's entry, so its ring is at least that recent.
				for tn.view < latest {
					m.apply(&t, n, tn.view+1)
				}
				// Catching up may hand the node a name: that one needs the
				// fresh epoch too, which this one is (committed after the ring).
				tn.needEpoch = false
				emit(t, clStep{kind: clAcquireEpoch, n: n, tok: uint16(tn.epoch), what: uint8(latest)}, nil)
			}
			if nd.lk.present && nd.lk.gated && (!orphans || m.cfg.Mutation == MutNoWarmup) {
				t := s
				t.n[n].lk.gated = false
				emit(t, clStep{kind: clGateOpen, n: n}, nil)
			}
			// A planned move of the name away from its committed owner.
			if changesLeft && s.moveFrom < 0 && s.ring[latest].owner == n && nd.view == latest &&
				nd.lk.present && (!nd.lk.gated || m.cfg.Mutation == MutMoveGated) && !nd.needEpoch {
				for y := range nodes {
					if y == n || !s.n[y].alive {
						continue
					}
					t := s
					t.n[n].lk.frozen = true
					t.moveFrom, t.moveTo = n, y
					st := clStep{kind: clMoveBegin, n: n, m: y}
					st.c, st.ended = m.tell(&t, n)
					st.once = st.c >= 0 && !t.n[n].lk.told
					if m.cfg.Mutation == MutSwitchFirst {
						t.ring[t.nring] = clRing{owner: y}
						t.nring++
						st.what = 1
					}
					emit(t, st, nil)
				}
			}
			// The hand-off waits for the told holder's record to end.
			if s.moveFrom == n && s.n[s.moveTo].alive && (!nd.lk.told || m.cfg.Mutation == MutHandoffBeforeHangup) {
				t := s
				y := s.moveTo
				// The hand-off carries the ring version it is based on; the
				// receiver applies the ring up to it before installing, so
				// that applying an older ring cannot wipe what it installed.
				for t.n[y].view < latest {
					m.apply(&t, y, t.n[y].view+1)
				}
				lk := t.n[n].lk
				lk.frozen, lk.gated = false, false
				st := clStep{kind: clHandoff, n: n, m: y, c: -1}
				if lk.told {
					// Only under MutHandoffBeforeHangup: the export ends a
					// claim that does not continue, it carries the others.
					st.c = lk.holder
					lk.holder, lk.told = -1, false
				}
				if cur := t.n[y].lk; cur.present {
					// Only reachable when the ring switched first: merge.
					if lk.holder < 0 {
						lk.holder = cur.holder
					}
					for i := range cur.nq {
						lk.queue[lk.nq] = cur.queue[i]
						lk.nq++
					}
				}
				t.n[y].lk = lk
				t.n[n].lk = clLock{holder: -1}
				t.moveFrom, t.moveTo = -1, -1
				if m.cfg.Mutation != MutSwitchFirst {
					t.ring[t.nring] = clRing{owner: y}
					t.nring++
					st.what = 1
				}
				emit(t, st, nil)
			}
			// A death, while every other node is up.
			if down < 0 && int(s.deaths) < m.cfg.Deaths {
				t := s
				t.deaths++
				tn := &t.n[n]
				tn.alive = false
				for c := range clients {
					tc := &t.c[c]
					if tn.lk.present && tn.lk.holder == c && (!tn.lk.told || tc.st == clTold) {
						tc.st = clOrphan
					}
					for i := range tn.lk.nq {
						if tn.lk.queue[i] == c {
							tc.st = clIdle
						}
					}
				}
				tn.lk = clLock{holder: -1}
				tn.needEpoch = false
				if t.moveFrom == n {
					t.moveFrom, t.moveTo = -1, -1
				} else if t.moveTo == n {
					t.n[t.moveFrom].lk.frozen = false
					t.moveFrom, t.moveTo = -1, -1
				}
				emit(t, clStep{kind: clDie, n: n}, nil)
			}
			continue
		}
		// A dead node.
		if changesLeft && s.ring[latest].owner == n {
			for y := range nodes {
				if y == n || !s.n[y].alive {
					continue
				}
				t := s
				t.ring[t.nring] = clRing{owner: y, gated: true}
				t.nring++
				emit(t, clStep{kind: clRemove, n: n, m: y}, nil)
			}
		}
		for wipe := range 2 {
			if int(s.restarts) >= m.cfg.Restarts || (wipe == 1 && int(s.wipes) >= m.cfg.Wipes) {
				continue
			}
			t := s
			t.restarts++
			tn := &t.n[n]
			tn.alive = true
			tn.lk = clLock{holder: -1}
			// The epoch stays in the data directory (only MutStaleEpoch reads
			// it); the counter was in memory. A wiped directory keeps none:
			// the node rejoins under its id, with the ring the cluster has.
			tn.ctr, tn.needEpoch = 0, true
			if wipe == 1 {
				t.wipes++
				tn.epoch = 0
			}
			if m.owner(&t, n) == n {
				tn.lk = clLock{present: true, gated: wipe == 0 || m.cfg.Mutation != MutWipedServes, holder: -1}
			}
			emit(t, clStep{kind: clRestart, n: n, what: uint8(wipe)}, nil)
			if wipe == 1 && m.cfg.Mutation == MutWipedForms {
				// It forms a cluster of its own instead: the only member,
				// nobody held anything before it (no gate), its first epoch
				// the clock floor's.
				tn.formed, tn.needEpoch, tn.epoch, tn.ctr = true, false, 1, 0
				tn.lk = clLock{present: true, holder: -1}
				emit(t, clStep{kind: clRestart, n: n, what: 2}, nil)
			}
		}
	}
	for i := range out {
		if out[i].f == nil {
			out[i].f = m.invariants(&out[i].to)
		}
	}
	return out
}

func (m *clModel) invariants(s *clState) *failure {
	holders := 0
	for c := range int8(m.cfg.Clients) {
		cl := s.c[c]
		if cl.st == clHolding || cl.st == clOrphan || cl.st == clTold {
			holders++
		}
		if cl.st != clHolding && cl.st != clWaiting {
			continue // a told claim does not continue: its record ends when the client has let go
		}
		records := 0
		for n := range int8(m.cfg.Nodes) {
			lk := &s.n[n].lk
			if !s.n[n].alive || !lk.present {
				continue
			}
			if cl.st == clHolding && lk.holder == c && !lk.told {
				records++
			}
			for i := range lk.nq {
				if cl.st == clWaiting && lk.queue[i] == c {
					records++
				}
			}
		}
		if records != 1 {
			what := "holds"
			if cl.st == clWaiting {
				what = "waits"
			}
			return fail(PropClusterNoLost, "c%d %s, but %d live nodes have its claim", c+1, what, records)
		}
	}
	if holders > 1 {
		return fail(PropClusterOneHolder, "%d clients believe they hold the lock", holders)
	}
	return nil
}

func (s *clState) key(m *clModel) string {
	b := make([]byte, 0, 64)
	bit := func(v bool) byte {
		if v {
			return 1
		}
		return 0
	}
	for n := range m.cfg.Nodes {
		nd := &s.n[n]
		lk := &nd.lk
		b = append(b, bit(nd.alive)|bit(nd.needEpoch)<<1|bit(lk.present)<<2|bit(lk.gated)<<3|bit(lk.frozen)<<4|bit(lk.told)<<5|bit(nd.formed)<<6,
			byte(nd.view), nd.epoch, nd.ctr, byte(lk.holder), byte(lk.nq))
		for i := range lk.nq {
			b = append(b, byte(lk.queue[i]))
		}
	}
	for c := range m.cfg.Clients {
		cl := &s.c[c]
		b = append(b, cl.st, byte(cl.lives), byte(cl.to), bit(cl.fwd), cl.visited)
	}
	for v := range s.nring {
		b = append(b, byte(s.ring[v].owner)|bit(s.ring[v].gated)<<4)
	}
	b = append(b, byte(s.nring), s.maxEpoch, byte(s.maxTok>>8), byte(s.maxTok), byte(s.moveFrom), byte(s.moveTo), byte(s.deaths), byte(s.restarts), byte(s.wipes))
	return string(b)
}

func (m *clModel) initial() clState {
	var s clState
	s.nring = 1
	s.moveFrom, s.moveTo = -1, -1
	for n := range int8(m.cfg.Nodes) {
		// Every node has committed its epoch at start: A has 1, B 2, C 3.
		s.n[n] = clNode{alive: true, epoch: uint8(n + 1), lk: clLock{holder: -1}}
		s.maxEpoch = uint8(n + 1)
	}
	s.n[0].lk.present = true
	for c := range m.cfg.Clients {
		s.c[c] = clClient{lives: int8(m.cfg.Lives)}
	}
	return s
}

// CheckCluster explores every interleaving of cfg breadth first and checks
// the cluster properties in every state and transition. It panics on a
// configuration that Validate rejects.
func CheckCluster(cfg ClusterConfig) Report { return checkCluster(cfg, nil) }

// checkCluster is CheckCluster; seen, if not nil, is called with every
// transition explored (the tests use it to show the model is not vacuous).
func checkCluster(cfg ClusterConfig, seen func(from *clState, st clStep)) Report {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	m := &clModel{cfg: cfg}
	return exploreSucc(Report{Model: "cluster", Config: cfg.String()}, m.initial(), func(s *clState) string { return s.key(m) }, m.next, seen)
}
