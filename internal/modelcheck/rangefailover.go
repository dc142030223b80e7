package modelcheck

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/batonlock/baton/internal/clustercore"
)

// The cluster-ranges-failover model: range locks re-asserted after a
// failover by the relaying node of their session. Range locks carry no
// token, so the new owner can only check conflicts; the rule rests on R's
// believed window (failoverrelay.go) and the new owner's warm-up
// (failover.go). One key, one relayed client (two with Second), and a
// direct client of the new owner that asks at any moment.
// Real rules run: clustercore's RangesFailed and RangeMove.Expired (rEnds).
// Design: "Range locks re-asserted after a failover" and
// #internalmodelcheckrangefailovergo in docs/design/2026-12-07-verification-models-cluster.md.

// RangeFailoverConfig bounds the cluster-ranges-failover model. Durations
// are in units of the processes' clocks; a tick of real time is Unit units
// at the nominal rate.
type RangeFailoverConfig struct {
	// Second adds client c3, relayed by node R2 to O, whose range lock
	// conflicts with c1's: two sessions that may both re-assert.
	Second bool

	Unit  int // units of a clock per tick at the nominal rate (1..60)
	Drift int // a clock advances Unit±Drift units per tick: ρ = Drift/Unit
	Lease int // every client's lease L
	TSelf int // O stops serving after TSelf without quorum contact
	T     int // the leader removes a node silent for T
	Slack int // W = L + Slack

	// Mutation, when not empty, drops one rule so that the checker must
	// fail; see RangeFailoverMutations.
	Mutation string
}

// DefaultRangeFailoverConfigs are the configurations always checked: c1
// relayed by R and c2 at N; and the same with c3 relayed by R2. A tick of
// 10 ± 1 units (ρ = 0.1), L = 40, TSelf 20, T 25, no slack: the failover
// model's defaults with one lease.
func DefaultRangeFailoverConfigs() []RangeFailoverConfig {
	return []RangeFailoverConfig{
		{Unit: 10, Drift: 1, Lease: 40, TSelf: 20, T: 25},
		{Second: true, Unit: 10, Drift: 1, Lease: 40, TSelf: 20, T: 25},
	}
}

// Mutations of the cluster-ranges-failover model.
const (
	// MutRfReassertUnbelieved drops the believed window: R re-asserts for
	// L/2 after it noticed the loss, however long ago O last confirmed a
	// request on the upstream. The real rules (rEnds) are given the
	// notice as the upstream's last confirmation.
	MutRfReassertUnbelieved = "range-reassert-unbelieved"
	// MutRfWarmupShort sets N's warm-up to L/2.
	MutRfWarmupShort = "range-warmup-short"
	// MutRfAnswersEarly lets R answer c1's PING while K re-asserts, before
	// N accepted (the re-asserting key not counted as an unconfirmed
	// upstream).
	MutRfAnswersEarly = "range-reassert-answers-early"
	// MutRfAcceptConflict lets N accept a reassert that conflicts with a
	// lock another session holds on K at N.
	MutRfAcceptConflict = "range-accept-conflict"
)

// RangeFailoverMutations lists the mutations of the model.
var RangeFailoverMutations = []string{MutRfReassertUnbelieved, MutRfWarmupShort, MutRfAnswersEarly, MutRfAcceptConflict}

// Properties of the model (beside PropClusterRangesOneHolder).
const (
	PropRfKept     = "a re-asserted range lock is never refused, nor expired by its owner, while its client still believes"
	PropRfOneOwner = "the old owner serves nothing on the key once the new owner has taken it over"
)

func (c RangeFailoverConfig) String() string {
	who := "c1 relayed through R, c2 at N"
	if c.Second {
		who = "c1 relayed through R, c3 through R2, c2 at N"
	}
	return fmt.Sprintf("range locks re-asserted after a failover, %s; %s, TSelf %d, T %d, W = lease + %d",
		who, timedString(c.Unit, c.Drift, c.Lease), c.TSelf, c.T, c.Slack) + mutationString(c.Mutation)
}

// timedString describes the clocks and lease of a timed range model.
func timedString(unit, drift, lease int) string {
	return fmt.Sprintf("tick %d±%d units (ρ = %.3f); lease %d", unit, drift, float64(drift)/float64(unit), lease)
}

// mutationString names a mutation at the end of a configuration's
// description.
func mutationString(mut string) string {
	if mut == "" {
		return ""
	}
	return ", mutation " + mut
}

// Validate reports bounds the checker cannot explore.
func (c RangeFailoverConfig) Validate() error {
	switch err := validateTimed(c.Unit, c.Drift, c.Lease, c.Mutation, RangeFailoverMutations); {
	case err != nil:
		return err
	case c.TSelf < 1 || c.TSelf > 12*c.Unit || c.T < 1 || c.T > 12*c.Unit:
		return fmt.Errorf("TSelf and T must be 1..%d (12 ticks), not %d and %d", 12*c.Unit, c.TSelf, c.T)
	case c.Slack < 0 || c.Slack > 12*c.Unit:
		return fmt.Errorf("slack must be 0..%d, not %d", 12*c.Unit, c.Slack)
	}
	return nil
}

// validateTimed reports clocks, a lease or a mutation (of muts) that a
// timed range model cannot explore.
func validateTimed(unit, drift, lease int, mut string, muts []string) error {
	switch {
	case unit < 1 || unit > 60:
		return fmt.Errorf("unit must be 1..60, not %d", unit)
	case drift < 0 || drift >= unit:
		return fmt.Errorf("drift must be 0..unit-1, not %d", drift)
	case lease < 1 || lease > 12*unit:
		return fmt.Errorf("lease must be 1..%d (12 ticks), not %d", 12*unit, lease)
	case mut != "" && !slices.Contains(muts, mut):
		return fmt.Errorf("mutation must be one of %s, not %q", strings.Join(muts, ", "), mut)
	}
	return nil
}

// A relayed client's states.
const (
	rfIdle    uint8 = iota // has not asked yet
	rfPending              // its LOCK is outstanding
	rfHeld                 // holds and believes
	rfDone                 // no lock, asks no more
)

// Requests: c's to R (LOCK, PING), R's upstream (LOCK, PING, REASSERT).
const (
	rqNone uint8 = iota
	rqLock
	rqPing
	rqReassert
)

// R's upstream for the key.
const (
	usNone   uint8 = iota // no upstream yet
	usO                   // open to O
	usRe                  // R noticed its end: the key re-asserts
	usN                   // the reassert was accepted: the lock is held at N
	usClosed              // R ended its client's session (or never had a lock)
)

// LOCK results R holds for its client.
const (
	rsNone uint8 = iota
	rsGranted
	rsRefused
)

type rfPair struct {
	// the client
	c    uint8
	anc  int8  // ticks since its anchor, while held
	out  uint8 // its outstanding request to R
	sent int8  // ticks since it was sent
	err  bool  // an ERROR 0x03 ending its session is on its way

	// its relaying node
	rq     uint8 // the client's request R read and has not answered
	rRead  int8  // ticks since R read it
	rRes   uint8 // O's answer to the relayed LOCK
	up     uint8 // upstream request in transit (to O while usO, to N otherwise)
	upSent int8  // ticks since it was sent
	conf   int8  // ticks since the send time of the latest upstream request answered (u.confirmed)
	mir    bool  // the mirror: O (or N) granted the session the lock
	ust    uint8
	mv     int8  // ticks since R noticed the end of its upstream to O
	ver    uint8 // ring version R knows

	// the owners' records of the relaying node's upstream session
	oLk   bool
	oSeen int8 // ticks since O last read from it
	nLk   bool
	nSeen int8 // ticks since N last read from it
}

type rfState struct {
	p [2]rfPair

	aq       int8 // ticks since O's quorum-contact anchor
	oStopped bool // O's clock reached TSelf since it: it serves nothing
	oGone    bool // O learned it was removed: keeps nothing

	qHeard int8  // ticks since Q last heard from O
	ring   uint8 // 1: O owns K, 2: N does

	nApplied bool
	nTake    int8 // ticks since N took K over

	c2 bool // c2 was granted at N and believes
}

// Step kinds.
const (
	rkTick      uint8 = iota + 1
	rkSend            // c sends LOCK or PING (what) to its relaying node
	rkLost            // c abandons its request
	rkGiveUp          // c's clock may be past anchor + 0.8·L
	rkReadErr         // c reads ERROR 0x03
	rkRRead           // R reads c's request
	rkRPing           // R sends PING upstream
	rkUpLost          // R's upstream request is lost
	rkUpRead          // the owner reads R's upstream request (what: the answer)
	rkRAnswer         // R answers c, which reads it at once
	rkRNotice         // R notices its upstream to O ended (what: 1 re-asserts, 0 ends the session)
	rkRLearn          // R learns ring 2
	rkRReassert       // R sends RANGE reassert to N
	rkRGiveUp         // R gives up re-asserting: ends c's session
	rkOExpire         // O drops a relayed session's lock
	rkNExpire         // N drops a relayed session's lock
	rkPing            // O pings Q
	rkStop            // O stops serving
	rkRemove          // Q removes O
	rkApply           // N applies ring 2
	rkC2              // c2 is granted at N
)

// N's answers to a reassert, in rkUpRead's what.
const (
	raAccepted uint8 = iota + 1
	raRefused
	raUnavailable
	raAnswered // a LOCK or PING answered
	raSilent   // not answered (the session holds no lock there)
)

type rfStep struct {
	kind uint8
	i    int8 // the pair: 0 c1/R, 1 c3/R2
	what uint8
}

func (st rfStep) String() string { return fmt.Sprintf("%d/%d/%d", st.kind, st.i, st.what) }

type rfModel struct {
	cfg        RangeFailoverConfig
	np         int8
	gMin, gMax int8 // a clock passes 0.8·L: a client's give-up
	eMin       int8 // an owner's clock passes L since it last read
	sMin, sMax int8 // O's clock reaches TSelf
	rMin       int8 // Q's clock reaches T
	gate       int8 // N's clock may have counted W
	rgMax      int8 // R's clock must have reached L/2 since it noticed (the clamp of mv)
	cap        int8 // clamp of conf and upSent
}

func newRfModel(cfg RangeFailoverConfig) *rfModel {
	clk := &foModel{cfg: FailoverConfig{Unit: cfg.Unit, Drift: cfg.Drift}}
	l := int16(cfg.Lease)
	m := &rfModel{cfg: cfg, np: 1}
	if cfg.Second {
		m.np = 2
	}
	m.gMin, m.gMax = int8(clk.mayPass(l*4/5)), int8(clk.mustPass(l*4/5))
	m.eMin = int8(clk.mayPass(l))
	m.sMin, m.sMax = int8(clk.mayReach(int16(cfg.TSelf))), int8(clk.mustReach(int16(cfg.TSelf)))
	m.rMin = int8(clk.mayReach(int16(cfg.T)))
	w := l + int16(cfg.Slack)
	if cfg.Mutation == MutRfWarmupShort {
		w = l / 2
	}
	m.gate = int8(clk.mayReach(w))
	m.rgMax = int8(clk.mustReach(l / 2))
	m.cap = m.gMax + 1
	return m
}

// rEnds reports whether R ends c1's session rather than re-assert its
// range locks, by the real rules: at the notice of the upstream's loss
// (p.ust == usO) clustercore.RangesFailed, then the re-assertion's
// RangeMove.Expired, p.mv ticks after the notice and p.conf ticks after
// the send time of the latest request O answered. R's clock counts
// between Unit−Drift and Unit+Drift units a tick (a unit is a second
// here, from an arbitrary present): fast asks whether it may have ended
// (its fastest clock), else whether it must have (its slowest). The
// real rule ends the window when R's clock reaches 0.8·L, where the
// model's copy waited until it passed it: the same tick at 10±1 units.
func (m *rfModel) rEnds(p *rfPair, fast bool) bool {
	rate := m.cfg.Unit - m.cfg.Drift
	if fast {
		rate = m.cfg.Unit + m.cfg.Drift
	}
	now := time.Unix(1<<20, 0)
	ago := func(ticks int8) time.Time { return now.Add(-time.Duration(int(ticks)*rate) * time.Second) }
	lease := time.Duration(m.cfg.Lease) * time.Second
	noticed := now
	if p.ust == usRe {
		noticed = ago(p.mv)
	}
	u := clustercore.RangeUpstream{Opened: true, Holds: true, Mirrored: true, Keys: 1, Confirmed: ago(p.conf)}
	if m.cfg.Mutation == MutRfReassertUnbelieved {
		u.Confirmed = noticed
	}
	fate, believed := clustercore.RangesFailed(u, true, true, noticed, lease)
	if fate != clustercore.RangesReassert {
		return true
	}
	rm := clustercore.RangeMove{Since: noticed, Failover: true, Believed: believed}
	return rm.Expired(now, lease)
}

func (m *rfModel) initial() rfState {
	var s rfState
	for i := range m.np {
		s.p[i] = rfPair{ver: 1, conf: m.cap}
	}
	s.ring = 1
	return s
}

func (m *rfModel) serving(s *rfState) bool { return !s.oGone && !s.oStopped }

// oneOwner fails when O acts on K after N took it over.
func (m *rfModel) oneOwner(s *rfState, what string) *failure {
	if s.nApplied {
		return fail(PropRfOneOwner, "node O %s after node N took the key over", what)
	}
	return nil
}

func clientName(i int8) string { return [...]string{"c1", "c3"}[i] }
func relayName(i int8) string  { return [...]string{"R", "R2"}[i] }

// kept fails if pair i's client still believes while its lock is refused
// or expired.
func (m *rfModel) kept(s *rfState, i int8, what string) *failure {
	if s.p[i].c == rfHeld {
		return fail(PropRfKept, "%s %s's range lock while %s still believes it holds it (anchor %d ticks ago)",
			what, clientName(i), clientName(i), s.p[i].anc)
	}
	return nil
}

// done: pair i's client has no lock and asks no more.
func (p *rfPair) done() {
	p.c, p.anc, p.out, p.sent, p.err = rfDone, 0, rqNone, 0, false
	p.rq, p.rRead, p.rRes = rqNone, 0, rsNone
}

// endSession: R ends its client's session (ERROR 0x03) and closes its
// upstream without releasing; a request in flight to N may still arrive.
func (p *rfPair) endSession() {
	p.ust = usClosed
	p.rq, p.rRead, p.rRes = rqNone, 0, rsNone
	if p.c == rfHeld || p.c == rfPending {
		p.err = true
	}
}

// conflictAtN: another session holds a lock on K at N.
func (m *rfModel) conflictAtN(s *rfState, i int8) bool {
	if s.c2 {
		return true
	}
	for j := range m.np {
		if j != i && s.p[j].nLk {
			return true
		}
	}
	return false
}

func (m *rfModel) next(s *rfState) []succ[rfState, rfStep] {
	var out []succ[rfState, rfStep]
	emit := func(t rfState, st rfStep, f *failure) {
		m.norm(&t)
		if f == nil {
			f = m.invariant(&t)
		}
		out = append(out, succ[rfState, rfStep]{step: st, to: t, f: f})
	}
	for i := range m.np {
		m.pairSteps(s, i, emit)
	}
	// O, Q, N and c2.
	if !s.oGone {
		t := *s
		if t.ring == 1 {
			t.aq, t.qHeard, t.oStopped = 0, 0, false
		} else {
			t.oGone = true
			for i := range m.np {
				t.p[i].oLk, t.p[i].oSeen = false, 0
			}
		}
		emit(t, rfStep{kind: rkPing}, nil)
	}
	if !s.oGone && !s.oStopped && s.aq >= m.sMin {
		t := *s
		t.oStopped = true
		emit(t, rfStep{kind: rkStop}, nil)
	}
	if s.ring == 1 && s.qHeard >= m.rMin {
		t := *s
		t.ring = 2
		emit(t, rfStep{kind: rkRemove}, nil)
	}
	if s.ring == 2 && !s.nApplied {
		t := *s
		t.nApplied, t.nTake = true, 0
		emit(t, rfStep{kind: rkApply}, nil)
	}
	if !s.c2 && s.nApplied && s.nTake >= m.gate && !m.conflictAtN(s, -1) {
		t := *s
		t.c2 = true
		emit(t, rfStep{kind: rkC2}, nil)
	}
	{
		t := *s
		m.tick(&t)
		emit(t, rfStep{kind: rkTick}, nil)
	}
	return out
}

func (m *rfModel) pairSteps(s *rfState, i int8, emit func(rfState, rfStep, *failure)) {
	p := &s.p[i]
	mut := m.cfg.Mutation
	// The client.
	switch {
	case p.out == rqNone && p.c == rfIdle:
		t := *s
		t.p[i].c, t.p[i].out, t.p[i].sent = rfPending, rqLock, 0
		emit(t, rfStep{kind: rkSend, i: i, what: rqLock}, nil)
	case p.out == rqNone && p.c == rfHeld:
		t := *s
		t.p[i].out, t.p[i].sent = rqPing, 0
		emit(t, rfStep{kind: rkSend, i: i, what: rqPing}, nil)
	case p.out != rqNone:
		t := *s
		tp := &t.p[i]
		if tp.out == rqLock {
			tp.done()
		} else {
			tp.out, tp.sent, tp.rq, tp.rRead = rqNone, 0, rqNone, 0
		}
		emit(t, rfStep{kind: rkLost, i: i, what: p.out}, nil)
	}
	if p.c == rfHeld && p.anc >= m.gMin {
		t := *s
		t.p[i].done()
		emit(t, rfStep{kind: rkGiveUp, i: i}, nil)
	}
	if p.err {
		t := *s
		t.p[i].done()
		emit(t, rfStep{kind: rkReadErr, i: i}, nil)
	}
	// R reads its client's request.
	if p.out != rqNone && p.rq == rqNone && p.ust != usClosed {
		t := *s
		tp := &t.p[i]
		switch {
		case p.out == rqPing:
			tp.rq, tp.rRead = rqPing, 0
		case p.ust == usNone && p.ver == 1:
			// R opens its upstream to O and relays the LOCK.
			tp.rq, tp.rRead, tp.ust, tp.up, tp.upSent, tp.conf = rqLock, 0, usO, rqLock, 0, m.cap
		default:
			// R knows ring 2 (or its upstream to O ended): unavailable.
			tp.done()
		}
		emit(t, rfStep{kind: rkRRead, i: i, what: p.out}, nil)
	}
	// R pings upstream for a PING that waits.
	if p.rq == rqPing && p.up == rqNone && p.conf > p.rRead && (p.ust == usO || p.ust == usN) {
		t := *s
		t.p[i].up, t.p[i].upSent = rqPing, 0
		emit(t, rfStep{kind: rkRPing, i: i}, nil)
	}
	// The upstream request in transit.
	if p.up != rqNone {
		t := *s
		t.p[i].up, t.p[i].upSent = rqNone, 0
		emit(t, rfStep{kind: rkUpLost, i: i, what: p.up}, nil)
		switch {
		case p.ust == usO:
			if m.serving(s) {
				m.oReads(s, i, emit)
			}
		default:
			m.nReads(s, i, emit)
		}
	}
	// R answers its client.
	if p.rq != rqNone && p.ust != usClosed {
		confirmed := p.conf <= p.rRead && (p.ust == usO || p.ust == usN)
		if p.ust == usRe && mut == MutRfAnswersEarly {
			confirmed = true
		}
		switch {
		case p.rq == rqLock && p.rRes != rsNone:
			t := *s
			tp := &t.p[i]
			if tp.rRes == rsGranted {
				tp.c, tp.anc = rfHeld, tp.sent
				tp.out, tp.sent, tp.rq, tp.rRead, tp.rRes = rqNone, 0, rqNone, 0, rsNone
			} else {
				tp.done()
			}
			emit(t, rfStep{kind: rkRAnswer, i: i, what: p.rRes}, nil)
		case p.rq == rqPing && confirmed:
			t := *s
			tp := &t.p[i]
			tp.anc = min(tp.anc, tp.sent)
			tp.out, tp.sent, tp.rq, tp.rRead = rqNone, 0, rqNone, 0
			emit(t, rfStep{kind: rkRAnswer, i: i}, nil)
		}
	}
	// R notices its upstream to O ended.
	if p.ust == usO {
		inWindow := !m.rEnds(p, false)
		mayBePast := m.rEnds(p, true)
		base := *s
		bp := &base.p[i]
		bp.up, bp.upSent = rqNone, 0
		if bp.rq == rqLock {
			// A pending set: "unavailable".
			bp.done()
		}
		if p.mir && inWindow {
			t := base
			t.p[i].ust, t.p[i].mv = usRe, 0
			emit(t, rfStep{kind: rkRNotice, i: i, what: 1}, nil)
		}
		if !p.mir || mayBePast {
			t := base
			t.p[i].endSession()
			emit(t, rfStep{kind: rkRNotice, i: i}, nil)
		}
	}
	if p.ver < 2 && s.ring == 2 {
		t := *s
		t.p[i].ver = 2
		emit(t, rfStep{kind: rkRLearn, i: i}, nil)
	}
	if p.ust == usRe {
		if p.up == rqNone && p.ver == 2 && !m.rEnds(p, false) {
			t := *s
			t.p[i].up, t.p[i].upSent = rqReassert, 0
			emit(t, rfStep{kind: rkRReassert, i: i}, nil)
		}
		if m.rEnds(p, true) {
			t := *s
			t.p[i].endSession()
			emit(t, rfStep{kind: rkRGiveUp, i: i}, nil)
		}
	}
	// The owners' expiries.
	if p.oLk && p.oSeen >= m.eMin && m.serving(s) {
		t := *s
		t.p[i].oLk, t.p[i].oSeen = false, 0
		var f *failure
		if p.ust == usO || p.ust == usRe {
			f = m.kept(s, i, "node O expires")
		}
		emit(t, rfStep{kind: rkOExpire, i: i}, cmp(m.oneOwner(s, "expires a lock"), f))
	}
	if p.nLk && p.nSeen >= m.eMin {
		t := *s
		t.p[i].nLk, t.p[i].nSeen = false, 0
		var f *failure
		if p.ust == usN {
			f = m.kept(s, i, "node N expires")
		}
		emit(t, rfStep{kind: rkNExpire, i: i}, f)
	}
}

// oReads has O read pair i's upstream request and R read the answer.
func (m *rfModel) oReads(s *rfState, i int8, emit func(rfState, rfStep, *failure)) {
	t := *s
	tp := &t.p[i]
	what := tp.up
	f := m.oneOwner(s, "reads an upstream request")
	ans := raAnswered
	switch what {
	case rqLock:
		free := true
		for j := range m.np {
			if j != i && t.p[j].oLk {
				free = false
			}
		}
		tp.oSeen = 0
		if free {
			tp.oLk, tp.mir = true, true
		}
		if tp.rq == rqLock {
			tp.rRes = rsRefused
			if free {
				tp.rRes = rsGranted
			}
		}
		if !free {
			ans = raRefused
		}
	case rqPing:
		if !tp.oLk {
			ans = raSilent // the session is over at O: no answer
			break
		}
		tp.oSeen = 0
	}
	if ans != raSilent {
		tp.conf = min(tp.conf, tp.upSent)
	}
	tp.up, tp.upSent = rqNone, 0
	emit(t, rfStep{kind: rkUpRead, i: i, what: ans}, f)
}

// nReads has N read pair i's upstream request (a reassert, or a PING
// after the acceptance) and R read the answer.
func (m *rfModel) nReads(s *rfState, i int8, emit func(rfState, rfStep, *failure)) {
	t := *s
	tp := &t.p[i]
	what := tp.up
	var f *failure
	var ans uint8
	switch what {
	case rqReassert:
		switch {
		case !t.nApplied:
			ans = raUnavailable
		case m.conflictAtN(&t, i) && m.cfg.Mutation != MutRfAcceptConflict:
			ans = raRefused
			if tp.ust == usRe {
				f = m.kept(s, i, "node N refuses")
				tp.endSession()
			}
		default:
			ans = raAccepted
			tp.nLk, tp.nSeen = true, 0
			if tp.ust == usRe {
				tp.ust, tp.conf = usN, tp.upSent
			}
		}
	case rqPing:
		if !tp.nLk {
			ans = raSilent
			break
		}
		ans = raAnswered
		tp.nSeen = 0
		tp.conf = min(tp.conf, tp.upSent)
	}
	tp.up, tp.upSent = rqNone, 0
	emit(t, rfStep{kind: rkUpRead, i: i, what: ans}, f)
}

func (m *rfModel) invariant(s *rfState) *failure {
	var who []string
	for i := range m.np {
		if s.p[i].c == rfHeld {
			who = append(who, fmt.Sprintf("%s (anchor %d ticks ago)", clientName(i), s.p[i].anc))
		}
	}
	if s.c2 {
		who = append(who, "c2")
	}
	if len(who) > 1 {
		return fail(PropClusterRangesOneHolder, "%s both believe they hold conflicting range locks on the key", strings.Join(who, " and "))
	}
	return nil
}

// tick lets one tick of real time pass; what must have happened by now
// takes effect: a client's give-up, O's stop, R's give-up (norm).
func (m *rfModel) tick(s *rfState) {
	for i := range m.np {
		p := &s.p[i]
		if p.c == rfHeld {
			p.anc = min(p.anc+1, m.gMax)
		}
		if p.out != rqNone {
			p.sent = min(p.sent+1, m.gMax)
		}
		if p.c == rfHeld && p.anc >= m.gMax || p.c == rfPending && p.sent >= m.gMax {
			p.done()
		}
		if p.rq != rqNone {
			p.rRead = min(p.rRead+1, m.gMax)
		}
		p.conf = min(p.conf+1, m.cap)
		if p.up != rqNone {
			p.upSent = min(p.upSent+1, m.cap)
		}
		if p.ust == usRe {
			p.mv = min(p.mv+1, m.rgMax)
		}
		if p.oLk {
			p.oSeen = min(p.oSeen+1, m.eMin)
		}
		if p.nLk {
			p.nSeen = min(p.nSeen+1, m.eMin)
		}
	}
	if !s.oGone {
		s.aq = min(s.aq+1, m.sMax)
		if s.aq >= m.sMax {
			s.oStopped = true
		}
	}
	if s.ring == 1 {
		s.qHeard = min(s.qHeard+1, m.rMin)
	}
	if s.nApplied {
		s.nTake = min(s.nTake+1, m.gate)
	}
}

// norm applies what must hold in every state and canonicalizes what no
// longer matters.
func (m *rfModel) norm(s *rfState) {
	for i := range m.np {
		p := &s.p[i]
		if p.ust == usRe && m.rEnds(p, false) {
			p.endSession() // R's clock must have reached its deadline
		}
		if p.out == rqNone {
			p.rq, p.rRead, p.rRes = rqNone, 0, rsNone
		}
		if p.c == rfDone {
			p.anc, p.out, p.sent, p.err = 0, rqNone, 0, false
			p.rq, p.rRead, p.rRes = rqNone, 0, rsNone
		}
		if p.ust != usRe {
			p.mv = 0
		}
		if p.ust == usClosed || p.ust == usNone {
			p.mir = false
			if p.up == rqNone {
				p.conf = m.cap
			}
		} else if p.rq == rqNone && p.ust == usN {
			// Only "sent at or after the next read" matters: 0 or not
			// (the believed window matters only for the upstream to O).
			p.conf = min(p.conf, 1)
		}
		if !p.oLk {
			p.oSeen = 0
		}
		if !p.nLk {
			p.nSeen = 0
		}
	}
	if s.oGone {
		s.aq, s.oStopped = 0, false
	}
}

func (m *rfModel) key(s *rfState) string {
	b := make([]byte, 0, 48)
	for i := range m.np {
		p := &s.p[i]
		b = append(b, p.c, byte(p.anc), p.out, byte(p.sent), b2u(p.err), p.rq, byte(p.rRead), p.rRes, p.up, byte(p.upSent),
			byte(p.conf), b2u(p.mir), p.ust, byte(p.mv), p.ver, b2u(p.oLk), byte(p.oSeen), b2u(p.nLk), byte(p.nSeen))
	}
	b = append(b, byte(s.aq), b2u(s.oStopped), b2u(s.oGone), byte(s.qHeard), s.ring, b2u(s.nApplied), byte(s.nTake), b2u(s.c2))
	return string(b)
}

// describe returns a line for step st from state s (before it), at real
// tick t.
func (m *rfModel) describe(s *rfState, st rfStep, t int) string {
	at := fmt.Sprintf("t=%-3d ", t)
	c, r := clientName(st.i), relayName(st.i)
	p := &s.p[st.i]
	req := [...]string{"", "LOCK", "PING", "RANGE reassert"}
	switch st.kind {
	case rkTick:
		return fmt.Sprintf("t=%-3d one tick passes", t)
	case rkSend:
		return at + fmt.Sprintf("%s sends %s to %s", c, req[st.what], r)
	case rkLost:
		return at + fmt.Sprintf("%s's %s (sent %d ticks ago) is lost: it stops waiting", c, req[st.what], p.sent)
	case rkGiveUp:
		return at + fmt.Sprintf("%s's clock may be past anchor + 0.8·L (anchor %d ticks ago): it gives up", c, p.anc)
	case rkReadErr:
		return at + fmt.Sprintf("%s reads the ERROR 0x03 that ends its session: it stops believing", c)
	case rkRRead:
		switch {
		case st.what == rqPing:
			return at + fmt.Sprintf("%s reads %s's PING (sent %d ticks ago)", r, c, p.sent)
		case p.ust == usNone && p.ver == 1:
			return at + fmt.Sprintf("%s reads %s's LOCK (sent %d ticks ago) and relays it upstream to O", r, c, p.sent)
		}
		return at + fmt.Sprintf("%s reads %s's LOCK: unavailable (its ring names N)", r, c)
	case rkRPing:
		to := "O"
		if p.ust == usN {
			to = "N"
		}
		return at + fmt.Sprintf("%s sends PING upstream to %s (not confirmed since it read %s's PING)", r, to, c)
	case rkUpLost:
		return at + fmt.Sprintf("%s's upstream %s (sent %d ticks ago) is lost", r, req[st.what], p.upSent)
	case rkUpRead:
		to := "N"
		if p.ust == usO {
			to = "O"
		}
		x := at + fmt.Sprintf("%s reads %s's upstream %s (sent %d ticks ago)", to, r, req[p.up], p.upSent)
		switch {
		case st.what == raAccepted && (s.c2 || s.p[1-st.i].nLk && m.np == 2):
			x += ": accepted although another session holds a conflicting lock there"
		case st.what == raAccepted:
			x += ": accepted, installed into " + r + "'s upstream session at N"
		case st.what == raRefused && p.up == rqReassert:
			x += ": refused \"conflict\""
		case st.what == raRefused:
			x += ": refused, another session holds a lock on the key"
		case st.what == raUnavailable:
			x += ": unavailable (N does not own the key yet)"
		case st.what == raSilent:
			x += ": the session holds nothing there any more, no answer"
		case p.up == rqLock:
			x += ": granted"
		default:
			x += ": PONG"
		}
		switch {
		case p.ust == usClosed:
			return x + fmt.Sprintf("; %s, which gave up, ignores it", r)
		case st.what == raAnswered || st.what == raAccepted:
			return x + fmt.Sprintf("; %s reads it: u.confirmed = that send", r)
		case st.what == raRefused && p.up == rqReassert:
			return x + fmt.Sprintf("; %s ends %s's session (ERROR 0x03)", r, c)
		}
		return x + fmt.Sprintf("; %s reads it", r)
	case rkRAnswer:
		switch {
		case p.rq == rqLock && st.what == rsGranted:
			return at + fmt.Sprintf("%s answers %s's LOCK: granted; %s believes, anchored at its send (%d ticks ago)", r, c, c, p.sent)
		case p.rq == rqLock:
			return at + fmt.Sprintf("%s answers %s's LOCK: refused", r, c)
		case p.ust == usRe:
			return at + fmt.Sprintf("%s answers %s's PING while the key re-asserts, before N accepted: PONG; %s re-anchors at its send (%d ticks ago)", r, c, c, p.sent)
		}
		return at + fmt.Sprintf("%s answers %s's PING (read %d ticks ago; upstream confirmed at a send %d ticks ago): PONG; %s re-anchors at its send (%d ticks ago)", r, c, p.rRead, p.conf, c, p.sent)
	case rkRNotice:
		x := at + fmt.Sprintf("%s notices its upstream to O ended (u.confirmed %d ticks ago)", r, p.conf)
		if st.what == 1 {
			return x + ": the key re-asserts, answers to " + c + " held"
		}
		if !p.mir {
			return x + ": no lock there; ends " + c + "'s session (ERROR 0x03)"
		}
		return x + fmt.Sprintf(": its clock may be past u.confirmed + 0.8·L; ends %s's session (ERROR 0x03)", c)
	case rkRLearn:
		return at + fmt.Sprintf("%s learns ring 2 (N owns the key)", r)
	case rkRReassert:
		return at + fmt.Sprintf("%s sends RANGE reassert(key, %s's lock) to N (u.confirmed %d ticks ago, noticed %d ticks ago)", r, c, p.conf, p.mv)
	case rkRGiveUp:
		return at + fmt.Sprintf("%s's clock may have reached u.confirmed + 0.8·L (%d ticks) or L/2 since it noticed (%d ticks) without acceptance: ends %s's session (ERROR 0x03)", r, p.conf, p.mv, c)
	case rkOExpire:
		return at + fmt.Sprintf("O's clock may have counted L since it last read from %s's upstream (%d ticks ago): drops %s's lock", r, p.oSeen, c)
	case rkNExpire:
		return at + fmt.Sprintf("N's clock may have counted L since it last read from %s's upstream (%d ticks ago): drops %s's lock", r, p.nSeen, c)
	case rkPing:
		if s.ring == 2 {
			return at + "O pings the leader and learns it is out of the ring: keeps nothing"
		}
		return at + "O pings the leader, which hears it; contact anchored"
	case rkStop:
		return at + fmt.Sprintf("O's clock may have reached TSelf since its contact anchor (%d ticks ago): it stops serving", s.aq)
	case rkRemove:
		return at + fmt.Sprintf("the leader has not heard from O for %d ticks (its clock may have counted T): commits ring 2 (owner N)", s.qHeard)
	case rkApply:
		return at + fmt.Sprintf("N applies ring 2: takes the key over, warm-up of at least %d ticks", m.gate)
	case rkC2:
		return at + fmt.Sprintf("c2 asks N for a conflicting range lock: granted (took over %d ticks ago)", s.nTake)
	}
	return "?"
}

// CheckRangeFailover explores every interleaving of cfg breadth first and
// checks that no two clients believe at once that they hold conflicting
// range locks, that no re-asserted lock is refused or expired while its
// client believes, and that the old owner serves nothing once the new one
// took over. It panics on a configuration that Validate rejects.
func CheckRangeFailover(cfg RangeFailoverConfig) Report { return checkRangeFailover(cfg, nil) }

func checkRangeFailover(cfg RangeFailoverConfig, seen func(from *rfState, st rfStep)) Report {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	m := newRfModel(cfg)
	rep := Report{Model: "cluster-ranges-failover", Config: cfg.String()}
	rep = exploreSucc(rep, m.initial(), m.key, func(s rfState) []succ[rfState, rfStep] { return m.next(&s) }, seen)
	if v := rep.Violation; v != nil {
		v.Trace = m.trace(v.Trace, v.Detail)
	}
	return rep
}

// trace replays a path of encoded steps from the initial state and
// describes each.
func (m *rfModel) trace(path []string, detail string) []string {
	return replayTrace("cluster-ranges-failover", m.initial(), m.next, func(st rfStep) bool { return st.kind == rkTick }, m.describe, path, detail)
}
