package modelcheck

import (
	"fmt"
	"slices"
	"strings"

	"github.com/batonlock/baton/internal/clustercore"
)

// The continuation model: the cluster model with version 2 sessions that
// continue through a planned move. Each client's session is on a host
// node; the hand-off is split into export, install and commit (or a gated
// fallback), hosts adopt their moving claims at the new owner, and
// releases of moving claims are queued and replayed. It checks one
// holder, increasing tokens, no lost claim and no stale claim.
// Real rules run: clustercore's Confirmation.Block and HandoffSessionFacts.
// Design: "Model 5b: version 2 claims across a planned move" and
// #internalmodelcheckclustercontinuego in docs/design/2026-12-07-verification-models-cluster.md;
// the rule is in docs/design/2026-12-02-cluster-handoff.md.

// ContinueConfig bounds the continuation model.
type ContinueConfig struct {
	Nodes    int // nodes (2..3)
	Clients  int // clients (1..3)
	Lives    int // acquisitions by each client, one after another (1..2)
	Changes  int // ring changes: planned moves and removals of a dead owner (0..3)
	Deaths   int // node deaths (0..2), at most one node down at a time
	Restarts int // restarts of a dead node (0..2)
	// Mutation, when not empty, drops one rule so that the checker must
	// fail; see ContinueMutations.
	Mutation string
}

// DefaultContinueConfig is the command's default configuration, the
// cluster model's: three nodes, two clients taking the lock once each,
// one ring change, one death and one restart. The tests check it without
// the race detector; they always check it without the restart, and with
// two nodes.
func DefaultContinueConfig() ContinueConfig {
	return ContinueConfig{Nodes: 3, Clients: 2, Lives: 1, Changes: 1, Deaths: 1, Restarts: 1}
}

// Mutations of the continuation model.
const (
	// MutReleaseAtHost answers the RELEASE of a moving claim at the host,
	// which forgets the claim, instead of queueing it for N.
	MutReleaseAtHost = "release-at-host"
	// MutDropDetachedGrant loses a promotion made at N while the claim was
	// detached: the adoption reports the claim queued.
	MutDropDetachedGrant = "drop-detached-grant"
	// MutAbortAfterExport treats a death of N after the export as one
	// before it: the move ends and P, unfrozen, serves the name.
	MutAbortAfterExport = "abort-after-export"
	// MutAnswerUnconfirmed lets the host answer a client whose claim is
	// moving (a PONG) without N's confirmation: the real outbox is handed
	// the PONG as a push.
	MutAnswerUnconfirmed = "answer-unconfirmed"
	// MutAdoptBeforeCommit lets a host adopt at the new owner of the
	// pending change and N answer before the change has committed.
	MutAdoptBeforeCommit = "adopt-before-commit"
	// MutReleaseAfterAdopt ends a RELEASE that P answers MOVED after the
	// host has adopted the claim, instead of sending it on to N (checking
	// the model found this gap in the design).
	MutReleaseAfterAdopt = "release-after-adopt"
	// MutExportAgain makes P, when N dies after the export, export again
	// for N restarted (finding the names empty) instead of resending what
	// it exported (checking the model found this gap in the design).
	MutExportAgain = "export-again"
	// MutExportDropsAbandoned makes P end, at the export, the records of
	// sessions it cannot hear (a host died, or a kept session's
	// connection broke) instead of handing them over with their lease:
	// the real rule (exportFacts) is told such a session is closing.
	MutExportDropsAbandoned = "export-drops-abandoned"
)

// ContinueMutations lists the mutations of the continuation model.
var ContinueMutations = []string{MutReleaseAtHost, MutDropDetachedGrant, MutAbortAfterExport, MutAnswerUnconfirmed, MutAdoptBeforeCommit,
	MutReleaseAfterAdopt, MutExportAgain, MutExportDropsAbandoned}

// bounds returns the cluster model's configuration with the same bounds.
func (c ContinueConfig) bounds() ClusterConfig {
	return ClusterConfig{Nodes: c.Nodes, Clients: c.Clients, Lives: c.Lives, Changes: c.Changes, Deaths: c.Deaths, Restarts: c.Restarts}
}

func (c ContinueConfig) String() string {
	s := c.bounds().String()
	if c.Mutation != "" {
		s += ", mutation " + c.Mutation
	}
	return s
}

// Validate reports bounds the checker cannot explore.
func (c ContinueConfig) Validate() error {
	if err := c.bounds().Validate(); err != nil {
		return err
	}
	if c.Mutation != "" && !slices.Contains(ContinueMutations, c.Mutation) {
		return fmt.Errorf("mutation must be one of %s, not %q", strings.Join(ContinueMutations, ", "), c.Mutation)
	}
	return nil
}

// Property names reported by the continuation model (besides
// PropClusterOneHolder and PropClusterTokens).
const (
	PropContinueNoLost = "no claim is lost: a client that holds, waits or releases has exactly one record of the right kind " +
		"on a live node or in the hand-off in flight"
	PropContinueNoStale = "no stale claim: every record belongs to a client that holds, waits or has a release on its way, " +
		"or to a session that ended (it expires)"
)

// Client states.
const (
	ccIdle      uint8 = iota
	ccSent            // its acquire is on its way from the host to node to
	ccWaiting         // told QUEUED
	ccHolding         // told GRANTED (or PROMOTED)
	ccOrphan          // believes it holds, and no session tracks its claim any more
	ccReleasing       // sent RELEASE, not yet answered
)

// Move phases.
const (
	ccNoMove uint8 = iota
	ccFrozen
	ccExported
	ccInstalled
	ccLost // P died after the export: what it exported is gone
)

// Where a claim is, as its host sees it.
const (
	ccAttached  uint8 = iota // on its upstream (or the host's table)
	ccMovedSent              // P wrote MOVED on the upstream; the host has not read it
	ccMoving                 // marked moving at the host
)

type ccLock struct {
	present bool // this node has the lock's state
	gated   bool
	frozen  bool
	holder  int8 // client whose record holds, or -1
	nq      int8
	queue   [clMaxClients]int8
	det     uint8 // clients whose record here is detached
}

func (lk *ccLock) has(c int8) (rec, holds bool) {
	if lk.holder == c {
		return true, true
	}
	for i := range lk.nq {
		if lk.queue[i] == c {
			return true, false
		}
	}
	return false, false
}

func (lk *ccLock) remove(c int8) {
	lk.det &^= 1 << c
	if lk.holder == c {
		lk.holder = -1
		return
	}
	for i := range lk.nq {
		if lk.queue[i] == c {
			copy(lk.queue[i:], lk.queue[i+1:])
			lk.nq--
			lk.queue[lk.nq] = 0
			return
		}
	}
}

// clients returns the clients with a record in lk.
func (lk *ccLock) clients() []int8 {
	var out []int8
	if lk.holder >= 0 {
		out = append(out, lk.holder)
	}
	return append(out, lk.queue[:lk.nq]...)
}

type ccNode struct {
	alive     bool
	view      int8
	epoch     uint8
	ctr       uint8
	needEpoch bool
	lk        ccLock
}

type ccClient struct {
	st    uint8
	lives int8
	host  int8 // the node of its session
	to    int8 // ccSent, ccReleasing: where the request goes
	at    int8 // the node the host has the claim attached at
	mv    uint8
	mvV   int8 // the ring version of the move (ccMoving, ccMovedSent)
	relq  bool // a RELEASE queued at the host for N
	fresh bool // answered while moving without N's confirmation
	aband bool // its record belongs to a session that ended
}

type ccMove struct {
	from, to int8
	phase    uint8
	fl       ccLock // the hand-off in flight (ccExported)
}

type ccState struct {
	n        [clMaxNodes]ccNode
	c        [clMaxClients]ccClient
	ring     [clMaxChanges + 1]clRing
	nring    int8
	maxEpoch uint8
	maxTok   uint16
	mv       ccMove
	deaths   int8
	restarts int8
}

// Step kinds.
const (
	ccSend uint8 = iota
	ccDeliver
	ccRelease
	ccDeliverRelease
	ccReadMoved
	ccAnswer
	ccAdopt
	ccGiveUp
	ccExpire
	ccPromote
	ccApply
	ccAcquireEpoch
	ccGateOpen
	ccMoveBegin
	ccExport
	ccInstall
	ccCommit
	ccFallback
	ccDie
	ccRemove
	ccRestart
)

// Outcomes of a step.
const (
	ccNone uint8 = iota
	ccRetry
	ccGrant
	ccQueue
	ccReleased
	ccMovedAgain
	ccQueued   // release queued at the host
	ccAnswered // release answered at the host (MutReleaseAtHost)
	ccAdoptHeld
	ccAdoptWaits
	ccAdoptPromoted
	ccAdoptReleased
	ccAdoptRevoked
	ccAdoptLosesGrant
	ccMovedAfterAdopt
)

type ccStep struct {
	kind uint8
	n, m int8
	c    int8
	what uint8
	tok  uint16
}

func (st ccStep) String() string {
	c := fmt.Sprintf("c%d", st.c+1)
	n, m := clNodeName(st.n), clNodeName(st.m)
	switch st.kind {
	case ccSend:
		return fmt.Sprintf("%s opens its session on node %s, which sends its acquire to node %s", c, n, m)
	case ccDeliver:
		switch st.what {
		case ccRetry:
			return "node " + n + " cannot serve " + c + "'s acquire (down, not the owner, frozen or not ready): retryable error"
		case ccGrant:
			return "node " + n + " grants the lock to " + c + " with token " + clTok(st.tok)
		case ccQueue:
			return "node " + n + " queues " + c
		}
	case ccRelease:
		switch st.what {
		case ccReleased:
			return c + " releases the lock on node " + n + " (its host)"
		case ccQueued:
			return c + " sends RELEASE; its claim is moving: node " + n + " (its host) queues it for the new owner"
		case ccAnswered:
			return c + " sends RELEASE; its claim is moving: node " + n + " (its host) answers RELEASED itself"
		}
		return c + " sends RELEASE, relayed by node " + n + " to node " + m
	case ccDeliverRelease:
		if st.what == ccMovedAfterAdopt {
			return "node " + n + " reads " + c + "'s RELEASE after the export: answers MOVED again; the host has adopted the claim and sends the RELEASE on to node " + m
		}
		if st.what == ccMovedAgain {
			return "node " + n + " reads " + c + "'s RELEASE after the export: answers MOVED again; the host queues it for the new owner"
		}
		return "node " + n + " releases " + c + "'s claim: RELEASED"
	case ccReadMoved:
		return "node " + n + " reads MOVED about " + c + "'s claim: moving"
	case ccAnswer:
		return "node " + n + " answers " + c + " (a PONG) while its claim is moving, without the new owner's confirmation"
	case ccAdopt:
		s := "node " + n + " sends ADOPT for " + c + "'s claim to node " + m + ": "
		switch st.what {
		case ccAdoptHeld:
			return s + "GRANTED, the token c" + fmt.Sprint(st.c+1) + " was told"
		case ccAdoptWaits:
			return s + "QUEUED"
		case ccAdoptPromoted:
			return s + "GRANTED, token " + clTok(st.tok) + ": PROMOTED pushed to " + c
		case ccAdoptReleased:
			return s + "attached, then the queued RELEASE: RELEASED"
		case ccAdoptRevoked:
			return s + "no such claim: REVOKED pushed to " + c
		case ccAdoptLosesGrant:
			return s + "its promotion while detached is lost: " + c + " is left waiting"
		}
	case ccGiveUp:
		return c + " gives up the lock (its lease ran out)"
	case ccExpire:
		return "node " + n + " expires " + c + "'s claim, whose session it cannot hear (lease)"
	case ccPromote:
		if st.what != 0 {
			return "node " + n + " promotes " + c + "'s detached claim, token " + clTok(st.tok) + ", announced to nobody"
		}
		return "node " + n + " grants the lock to the head of its queue, " + c + ", token " + clTok(st.tok)
	case ccApply:
		return fmt.Sprintf("node %s applies ring version %d (owner %s)", n, st.what, m)
	case ccAcquireEpoch:
		return fmt.Sprintf("node %s commits token epoch %d through Raft and catches up to ring version %d", n, st.tok, st.what)
	case ccGateOpen:
		return "node " + n + " opens the gate of the name (warm-up elapsed)"
	case ccMoveBegin:
		return "planned move: node " + n + " freezes the name to hand it to node " + m
	case ccExport:
		return "node " + n + " exports the name's state to node " + m + " and detaches its claims (direct: moving; relayed: MOVED written)"
	case ccInstall:
		return "node " + m + " installs the state from node " + n + ", every claim detached"
	case ccCommit:
		return "node " + n + " records its hand-off: the new ring (owner " + m + ") is committed, handed over"
	case ccFallback:
		return "the leader's wait ends: the new ring (owner " + m + ") is committed, not handed over (gated)"
	case ccDie:
		return "node " + n + " dies, losing its lock state and its sessions"
	case ccRemove:
		return "dead node " + n + " is removed: the new ring gives the name to node " + m + ", gated"
	case ccRestart:
		return "node " + n + " restarts from its data directory"
	}
	return "?"
}

type ccModel struct{ cfg ContinueConfig }

func (m *ccModel) mut(name string) bool { return m.cfg.Mutation == name }

// exportFacts is what the real hand-off rules (clustercore's
// HandoffSessionFacts: MovesOn, Tell) know of the session of client
// c's record at prior owner p when p exports: a version 2 session whose
// origin is known, kept when it is abandoned (its host died, or its
// connection broke), relayed when its host is another node.
// MutExportDropsAbandoned breaks the rule's input as a bug would: an
// abandoned session is taken for one closing, not kept.
func (m *ccModel) exportFacts(cl *ccClient, p int8) clustercore.HandoffSessionFacts {
	f := clustercore.HandoffSessionFacts{Clustered: true, V2: true, HasOrigin: true,
		Kept: cl.aband, Forwarded: cl.host != p}
	if cl.aband && m.mut(MutExportDropsAbandoned) {
		f.Kept, f.Closing = false, true
	}
	return f
}

func (m *ccModel) owner(s *ccState, n int8) int8 { return s.ring[s.n[n].view].owner }

func (m *ccModel) ready(s *ccState, n int8) bool {
	nd := &s.n[n]
	return nd.alive && m.owner(s, n) == n && nd.lk.present && !nd.lk.gated && !nd.lk.frozen && !nd.needEpoch
}

// grant takes the next token on node n, checking that it is above every
// token before.
func (m *ccModel) grant(s *ccState, n int8) (uint16, *failure) {
	nd := &s.n[n]
	nd.ctr++
	tok := uint16(nd.epoch)<<8 | uint16(nd.ctr)
	var f *failure
	if tok <= s.maxTok {
		f = fail(PropClusterTokens, "node %s grants token %s, not above the largest token granted before, %s",
			clNodeName(n), clTok(tok), clTok(s.maxTok))
	}
	s.maxTok = max(s.maxTok, tok)
	return tok, f
}

// lose is what happens to client c when its record is gone without a
// frame (its node died, the hand-off in flight was lost, N dropped it): a
// holder believes until its lease runs out (orphan), a waiter is told in
// time and retries, a release is over.
func (m *ccModel) lose(s *ccState, c int8) {
	cl := &s.c[c]
	if cl.aband {
		cl.aband = false
		return
	}
	switch cl.st {
	case ccHolding:
		cl.st = ccOrphan
	case ccWaiting:
		cl.st = ccIdle
	case ccReleasing:
		cl.st = ccIdle
		cl.lives--
	}
	cl.mv, cl.relq = ccAttached, false
}

// records counts client c's records on live nodes and in the hand-off in
// flight, and how many of them hold.
func (m *ccModel) records(s *ccState, c int8) (recs, holds int) {
	count := func(lk *ccLock) {
		if r, h := lk.has(c); r {
			recs++
			if h {
				holds++
			}
		}
	}
	for n := range int8(m.cfg.Nodes) {
		if s.n[n].alive && s.n[n].lk.present {
			count(&s.n[n].lk)
		}
	}
	if s.mv.phase == ccExported {
		count(&s.mv.fl)
	}
	return recs, holds
}

// endSession ends client c's session (its host died): a holder believes
// until its lease runs out; a record left on a live node is abandoned.
func (m *ccModel) endSession(s *ccState, c int8) {
	cl := &s.c[c]
	switch cl.st {
	case ccSent, ccWaiting:
		cl.st = ccIdle
	case ccHolding:
		cl.st = ccOrphan
	case ccReleasing:
		cl.st = ccIdle
		cl.lives--
	}
	cl.mv, cl.relq = ccAttached, false
	if r, _ := m.records(s, c); r > 0 {
		cl.aband = true
	}
}

// apply makes node n apply ring version v.
func (m *ccModel) apply(s *ccState, n int8, v int8) {
	nd := &s.n[n]
	old, nw := m.owner(s, n), s.ring[v].owner
	nd.view = v
	switch {
	case nw == n && old != n:
		nd.needEpoch = true
		if !nd.lk.present || s.ring[v].gated {
			// Taken without its state (or the change fell back): N drops
			// what it installed, without a frame. Only detached claims
			// can be here; an attached one (MutAdoptBeforeCommit) is
			// dropped silently, as the design's drop is.
			if nd.lk.present {
				for _, c := range nd.lk.clients() {
					if nd.lk.det&(1<<c) != 0 || s.c[c].aband {
						m.lose(s, c)
					}
				}
			}
			nd.lk = ccLock{present: true, gated: true, holder: -1}
		}
	case old == n && nw != n:
		// Anything still here is lost; the checker reports it.
		nd.lk = ccLock{holder: -1}
	}
}

func (m *ccModel) next(s ccState) []succ[ccState, ccStep] {
	var out []succ[ccState, ccStep]
	emit := func(t ccState, st ccStep, f *failure) {
		out = append(out, succ[ccState, ccStep]{step: st, to: t, f: f})
	}
	nodes, clients := int8(m.cfg.Nodes), int8(m.cfg.Clients)
	orphans := false
	for c := range clients {
		if s.c[c].st == ccOrphan {
			orphans = true
		}
	}
	// Clients and their hosts.
	for c := range clients {
		cl := s.c[c]
		h := cl.host
		switch cl.st {
		case ccIdle:
			if cl.lives == 0 {
				break
			}
			if r, _ := m.records(&s, c); r > 0 {
				break // its abandoned record expires first
			}
			for n := range nodes {
				if !s.n[n].alive {
					continue
				}
				t := s
				o := m.owner(&t, n)
				t.c[c] = ccClient{st: ccSent, lives: cl.lives, host: n, to: o, at: -1}
				emit(t, ccStep{kind: ccSend, n: n, m: o, c: c}, nil)
			}
		case ccSent:
			t := s
			x := cl.to
			tc := &t.c[c]
			nd := &t.n[x]
			st := ccStep{kind: ccDeliver, n: x, c: c}
			var f *failure
			switch {
			case !nd.alive || m.owner(&t, x) != x || !nd.lk.present || nd.lk.frozen || nd.needEpoch:
				st.what = ccRetry
				tc.st = ccIdle
			case !nd.lk.gated && nd.lk.holder < 0 && nd.lk.nq == 0:
				st.what = ccGrant
				st.tok, f = m.grant(&t, x)
				nd.lk.holder = c
				tc.st, tc.at = ccHolding, x
			default:
				st.what = ccQueue
				nd.lk.queue[nd.lk.nq] = c
				nd.lk.nq++
				tc.st, tc.at = ccWaiting, x
			}
			emit(t, st, f)
		case ccHolding:
			t := s
			tc := &t.c[c]
			st := ccStep{kind: ccRelease, n: h, m: cl.at, c: c}
			switch {
			case cl.mv == ccMoving && m.mut(MutReleaseAtHost):
				st.what = ccAnswered
				tc.st, tc.mv, tc.fresh = ccIdle, ccAttached, false
				tc.lives--
			case cl.mv == ccMoving:
				st.what = ccQueued
				tc.st, tc.relq = ccReleasing, true
			case cl.mv == ccAttached && cl.at == h:
				// Direct: the session releases in its own table.
				st.what = ccReleased
				t.n[h].lk.remove(c)
				tc.st = ccIdle
				tc.lives--
			default:
				tc.st, tc.to = ccReleasing, cl.at
			}
			emit(t, st, nil)
			// The host answers the client (a PONG) while the claim moves
			// only when its outbox releases it (outboxReleases, the real
			// rule: Confirmation.Block holds it back); the model has no
			// clock here, so only the Block decides.
			if cl.mv == ccMoving && !cl.fresh && outboxReleases(0, 0, true, m.mut(MutAnswerUnconfirmed)) {
				t := s
				t.c[c].fresh = true
				emit(t, ccStep{kind: ccAnswer, n: h, c: c}, nil)
			}
		case ccOrphan:
			t := s
			t.c[c].st, t.c[c].fresh = ccIdle, false
			t.c[c].lives--
			emit(t, ccStep{kind: ccGiveUp, c: c}, nil)
		case ccReleasing:
			if cl.relq {
				break
			}
			// On the upstream to node to, which is alive (its death ends
			// the request).
			t := s
			x := cl.to
			tc := &t.c[c]
			st := ccStep{kind: ccDeliverRelease, n: x, c: c}
			lk := &t.n[x].lk
			if r, _ := lk.has(c); r && lk.present && lk.det&(1<<c) == 0 {
				lk.remove(c)
				tc.st = ccIdle
				tc.lives--
			} else if cl.mv != ccAttached {
				// P handed the claim over: it answers MOVED again, and the
				// host queues the RELEASE for N.
				st.what = ccMovedAgain
				tc.mv, tc.relq = ccMoving, true
			} else if m.mut(MutReleaseAfterAdopt) {
				st.what = ccReleased
				tc.st = ccIdle
				tc.lives--
			} else {
				// MOVED again, but the host has adopted the claim in the
				// meantime: the RELEASE goes on to the adopting owner, after
				// the ADOPT on that upstream.
				st.what, st.m = ccMovedAfterAdopt, cl.at
				tc.to = cl.at
			}
			emit(t, st, nil)
		}
		if cl.mv == ccMovedSent {
			t := s
			t.c[c].mv = ccMoving
			emit(t, ccStep{kind: ccReadMoved, n: h, c: c}, nil)
		}
		if cl.mv == ccMoving {
			m.adopt(&s, c, emit)
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
		if !nd.alive {
			if changesLeft && s.mv.phase == ccNoMove && s.ring[latest].owner == n {
				for y := range nodes {
					if y == n || !s.n[y].alive {
						continue
					}
					t := s
					t.ring[t.nring] = clRing{owner: y, gated: true}
					t.nring++
					emit(t, ccStep{kind: ccRemove, n: n, m: y}, nil)
				}
			}
			if int(s.restarts) < m.cfg.Restarts {
				t := s
				t.restarts++
				tn := &t.n[n]
				tn.alive = true
				tn.lk = ccLock{holder: -1}
				tn.ctr, tn.needEpoch = 0, true
				if m.owner(&t, n) == n {
					// A prior owner of a change still pending applies it
					// from the log again: the name stays frozen, and its
					// hand-off is not made again (the change falls back).
					tn.lk = ccLock{present: true, gated: true, frozen: t.mv.phase != ccNoMove && t.mv.from == n, holder: -1}
				}
				emit(t, ccStep{kind: ccRestart, n: n}, nil)
			}
			continue
		}
		if m.ready(&s, n) && nd.lk.holder < 0 && nd.lk.nq > 0 {
			t := s
			lk := &t.n[n].lk
			c := lk.queue[0]
			copy(lk.queue[:], lk.queue[1:])
			lk.nq--
			lk.queue[lk.nq] = 0
			lk.holder = c
			tok, f := m.grant(&t, n)
			st := ccStep{kind: ccPromote, n: n, c: c, tok: tok}
			switch {
			case lk.det&(1<<c) != 0:
				st.what = 1 // kept for the adoption
			case !t.c[c].aband:
				t.c[c].st = ccHolding
			}
			emit(t, st, f)
		}
		// Expiry of a record whose session this node cannot hear.
		if nd.lk.present {
			for _, c := range nd.lk.clients() {
				if nd.lk.det&(1<<c) == 0 && !s.c[c].aband {
					continue
				}
				t := s
				t.n[n].lk.remove(c)
				tc := &t.c[c]
				switch {
				case tc.aband:
					tc.aband = false
					if tc.st == ccOrphan && !tc.fresh {
						tc.st = ccIdle
						tc.lives--
					}
				case tc.fresh && (tc.st == ccHolding || tc.st == ccOrphan):
					tc.st, tc.mv, tc.relq = ccOrphan, ccAttached, false
				default:
					if tc.st == ccHolding || tc.st == ccReleasing || tc.st == ccOrphan {
						tc.lives--
					}
					tc.st, tc.mv, tc.relq = ccIdle, ccAttached, false
				}
				emit(t, ccStep{kind: ccExpire, n: n, c: c}, nil)
			}
		}
		if nd.view < latest {
			t := s
			v := nd.view + 1
			m.apply(&t, n, v)
			emit(t, ccStep{kind: ccApply, n: n, m: s.ring[v].owner, what: uint8(v)}, nil)
		}
		if nd.needEpoch {
			t := s
			tn := &t.n[n]
			t.maxEpoch++
			tn.epoch, tn.ctr = t.maxEpoch, 0
			for tn.view < latest {
				m.apply(&t, n, tn.view+1)
			}
			tn.needEpoch = false
			emit(t, ccStep{kind: ccAcquireEpoch, n: n, tok: uint16(tn.epoch), what: uint8(latest)}, nil)
		}
		if nd.lk.present && nd.lk.gated && !orphans {
			t := s
			t.n[n].lk.gated = false
			emit(t, ccStep{kind: ccGateOpen, n: n}, nil)
		}
		if changesLeft && s.mv.phase == ccNoMove && s.ring[latest].owner == n && nd.view == latest &&
			nd.lk.present && !nd.lk.gated && !nd.needEpoch {
			for y := range nodes {
				if y == n || !s.n[y].alive {
					continue
				}
				t := s
				t.n[n].lk.frozen = true
				t.mv = ccMove{from: n, to: y, phase: ccFrozen, fl: ccLock{holder: -1}}
				emit(t, ccStep{kind: ccMoveBegin, n: n, m: y}, nil)
			}
		}
		if s.mv.from == n && (s.mv.phase == ccFrozen || s.mv.phase == ccLost && !nd.lk.gated) {
			// Export and detach, under P's table lock. A prior owner that
			// restarted exports again (its empty state) after its warm-up.
			t := s
			fl := t.n[n].lk
			fl.present, fl.frozen, fl.gated = false, false, false
			for _, c := range fl.clients() {
				fl.det |= 1 << c
				tc := &t.c[c]
				f := m.exportFacts(tc, n)
				if !f.MovesOn() {
					fl.remove(c)
					tc.aband = false // its client, an orphan, may still believe
					continue
				}
				switch tell := f.Tell(); {
				case tell == clustercore.HandoffAsKept:
					continue // handed over with its lease: it expires at N
				case tc.mv != ccAttached:
					// Moving again: same move key, the newer change.
				case tell == clustercore.HandoffStartMoving:
					tc.mv = ccMoving
				default: // HandoffTellMoved: its host reads MOVED
					tc.mv = ccMovedSent
				}
				tc.mvV = t.nring
			}
			t.n[n].lk = ccLock{holder: -1}
			t.mv.phase, t.mv.fl = ccExported, fl
			emit(t, ccStep{kind: ccExport, n: n, m: s.mv.to}, nil)
		}
		if s.mv.to == n && s.mv.phase == ccExported {
			t := s
			for t.n[n].view < latest {
				m.apply(&t, n, t.n[n].view+1)
			}
			lk := t.mv.fl
			lk.present = true
			t.n[n].lk = lk
			t.mv.phase, t.mv.fl = ccInstalled, ccLock{holder: -1}
			emit(t, ccStep{kind: ccInstall, n: s.mv.from, m: n}, nil)
		}
		if s.mv.from == n && s.mv.phase == ccInstalled && !nd.lk.gated {
			// (A prior owner that restarted records only after its
			// warm-up.)
			t := s
			t.ring[t.nring] = clRing{owner: s.mv.to}
			t.nring++
			t.mv = ccMove{from: -1, to: -1, fl: ccLock{holder: -1}}
			emit(t, ccStep{kind: ccCommit, n: n, m: s.mv.to}, nil)
		}
		if down < 0 && int(s.deaths) < m.cfg.Deaths {
			t := s
			m.die(&t, n)
			emit(t, ccStep{kind: ccDie, n: n}, nil)
		}
	}
	if s.mv.phase == ccExported || s.mv.phase == ccInstalled || s.mv.phase == ccLost {
		t := s
		for _, c := range t.mv.fl.clients() {
			m.lose(&t, c)
		}
		t.ring[t.nring] = clRing{owner: s.mv.to, gated: true}
		t.nring++
		t.mv = ccMove{from: -1, to: -1, fl: ccLock{holder: -1}}
		emit(t, ccStep{kind: ccFallback, m: s.mv.to}, nil)
	}
	for i := range out {
		if out[i].f == nil {
			out[i].f = m.invariants(&out[i].to)
		}
	}
	return out
}

// adopt emits client c's adoption by its host at the owner in the host's
// ring, if that owner answers now.
func (m *ccModel) adopt(s *ccState, c int8, emit func(ccState, ccStep, *failure)) {
	cl := s.c[c]
	h := cl.host
	hv := s.n[h].view
	x := s.ring[hv].owner
	early := false
	if hv < cl.mvV {
		// The host has not applied the change that moved the claim.
		if !m.mut(MutAdoptBeforeCommit) || s.mv.phase != ccInstalled {
			return
		}
		x, early = s.mv.to, true
	}
	nx := &s.n[x]
	if !nx.alive {
		return
	}
	lk := &nx.lk
	rec, holds := lk.has(c)
	if !early && (m.owner(s, x) != x || nx.view < cl.mvV || !lk.present || lk.frozen) {
		return // not yet: asked again later
	}
	if early && (!lk.present || !rec) {
		return
	}
	t := *s
	tc := &t.c[c]
	tlk := &t.n[x].lk
	st := ccStep{kind: ccAdopt, n: h, m: x, c: c}
	tc.mv, tc.fresh, tc.at = ccAttached, false, x
	switch {
	case !rec || tlk.det&(1<<c) == 0:
		st.what = ccAdoptRevoked
		if tc.st == ccHolding || tc.st == ccReleasing {
			tc.lives--
		}
		tc.st, tc.relq = ccIdle, false
	case tc.relq:
		st.what = ccAdoptReleased
		tlk.remove(c)
		tc.st, tc.relq = ccIdle, false
		tc.lives--
	default:
		tlk.det &^= 1 << c
		switch {
		case holds && tc.st == ccWaiting && m.mut(MutDropDetachedGrant):
			st.what = ccAdoptLosesGrant
		case holds && tc.st == ccWaiting:
			st.what = ccAdoptPromoted
			tc.st = ccHolding
		case holds:
			st.what = ccAdoptHeld
		default:
			st.what = ccAdoptWaits
		}
	}
	emit(t, st, nil)
}

// die kills node n: its lock state, its sessions, the upstreams to it and
// the hand-off it takes part in.
func (m *ccModel) die(t *ccState, n int8) {
	t.deaths++
	tn := &t.n[n]
	tn.alive = false
	if tn.lk.present {
		for _, c := range tn.lk.clients() {
			m.lose(t, c)
		}
	}
	tn.lk = ccLock{holder: -1}
	tn.needEpoch = false
	mv := &t.mv
	switch {
	case mv.phase == ccFrozen && mv.from == n:
		*mv = ccMove{from: -1, to: -1, fl: ccLock{holder: -1}}
	case mv.phase == ccFrozen && mv.to == n:
		// The state is still on P: the move ends, P serves the name.
		t.n[mv.from].lk.frozen = false
		*mv = ccMove{from: -1, to: -1, fl: ccLock{holder: -1}}
	case mv.phase >= ccExported && mv.to == n && m.mut(MutAbortAfterExport):
		// As if the state were still on P: the move ends, and what was in
		// flight is forgotten with it.
		t.n[mv.from].lk = ccLock{present: true, holder: -1}
		*mv = ccMove{from: -1, to: -1, fl: ccLock{holder: -1}}
	case mv.phase == ccExported && mv.to == n && m.mut(MutExportAgain):
		// What was in flight is forgotten; P's retry exports its table
		// again, empty now, and will send that.
		for _, c := range mv.fl.clients() {
			m.lose(t, c)
		}
		mv.fl = ccLock{holder: -1}
	case mv.phase == ccExported && mv.from == n:
		// The hand-off in flight is lost with P; the change will commit
		// gated. (A death of N loses nothing: P keeps what it exported
		// until N acknowledges it, and sends it again, to N restarted.)
		for _, c := range mv.fl.clients() {
			m.lose(t, c)
		}
		mv.fl = ccLock{holder: -1}
		mv.phase = ccLost
	}
	for c := range int8(m.cfg.Clients) {
		tc := &t.c[c]
		switch {
		case tc.st == ccIdle:
		case tc.host == n:
			m.endSession(t, c)
		case tc.mv == ccMovedSent && tc.at == n:
			// The upstream is lost before the host read MOVED: the host
			// revokes the claims of that upstream, as today.
			m.endSession(t, c)
		case tc.st == ccReleasing && !tc.relq && tc.to == n:
			if tc.mv == ccMoving {
				// Read MOVED already: the RELEASE waits for N.
				tc.relq = true
			} else {
				m.endSession(t, c)
			}
		}
	}
}

func (m *ccModel) invariants(s *ccState) *failure {
	holders := 0
	for c := range int8(m.cfg.Clients) {
		cl := s.c[c]
		if cl.st == ccHolding || cl.st == ccOrphan {
			holders++
		}
		recs, holds := m.records(s, c)
		tracked := cl.st == ccHolding || cl.st == ccWaiting || cl.st == ccReleasing
		if !tracked || cl.aband {
			if recs > 0 && !cl.aband {
				return fail(PropContinueNoStale, "c%d is %s, but %d records of its claim remain", c+1, ccStName[cl.st], recs)
			}
			continue
		}
		switch {
		case recs != 1:
			return fail(PropContinueNoLost, "c%d is %s, but it has %d records", c+1, ccStName[cl.st], recs)
		case cl.st != ccWaiting && holds == 0:
			return fail(PropContinueNoLost, "c%d is %s, but its record is a waiter", c+1, ccStName[cl.st])
		case cl.st == ccWaiting && cl.mv == ccAttached && holds == 1:
			return fail(PropContinueNoLost, "c%d waits and is told nothing more, but its record holds the lock", c+1)
		}
	}
	if holders > 1 {
		return fail(PropClusterOneHolder, "%d clients believe they hold the lock", holders)
	}
	return nil
}

var ccStName = [...]string{"idle", "sending", "waiting", "holding", "an orphan", "releasing"}

func (s *ccState) key(m *ccModel) string {
	b := make([]byte, 0, 96)
	bit := func(v bool) byte {
		if v {
			return 1
		}
		return 0
	}
	lock := func(lk *ccLock) {
		b = append(b, bit(lk.present)|bit(lk.gated)<<1|bit(lk.frozen)<<2, byte(lk.holder), byte(lk.nq), lk.det)
		for i := range lk.nq {
			b = append(b, byte(lk.queue[i]))
		}
	}
	for n := range m.cfg.Nodes {
		nd := &s.n[n]
		b = append(b, bit(nd.alive)|bit(nd.needEpoch)<<1, byte(nd.view), nd.epoch, nd.ctr)
		lock(&nd.lk)
	}
	for c := range m.cfg.Clients {
		cl := &s.c[c]
		b = append(b, cl.st, byte(cl.lives), byte(cl.host), byte(cl.to), byte(cl.at), cl.mv, byte(cl.mvV),
			bit(cl.relq)|bit(cl.fresh)<<1|bit(cl.aband)<<2)
	}
	for v := range s.nring {
		b = append(b, byte(s.ring[v].owner)|bit(s.ring[v].gated)<<4)
	}
	b = append(b, byte(s.nring), s.maxEpoch, byte(s.maxTok>>8), byte(s.maxTok), byte(s.mv.from), byte(s.mv.to), s.mv.phase,
		byte(s.deaths), byte(s.restarts))
	lock(&s.mv.fl)
	return string(b)
}

func (m *ccModel) initial() ccState {
	var s ccState
	s.nring = 1
	s.mv = ccMove{from: -1, to: -1, fl: ccLock{holder: -1}}
	for n := range int8(m.cfg.Nodes) {
		s.n[n] = ccNode{alive: true, epoch: uint8(n + 1), lk: ccLock{holder: -1}}
		s.maxEpoch = uint8(n + 1)
	}
	s.n[0].lk.present = true
	for c := range m.cfg.Clients {
		s.c[c] = ccClient{lives: int8(m.cfg.Lives), host: -1, to: -1, at: -1}
	}
	return s
}

// CheckContinue explores every interleaving of cfg breadth first and
// checks the continuation properties in every state. It panics on a
// configuration that Validate rejects.
func CheckContinue(cfg ContinueConfig) Report { return checkContinue(cfg, nil) }

// checkContinue is CheckContinue; seen, if not nil, is called with every
// transition explored.
func checkContinue(cfg ContinueConfig, seen func(from *ccState, st ccStep)) Report {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	m := &ccModel{cfg: cfg}
	return exploreSucc(Report{Model: "cluster-continue", Config: cfg.String()}, m.initial(), func(s *ccState) string { return s.key(m) }, m.next, seen)
}
