package modelcheck

import (
	"fmt"
	"slices"
	"strings"
)

// The cluster-ranges model: POSIX range locks on a cluster
// (server/relayranges.go, server/rangemove.go, server/move_install.go;
// their decisions in internal/clustercore). A key's range locks are served
// by its owner alone, and every path that could lose them fails closed: a
// planned move gates the key at the new owner for the longest lease of its
// holders and waiters, and a relay loss ends the client's session.
// Clients follow the client rule; time and drift are the failover model's.
// Real rules run: clustercore's Outbox and Confirmation (outboxReleases).
// Design: "Range locks on a cluster" and #internalmodelcheckclusterrangesgo
// in docs/design/2026-12-07-verification-models-cluster.md.

// ClusterRangesConfig bounds the cluster-ranges model. Durations are in
// units of the processes' clocks; a tick of real time is Unit units at
// the nominal rate.
type ClusterRangesConfig struct {
	Relay bool // c1 is relayed through node R to the key's owner
	Move  bool // the key moves from P to N by a planned change

	Unit  int // units of a clock per tick at the nominal rate (1..60)
	Drift int // a clock advances Unit±Drift units per tick: ρ = Drift/Unit
	Lease int // the clients' lease L

	// Waiter, with Move and a direct c1, adds client w, which asks P for
	// a conflicting range lock and waits (a blocking set) behind c1's.
	Waiter      bool
	WaiterLease int // w's lease (0: Lease)

	// Handover, with Move, hands c1's range lock over to N instead of
	// ending its session (clusterrangeshandover.go); RelayAtN, with Relay,
	// makes N itself c1's host (R = N).
	Handover bool
	RelayAtN bool

	// orphanCheck adds PropClusterRangesNoOrphan to the hand-over;
	// orphanFix is what the host does when N adopts locks for a session
	// it has ended already (clusterrangeshandover.go, ofNone...).
	orphanCheck bool
	orphanFix   uint8

	// Mutation, when not empty, drops one rule so that the checker must
	// fail; see ClusterRangesMutations.
	Mutation string
}

// DefaultClusterRangesConfigs are the configurations always checked: the
// planned move of a direct client's lock, the loss of a relayed client's
// hop, the planned move of a relayed client's lock, and the planned move
// of a direct client's lock with a waiter of the same lease, and the
// hand-over of c1's lock at the move (direct, relayed, relayed by N); a tick of 10
// units with a drift of 1 (ρ = 0.1, close to the 1/9 above which the
// give-up rule itself fails) and a lease of 40 (four ticks).
func DefaultClusterRangesConfigs() []ClusterRangesConfig {
	return []ClusterRangesConfig{
		{Move: true, Unit: 10, Drift: 1, Lease: 40},
		{Relay: true, Unit: 10, Drift: 1, Lease: 40},
		{Relay: true, Move: true, Unit: 10, Drift: 1, Lease: 40},
		{Move: true, Waiter: true, Unit: 10, Drift: 1, Lease: 40},
		{Move: true, Handover: true, Unit: 10, Drift: 1, Lease: 40},
		{Move: true, Handover: true, Relay: true, Unit: 10, Drift: 1, Lease: 40},
		{Move: true, Handover: true, Relay: true, RelayAtN: true, Unit: 10, Drift: 1, Lease: 40},
	}
}

// Mutations of the cluster-ranges model.
const (
	// MutCrGateShort sets N's gate to 0 instead of the holders' longest
	// lease.
	MutCrGateShort = "range-gate-short"
	// MutCrAnswerAfterExport lets P answer c1's heartbeats (PONG; on R's
	// upstream session, with Relay) after the export ended the session.
	MutCrAnswerAfterExport = "range-answer-after-export"
	// MutCrOwnerDropsRelayed has the owner drop a relayed session's range
	// lock the moment it sees the hop end, instead of L after it last
	// read from it.
	MutCrOwnerDropsRelayed = "range-owner-drops-relayed"
	// MutCrRelayUnconfirmed lets R answer c1's heartbeat without an
	// upstream request sent at or after its read having been answered:
	// the real outbox is handed the PONG as a push.
	MutCrRelayUnconfirmed = "range-relay-unconfirmed"
	// MutCrGateHoldersOnly counts only the sessions holding a range lock
	// at the export in the gate, not those waiting (the rule first built):
	// a waiter granted after the export, with a longer lease than every
	// holder, outlasts the gate (needs WaiterLease above Lease).
	MutCrGateHoldersOnly = "range-gate-holders-only"
)

// ClusterRangesMutations lists the mutations of the cluster-ranges model.
var ClusterRangesMutations = []string{MutCrGateShort, MutCrAnswerAfterExport, MutCrOwnerDropsRelayed, MutCrRelayUnconfirmed, MutCrGateHoldersOnly,
	MutCrPlaceholderShort, MutCrHostAnswersMoving, MutCrMovedUnordered, MutCrAdoptAnyOrigin}

// PropClusterRangesOneHolder is the property of the cluster-ranges model.
const PropClusterRangesOneHolder = "no instant at which two clients believe they hold conflicting range locks on the key"

func (c ClusterRangesConfig) String() string {
	var parts []string
	if c.Move {
		parts = append(parts, "planned move P→N")
	}
	if c.Handover {
		parts = append(parts, "range locks handed over")
	}
	if c.RelayAtN {
		parts = append(parts, "c1 relayed through N")
	} else if c.Relay {
		parts = append(parts, "c1 relayed through R")
	} else {
		parts = append(parts, "c1 direct")
	}
	if c.Waiter {
		parts = append(parts, "w waits at P")
	}
	s := fmt.Sprintf("%s; tick %d±%d units (ρ = %.3f); lease %d", strings.Join(parts, ", "), c.Unit, c.Drift,
		float64(c.Drift)/float64(c.Unit), c.Lease)
	if c.Waiter {
		s += fmt.Sprintf(", w's %d", c.waiterLease())
	}
	if c.Mutation != "" {
		s += ", mutation " + c.Mutation
	}
	return s
}

func (c ClusterRangesConfig) waiterLease() int {
	if c.WaiterLease == 0 {
		return c.Lease
	}
	return c.WaiterLease
}

// Validate reports bounds the checker cannot explore.
func (c ClusterRangesConfig) Validate() error {
	switch {
	case !c.Relay && !c.Move:
		return fmt.Errorf("cluster-ranges needs the relay or the move option (or both)")
	case c.Unit < 1 || c.Unit > 60:
		return fmt.Errorf("unit must be 1..60, not %d", c.Unit)
	case c.Drift < 0 || c.Drift >= c.Unit:
		return fmt.Errorf("drift must be 0..unit-1, not %d", c.Drift)
	case c.Lease < 1 || c.Lease > 20*c.Unit:
		return fmt.Errorf("lease must be 1..%d (20 ticks), not %d", 20*c.Unit, c.Lease)
	case c.Mutation != "" && !slices.Contains(ClusterRangesMutations, c.Mutation):
		return fmt.Errorf("mutation must be one of %s, not %q", strings.Join(ClusterRangesMutations, ", "), c.Mutation)
	case (c.Mutation == MutCrGateShort || c.Mutation == MutCrAnswerAfterExport) && !c.Move:
		return fmt.Errorf("mutation %s needs the move option", c.Mutation)
	case c.Waiter && (!c.Move || c.Relay):
		return fmt.Errorf("the waiter needs the move option and a direct c1")
	case c.WaiterLease < 0 || c.WaiterLease > 20*c.Unit:
		return fmt.Errorf("the waiter's lease must be 0..%d (20 ticks), not %d", 20*c.Unit, c.WaiterLease)
	case (c.Mutation == MutCrOwnerDropsRelayed || c.Mutation == MutCrRelayUnconfirmed || c.Mutation == MutCrMovedUnordered) && !c.Relay:
		return fmt.Errorf("mutation %s needs the relay option", c.Mutation)
	case c.Handover && (!c.Move || c.Waiter):
		return fmt.Errorf("the hand-over needs the move option and no waiter")
	case c.RelayAtN && (!c.Relay || !c.Handover):
		return fmt.Errorf("c1 relayed through N needs the relay and hand-over options")
	case c.Handover && (c.Mutation == MutCrGateShort || c.Mutation == MutCrAnswerAfterExport || c.Mutation == MutCrOwnerDropsRelayed || c.Mutation == MutCrGateHoldersOnly):
		return fmt.Errorf("mutation %s does not apply to the hand-over", c.Mutation)
	case !c.Handover && (c.Mutation == MutCrPlaceholderShort || c.Mutation == MutCrHostAnswersMoving || c.Mutation == MutCrMovedUnordered || c.Mutation == MutCrAdoptAnyOrigin):
		return fmt.Errorf("mutation %s needs the hand-over option", c.Mutation)
	}
	return nil
}

// c1's states.
const (
	crIdle    uint8 = iota // has not asked yet
	crPending              // its LOCK is outstanding
	crHeld                 // holds and believes: a give-up or an ERROR read ends it
	crDone                 // no lock, and will ask no more
	crQueued               // w: its blocking set waits at P
)

// P's record of w's request.
const (
	wrNone uint8 = iota
	wrQueued
	wrHeld
)

// Requests.
const (
	crNone uint8 = iota
	crLock
	crPing
)

// Answers R has for c1's LOCK.
const (
	crResNone uint8 = iota
	crResGranted
	crResRefused
)

// The move's phases.
const (
	mvNone      uint8 = iota
	mvFrozen          // P answers "unavailable" to range requests on the key
	mvExported        // P ended the holding sessions and computed the gate
	mvInstalled       // N installed the gate
	mvSwitched        // the ring names N
)

type crState struct {
	// c1
	c1   uint8
	anc  int8  // ticks since its anchor, while held
	out  uint8 // its outstanding request (to P, or to R with Relay)
	sent int8  // ticks since it was sent
	err  bool  // an ERROR ending its session is on its way to it

	c2 bool // c2 was granted and believes

	// w, with Waiter: as c1, and P's record of it.
	w      uint8
	wAnc   int8
	wOut   uint8
	wSent  int8
	wErr   bool
	wRec   uint8
	wSeen  int8
	wEnded bool // P ended w's session (ERROR 0x01 sent)

	// The owner (P, also O of the relay): the session that holds c1's
	// lock (c1's own, or R's upstream session).
	lk     bool // it holds c1's lock
	seen   int8 // ticks since the owner last read from that session
	ended  bool // the owner ended that session (expiry, export, hop seen ended)
	told   bool // P sent c1 ERROR 0x01 (a direct c1 with the move)
	hopCut bool // the owner saw R's upstream session end: reads nothing more

	// The move.
	mv   uint8
	gate int8  // ticks since N installed the gate
	g    uint8 // the gate: 0 none (no holder at the export), 1 c1's lease, 2 w's lease, 3 both
	pend uint8 // sessions the export must still end: 1 c1's, 2 w's

	// R, with Relay.
	rq     uint8 // c1's request R read and has not answered
	rRead  int8  // ticks since R read it
	rRes   uint8 // the owner's answer to the LOCK it relayed
	up     uint8 // R's upstream request in transit
	upSent int8  // ticks since R sent it
	conf   int8  // ticks since the send time of the latest upstream request answered
	upOpen bool  // R opened the upstream session
	upEnd  bool  // R noticed the upstream ended: ended c1's session
}

// Step kinds.
const (
	ckTick    uint8 = iota + 1
	ckSend          // c1 sends its LOCK or a PING (what)
	ckLost          // c1's request is lost or abandoned
	ckDeliver       // P reads c1's request (direct)
	ckGiveUp        // c1's clock may be past anchor + 0.8·L
	ckReadErr       // c1 reads the ERROR that ends its session
	ckC2            // c2 asks the owner and is granted
	ckExpire        // the owner's clock may have counted L since it last read from the session
	ckFreeze
	ckExport
	ckInstall
	ckSwitch
	ckRRead    // R reads c1's request
	ckRPump    // R sends an upstream PING
	ckUpLost   // R's upstream request is lost
	ckUpRead   // the owner reads R's upstream request
	ckRAnswer  // R answers c1, which reads it at once
	ckRUpEnd   // R notices its upstream ended: ends c1's session (ERROR 0x03)
	ckOwnerCut // the owner sees R's upstream session end
	ckEnd      // P ends a session the export named (what: 1 c1's, 2 w's): ERROR 0x01
	ckHangUp   // P sees a direct client's connection end (what: 1 c1, 2 w): drops its locks
	ckPromote  // P grants w, whose set waited, and pushes PROMOTED
	ckWSend    // w sends its blocking set or a PING to P
	ckWLost    // w's request is lost
	ckWDeliver // P reads w's request
	ckWGiveUp
	ckWReadErr
	ckWExpire // P's clock may have counted w's lease since it last read from w
)

type crStep struct {
	kind uint8
	what uint8
}

type crModel struct {
	cfg          ClusterRangesConfig
	clk          *foModel // the failover model's timer windows
	gMin, gMax   int8     // c1's clock passes 0.8·L
	eMin         int8     // the owner's clock passes L since it last read
	wgMin, wgMax int8     // w's clock passes 0.8 × its lease
	weMin        int8     // P's clock passes w's lease since it last read from w
	gateMin      [4]int8  // N's clock may have counted G since the install, by gate
	cap          int8     // clamp of R's counters
}

func newCrModel(cfg ClusterRangesConfig) *crModel {
	clk := &foModel{cfg: FailoverConfig{Unit: cfg.Unit, Drift: cfg.Drift}}
	l := int16(cfg.Lease)
	m := &crModel{cfg: cfg, clk: clk}
	m.gMin, m.gMax = int8(clk.mayPass(l*4/5)), int8(clk.mustPass(l*4/5))
	m.eMin = int8(clk.mayPass(l))
	wl := int16(cfg.waiterLease())
	m.wgMin, m.wgMax = int8(clk.mayPass(wl*4/5)), int8(clk.mustPass(wl*4/5))
	m.weMin = int8(clk.mayPass(wl))
	for g := range uint8(4) {
		m.gateMin[g] = int8(clk.mayReach(m.gateUnits(g)))
	}
	m.cap = m.gMax + 1
	return m
}

// gateUnits is G: the longest lease of the sessions that held range locks
// on the key at the export (g: 1 c1's session, 2 w's, 3 both).
func (m *crModel) gateUnits(g uint8) int16 {
	if m.cfg.Mutation == MutCrGateShort {
		return 0
	}
	var G int16
	if g&1 != 0 {
		G = int16(m.cfg.Lease)
	}
	if g&2 != 0 {
		G = max(G, int16(m.cfg.waiterLease()))
	}
	return G
}

func (m *crModel) initial() crState {
	return crState{conf: m.cap}
}

// done: c1 has no lock and asks no more; what was outstanding is gone.
func (m *crModel) done(s *crState) {
	s.c1, s.anc, s.out, s.sent, s.err = crDone, 0, crNone, 0, false
	s.rq, s.rRead, s.rRes = crNone, 0, crResNone
}

// ownerServes: the owner answers on the session that holds c1's lock.
func (m *crModel) ownerServes(s *crState) bool {
	if !s.ended {
		return true
	}
	return m.cfg.Mutation == MutCrAnswerAfterExport && s.mv >= mvExported && (s.told || m.cfg.Relay && s.g != 0) // the export ended it
}

// ownerLock has the owner handle a LOCK on the key from c1's session:
// granted or refused.
func (m *crModel) ownerLock(s *crState) uint8 {
	if s.mv >= mvFrozen || s.c2 || s.ended || s.wRec != wrNone {
		return crResRefused
	}
	s.lk, s.seen = true, 0
	return crResGranted
}

// c2Grantable: the key's owner may grant c2 its conflicting lock now.
func (m *crModel) c2Grantable(s *crState) bool {
	if s.c2 {
		return false
	}
	if m.cfg.Move {
		return s.mv == mvSwitched && s.gate >= m.gateMin[s.g]
	}
	return !s.lk
}

func (m *crModel) next(s *crState) []succ[crState, crStep] {
	var out []succ[crState, crStep]
	emit := func(t crState, st crStep) {
		m.norm(&t)
		var f *failure
		switch {
		case t.c1 == crHeld && t.c2:
			f = fail(PropClusterRangesOneHolder, "c1 (anchor %d ticks ago) and c2 both believe they hold conflicting range locks on the key", t.anc)
		case t.w == crHeld && t.c2:
			f = fail(PropClusterRangesOneHolder, "w (anchor %d ticks ago) and c2 both believe they hold conflicting range locks on the key", t.wAnc)
		case t.w == crHeld && t.c1 == crHeld:
			f = fail(PropClusterRangesOneHolder, "c1 and w both believe they hold conflicting range locks on the key")
		}
		out = append(out, succ[crState, crStep]{step: st, to: t, f: f})
	}
	relay := m.cfg.Relay
	// c1.
	if s.out == crNone {
		switch {
		case s.c1 == crIdle:
			t := *s
			t.c1, t.out, t.sent = crPending, crLock, 0
			emit(t, crStep{kind: ckSend, what: crLock})
		case s.c1 == crHeld:
			t := *s
			t.out, t.sent = crPing, 0
			emit(t, crStep{kind: ckSend, what: crPing})
		}
	} else {
		t := *s
		if t.out == crLock {
			m.done(&t)
		} else {
			t.out, t.sent, t.rq, t.rRead = crNone, 0, crNone, 0
		}
		emit(t, crStep{kind: ckLost, what: s.out})
	}
	if !relay && s.out != crNone {
		t := *s
		what := t.out
		t.out = crNone
		switch what {
		case crLock:
			if m.ownerLock(&t) == crResGranted {
				t.c1, t.anc = crHeld, t.sent
			} else {
				m.done(&t)
			}
		case crPing:
			if m.ownerServes(&t) {
				if !t.ended {
					t.seen = 0
				}
				t.anc = min(t.anc, t.sent)
			}
		}
		t.sent = 0
		emit(t, crStep{kind: ckDeliver, what: what})
	}
	if s.c1 == crHeld && s.anc >= m.gMin {
		t := *s
		m.done(&t)
		emit(t, crStep{kind: ckGiveUp})
	}
	if s.err {
		t := *s
		m.done(&t)
		emit(t, crStep{kind: ckReadErr})
	}
	// c2.
	if m.c2Grantable(s) {
		t := *s
		t.c2 = true
		emit(t, crStep{kind: ckC2})
	}
	// The owner.
	if s.lk && s.seen >= m.eMin {
		t := *s
		m.dropC1(&t)
		emit(t, crStep{kind: ckExpire})
	}
	if !relay && s.lk && s.c1 == crDone {
		// c1 gave up or read its ERROR and hung up (or died).
		t := *s
		m.dropC1(&t)
		emit(t, crStep{kind: ckHangUp, what: 1})
	}
	if m.cfg.Waiter {
		m.waiterSteps(s, emit)
	}
	// The move.
	for _, who := range [...]uint8{1, 2} {
		if s.pend&who == 0 {
			continue
		}
		// P ends the sessions the export named, one at a time, in any
		// order (Export's closeWithError loop, after srv.mu is released).
		t := *s
		t.pend &^= who
		if who == 1 {
			t.told, t.ended = true, true
			if t.c1 != crDone {
				t.err = true // ERROR 0x01 on its way to c1
			}
		} else {
			t.wEnded = true
			if t.w != crDone {
				t.wErr = true
			}
		}
		emit(t, crStep{kind: ckEnd, what: who})
	}
	if m.cfg.Move {
		t := *s
		switch s.mv {
		case mvNone:
			t.mv = mvFrozen
			emit(t, crStep{kind: ckFreeze})
		case mvFrozen:
			t.mv = mvExported
			if t.lk {
				t.g |= 1
			}
			if t.wRec == wrHeld || t.wRec != wrNone && m.cfg.Mutation != MutCrGateHoldersOnly {
				// A waiter is counted too: P may grant it after the
				// export, before its session ends.
				t.g |= 2
			}
			switch {
			case relay && t.lk:
				// R's upstream session ends (R notices at any moment);
				// P keeps nothing of it that matters any more.
				t.lk, t.ended = false, true
			case t.lk:
				t.pend |= 1
			}
			if t.wRec != wrNone {
				t.pend |= 2
			}
			emit(t, crStep{kind: ckExport, what: t.g})
		case mvExported:
			if s.pend == 0 {
				t.mv, t.gate = mvInstalled, 0
				emit(t, crStep{kind: ckInstall})
			}
		case mvInstalled:
			t.mv = mvSwitched
			emit(t, crStep{kind: ckSwitch})
		}
	}
	if relay {
		m.relaySteps(s, emit)
	}
	{
		t := *s
		m.tick(&t)
		emit(t, crStep{kind: ckTick})
	}
	return out
}

// dropC1: the owner drops c1's lock and ends the session that held it;
// w, if it waits, is granted at once (the range table's CloseSession),
// and told PROMOTED if its own session is not ended yet.
func (m *crModel) dropC1(s *crState) {
	s.lk, s.ended = false, true
	if s.wRec == wrQueued {
		s.wRec = wrHeld
		if !s.wEnded && s.w == crQueued {
			s.w = crHeld // the push is read at once; it does not move the anchor
		}
	}
}

// wDone: w has no lock and asks no more.
func (m *crModel) wDone(s *crState) {
	s.w, s.wAnc, s.wOut, s.wSent, s.wErr = crDone, 0, crNone, 0, false
}

// waiterSteps are w's steps and P's about w: w is a direct client of P
// whose blocking set waits behind c1's lock.
func (m *crModel) waiterSteps(s *crState, emit func(crState, crStep)) {
	switch {
	case s.wOut == crNone && s.w == crIdle:
		t := *s
		t.w, t.wOut, t.wSent = crPending, crLock, 0
		emit(t, crStep{kind: ckWSend, what: crLock})
	case s.wOut == crNone && (s.w == crHeld || s.w == crQueued):
		t := *s
		t.wOut, t.wSent = crPing, 0
		emit(t, crStep{kind: ckWSend, what: crPing})
	case s.wOut != crNone:
		t := *s
		if t.wOut == crLock {
			m.wDone(&t)
		} else {
			t.wOut, t.wSent = crNone, 0
		}
		emit(t, crStep{kind: ckWLost, what: s.wOut})
		t = *s
		what := t.wOut
		t.wOut = crNone
		switch {
		case what == crLock && (t.mv >= mvFrozen || t.c2):
			m.wDone(&t)
		case what == crLock && t.lk:
			t.w, t.wAnc, t.wRec, t.wSeen = crQueued, t.wSent, wrQueued, 0
		case what == crLock:
			t.w, t.wAnc, t.wRec, t.wSeen = crHeld, t.wSent, wrHeld, 0
		case t.wRec != wrNone && !t.wEnded:
			t.wSeen = 0
			t.wAnc = min(t.wAnc, t.wSent)
		}
		t.wSent = 0
		emit(t, crStep{kind: ckWDeliver, what: what})
	}
	if (s.w == crHeld || s.w == crQueued) && s.wAnc >= m.wgMin {
		t := *s
		m.wDone(&t)
		emit(t, crStep{kind: ckWGiveUp})
	}
	if s.wErr {
		t := *s
		m.wDone(&t)
		emit(t, crStep{kind: ckWReadErr})
	}
	if s.wRec != wrNone && s.wSeen >= m.weMin {
		t := *s
		t.wRec, t.wEnded = wrNone, true
		emit(t, crStep{kind: ckWExpire})
	}
	if s.wRec != wrNone && s.w == crDone {
		t := *s
		t.wRec, t.wEnded = wrNone, true
		emit(t, crStep{kind: ckHangUp, what: 2})
	}
}

func (m *crModel) relaySteps(s *crState, emit func(crState, crStep)) {
	if s.out != crNone && s.rq == crNone && !s.upEnd {
		t := *s
		t.rq, t.rRead = t.out, 0
		if t.out == crLock {
			// R relays the LOCK upstream at once (a delay is the
			// message's).
			t.up, t.upSent, t.upOpen = crLock, 0, true
		}
		emit(t, crStep{kind: ckRRead, what: s.out})
	}
	if s.rq == crPing && s.up == crNone && s.conf > s.rRead && !s.upEnd {
		t := *s
		t.up, t.upSent = crPing, 0
		emit(t, crStep{kind: ckRPump})
	}
	if s.up != crNone {
		t := *s
		t.up, t.upSent = crNone, 0
		emit(t, crStep{kind: ckUpLost, what: s.up})
		if !s.hopCut {
			t := *s
			what := t.up
			t.up = crNone
			answered := false
			switch what {
			case crLock:
				res := m.ownerLock(&t)
				answered = true
				if t.rq == crLock && !t.upEnd {
					t.rRes = res
				}
			case crPing:
				if m.ownerServes(&t) {
					if !t.ended {
						t.seen = 0
					}
					answered = true
				}
			}
			if answered {
				t.conf = min(t.conf, t.upSent)
			}
			t.upSent = 0
			emit(t, crStep{kind: ckUpRead, what: what})
		}
	}
	if s.rq != crNone && !s.upEnd {
		// R's outbox releases the PONG by the real rule (outboxReleases):
		// the upstream carries c1's range lock, so it protects the session.
		confirmed := outboxReleases(int(s.conf), int(s.rRead), false, s.rq == crPing && m.cfg.Mutation == MutCrRelayUnconfirmed)
		switch {
		case s.rq == crLock && s.rRes != crResNone:
			t := *s
			if t.rRes == crResGranted {
				t.c1, t.anc = crHeld, t.sent
				t.out, t.sent, t.rq, t.rRead, t.rRes = crNone, 0, crNone, 0, crResNone
			} else {
				m.done(&t)
			}
			emit(t, crStep{kind: ckRAnswer, what: s.rRes})
		case s.rq == crPing && confirmed:
			t := *s
			t.anc = min(t.anc, t.sent)
			t.out, t.sent, t.rq, t.rRead = crNone, 0, crNone, 0
			emit(t, crStep{kind: ckRAnswer})
		}
	}
	if s.upOpen && !s.upEnd {
		t := *s
		t.upEnd = true
		t.rq, t.rRead, t.rRes = crNone, 0, crResNone
		if t.c1 == crHeld || t.c1 == crPending {
			t.err = true // ERROR 0x03 ends c1's session
		}
		emit(t, crStep{kind: ckRUpEnd})
	}
	if s.upOpen && !s.hopCut {
		t := *s
		t.hopCut = true
		t.up, t.upSent = crNone, 0
		if m.cfg.Mutation == MutCrOwnerDropsRelayed && t.lk {
			t.lk, t.ended = false, true
		}
		emit(t, crStep{kind: ckOwnerCut})
	}
}

// tick lets one tick of real time pass; c1 gives up at the tick if its
// clock must be past anchor + 0.8·L (or it waited that long for its
// LOCK).
func (m *crModel) tick(s *crState) {
	if s.c1 == crHeld {
		s.anc = min(s.anc+1, m.gMax)
	}
	if s.out != crNone {
		s.sent = min(s.sent+1, m.gMax)
	}
	if s.c1 == crHeld && s.anc >= m.gMax || s.c1 == crPending && s.sent >= m.gMax {
		m.done(s)
	}
	if s.lk {
		s.seen = min(s.seen+1, m.eMin)
	}
	if s.mv >= mvInstalled {
		s.gate = min(s.gate+1, m.gateMin[s.g])
	}
	if m.cfg.Waiter {
		if s.w == crHeld || s.w == crQueued {
			s.wAnc = min(s.wAnc+1, m.wgMax)
		}
		if s.wOut != crNone {
			s.wSent = min(s.wSent+1, m.wgMax)
		}
		if (s.w == crHeld || s.w == crQueued) && s.wAnc >= m.wgMax || s.w == crPending && s.wSent >= m.wgMax {
			m.wDone(s)
		}
		if s.wRec != wrNone {
			s.wSeen = min(s.wSeen+1, m.weMin)
		}
	}
	if s.rq != crNone {
		s.rRead = min(s.rRead+1, m.gMax) // c1, whose request is older, has given up by then
	}
	s.conf = min(s.conf+1, m.cap)
	if s.up != crNone {
		s.upSent = min(s.upSent+1, m.cap)
	}
}

// norm canonicalizes what no longer matters.
func (m *crModel) norm(s *crState) {
	if !s.lk {
		s.seen = 0
	}
	if s.wRec == wrNone {
		s.wSeen = 0
	}
	if s.w == crDone {
		s.wAnc, s.wOut, s.wSent, s.wErr = 0, crNone, 0, false
	}
	if !s.upOpen || s.upEnd && s.up == crNone {
		s.conf = m.cap
	} else if s.rq == crNone {
		// Only "sent at or after the next read" matters: 0 or not.
		s.conf = min(s.conf, 1)
	}
	if s.c1 == crDone {
		s.anc, s.out, s.sent, s.err = 0, crNone, 0, false
		s.rq, s.rRead, s.rRes = crNone, 0, crResNone
	}
}

func (m *crModel) key(s *crState) string {
	return string([]byte{s.c1, byte(s.anc), s.out, byte(s.sent), b2u(s.err), b2u(s.c2), b2u(s.lk), byte(s.seen),
		b2u(s.ended), b2u(s.hopCut), s.mv, byte(s.gate), s.g, s.rq, byte(s.rRead), s.rRes, s.up,
		byte(s.upSent), byte(s.conf), b2u(s.upOpen), b2u(s.upEnd), b2u(s.told), s.pend,
		s.w, byte(s.wAnc), s.wOut, byte(s.wSent), b2u(s.wErr), s.wRec, byte(s.wSeen), b2u(s.wEnded)})
}

func (st crStep) String() string { return fmt.Sprintf("%d/%d", st.kind, st.what) }

// describe returns a line for step st from state s (before it), at real
// tick t.
func (m *crModel) describe(s *crState, st crStep, t int) string {
	at := fmt.Sprintf("t=%-3d ", t)
	req := [...]string{"", "LOCK", "PING"}
	owner := "P"
	if !m.cfg.Move {
		owner = "O"
	}
	to := owner
	if m.cfg.Relay {
		to = "R"
	}
	switch st.kind {
	case ckTick:
		return fmt.Sprintf("t=%-3d one tick passes", t)
	case ckSend:
		return at + fmt.Sprintf("c1 sends %s to %s", req[st.what], to)
	case ckLost:
		return at + fmt.Sprintf("c1's %s (sent %d ticks ago) is lost: it stops waiting", req[st.what], s.sent)
	case ckDeliver:
		r := at + fmt.Sprintf("P reads c1's %s (sent %d ticks ago)", req[st.what], s.sent)
		switch {
		case st.what == crLock && !(s.mv >= mvFrozen || s.c2 || s.ended):
			return r + ": grants; c1 believes, anchored at the send"
		case st.what == crLock:
			return r + ": unavailable"
		case m.ownerServes(s) && s.ended:
			return r + ": PONG on the session the export ended; c1 re-anchors at the send"
		case m.ownerServes(s):
			return r + ": PONG; c1 re-anchors at the send"
		}
		return r + ": the session is ended, no answer"
	case ckGiveUp:
		return at + fmt.Sprintf("c1's clock may be past anchor + 0.8·L (anchor %d ticks ago): it gives up", s.anc)
	case ckReadErr:
		return at + "c1 reads the ERROR that ends its session: it stops believing"
	case ckC2:
		n := owner
		if m.cfg.Move {
			n = "N"
			if s.g != 0 {
				return at + fmt.Sprintf("c2 asks N for a conflicting range lock: granted (gate G = %d units, installed %d ticks ago)", m.gateUnits(s.g), s.gate)
			}
		}
		return at + fmt.Sprintf("c2 asks %s for a conflicting range lock: granted", n)
	case ckExpire:
		r := at + fmt.Sprintf("%s's clock may have counted L since it last read from c1's session (%d ticks ago): drops its range lock", owner, s.seen)
		if s.wRec == wrQueued {
			if s.wEnded {
				r += "; grants w, which waited (its session is ended: no push)"
			} else {
				r += "; grants w, which waited, and pushes PROMOTED: w believes (anchor unchanged)"
			}
		}
		return r
	case ckFreeze:
		return at + "P freezes the key: range requests on it are answered \"unavailable\""
	case ckExport:
		holders := [...]string{"no session holds a range lock on the key; no gate", "c1's session holds", "w's session holds", "c1's and w's sessions hold"}[st.what]
		if st.what != 0 {
			holders += fmt.Sprintf(": gate G = %d units", m.gateUnits(st.what))
		}
		if m.cfg.Relay && s.lk {
			return at + "P exports: " + holders + "; ends R's upstream session (ERROR 0x01)"
		}
		var ending []string
		if s.lk {
			ending = append(ending, "c1's")
		}
		if s.wRec != wrNone {
			ending = append(ending, "w's")
		}
		if len(ending) > 0 {
			holders += "; to end " + strings.Join(ending, " and ") + " session"
		}
		return at + "P exports: " + holders
	case ckInstall:
		return at + fmt.Sprintf("N installs the gate (G = %d units, at least %d ticks)", m.gateUnits(s.g), m.gateMin[s.g])
	case ckEnd:
		return at + fmt.Sprintf("P ends %s session: ERROR 0x01 on its way", [...]string{"", "c1's", "w's"}[st.what])
	case ckHangUp:
		r := at + fmt.Sprintf("P sees %s's connection end: drops its range locks at once", [...]string{"", "c1", "w"}[st.what])
		if st.what == 1 && s.wRec == wrQueued {
			if s.wEnded {
				r += "; grants w, which waited (its session is ended: no push)"
			} else {
				r += "; grants w, which waited, and pushes PROMOTED: w believes (anchor unchanged)"
			}
		}
		return r
	case ckWSend:
		if st.what == crLock {
			return at + "w sends a blocking set (LOCK) to P"
		}
		return at + "w sends PING to P"
	case ckWLost:
		return at + fmt.Sprintf("w's %s (sent %d ticks ago) is lost: it stops waiting", req[st.what], s.wSent)
	case ckWDeliver:
		r := at + fmt.Sprintf("P reads w's %s (sent %d ticks ago)", req[st.what], s.wSent)
		switch {
		case st.what == crLock && (s.mv >= mvFrozen || s.c2):
			return r + ": unavailable"
		case st.what == crLock && s.lk:
			return r + ": queued behind c1's lock; w anchors at the send"
		case st.what == crLock:
			return r + ": grants; w believes, anchored at the send"
		case s.wRec != wrNone && !s.wEnded:
			return r + ": PONG; w re-anchors at the send"
		}
		return r + ": the session is ended, no answer"
	case ckWGiveUp:
		return at + fmt.Sprintf("w's clock may be past anchor + 0.8 × its lease (anchor %d ticks ago): it gives up", s.wAnc)
	case ckWReadErr:
		return at + "w reads the ERROR that ends its session: it stops believing"
	case ckWExpire:
		return at + fmt.Sprintf("P's clock may have counted w's lease since it last read from w (%d ticks ago): drops its range lock", s.wSeen)
	case ckSwitch:
		return at + "the ring switches: N serves the key"
	case ckRRead:
		if st.what == crLock {
			return at + fmt.Sprintf("R reads c1's LOCK (sent %d ticks ago) and relays it upstream to %s", s.sent, owner)
		}
		return at + fmt.Sprintf("R reads c1's PING (sent %d ticks ago)", s.sent)
	case ckRPump:
		return at + "R sends PING upstream (the upstream is not confirmed since it read c1's PING)"
	case ckUpLost:
		return at + fmt.Sprintf("R's upstream %s (sent %d ticks ago) is lost", req[st.what], s.upSent)
	case ckUpRead:
		r := at + fmt.Sprintf("%s reads R's upstream %s (sent %d ticks ago)", owner, req[st.what], s.upSent)
		switch {
		case st.what == crLock && !(s.mv >= mvFrozen || s.c2 || s.ended):
			return r + ": grants, R reads it"
		case st.what == crLock:
			return r + ": unavailable, R reads it"
		case m.ownerServes(s) && s.ended:
			return r + ": PONG on the session the export ended; R reads it"
		case m.ownerServes(s):
			return r + ": PONG, R reads it"
		}
		return r + ": the session is ended, no answer"
	case ckRAnswer:
		switch {
		case s.rq == crLock && st.what == crResGranted:
			return at + fmt.Sprintf("R answers c1's LOCK: granted; c1 believes, anchored at its send (%d ticks ago)", s.sent)
		case s.rq == crLock:
			return at + "R answers c1's LOCK: unavailable"
		case s.conf <= s.rRead:
			return at + fmt.Sprintf("R answers c1's PING (read %d ticks ago; upstream confirmed at a send %d ticks ago): PONG; c1 re-anchors at its send (%d ticks ago)", s.rRead, s.conf, s.sent)
		}
		return at + fmt.Sprintf("R answers c1's PING (read %d ticks ago) without an upstream confirmation since: PONG; c1 re-anchors at its send (%d ticks ago)", s.rRead, s.sent)
	case ckRUpEnd:
		return at + "R notices its upstream session ended: ends c1's session (ERROR 0x03)"
	case ckOwnerCut:
		if m.cfg.Mutation == MutCrOwnerDropsRelayed && s.lk {
			return at + fmt.Sprintf("%s sees R's upstream session end: drops its range lock at once", owner)
		}
		return at + fmt.Sprintf("%s sees R's upstream session end: reads nothing more from it, keeps the lock for L since its last read", owner)
	}
	return "?"
}

// CheckClusterRanges explores every interleaving of cfg breadth first and
// checks that no two clients believe at once that they hold conflicting
// range locks. It panics on a configuration that Validate rejects.
func CheckClusterRanges(cfg ClusterRangesConfig) Report {
	if cfg.Handover {
		return checkClusterRangesHandover(cfg, nil)
	}
	return checkClusterRanges(cfg, nil)
}

func checkClusterRanges(cfg ClusterRangesConfig, seen func(from *crState, st crStep)) Report {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	m := newCrModel(cfg)
	rep := Report{Model: "cluster-ranges", Config: cfg.String()}
	rep = exploreSucc(rep, m.initial(), m.key, func(s crState) []succ[crState, crStep] { return m.next(&s) }, seen)
	if v := rep.Violation; v != nil {
		v.Trace = m.trace(v.Trace, v.Detail)
	}
	return rep
}

// trace replays a path of encoded steps from the initial state and
// describes each.
func (m *crModel) trace(path []string, detail string) []string {
	return replayTrace("cluster-ranges", m.initial(), m.next, func(st crStep) bool { return st.kind == ckTick }, m.describe, path, detail)
}
