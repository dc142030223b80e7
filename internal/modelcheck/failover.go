package modelcheck

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/batonlock/baton/internal/clustercore"
	"github.com/batonlock/baton/protocol"
)

// The failover model: one lock name whose owner A is cut off from the
// Raft quorum, a leader Q that removes the silent A, and node B that takes
// the name over without A's state after a warm-up, while clients that
// follow the give-up rule re-assert their claims on B or re-queue. Time is
// explicit, every process's clock drifts within [1−ρ, 1+ρ], and every
// step is optional, so freezes, partitions, deaths and unbounded delays
// are behaviours of the model. It is monotone in its settings: checking
// at a bound checks every safer setting.
// Design: "Model 7: failover, timed, with clock drift" and
// #internalmodelcheckfailovergo in docs/design/2026-12-07-verification-models-cluster.md.

// FailoverConfig bounds the failover model. Durations are in units of
// the processes' clocks; a tick of real time is Unit units at the nominal
// rate.
type FailoverConfig struct {
	Clients int // clients (2..3); c1 has Lease, the others ShortLease
	Shared  int // how many of the clients, counted from the last, claim shared (0..Clients-1)
	Lives   int // claims each client makes, one after another (1..2)

	Unit  int // units of a clock per tick at the nominal rate (1..60)
	Drift int // a clock advances Unit±Drift units per tick: ρ = Drift/Unit

	Lease      int // c1's lease
	ShortLease int // the other clients' lease (0: Lease); the largest lease committed at start is the smallest lease
	TSelf      int // A stops serving after TSelf without quorum contact
	T          int // the leader removes a node silent for T
	Slack      int // W = the largest committed lease + Slack

	// Relay, when not 0, makes client c<Relay> a version 2 client of
	// node R, which relays its claim to the owner (failoverrelay.go).
	Relay int
	// RelayFails, with Relay, lets node R die at any moment while it
	// relays a claim (failoverrelayfail.go).
	RelayFails bool

	// Mutation, when not empty, drops one rule so that the checker must
	// fail; see FailoverMutations.
	Mutation string

	// noOwnerCheck turns off the design invariant that the old owner
	// serves nothing once the new owner has taken over, so that the tests
	// can show what the mutations that break it do to the clients.
	noOwnerCheck bool
	// noKeptCheck turns off PropFailoverKept, so that the tests can show
	// what the relay mutations that break it first do to the clients.
	noKeptCheck bool
}

// DefaultFailoverConfig is the configuration always checked: two clients
// (c1 with lease 40, c2 with lease 20, both exclusive), one claim each, a
// tick of 10 units with a drift of 1 (ρ = 0.1, close to the 1/9 above
// which the give-up rule itself fails), TSelf 20, T 25, the smallest
// integer above TSelf·(1+ρ)/(1−ρ) = 24.4, and no slack: W = the largest
// committed lease. Three clients, or two claims per client, need more
// than 10 GB of memory.
func DefaultFailoverConfig() FailoverConfig {
	return FailoverConfig{Clients: 2, Lives: 1, Unit: 10, Drift: 1, Lease: 40, ShortLease: 20, TSelf: 20, T: 25}
}

// Mutations of the failover model.
const (
	// MutFoWarmupShort sets the warm-up to half the largest lease.
	MutFoWarmupShort = "warmup-short"
	// MutFoNoTSelf lets the old owner serve without quorum contact.
	MutFoNoTSelf = "no-tself"
	// MutFoReassertOverNewer lets the new owner accept a re-assertion that
	// conflicts with claims it holds under newer tokens, dropping them:
	// the older token wins.
	MutFoReassertOverNewer = "reassert-over-newer"
	// MutFoRemoveAtTSelf removes a silent node after T = TSelf, without
	// the drift margin.
	MutFoRemoveAtTSelf = "remove-at-tself"
	// MutFoStaleReassert accepts a re-assertion that names the old ring
	// (it may have been sent before the ring changed): the real rule,
	// clustercore.TakeOverFor, is given the re-assertion as if it named
	// the take-over's ring.
	MutFoStaleReassert = "stale-reassert"
	// MutFoContactAtReceive anchors a node's quorum contact at the arrival
	// of the leader's answer instead of the send time of its request.
	MutFoContactAtReceive = "contact-at-receive"
	// MutFoLeaseUncommitted grants a claim whose lease is above the
	// largest committed lease before committing it.
	MutFoLeaseUncommitted = "lease-uncommitted"
)

// FailoverMutations lists the mutations of the failover model.
var FailoverMutations = []string{MutFoWarmupShort, MutFoNoTSelf, MutFoReassertOverNewer, MutFoRemoveAtTSelf,
	MutFoStaleReassert, MutFoContactAtReceive, MutFoLeaseUncommitted}

func (c FailoverConfig) String() string {
	short := c.ShortLease
	if short == 0 {
		short = c.Lease
	}
	s := fmt.Sprintf("%s × %s, %d shared; tick %d±%d units (ρ = %.3f); leases %d/%d, TSelf %d, T %d, W = largest lease + %d",
		plural(c.Clients, "client"), plural(c.Lives, "claim"), c.Shared, c.Unit, c.Drift,
		float64(c.Drift)/float64(c.Unit), c.Lease, short, c.TSelf, c.T, c.Slack)
	if c.Relay != 0 {
		s += fmt.Sprintf("; c%d relayed through R", c.Relay)
		if c.RelayFails {
			s += ", which may die"
		}
	}
	if c.Mutation != "" {
		s += ", mutation " + c.Mutation
	}
	return s
}

const (
	foMaxClients = 3
	foMaxUnits   = 600
)

// Validate reports bounds the checker cannot explore.
func (c FailoverConfig) Validate() error {
	short := c.ShortLease
	if short == 0 {
		short = c.Lease
	}
	switch {
	case c.Clients < 2 || c.Clients > foMaxClients:
		return fmt.Errorf("clients must be 2..%d, not %d", foMaxClients, c.Clients)
	case c.Shared < 0 || c.Shared >= c.Clients:
		return fmt.Errorf("shared clients must be 0..%d, not %d", c.Clients-1, c.Shared)
	case c.Lives < 1 || c.Lives > 2:
		return fmt.Errorf("claims per client must be 1..2, not %d", c.Lives)
	case c.Unit < 1 || c.Unit > 60:
		return fmt.Errorf("unit must be 1..60, not %d", c.Unit)
	case c.Drift < 0 || c.Drift >= c.Unit:
		return fmt.Errorf("drift must be 0..unit-1, not %d", c.Drift)
	case c.Lease < 1 || c.Lease > foMaxUnits || short < 1 || short > c.Lease:
		return fmt.Errorf("leases must be 1..%d, the short one at most the first, not %d and %d", foMaxUnits, c.Lease, c.ShortLease)
	case c.TSelf < 1 || c.TSelf > foMaxUnits || c.T < 1 || c.T > foMaxUnits:
		return fmt.Errorf("TSelf and T must be 1..%d, not %d and %d", foMaxUnits, c.TSelf, c.T)
	case c.Slack < 0 || c.Lease+c.Slack > foMaxUnits:
		return fmt.Errorf("slack must be 0..%d, not %d", foMaxUnits-c.Lease, c.Slack)
	case c.Mutation != "" && !slices.Contains(FailoverMutations, c.Mutation) && !slices.Contains(FailoverRelayMutations, c.Mutation):
		return fmt.Errorf("mutation must be one of %s, not %q", strings.Join(slices.Concat(FailoverMutations, FailoverRelayMutations), ", "), c.Mutation)
	case c.Relay < 0 || c.Relay > c.Clients:
		return fmt.Errorf("relay must be 0 (none) or a client, 1..%d, not %d", c.Clients, c.Relay)
	case slices.Contains(FailoverRelayMutations, c.Mutation) && c.Relay == 0:
		return fmt.Errorf("mutation %s needs the relay option", c.Mutation)
	case c.RelayFails && c.Relay == 0:
		return fmt.Errorf("relay failure needs the relay option")
	case (c.Mutation == MutFoRelayDeathReleases || c.Mutation == MutFoRelayForeignSecret) && !c.RelayFails:
		return fmt.Errorf("mutation %s needs the relay failure option", c.Mutation)
	}
	return nil
}

// Property names reported by the failover model.
const (
	PropFailoverOneBeliever = "no instant at which two clients believe they hold conflicting claims"
	PropFailoverTokens      = "tokens of the lock strictly increase with every new grant; a re-asserted claim keeps its token"
	PropFailoverKept        = "a holder is never refused, told its claim is gone, or expired while it still believes"
	PropFailoverOneOwner    = "the old owner serves nothing once the new owner has taken the name over"
)

// Client states.
const (
	fcIdle    uint8 = iota // no claim; may claim if it has lives left
	fcPending              // a claim sent, not answered yet
	fcQueued               // queued on node at
	fcHeld                 // holds on node at, and believes it: a give-up ends the state
	fcDone                 // no lives left
)

// Requests.
const (
	fmNone uint8 = iota
	fmClaim
	fmHeartbeat
	fmReassert
	fmRelease
)

// Answers.
const (
	frNone    uint8 = iota
	frGranted       // claim: granted (tok)
	frQueued        // claim or heartbeat: queued (ticket)
	frHeld          // heartbeat: held (tok); re-assertion: accepted
	frGone          // heartbeat: no such claim; re-assertion: refused
	frRetry         // not served here now, or an older ring named: try again (ring version)
)

// Record states on a node.
const (
	frecNone uint8 = iota
	frecQueued
	frecHeld
)

const (
	nodeA = 0
	nodeB = 1
)

type foClient struct {
	st     uint8
	at     int8  // node of its claim (queued or held)
	ver    uint8 // ring version it knows
	lives  int8  // claims left, the current one included
	anc    int16 // ticks since its anchor; -1 before the first answer
	tok    uint8 // token of its held claim
	ticket uint8 // queue ticket from A
	out    uint8 // outstanding request
	dst    int8  // its node
	sent   int16 // ticks since it was sent
	mver   uint8 // ring version it names
	mtick  uint8 // ticket it carries (a re-queue)
	rep    uint8 // the answer, read in the step the node sends it; frNone otherwise
	rval   uint8 // its token, ticket or ring version
	orph   bool  // a re-assertion it gave up waiting for is still on its way to B
	otok   uint8 // ... with this token
	over   uint8 // ... naming this ring version
}

type foRec struct {
	st     uint8
	tok    uint8
	ticket uint8
	seen   int16 // ticks since the node last heard from the client
}

type foNode struct {
	rec   [foMaxClients]foRec
	queue [foMaxClients]int8
	nq    int8
	ctr   uint8 // token counter under the node's epoch
}

type foState struct {
	c [foMaxClients]foClient
	n [2]foNode

	// A
	aq        int16 // ticks since A's quorum-contact anchor
	aStopped  bool  // A's clock has reached TSelf since that anchor: it serves nothing
	aRemoved  bool  // A learned it is out of the ring
	aLmax     int16 // largest lease A knows committed
	aTicket   uint8 // A's last queue ticket
	aPing     uint8 // 0 none, 2 Q's answer on its way back
	aPingSent int16 // ticks since A sent it
	aPingGone bool  // the answer says A was removed
	aPingLmax int16 // the answer's largest lease

	// Q
	qHeard int16 // ticks since Q last heard from A
	ring   uint8 // 1: A owns the name, 2: B does
	lmax   int16 // largest committed lease

	// B
	bVer  uint8 // ring version B applied
	bTake int16 // ticks since B took the name over

	maxTok uint8 // largest token granted (epoch<<4 | counter)

	r foRelay // R, with the relay option
}

// Step kinds.
const (
	fsTick uint8 = iota + 1
	fsClaim
	fsHeartbeat
	fsReassert
	fsRequeue
	fsRelease
	fsAbandon
	fsDeliver // a node handles a request
	fsExpire
	fsPromote
	fsPing
	fsPingLost
	fsPingAnswer
	fsRemove
	fsApply
	fsLearn
	fsGiveUp
	fsStop
	fsOrphan
	fsRRead     // R reads c1's request
	fsRAnswer   // R answers c1, which reads the answer
	fsRPing     // R pings the upstream
	fsRUp       // an owner handles R's upstream request
	fsRFail     // R's upstream ends
	fsRLearn    // R learns ring 2
	fsRReassert // R re-asserts the moving claim
	fsRGiveUp   // R gives the moving claim up
	fsRRevoked  // the relayed client reads REVOKED
	fsRExpire   // R ends the relayed client's session
	fsRDie      // R dies (failoverrelayfail.go)
	fsCReassert // the relayed client, R dead, re-asserts at an owner
)

type foStep struct {
	kind uint8
	c    int8 // client
	n    int8 // node
	what uint8
	val  uint8
	tok  uint8
}

func foTok(t uint8) string { return fmt.Sprintf("(epoch %d, %d)", t>>4, t&15) }

func foNodeName(n int8) string {
	if n == nodeR {
		return "R"
	}
	return string(rune('A' + n))
}

type foModel struct {
	cfg   FailoverConfig
	nc    int8
	lease [foMaxClients]int16 // units
	long  int16               // the largest lease, units
	short int16
	t     int16 // T after the mutation, units

	// Timer windows, in ticks since the timer's start (see the comment at
	// the top): a condition may hold from the first and must hold from the
	// second.
	gMin, gMax [foMaxClients]int16 // the client's clock passes 0.8·lease
	eMin       [foMaxClients]int16 // a node's clock passes lease: it may expire the claim
	sMin, sMax int16               // A's clock reaches TSelf: it stops
	rMin       int16               // Q's clock reaches T: it may remove A
	rc         int8                // the relayed client, with the relay option
	rgMin      int16               // R's clock reaches L/2 of its lease: it may give a moving claim up
	rgMax      int16
	sxMin      int16 // R's clock passes its lease since R last heard from it: R may end its session
	sxMax      int16
	wCap       int16 // the longest gate, in ticks
}

// Windows of a timed condition on a clock started at a tick boundary:
// after n ticks the clock has advanced between n·(Unit−Drift) and
// n·(Unit+Drift) units.
func (m *foModel) mayReach(k int16) int16 { // first n with n·(Unit+Drift) ≥ k
	f := int16(m.cfg.Unit + m.cfg.Drift)
	return (k + f - 1) / f
}

func (m *foModel) mustReach(k int16) int16 { // first n with n·(Unit−Drift) ≥ k
	s := int16(m.cfg.Unit - m.cfg.Drift)
	return (k + s - 1) / s
}

func (m *foModel) mayPass(k int16) int16  { return m.mayReach(k + 1) }  // n·(Unit+Drift) > k
func (m *foModel) mustPass(k int16) int16 { return m.mustReach(k + 1) } // n·(Unit−Drift) > k

func newFoModel(cfg FailoverConfig) *foModel {
	m := &foModel{cfg: cfg, nc: int8(cfg.Clients)}
	short := cfg.ShortLease
	if short == 0 {
		short = cfg.Lease
	}
	for c := range m.nc {
		l := short
		if c == 0 {
			l = cfg.Lease
		}
		m.lease[c] = int16(l)
		give := int16(l * 4 / 5) // believes while its clock reads at most anchor + 0.8·lease
		m.gMin[c], m.gMax[c] = m.mayPass(give), m.mustPass(give)
		m.eMin[c] = m.mayPass(int16(l))
	}
	m.long, m.short = int16(cfg.Lease), int16(short)
	m.t = int16(cfg.T)
	if cfg.Mutation == MutFoRemoveAtTSelf {
		m.t = int16(cfg.TSelf)
	}
	m.sMin, m.sMax = m.mayReach(int16(cfg.TSelf)), m.mustReach(int16(cfg.TSelf))
	m.rMin = m.mayReach(m.t)
	m.wCap = m.gate(m.long)
	m.rc = int8(max(cfg.Relay-1, 0))
	m.rgMin, m.rgMax = m.mayReach(m.lease[m.rc]/2), m.mustReach(m.lease[m.rc]/2)
	m.sxMin, m.sxMax = m.mayPass(m.lease[m.rc]), m.mustPass(m.lease[m.rc])
	return m
}

// warmup is W in units for the largest committed lease lmax.
func (m *foModel) warmup(lmax int16) int16 {
	if m.cfg.Mutation == MutFoWarmupShort {
		return lmax / 2
	}
	return lmax + int16(m.cfg.Slack)
}

// gate is the first tick after the take-over at which B's clock may
// have counted W.
func (m *foModel) gate(lmax int16) int16 { return m.mayReach(m.warmup(lmax)) }

func (m *foModel) shared(c int8) bool { return int(c) >= m.cfg.Clients-m.cfg.Shared }

func (m *foModel) conflict(c, d int8) bool { return c != d && !(m.shared(c) && m.shared(d)) }

// believes: a client believes while it holds and has not given up; a
// give-up due by its clock is applied at the tick (normalize).
func (m *foModel) believes(s *foState, c int8) bool { return s.c[c].st == fcHeld }

// serving: A answers and acts on the name.
func (m *foModel) serving(s *foState) bool {
	return !s.aRemoved && (!s.aStopped || m.cfg.Mutation == MutFoNoTSelf)
}

func (m *foModel) gateOpen(s *foState) bool { return s.bVer == 2 && s.bTake >= m.gate(s.lmax) }

// grantable: node n may grant c now, queue aside.
func (m *foModel) grantable(s *foState, n, c int8) bool {
	nd := &s.n[n]
	for d := range m.nc {
		if nd.rec[d].st == frecHeld && m.conflict(c, d) {
			return false
		}
	}
	if n == nodeA {
		return m.lease[c] <= s.aLmax || m.cfg.Mutation == MutFoLeaseUncommitted
	}
	return m.gateOpen(s)
}

// grant makes c a holder on node n with a new token.
func (m *foModel) grant(s *foState, n, c int8) (uint8, *failure) {
	nd := &s.n[n]
	nd.ctr++
	tok := uint8(n+1)<<4 | nd.ctr
	var f *failure
	if tok <= s.maxTok {
		f = fail(PropFailoverTokens, "node %s grants c%d token %s, not above the largest granted before, %s",
			foNodeName(n), c+1, foTok(tok), foTok(s.maxTok))
	}
	s.maxTok = max(s.maxTok, tok)
	nd.rec[c] = foRec{st: frecHeld, tok: tok}
	return tok, f
}

func (nd *foNode) dequeue(c int8) {
	for i := range nd.nq {
		if nd.queue[i] == c {
			copy(nd.queue[i:], nd.queue[i+1:nd.nq])
			nd.nq--
			nd.queue[nd.nq] = 0
			return
		}
	}
}

// enqueue puts c on node n's queue: at the back, except that on B a claim
// with a ticket of its predecessor goes ahead of those without one and
// behind those with a smaller ticket. The code: locktable's ticketPlace
// (tickets.go), used by Claim and Enter; the server enters the claims
// held during the warm-up with Enter (server/tickets.go).
func (nd *foNode) enqueue(c int8, ticket uint8) {
	i := nd.nq
	if ticket != 0 {
		for j := range nd.nq {
			if t := nd.rec[nd.queue[j]].ticket; t == 0 || t > ticket {
				i = j
				break
			}
		}
	}
	copy(nd.queue[i+1:nd.nq+1], nd.queue[i:nd.nq])
	nd.queue[i] = c
	nd.nq++
}

// kept fails if client c, whose claim node n ends or refuses, still
// believes it holds it (there, unless anywhere).
func (m *foModel) kept(s *foState, n, c int8, what string, anywhere bool) *failure {
	cl := &s.c[c]
	at := cl.at
	switch {
	case m.isRelayed(s, c):
		at = s.r.on // the node that holds it on R's behalf
	case m.cfg.Relay != 0 && c == m.rc && at == nodeR:
		// R died: its owner (A, or B after a move) keeps it for the
		// client, which has not re-asserted it yet.
		anywhere = true
	}
	if m.believes(s, c) && (at == n || anywhere) && !m.cfg.noKeptCheck {
		return fail(PropFailoverKept, "node %s %s c%d's claim while c%d still believes it holds it (anchor %d ticks ago)",
			foNodeName(n), what, c+1, c+1, cl.anc)
	}
	return nil
}

// deliver has node n handle client c's outstanding request.
func (m *foModel) deliver(s *foState, n, c int8) (foStep, *failure) {
	cl := &s.c[c]
	st := foStep{kind: fsDeliver, n: n, c: c, what: cl.out}
	rep, val, f := m.handle(s, n, c, cl.out, cl.tok, cl.mver, cl.mtick)
	if n == nodeA && cl.out == fmReassert {
		st.tok = val // an adoption (failoverrelayfail.go)
	}
	if cl.out == fmRelease {
		cl.out = fmNone
	} else {
		cl.rep, cl.rval = rep, val
	}
	st.val = rep
	return st, f
}

// handle has node n handle request out about client c's claim (token tok
// for a re-assertion, naming ring version ver; ticket mtick for a
// re-queue), from the client itself or from the relaying node on its
// behalf. It returns the answer and its token, ticket or ring version.
func (m *foModel) handle(s *foState, n, c int8, out, tok, ver, mtick uint8) (uint8, uint8, *failure) {
	nd := &s.n[n]
	var f *failure
	if n == nodeA && s.bVer == 2 && !m.cfg.noOwnerCheck {
		f = fail(PropFailoverOneOwner, "node A handles c%d's request after node B took the name over", c+1)
	}
	var rep, val uint8
	answer := func(r, v uint8) { rep, val = r, v }
	r := &nd.rec[c]
	switch out {
	case fmRelease:
		if r.st != frecNone {
			if r.st == frecQueued {
				nd.dequeue(c)
			}
			*r = foRec{}
		}
	case fmClaim:
		switch {
		case n == nodeB && s.bVer < 2:
			answer(frRetry, s.bVer)
		case r.st == frecHeld:
			r.seen = 0
			answer(frGranted, r.tok)
		case r.st == frecQueued:
			r.seen = 0
			answer(frQueued, r.ticket)
		case nd.nq == 0 && m.grantable(s, n, c):
			tok, ff := m.grant(s, n, c)
			f = cmp(f, ff)
			answer(frGranted, tok)
		default:
			ticket := mtick
			if n == nodeA {
				s.aTicket++
				ticket = s.aTicket
			}
			*r = foRec{st: frecQueued, ticket: ticket}
			nd.enqueue(c, ticket)
			answer(frQueued, ticket)
		}
	case fmHeartbeat:
		switch r.st {
		case frecHeld:
			r.seen = 0
			answer(frHeld, r.tok)
		case frecQueued:
			r.seen = 0
			answer(frQueued, r.ticket)
		default:
			f = cmp(f, m.kept(s, n, c, "answers a heartbeat that it has no claim: ends", false))
			answer(frGone, 0)
		}
	case fmReassert:
		if n == nodeA {
			// The relayed client re-asserts at A after R died
			// (failoverrelayfail.go): A adopts what it still keeps.
			if m.cfg.Mutation == MutFoRelayForeignSecret {
				f = cmp(f, m.kept(s, n, c, "refuses (secret mismatch) the re-assertion of", true))
				answer(frGone, 0)
				break
			}
			rep, val, ff := m.adoptAtOwner(s, c, tok, mtick)
			f = cmp(f, ff)
			answer(rep, val)
			break
		}
		rep, val, ff := m.reassert(s, n, c, tok, ver, false)
		f = cmp(f, ff)
		answer(rep, val)
	}
	return rep, val, f
}

// reassert has node n handle a re-assertion of client c's claim with
// token tok, naming ring version ver; orphan: the client no longer waits
// for the answer (it gave up or its connection broke).
func (m *foModel) reassert(s *foState, n, c int8, tok, ver uint8, orphan bool) (uint8, uint8, *failure) {
	nd := &s.n[n]
	r := &nd.rec[c]
	if s.bVer < 2 {
		return frRetry, s.bVer, nil
	}
	// B took the name over at ring 2; how it answers a held claim's
	// re-assertion is the real node's rule.
	reassertion := protocol.Frame{Type: protocol.TypeClaim, Flags: protocol.ClaimReassert, Name: "m",
		Token: uint64(tok), Ring: uint64(ver)}
	if m.takeOver(reassertion) == clustercore.TakeOverStaleRing {
		return frRetry, s.bVer, nil
	}
	switch {
	case r.st == frecHeld && r.tok == tok:
		r.seen = 0
		return frHeld, tok, nil
	}
	var f *failure
	conflict, newer := false, true
	for d := range m.nc {
		if nd.rec[d].st == frecHeld && m.conflict(c, d) {
			conflict = true
			newer = newer && nd.rec[d].tok > tok
		}
	}
	if conflict {
		if m.cfg.Mutation != MutFoReassertOverNewer || !newer {
			if !orphan {
				f = m.kept(s, n, c, "refuses the re-assertion of", true)
			}
			return frGone, 0, f
		}
		// The mutation: the re-asserted (older) token wins; the newer
		// claims are dropped.
		for d := range m.nc {
			if nd.rec[d].st == frecHeld && m.conflict(c, d) {
				nd.rec[d] = foRec{}
			}
		}
	}
	if r.st == frecQueued {
		nd.dequeue(c)
	}
	if tok > s.maxTok || tok == 0 {
		f = fail(PropFailoverTokens, "c%d re-asserts token %s, which was never granted", c+1, foTok(tok))
	}
	*r = foRec{st: frecHeld, tok: tok}
	return frHeld, tok, f
}

// takeOver is B's decision on a re-assertion (clustercore.TakeOverFor,
// the name taken over at ring 2). MutFoStaleReassert breaks the real
// rule the way a bug would: the ring the re-assertion names is not
// compared.
func (m *foModel) takeOver(f protocol.Frame) clustercore.TakeOver {
	const since = 2
	if m.cfg.Mutation == MutFoStaleReassert {
		f.Ring = since
	}
	answer, _ := clustercore.TakeOverFor(f, since)
	return answer
}

func cmp(a, b *failure) *failure {
	if a != nil {
		return a
	}
	return b
}

// answer has client c read the answer to its request.
func (m *foModel) answer(s *foState, c int8) {
	cl := &s.c[c]
	rep, val, out, dst, sent := cl.rep, cl.rval, cl.out, cl.dst, cl.sent
	anchor := func() { cl.anc = sent }
	cl.out, cl.rep, cl.rval, cl.sent, cl.mver, cl.mtick = fmNone, frNone, 0, 0, 0, 0
	if rep == frRetry {
		cl.ver = max(cl.ver, val)
		if out == fmClaim && cl.st == fcPending {
			cl.st = fcIdle
		}
		return
	}
	switch rep {
	case frGranted:
		anchor()
		cl.st, cl.at, cl.tok = fcHeld, dst, val
	case frQueued:
		anchor()
		cl.st, cl.at, cl.ticket = fcQueued, dst, val
	case frHeld:
		anchor()
		cl.st, cl.at, cl.tok = fcHeld, dst, val
	case frGone:
		m.end(s, c)
	}
}

// end: client c's claim is over (released, refused, given up); it may
// claim again if it has lives left.
func (m *foModel) end(s *foState, c int8) {
	cl := &s.c[c]
	cl.lives--
	m.orphan(cl)
	*cl = foClient{st: fcIdle, ver: cl.ver, lives: cl.lives, anc: -1, out: cl.out, dst: cl.dst, mver: cl.mver,
		orph: cl.orph, otok: cl.otok, over: cl.over}
	if cl.out != fmRelease {
		cl.out, cl.dst, cl.mver = fmNone, 0, 0
	}
	if cl.lives == 0 {
		cl.st = fcDone
	}
}

// orphan: client cl stops waiting for its outstanding request; a
// re-assertion to B may still reach B (one at a time; a second is lost;
// one to A, with the relay failure option, see failoverrelayfail.go). Other
// requests are lost: a late claim is granted to no one who waits (B
// grants only after the warm-up), a late heartbeat only keeps a claim
// longer, a late release frees what its client no longer believes in.
func (m *foModel) orphan(cl *foClient) {
	if cl.out == fmReassert && cl.dst == nodeB && !cl.orph {
		cl.orph, cl.otok, cl.over = true, cl.tok, cl.mver
	}
}

type foSucc struct {
	step foStep
	to   foState
	f    *failure
}

func (m *foModel) next(s *foState) []foSucc {
	var out []foSucc
	emit := func(t foState, st foStep, f *failure) {
		out = append(out, foSucc{step: st, to: t, f: f})
	}
	if m.cfg.Relay != 0 {
		m.relaySteps(s, emit)
	}
	// Clients.
	for c := range m.nc {
		cl := &s.c[c]
		viaR := m.isRelayed(s, c)
		send := func(kind uint8, out uint8, dst int8, mtick uint8) {
			t := *s
			tc := &t.c[c]
			tc.out, tc.dst, tc.sent, tc.mver, tc.mtick = out, dst, 0, tc.ver, mtick
			if out == fmClaim && tc.st == fcIdle {
				tc.st = fcPending
			}
			emit(t, foStep{kind: kind, c: c, n: dst, val: tc.ver}, nil)
		}
		if cl.out == fmNone && !viaR && cl.at == nodeR && (cl.st == fcQueued || cl.st == fcHeld) {
			// Its relaying node died: it re-asserts, or (a plain
			// session) can do nothing.
			m.relayLostSends(s, c, emit)
		} else if cl.out == fmNone && !viaR {
			switch cl.st {
			case fcIdle:
				if cl.ver < 2 {
					send(fsClaim, fmClaim, nodeA, 0)
				} else {
					send(fsClaim, fmClaim, nodeB, 0)
				}
			case fcQueued:
				send(fsHeartbeat, fmHeartbeat, cl.at, 0)
				if cl.at == nodeA {
					send(fsRequeue, fmClaim, nodeB, cl.ticket)
				}
			case fcHeld:
				if m.believes(s, c) {
					send(fsHeartbeat, fmHeartbeat, cl.at, 0)
					if cl.at == nodeA {
						send(fsReassert, fmReassert, nodeB, 0)
					}
					t := *s
					tc := &t.c[c]
					dst := tc.at
					m.end(&t, c)
					tc.out, tc.dst = fmRelease, dst
					emit(t, foStep{kind: fsRelease, c: c, n: dst}, nil)
				}
			}
		}
		if cl.out != fmNone && !(viaR && cl.out == fmClaim) {
			// (A relayed client's CLAIM waits for R's answer or its
			// give-up: the claim it would send instead is a new one, and
			// R relays one claim at a time.)
			t := *s
			tc := &t.c[c]
			st := foStep{kind: fsAbandon, c: c, n: tc.dst, what: tc.out}
			m.orphan(tc)
			tc.out, tc.dst, tc.sent, tc.mver, tc.mtick, tc.rep, tc.rval = fmNone, 0, 0, 0, 0, frNone, 0
			if tc.st == fcPending {
				tc.st = fcIdle
			}
			emit(t, st, nil)
		}
		if cl.out != fmNone && !viaR {
			n := cl.dst
			if n == nodeB || m.serving(s) {
				// The answer is read at once: an answer that takes longer
				// only starts the client's belief later (its anchor is the
				// request's send time either way).
				t := *s
				st, f := m.deliver(&t, n, c)
				if t.c[c].rep != frNone {
					m.answer(&t, c)
				}
				emit(t, st, f)
			}
		}
		if cl.orph {
			t := *s
			tc := &t.c[c]
			rep, _, f := m.reassert(&t, nodeB, c, tc.otok, tc.over, true)
			st := foStep{kind: fsOrphan, c: c, n: nodeB, what: tc.over, val: rep, tok: tc.otok}
			tc.orph, tc.otok, tc.over = false, 0, 0
			emit(t, st, f)
		}
		if cl.ver < 2 && s.bVer == 2 && !viaR {
			// It asks any node that has applied the new ring.
			t := *s
			t.c[c].ver = 2
			emit(t, foStep{kind: fsLearn, c: c}, nil)
		}
		if (cl.st == fcHeld || cl.st == fcQueued) && cl.anc >= m.gMin[c] {
			// Its clock may be past anchor + 0.8·lease.
			t := *s
			m.end(&t, c)
			emit(t, foStep{kind: fsGiveUp, c: c, what: cl.st}, nil)
		}
	}
	// Nodes A and B: expiry and promotion.
	for n := range int8(2) {
		if n == nodeA && !m.serving(s) || n == nodeB && s.bVer < 2 {
			continue
		}
		var owner *failure
		if n == nodeA && s.bVer == 2 && !m.cfg.noOwnerCheck {
			owner = fail(PropFailoverOneOwner, "node A acts on the name after node B took it over")
		}
		nd := &s.n[n]
		for c := range m.nc {
			r := nd.rec[c]
			if r.st != frecNone && r.seen >= m.eMin[c] {
				t := *s
				tn := &t.n[n]
				if r.st == frecQueued {
					tn.dequeue(c)
				}
				tn.rec[c] = foRec{}
				f := owner
				if r.st == frecHeld {
					f = cmp(f, m.kept(&t, n, c, "expires", false))
				}
				emit(t, foStep{kind: fsExpire, n: n, c: c, what: r.st}, f)
			}
		}
		if nd.nq > 0 && m.grantable(s, n, nd.queue[0]) {
			t := *s
			tn := &t.n[n]
			c := tn.queue[0]
			tn.dequeue(c)
			tok, f := m.grant(&t, n, c)
			if m.isRelayed(&t, c) {
				if tr := &t.r; tr.cst == frcLive && tr.on == n {
					// Pushed through R.
					tr.tok, tr.ticket = tok, 0
					if tc := &t.c[c]; tc.st == fcQueued {
						tc.st, tc.tok = fcHeld, tok
					}
				}
			} else if tc := &t.c[c]; tc.st == fcQueued && tc.at == n {
				// The push is read at once (later only starts the belief
				// later); it does not move the anchor.
				tc.st, tc.tok = fcHeld, tok
			}
			emit(t, foStep{kind: fsPromote, n: n, c: c, val: tok}, cmp(owner, f))
		}
	}
	// A's pings and Q.
	if !s.aRemoved && !s.aStopped && s.aq >= m.sMin {
		// A's clock may have reached TSelf since its contact anchor.
		t := *s
		t.aStopped = true
		emit(t, foStep{kind: fsStop}, nil)
	}
	if !s.aRemoved {
		m.pings(s, func(t foState, st foStep) { emit(t, st, nil) })
	}
	if s.ring == 1 && s.qHeard >= m.rMin {
		t := *s
		t.ring = 2
		emit(t, foStep{kind: fsRemove}, nil)
	}
	if s.ring == 2 && s.bVer < 2 {
		t := *s
		t.bVer, t.bTake = 2, 0
		emit(t, foStep{kind: fsApply}, nil)
	}
	{
		t := *s
		f := m.tick(&t)
		emit(t, foStep{kind: fsTick}, f)
	}
	for i := range out {
		if m.cfg.Relay != 0 {
			m.relayNorm(&out[i].to)
		}
		if out[i].f == nil {
			out[i].f = m.invariants(&out[i].to)
		}
	}
	return out
}

// pings emits A's contact with the leader. A ping reaches Q at once: a
// delay on the way there only makes Q hear A later than A's anchor, the
// safe side. Its answer, too, is read at once: one that takes longer
// leaves A on its older anchor meanwhile, which serves no more than this
// (the anchor it sets is the ping's send time either way), and A may
// also not ping at all. Only under MutFoContactAtReceive, where the
// delay is the point, does the answer travel.
func (m *foModel) pings(s *foState, emit func(foState, foStep)) {
	raise := false
	for c := range m.nc {
		if r := s.n[nodeA].rec[c]; r.st == frecQueued && m.lease[c] > s.aLmax {
			raise = true
		}
	}
	hear := func(t *foState) {
		if t.ring == 1 {
			t.qHeard = 0
			if raise {
				t.lmax = m.long
			}
		}
		t.aPingGone, t.aPingLmax = t.ring == 2, t.lmax
	}
	learn := func(t *foState, anchor int16) {
		if t.aPingGone {
			// A closes its sessions and keeps nothing of the name.
			t.aRemoved = true
			t.n[nodeA] = foNode{}
			t.aq, t.aLmax, t.aTicket, t.aStopped = 0, 0, 0, false
		} else {
			t.aq = min(t.aq, anchor)
			// Serving again unless its clock must be past TSelf since the
			// new anchor.
			t.aStopped = t.aq >= m.sMax
			t.aLmax = t.aPingLmax
		}
		t.aPing, t.aPingSent, t.aPingGone, t.aPingLmax = 0, 0, false, 0
	}
	if m.cfg.Mutation != MutFoContactAtReceive {
		t := *s
		hear(&t)
		st := foStep{kind: fsPing, val: b2u(raise), what: b2u(t.aPingGone)}
		learn(&t, 0)
		emit(t, st)
		return
	}
	switch s.aPing {
	case 0:
		t := *s
		hear(&t)
		t.aPing, t.aPingSent = 2, 0
		emit(t, foStep{kind: fsPing, val: b2u(raise), what: b2u(t.aPingGone), n: 1})
	case 2:
		t := *s
		st := foStep{kind: fsPingAnswer, what: b2u(t.aPingGone)}
		learn(&t, 0) // the mutation: anchored at the answer's arrival
		emit(t, st)
		t = *s
		t.aPing, t.aPingSent, t.aPingGone, t.aPingLmax = 0, 0, false, 0
		emit(t, foStep{kind: fsPingLost})
	}
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// tick lets one tick of real time pass: every counter advances, and the
// conditions that must hold by now take effect: a client whose clock must
// be past its give-up has given up (its connection closes: what it had
// outstanding is lost), and A, if its clock must have reached TSelf since
// its contact anchor, has stopped.
func (m *foModel) tick(s *foState) *failure {
	for c := range m.nc {
		cl := &s.c[c]
		g := m.gMax[c]
		if cl.anc >= 0 {
			cl.anc = min(cl.anc+1, g)
		}
		if cl.out != fmNone && cl.out != fmRelease {
			cl.sent = min(cl.sent+1, g)
		}
		switch {
		case (cl.st == fcHeld || cl.st == fcQueued) && cl.anc >= g,
			cl.st == fcPending && cl.sent >= g:
			m.end(s, c)
		}
	}
	recs := func(nd *foNode) {
		for c := range m.nc {
			if nd.rec[c].st != frecNone {
				nd.rec[c].seen = min(nd.rec[c].seen+1, m.eMin[c])
			}
		}
	}
	if !s.aRemoved {
		s.aq = min(s.aq+1, m.sMax)
		if s.aPing != 0 {
			s.aPingSent = min(s.aPingSent+1, m.sMax)
		}
		if s.aq >= m.sMax {
			s.aStopped = true
		}
		recs(&s.n[nodeA])
	}
	if s.ring == 1 {
		s.qHeard = min(s.qHeard+1, m.rMin)
	}
	if s.bVer == 2 {
		s.bTake = min(s.bTake+1, m.wCap)
		recs(&s.n[nodeB])
	}
	if m.cfg.Relay != 0 {
		return m.relayTick(s)
	}
	return nil
}

func (m *foModel) invariants(s *foState) *failure {
	for c := range m.nc {
		if !m.believes(s, c) {
			continue
		}
		for d := c + 1; d < m.nc; d++ {
			if m.believes(s, d) && m.conflict(c, d) {
				return fail(PropFailoverOneBeliever, "c%d (token %s, on node %s) and c%d (token %s, on node %s) both believe they hold the lock",
					c+1, foTok(s.c[c].tok), foNodeName(s.c[c].at), d+1, foTok(s.c[d].tok), foNodeName(s.c[d].at))
			}
		}
	}
	return nil
}

func (m *foModel) key(s *foState) string { return string(m.appendKey(nil, s)) }

// appendKey appends the canonical encoding of s to b.
func (m *foModel) appendKey(b []byte, s *foState) []byte {
	i16 := func(v int16) { b = append(b, byte(v), byte(v>>8)) }
	for c := range m.nc {
		cl := &s.c[c]
		b = append(b, cl.st, byte(cl.at), cl.ver, byte(cl.lives), cl.tok, cl.ticket, cl.out, byte(cl.dst), cl.mver, cl.mtick, b2u(cl.orph), cl.otok, cl.over)
		i16(cl.anc)
		i16(cl.sent)
	}
	for n := range 2 {
		nd := &s.n[n]
		for c := range m.nc {
			r := &nd.rec[c]
			b = append(b, r.st, r.tok, r.ticket)
			i16(r.seen)
		}
		b = append(b, byte(nd.nq))
		for i := range nd.nq {
			b = append(b, byte(nd.queue[i]))
		}
		b = append(b, nd.ctr)
	}
	i16(s.aq)
	i16(s.aLmax)
	i16(s.aPingSent)
	i16(s.aPingLmax)
	i16(s.qHeard)
	i16(s.lmax)
	i16(s.bTake)
	b = append(b, b2u(s.aRemoved), b2u(s.aStopped), s.aTicket, s.aPing, b2u(s.aPingGone), s.ring, s.bVer, s.maxTok)
	if m.cfg.Relay != 0 {
		b = m.appendRelayKey(b, s)
	}
	return b
}

func (m *foModel) initial() foState {
	var s foState
	for c := range m.nc {
		s.c[c] = foClient{st: fcIdle, ver: 1, lives: int8(m.cfg.Lives), anc: -1}
	}
	s.ring, s.bVer = 1, 1
	s.r = foRelay{ver: 1}
	// The short lease has been committed by an earlier grant; the long one
	// is committed before its first grant.
	s.lmax, s.aLmax = m.short, m.short
	return s
}

// describe returns a line for step st from state s (before it), at real
// tick t.
func (m *foModel) describe(s *foState, st foStep, t int) string {
	c := fmt.Sprintf("c%d", st.c+1)
	n := "node " + foNodeName(st.n)
	at := fmt.Sprintf("t=%-3d ", t)
	req := [...]string{"", "CLAIM", "HEARTBEAT", "RE-ASSERT", "RELEASE"}
	if st.kind >= fsRRead {
		return m.describeRelay(s, st, at)
	}
	switch st.kind {
	case fsTick:
		return fmt.Sprintf("t=%-3d one tick passes", t)
	case fsOrphan:
		r := at + fmt.Sprintf("node B reads a RE-ASSERT(token %s, ring %d) that %s sent before it gave up waiting", foTok(st.tok), st.what, c)
		switch st.val {
		case frHeld:
			r += ": accepted (nobody reads the answer)"
		case frGone:
			r += ": refused"
		default:
			r += ": retry"
		}
		return r
	case fsLearn:
		return at + fmt.Sprintf("%s learns ring 2 (owner B) from a node that applied it", c)
	case fsGiveUp:
		return at + fmt.Sprintf("%s's clock may be past anchor + 0.8·lease (anchor %d ticks ago): it gives up its claim", c, s.c[st.c].anc)
	case fsStop:
		return at + fmt.Sprintf("node A's clock may have reached TSelf since its contact anchor (%d ticks ago): it stops serving", s.aq)
	case fsClaim:
		if st.n == nodeR {
			return at + fmt.Sprintf("%s sends CLAIM to node R", c)
		}
		return at + fmt.Sprintf("%s sends CLAIM to %s (knows ring %d)", c, n, st.val)
	case fsHeartbeat:
		return at + fmt.Sprintf("%s sends HEARTBEAT to %s", c, n)
	case fsReassert:
		return at + fmt.Sprintf("%s has lost node A: sends RE-ASSERT(token %s, ring %d) to node B", c, foTok(s.c[st.c].tok), st.val)
	case fsRequeue:
		return at + fmt.Sprintf("%s has lost node A: re-queues on node B with A's ticket %d (knows ring %d)", c, s.c[st.c].ticket, st.val)
	case fsRelease:
		return at + fmt.Sprintf("%s releases: sends RELEASE to %s", c, n)
	case fsAbandon:
		what := "its request is lost"
		if st.val != frNone {
			what = "the answer is lost"
		}
		return at + fmt.Sprintf("%s's connection to %s breaks: its %s is abandoned, %s", c, n, req[st.what], what)
	case fsDeliver:
		cl := &s.c[st.c]
		r := fmt.Sprintf("%s reads %s's %s (sent %d ticks ago)", n, c, req[st.what], cl.sent)
		switch st.val {
		case frGranted:
			r += ": grants"
		case frQueued:
			if st.what == fmReassert {
				r += ": adopted from R's kept upstream session, queued at its place"
			} else {
				r += ": queued"
			}
		case frHeld:
			switch {
			case st.what == fmReassert && st.n == nodeA:
				r += ": adopted from R's kept upstream session, token " + foTok(st.tok)
			case st.what == fmReassert:
				r += ": accepted, same token"
			default:
				r += ": held"
			}
		case frGone:
			switch {
			case st.what == fmReassert && st.n == nodeA:
				r += ": refused 0x04, it keeps no such claim for this client"
			case st.what == fmReassert:
				r += ": refused, a conflicting claim is held here"
			default:
				r += ": no such claim"
			}
		case frRetry:
			r += fmt.Sprintf(": retry (node applied ring %d)", s.bVer)
		}
		return at + r
	case fsExpire:
		what := "held"
		if st.what == frecQueued {
			what = "queued"
		}
		return at + fmt.Sprintf("%s expires %s's %s claim (silent for %d ticks: its clock may be past the lease)",
			n, c, what, s.n[st.n].rec[st.c].seen)
	case fsPromote:
		return at + fmt.Sprintf("%s grants %s, the head of its queue, token %s, and pushes PROMOTED", n, c, foTok(st.val))
	case fsPing:
		r := at + "node A pings the leader, which hears it"
		if st.val != 0 && st.what == 0 {
			r += fmt.Sprintf(" and commits largest lease %d", m.long)
		}
		switch {
		case st.n != 0:
			r += "; the answer is on its way"
		case st.what != 0:
			r += "; A reads the answer: it is out of the ring; it stops and keeps nothing"
		default:
			r += "; A reads the answer: contact anchored at the ping's send time"
		}
		return r
	case fsPingLost:
		return at + "the leader's answer to node A is lost"
	case fsPingAnswer:
		if st.what != 0 {
			return at + "node A learns it is out of the ring: stops, keeps nothing"
		}
		return at + fmt.Sprintf("node A reads the leader's answer, sent %d ticks ago: contact anchored now", s.aPingSent)
	case fsRemove:
		return at + fmt.Sprintf("the leader has not heard from node A for %d ticks (its clock may have counted T): commits ring 2 (owner B)", s.qHeard)
	case fsApply:
		return at + fmt.Sprintf("node B applies ring 2: takes the name over with epoch 2, gated for W = %d units on its clock (at least %d ticks)", m.warmup(s.lmax), m.gate(s.lmax))
	}
	return "?"
}

// CheckFailover explores every interleaving of cfg breadth first and
// checks the failover properties in every state and transition. It
// panics on a configuration that Validate rejects.
func CheckFailover(cfg FailoverConfig) Report { return checkFailover(cfg, nil) }

func checkFailover(cfg FailoverConfig, seen func(from *foState, st foStep)) Report {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	start := time.Now()
	m := newFoModel(cfg)
	rep := Report{Model: "failover", Config: cfg.String()}
	g := newGraph[foStep](false)
	init := m.initial()
	g.add(m.key(&init), -1, foStep{})
	states := []foState{init}
	var buf []byte
	for id := int32(0); id < int32(len(states)); id++ {
		for _, sc := range m.next(&states[id]) {
			if seen != nil {
				seen(&states[id], sc.step)
			}
			if sc.f != nil {
				path := append(g.path(id), sc.step)
				rep.Violation = &Violation{Property: sc.f.prop, Detail: sc.f.detail, Trace: m.trace(path, sc.f)}
				return finish(&rep, g, start)
			}
			buf = m.appendKey(buf[:0], &sc.to)
			if _, known := g.index[string(buf)]; known { // no allocation for a state seen before
				g.trans++
				continue
			}
			g.add(string(buf), id, sc.step)
			states = append(states, sc.to)
		}
	}
	return finish(&rep, g, start)
}

// trace replays path from the initial state and describes each step.
func (m *foModel) trace(path []foStep, f *failure) []string {
	s := m.initial()
	t := 0
	lines := make([]string, 0, len(path))
	for i, st := range path {
		if st.kind == fsTick {
			t++
		}
		lines = append(lines, m.describe(&s, st, t))
		found := false
		for _, sc := range m.next(&s) {
			if sc.step == st {
				s, found = sc.to, true
				break
			}
		}
		if !found {
			panic("modelcheck: failover trace does not replay")
		}
		if i == len(path)-1 {
			lines[i] += "\n      ✗ " + f.detail
		}
	}
	return lines
}
