package modelcheck

import (
	"fmt"
	"strings"

	"github.com/batonlock/baton/internal/clustercore"
)

// The cluster-ranges-resume model: a client re-asserts its range locks
// itself, through another node, after its own relaying node dies while the
// key's owner lives (server/rangeresume.go, the Go client's
// resume_ranges.go). The owner moves a lock to the re-asserting session
// only when the named earlier session and its secret match, and the client
// names every session its re-assertions were cut off on, latest first,
// then the one its lock was confirmed on; the mutations show why naming
// fewer loses the lock. Time and drift are the failover model's.
// Real rule run: clustercore's ReassertHolders (oTakes).
// Design: "Range locks re-asserted by their client after its own node
// dies" and #internalmodelcheckrangeresumego in docs/design/2026-12-07-verification-models-cluster.md.

// Not modelled: c1 resuming at R itself (Y = R), releases, several
// locks, ranges or keys per session, O's death (case A), a re-assertion
// of a lock whose LOCK was still pending, RangeUnavailable answers (a
// re-send on the same session after a pause, which any delay covers),
// more than one request a client stopped waiting for on its way at once
// (a second is lost), more than three sessions at Y. Liveness is checked
// only as PropRrNamed (the lock is in a session c1 names), not as
// "done" eventually: with the lock there and at most one late
// re-assertion to move it, c1's turns reach it unless its give-up
// comes first; TestRangeResumeThirdSession checks that the exploration
// reaches c1 on x answered done naming v after the late re-assertion
// from v moved the lock there.

// RangeResumeConfig bounds the cluster-ranges-resume model. Durations are
// in units of the processes' clocks; a tick of real time is Unit units at
// the nominal rate.
type RangeResumeConfig struct {
	// Second adds client c3 at R, whose range lock conflicts with c1's
	// and which re-asserts with its own origin and secret.
	Second bool
	// Sessions is how many successive sessions at Y a client may
	// re-assert on (1..3; 0 means 2: v, then w; 3 adds x).
	Sessions int

	Unit  int // units of a clock per tick at the nominal rate (1..60)
	Drift int // a clock advances Unit±Drift units per tick: ρ = Drift/Unit
	Lease int // every client's lease L

	// Mutation, when not empty, drops one rule so that the checker must
	// fail; see RangeResumeMutations.
	Mutation string
}

// DefaultRangeResumeConfigs are the configurations always checked: c1 at
// R, c2 at O and the impostor c4 at Y; and the same with c3 at R. A tick
// of 10 ± 1 units (ρ = 0.1), L = 40, as in the cluster-ranges-failover
// model; each client may re-assert on two successive sessions at Y.
func DefaultRangeResumeConfigs() []RangeResumeConfig {
	return []RangeResumeConfig{
		{Unit: 10, Drift: 1, Lease: 40},
		{Second: true, Unit: 10, Drift: 1, Lease: 40},
	}
}

// Mutations of the cluster-ranges-resume model.
const (
	// MutRrDropAtOnce: O drops u's lock as soon as it notices u's end.
	MutRrDropAtOnce = "resume-drop-at-once"
	// MutRrAdoptAnySecret: O moves the lock of the session named
	// whatever the secret: the real rule (oTakes) is told it matches.
	MutRrAdoptAnySecret = "resume-adopt-any-secret"
	// MutRrAnswerEarly: Y answers c1's reassert and PINGs as it relays
	// them, before O answered.
	MutRrAnswerEarly = "resume-answer-early"
	// MutRrKeepShort: O keeps a relayed session's lock L/2 after its last
	// read from it.
	MutRrKeepShort = "resume-keep-short"
	// MutRrReassertUnbelieved: c1 may re-assert after its give-up and
	// take its anchor from the answer.
	MutRrReassertUnbelieved = "resume-reassert-unbelieved"
	// MutRrNameHomeOnly: the client always names the session its lock
	// was last confirmed on, never the one its re-assertions were cut
	// off on.
	MutRrNameHomeOnly = "resume-name-home-only"
	// MutRrNameOnce: the client names each of its sessions once, the
	// latest cut-off one first, and takes the "conflict" naming home as a
	// refusal.
	MutRrNameOnce = "resume-name-once"
	// MutRrNameLatestOnly: the client names only the latest session its
	// re-assertions were cut off on, and home, in turn (the rule before
	// resume_ranges.go kept every cut-off session). The same rule with
	// two sessions at Y: caught with three (Sessions = 3).
	MutRrNameLatestOnly = "resume-name-latest-only"
	// MutRrReleaseOnBreak: R releases a client's range locks at O when
	// the client's connection breaks (what the server did for a client
	// that hangs up, appendRangeReleases).
	MutRrReleaseOnBreak = "resume-release-on-break"
)

// RangeResumeMutations lists the mutations of the model.
var RangeResumeMutations = []string{MutRrDropAtOnce, MutRrAdoptAnySecret, MutRrAnswerEarly, MutRrKeepShort,
	MutRrReassertUnbelieved, MutRrNameHomeOnly, MutRrNameOnce, MutRrNameLatestOnly, MutRrReleaseOnBreak}

// Properties of the model (beside PropClusterRangesOneHolder).
const (
	PropRrKept = "a client's re-assertion is never finally refused (\"conflict\" with no other session to name), " +
		"nor its range lock dropped by the owner, while it still believes"
	PropRrAdopt   = "a range lock is adopted only by a re-assertion naming its session's origin with its secret"
	PropRrNoSteal = "while a client believes and has re-asserted nothing since its lock was last confirmed on a session, " +
		"the owner keeps the lock in that session"
	PropRrNamed = "while a client believes and re-asserts, the owner keeps its lock in a session it names in turn " +
		"(else it is answered \"conflict\" until its give-up: the lock is lost to it)"
)

func (c RangeResumeConfig) String() string {
	who := "c1 at R, c2 at O, impostor c4 at Y"
	if c.Second {
		who = "c1 and c3 at R, c2 at O, impostor c4 at Y"
	}
	if c.Sessions != 0 && c.Sessions != 2 {
		who += fmt.Sprintf(", %d sessions at Y each", c.Sessions)
	}
	return fmt.Sprintf("range locks re-asserted by their client after its node dies, %s; %s",
		who, timedString(c.Unit, c.Drift, c.Lease)) + mutationString(c.Mutation)
}

// Validate reports bounds the checker cannot explore.
func (c RangeResumeConfig) Validate() error {
	if c.Sessions < 0 || c.Sessions > 3 {
		return fmt.Errorf("sessions at Y %d out of range 1..3", c.Sessions)
	}
	return validateTimed(c.Unit, c.Drift, c.Lease, c.Mutation, RangeResumeMutations)
}

// rfGaveUp: a client that gave up a lock it held (rfDone otherwise).
const rfGaveUp = rfDone + 1

// Where a client's session is.
const (
	atR    uint8 = iota // at R
	atLost              // its connection ended: no session
	atY                 // on its latest session at Y
)

// A client's sessions, each with its upstream session at O, named after
// it: u (s1 at R, origin (R, s1)), then v, w, x at Y, in the order the
// client opens them.
const (
	snNone uint8 = iota
	snU
	snV
	snW
	snX
)

// O's answers, in rrRead's what.
const (
	rrGranted uint8 = iota + 1
	rrRefused
	rrAdopted // a re-assertion: done, the named session's lock moved (or was there)
	rrInstalled
	rrPong
	rrSilent
)

type rrClient struct {
	c   uint8 // rfIdle, rfPending, rfHeld, rfDone, rfGaveUp
	anc int8  // ticks since its anchor, while held
	at  uint8
	cur uint8 // its session (snU at R, its latest at Y)

	home uint8 // the session its lock was last confirmed on
	// cut: the sessions its re-assertions were sent on since its lock
	// was last confirmed (bit 1<<s for session s; sessions are opened in
	// order, so this is the client's list, oldest first), cleared when
	// one is answered done.
	cut uint8
	nm  uint8 // while it re-asserts on cur: the session its (next) re-assertion names

	up   uint8 // its request on its way to O, which it waits for
	sent int8  // ticks since it was sent
	old  uint8 // a request it stopped waiting for, still on its way
	oldS uint8 // the session old was sent on
	oldN uint8 // the session old names (a re-assertion)

	lk   uint8 // the session holding its lock at O
	seen int8  // ticks since O last read from that session
}

type rrState struct {
	p     [2]rrClient
	rDead bool
	c2    bool
	c4    uint8 // 0 idle, 1 its reassert on its way, 2 holds (believes forever), 3 refused
}

// Step kinds.
const (
	rrTick    uint8 = iota + 1
	rrSend          // c sends what (LOCK, PING, RANGE reassert)
	rrBreak         // c's connection to Y ends (Y dies, or it breaks)
	rrLostOld       // a request c stopped waiting for is lost
	rrGiveUp        // c's clock may be past anchor + 0.8·L
	rrRead          // O reads c's request (what: the answer), c reads the answer
	rrReadOld       // O reads a request c stopped waiting for
	rrDie           // R dies
	rrNotice        // c notices its connection to R ended (what 1: it broke while R lives)
	rrONotice       // O notices u ended (MutRrDropAtOnce only: otherwise nothing changes)
	rrExpire        // O drops c's lock
	rrC2            // c2 is granted at O
	rrC4Send        // c4 sends its reassert
	rrC4Read        // O reads c4's reassert (what: the answer)
)

type rrStep struct {
	kind uint8
	i    int8
	what uint8
}

func (st rrStep) String() string { return fmt.Sprintf("%d/%d/%d", st.kind, st.i, st.what) }

type rrModel struct {
	cfg        RangeResumeConfig
	np         int8
	last       uint8 // a client's last session at Y
	gMin, gMax int8  // a client's clock passes 0.8·L
	eMin       int8  // O's clock passes the keep time since its last read
	noKept     bool  // tests: PropRrKept, PropRrNoSteal and PropRrNamed are not checked, to reach what lies behind them
	noNamed    bool  // tests: PropRrNamed is not checked, to reach what lies behind it
}

func newRrModel(cfg RangeResumeConfig) *rrModel {
	clk := &foModel{cfg: FailoverConfig{Unit: cfg.Unit, Drift: cfg.Drift}}
	l := int16(cfg.Lease)
	m := &rrModel{cfg: cfg, np: 1, last: snW}
	if cfg.Second {
		m.np = 2
	}
	if cfg.Sessions != 0 {
		m.last = snU + uint8(cfg.Sessions)
	}
	m.gMin, m.gMax = int8(clk.mayPass(l*4/5)), int8(clk.mustPass(l*4/5))
	keep := l
	if cfg.Mutation == MutRrKeepShort {
		keep = l / 2
	}
	m.eMin = int8(clk.mayPass(keep))
	return m
}

// sessName names client i's session s at O.
func sessName(i int8, s uint8) string {
	n := [...]string{"-", "u", "v", "w", "x"}[s]
	if i == 1 && s != snNone {
		n += "3"
	}
	return n
}

// conflict: a session holds a lock on K at O (all of them conflict).
func (m *rrModel) conflict(s *rrState) bool {
	if s.c2 || s.c4 == 2 {
		return true
	}
	for j := range m.np {
		if s.p[j].lk != snNone {
			return true
		}
	}
	return false
}

// believes: client i believes it holds its lock.
func (p *rrClient) believes() bool { return p.c == rfHeld }

// reasserting: the client re-asserts its lock on its session at Y.
func (p *rrClient) reasserting() bool { return p.at == atY && p.home != p.cur }

// mayReassert: the client may re-assert (only while it believes, but
// for the mutant).
func (m *rrModel) mayReassert(p *rrClient) bool {
	return p.c == rfHeld || p.c == rfGaveUp && m.cfg.Mutation == MutRrReassertUnbelieved
}

// names are the sessions a client names on its session cur, in turn:
// those its re-assertions were sent on (and cut off on) since its lock
// was last confirmed, before cur, the latest first; then home.
func (m *rrModel) names(p *rrClient, cur uint8) []uint8 {
	var ns []uint8
	for s := cur - 1; s > snNone; s-- {
		if p.cut&(1<<s) != 0 && s != p.home {
			ns = append(ns, s)
		}
	}
	switch m.cfg.Mutation {
	case MutRrNameHomeOnly:
		ns = nil
	case MutRrNameLatestOnly:
		ns = ns[:min(len(ns), 1)]
	}
	return append(ns, p.home)
}

// nextName is the session a client re-asserting on its session names
// after a "conflict" naming p.nm: the next in its names, wrapping
// around; none (a refusal) if p.nm is its only name (or, for
// MutRrNameOnce, its last).
func (m *rrModel) nextName(p *rrClient) uint8 {
	ns := m.names(p, p.cur)
	for i, s := range ns {
		switch {
		case s != p.nm:
		case i+1 < len(ns):
			return ns[i+1]
		case len(ns) > 1 && m.cfg.Mutation != MutRrNameOnce:
			return ns[0]
		}
	}
	return snNone
}

// abandon: the client stops waiting for its request, which may still
// reach O (unless another it abandoned is on its way: then it is lost).
func (p *rrClient) abandon() {
	if p.up != rqNone && p.old == rqNone {
		p.old, p.oldS, p.oldN = p.up, p.cur, snNone
		if p.up == rqReassert {
			p.oldN = p.nm
		}
	}
	p.up, p.sent = rqNone, 0
	if p.c == rfPending {
		p.c = rfDone
	}
}

func (m *rrModel) next(s *rrState) []succ[rrState, rrStep] {
	var out []succ[rrState, rrStep]
	emit := func(t rrState, st rrStep, f *failure) {
		m.norm(&t)
		if f == nil {
			f = m.invariant(&t)
		}
		out = append(out, succ[rrState, rrStep]{step: st, to: t, f: f})
	}
	for i := range m.np {
		m.clientSteps(s, i, emit)
	}
	if !s.rDead {
		t := *s
		t.rDead = true
		emit(t, rrStep{kind: rrDie}, nil)
	}
	if !s.c2 && !m.conflict(s) {
		t := *s
		t.c2 = true
		emit(t, rrStep{kind: rrC2}, nil)
	}
	switch s.c4 {
	case 0:
		t := *s
		t.c4 = 1
		emit(t, rrStep{kind: rrC4Send}, nil)
	case 1:
		// c4 names the session holding c1's lock with a wrong secret:
		// its lock moves only for the mutant.
		t := *s
		p := &t.p[0]
		var f *failure
		switch {
		case p.lk != snNone && m.oTakes(false):
			f = fail(PropRrAdopt, "node O moves %s's lock (session %s) to c4, whose re-assertion names %s with a wrong secret",
				clientName(0), sessName(0, p.lk), sessName(0, p.lk))
			p.lk, p.seen, t.c4 = snNone, 0, 2
			emit(t, rrStep{kind: rrC4Read, what: rrAdopted}, f)
		case !m.conflict(s):
			t.c4 = 2
			emit(t, rrStep{kind: rrC4Read, what: rrInstalled}, nil)
		default:
			t.c4 = 3
			emit(t, rrStep{kind: rrC4Read, what: rrRefused}, nil)
		}
	}
	{
		t := *s
		m.tick(&t)
		emit(t, rrStep{kind: rrTick}, nil)
	}
	return out
}

func (m *rrModel) clientSteps(s *rrState, i int8, emit func(rrState, rrStep, *failure)) {
	p := &s.p[i]
	mut := m.cfg.Mutation
	// The client sends.
	if p.up == rqNone {
		var what uint8
		switch {
		case p.at == atR && s.rDead:
			// what it would send to R reaches nobody
		case p.at == atR && p.c == rfIdle:
			what = rqLock
		case p.at == atR && p.c == rfHeld, p.at == atY && p.c == rfHeld && !p.reasserting():
			what = rqPing
		case p.reasserting() && m.mayReassert(p):
			what = rqReassert // its next try, after any pause
		case p.at == atLost && m.mayReassert(p) && p.cur < m.last:
			what = rqReassert // on a new session at Y
		}
		if what != rqNone {
			t := *s
			tp := &t.p[i]
			tp.up, tp.sent = what, 0
			if what == rqLock {
				tp.c = rfPending
			}
			if tp.at == atLost {
				tp.nm = m.names(tp, tp.cur+1)[0]
				tp.cur++
				tp.at, tp.cut = atY, tp.cut|1<<tp.cur
			}
			if mut == MutRrAnswerEarly && tp.at != atR {
				// Y answers as it relays: the request goes on to O, the
				// client no longer waits for it.
				tp.abandon()
				m.answer(tp, what, rrAdopted)
			}
			emit(t, rrStep{kind: rrSend, i: i, what: what}, nil)
		}
	}
	if p.up != rqNone {
		m.oReads(s, i, false, emit)
	}
	if p.old != rqNone {
		t := *s
		t.p[i].old, t.p[i].oldS, t.p[i].oldN = rqNone, snNone, snNone
		emit(t, rrStep{kind: rrLostOld, i: i, what: p.old}, nil)
		m.oReads(s, i, true, emit)
	}
	if p.c == rfHeld && p.anc >= m.gMin {
		t := *s
		t.p[i].c = rfGaveUp
		t.p[i].abandon()
		emit(t, rrStep{kind: rrGiveUp, i: i}, nil)
	}
	// The client's connection to Y ends: Y died, or it broke; Y keeps
	// the relayed locks at O as they are, as R does.
	if p.at == atY {
		t := *s
		t.p[i].abandon()
		t.p[i].at = atLost
		emit(t, rrStep{kind: rrBreak, i: i}, nil)
	}
	// The client's connection to R ends: R died (what 0), or it broke
	// while R lives (what 1), which R sees as its client hanging up.
	if p.at == atR {
		t := *s
		tp := &t.p[i]
		tp.abandon()
		tp.at = atLost
		if tp.c == rfIdle {
			tp.c = rfDone
		}
		if s.rDead {
			emit(t, rrStep{kind: rrNotice, i: i}, nil)
		} else {
			var f *failure
			if mut == MutRrReleaseOnBreak && tp.lk == snU {
				// R releases its client's range locks at O.
				tp.lk, tp.seen = snNone, 0
				f = m.kept(&t, i, "node R releases")
			}
			emit(t, rrStep{kind: rrNotice, i: i, what: 1}, f)
		}
	}
	// O.
	if p.lk == snU && s.rDead && mut == MutRrDropAtOnce {
		t := *s
		t.p[i].lk, t.p[i].seen = snNone, 0
		emit(t, rrStep{kind: rrONotice, i: i}, m.kept(s, i, "node O drops"))
	}
	if p.lk != snNone && p.seen >= m.eMin {
		t := *s
		t.p[i].lk, t.p[i].seen = snNone, 0
		emit(t, rrStep{kind: rrExpire, i: i}, m.kept(s, i, "node O drops"))
	}
}

// kept fails if client i still believes.
func (m *rrModel) kept(s *rrState, i int8, what string) *failure {
	if s.p[i].believes() && !m.noKept {
		return fail(PropRrKept, "%s %s's range lock while %s still believes it holds it (anchor %d ticks ago)",
			what, clientName(i), clientName(i), s.p[i].anc)
	}
	return nil
}

// answer has the client read answer a to its request what (sent sent
// ticks ago).
func (m *rrModel) answer(p *rrClient, what, a uint8) {
	switch {
	case a == rrRefused && what == rqReassert && m.nextName(p) != snNone:
		// Not in the session named: in the next one, then; named in
		// turn (a pause after each round) until one answers done or
		// the give-up.
		p.nm = m.nextName(p)
	case a == rrRefused && what == rqReassert:
		// A refusal: its session ends, it stops believing.
		p.c = rfDone
	case a == rrRefused || a == rrSilent:
		if p.c == rfPending {
			p.c = rfDone
		}
	case what == rqLock:
		p.c, p.anc = rfHeld, p.sent
	case what == rqPing:
		p.anc = min(p.anc, p.sent)
	case what == rqReassert && m.mayReassert(p):
		p.c, p.anc = rfHeld, p.sent
		p.home, p.cut, p.nm = p.cur, 0, snNone
	}
	p.up, p.sent = rqNone, 0
}

// oTakes reports whether O takes the range locks of the session a
// re-assertion names, by the real rule (clustercore.ReassertHolders):
// matches says the re-assertion carries that session's secret. O keeps
// the named session's locks whether its connection is open or not, and
// the rule treats both alike, so the model names it kept.
// MutRrAdoptAnySecret breaks the rule's input: the secret is not
// compared.
func (m *rrModel) oTakes(matches bool) bool {
	if m.cfg.Mutation == MutRrAdoptAnySecret {
		matches = true
	}
	h := clustercore.ReassertHolders{Kept: true, KeptMatches: matches}
	return h.Holder() == clustercore.HolderKept
}

// oReads has O read client i's request (old: one it stopped waiting for)
// and the client read the answer if it waits for it.
func (m *rrModel) oReads(s *rrState, i int8, old bool, emit func(rrState, rrStep, *failure)) {
	t := *s
	tp := &t.p[i]
	what, sess, nm := tp.up, tp.cur, tp.nm
	if old {
		what, sess, nm = tp.old, tp.oldS, tp.oldN
		tp.old, tp.oldS, tp.oldN = rqNone, snNone, snNone
	}
	var f *failure
	var ans uint8
	switch what {
	case rqLock:
		ans = rrRefused
		if !m.conflict(&t) {
			ans = rrGranted
			tp.lk, tp.seen = snU, 0
		}
	case rqPing:
		ans = rrSilent // the session holds nothing there: no answer
		if tp.lk == sess {
			ans, tp.seen = rrPong, 0
		}
	case rqReassert:
		// The named session's lock on K moves into sess (the secret
		// matches: it is the client's); then it is held for sess unless
		// another session holds a lock on K.
		if tp.lk == nm && m.oTakes(true) {
			tp.lk = sess
		}
		switch {
		case tp.lk == sess:
			ans, tp.seen = rrAdopted, 0
		case !m.conflict(&t):
			ans = rrInstalled
			tp.lk, tp.seen = sess, 0
		default:
			ans = rrRefused
			if !old && m.nextName(tp) == snNone && tp.believes() && !m.noKept {
				f = fail(PropRrKept, "node O answers %s's re-assertion \"conflict\" while %s still believes (anchor %d ticks ago) and has no other session to name",
					clientName(i), clientName(i), tp.anc)
			}
		}
	}
	switch {
	case old:
	case tp.at == atR && s.rDead:
		tp.up, tp.sent = rqNone, 0 // R is dead: nobody reads the answer
	default:
		m.answer(tp, what, ans)
	}
	kind := rrRead
	if old {
		kind = rrReadOld
	}
	emit(t, rrStep{kind: kind, i: i, what: ans}, f)
}

func (m *rrModel) invariant(s *rrState) *failure {
	var who []string
	for i := range m.np {
		if s.p[i].believes() {
			who = append(who, fmt.Sprintf("%s (anchor %d ticks ago)", clientName(i), s.p[i].anc))
		}
	}
	if s.c2 {
		who = append(who, "c2")
	}
	if s.c4 == 2 {
		who = append(who, "c4")
	}
	if len(who) > 1 {
		return fail(PropClusterRangesOneHolder, "%s both believe they hold conflicting range locks on the key", strings.Join(who, " and "))
	}
	for i := range m.np {
		p := &s.p[i]
		if p.believes() && p.cut == 0 && p.lk != p.home && !m.noKept {
			return fail(PropRrNoSteal, "%s believes its lock confirmed on %s and has re-asserted nothing since, but O holds it on %s",
				clientName(i), sessName(i, p.home), sessName(i, p.lk))
		}
		if p.believes() && p.reasserting() && p.lk != snNone && p.lk != p.cur && !m.noKept && !m.noNamed {
			ns := m.names(p, p.cur)
			named := false
			var all []string
			for _, n := range ns {
				named = named || n == p.lk
				all = append(all, sessName(i, n))
			}
			if !named {
				return fail(PropRrNamed, "%s re-asserts on %s naming %s in turn, but O holds its lock on %s",
					clientName(i), sessName(i, p.cur), strings.Join(all, ", "), sessName(i, p.lk))
			}
		}
	}
	return nil
}

// tick lets one tick of real time pass; a client's give-up takes effect
// when its clock must be past its deadline.
func (m *rrModel) tick(s *rrState) {
	for i := range m.np {
		p := &s.p[i]
		if p.c == rfHeld {
			p.anc = min(p.anc+1, m.gMax)
		}
		if p.up != rqNone {
			p.sent = min(p.sent+1, m.gMax)
		}
		if p.c == rfHeld && p.anc >= m.gMax {
			p.c = rfGaveUp
			p.abandon()
		}
		if p.c == rfPending && p.sent >= m.gMax {
			p.abandon()
		}
		if p.lk != snNone {
			p.seen = min(p.seen+1, m.eMin)
		}
	}
}

// norm canonicalizes what no longer matters.
func (m *rrModel) norm(s *rrState) {
	for i := range m.np {
		p := &s.p[i]
		if p.c != rfHeld {
			p.anc = 0
		}
		if p.c == rfDone || p.c == rfGaveUp && m.cfg.Mutation != MutRrReassertUnbelieved {
			// It asks no more.
			p.c, p.at, p.cur, p.home, p.cut = rfDone, atLost, snNone, snNone, 0
		}
		if !p.reasserting() {
			p.nm = snNone
		}
	}
}

func (m *rrModel) key(s *rrState) string {
	b := make([]byte, 0, 36)
	for i := range m.np {
		p := &s.p[i]
		b = append(b, p.c, byte(p.anc), p.at, p.cur, p.home, p.cut, p.nm, p.up, byte(p.sent),
			p.old, p.oldS, p.oldN, p.lk, byte(p.seen))
	}
	return string(append(b, b2u(s.rDead), b2u(s.c2), s.c4))
}

// describe returns a line for step st from state s (before it), at real
// tick t.
func (m *rrModel) describe(s *rrState, st rrStep, t int) string {
	at := fmt.Sprintf("t=%-3d ", t)
	c := clientName(st.i)
	p := &s.p[st.i]
	sn := func(x uint8) string { return sessName(st.i, x) }
	req := [...]string{"", "LOCK", "PING", "RANGE reassert"}
	ans := [...]string{"", "granted", "\"conflict\"", "done", "done (installed)", "PONG", "no answer (the session holds nothing)"}
	via := func(sess uint8) string {
		if sess == snU {
			return "through R on u"
		}
		return "through Y on " + sn(sess)
	}
	switch st.kind {
	case rrTick:
		return fmt.Sprintf("t=%-3d one tick passes", t)
	case rrSend:
		sess, nm := p.cur, p.nm
		x := at + c + " sends "
		if p.at == atLost {
			sess = p.cur + 1
			nm = m.names(p, sess)[0]
			x = at + fmt.Sprintf("%s opens session %s at Y and sends ", c, sn(sess))
		}
		x += req[st.what] + " " + via(sess)
		if st.what == rqReassert {
			x += fmt.Sprintf(" naming session %s with its secret", sn(nm))
			if ns := m.names(p, sess); len(ns) > 1 {
				var all []string
				for _, n := range ns {
					all = append(all, sn(n))
				}
				x += fmt.Sprintf(" (its names in turn: %s)", strings.Join(all, ", "))
			}
		}
		if p.c == rfGaveUp {
			x += ", after its give-up"
		}
		if m.cfg.Mutation == MutRrAnswerEarly && p.at != atR {
			x += "; Y answers it at once, before O did: " + c + " re-anchors at its send"
		}
		return x
	case rrBreak:
		x := at + fmt.Sprintf("%s's connection to Y on %s ends", c, sn(p.cur))
		if p.up != rqNone {
			x += fmt.Sprintf(" before the answer to its %s (sent %d ticks ago), which may still reach O", req[p.up], p.sent)
		}
		return x
	case rrLostOld:
		return at + fmt.Sprintf("%s's %s that it stopped waiting for is lost", c, req[st.what])
	case rrGiveUp:
		return at + fmt.Sprintf("%s's clock may be past anchor + 0.8·L (anchor %d ticks ago): it gives up", c, p.anc)
	case rrRead, rrReadOld:
		what, sess, nm, sent := p.up, p.cur, p.nm, fmt.Sprintf(" (sent %d ticks ago)", p.sent)
		if st.kind == rrReadOld {
			what, sess, nm, sent = p.old, p.oldS, p.oldN, ", which "+c+" stopped waiting for"
		}
		x := at + fmt.Sprintf("O reads %s's %s %s", c, req[what], via(sess))
		if what == rqReassert {
			x += fmt.Sprintf(" naming %s", sn(nm))
		}
		x += sent + ": " + ans[st.what]
		switch {
		case st.what == rrAdopted && p.lk != sess:
			x += fmt.Sprintf(", %s's lock moves from %s to %s", c, sn(p.lk), sn(sess))
		case st.what == rrRefused && what == rqReassert && p.lk != snNone:
			x += fmt.Sprintf(" (%s's lock is on %s)", c, sn(p.lk))
		}
		switch {
		case st.kind == rrReadOld:
			return x + "; nobody reads the answer"
		case p.at == atR && s.rDead:
			return x + "; R is dead: nobody reads the answer"
		case st.what == rrSilent:
			return x
		case st.what == rrRefused && what == rqReassert && m.nextName(p) != snNone:
			return x + fmt.Sprintf("; %s reads it and will name %s", c, sn(m.nextName(p)))
		}
		return x + fmt.Sprintf("; %s reads it", c)
	case rrDie:
		return at + "R dies"
	case rrNotice:
		if st.what == 1 {
			x := at + fmt.Sprintf("%s's connection to R breaks (R lives)", c)
			if m.cfg.Mutation == MutRrReleaseOnBreak && p.lk == snU {
				x += fmt.Sprintf("; R sees its client hang up and releases %s's lock at O", c)
			}
			return x
		}
		return at + fmt.Sprintf("%s notices its connection to R ended", c)
	case rrONotice:
		return at + fmt.Sprintf("O notices %s ended and drops %s's lock at once", sn(snU), c)
	case rrExpire:
		return at + fmt.Sprintf("O's clock may have counted its keep time since it last read from %s (%d ticks ago): drops %s's lock", sn(p.lk), p.seen, c)
	case rrC2:
		return at + "c2 asks O for a conflicting range lock: granted"
	case rrC4Send:
		return at + "c4 sends RANGE reassert through Y naming c1's session that holds its lock, with a wrong secret"
	case rrC4Read:
		return at + "O reads c4's RANGE reassert: " + ans[st.what]
	}
	return "?"
}

// CheckRangeResume explores every interleaving of cfg breadth first and
// checks that no two clients believe at once that they hold conflicting
// range locks, that no client's re-assertion is finally refused nor its
// lock dropped while it believes, that a lock confirmed on a session
// stays there until its client re-asserts on a newer one, that while it
// re-asserts its lock is in a session it names, and that only the right
// origin and secret move a lock. It panics on a configuration
// that Validate rejects.
func CheckRangeResume(cfg RangeResumeConfig) Report { return checkRangeResume(cfg, nil) }

func checkRangeResume(cfg RangeResumeConfig, seen func(from *rrState, st rrStep)) Report {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	return newRrModel(cfg).check(seen)
}

func (m *rrModel) check(seen func(from *rrState, st rrStep)) Report {
	rep := Report{Model: "cluster-ranges-resume", Config: m.cfg.String()}
	var init rrState
	for i := range init.p {
		init.p[i].cur, init.p[i].home = snU, snU
	}
	rep = exploreSucc(rep, init, m.key, func(s rrState) []succ[rrState, rrStep] { return m.next(&s) }, seen)
	if v := rep.Violation; v != nil {
		v.Trace = replayTrace("cluster-ranges-resume", init, m.next, func(st rrStep) bool { return st.kind == rrTick }, m.describe, v.Trace, v.Detail)
	}
	return rep
}
