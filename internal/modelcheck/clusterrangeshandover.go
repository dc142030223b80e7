package modelcheck

import (
	"fmt"

	"github.com/batonlock/baton/internal/clustercore"
	"github.com/batonlock/baton/protocol"
)

// The hand-over option of the cluster-ranges model (Handover): at a
// planned move P→N the range locks of a session that continues go to N
// under a placeholder instead of ending the session; the host holds back
// every answer while the key moves and adopts the locks with ADOPT once
// its ring routes the key to N, or ends the session (ERROR 0x03) when the
// placeholder expired or half the lease passed.
// Real rules run: clustercore's Confirmation.Block and RangeMove.Answered.
// Design: "Range locks handed over at a planned move" and
// #internalmodelcheckclusterrangeshandovergo in docs/design/2026-12-07-verification-models-cluster.md.

// PropClusterRangesNoOrphan, checked by the tests only (orphanCheck): N
// holds no range lock for a live upstream session whose host has ended
// the client's session it came from. In the model the host sends nothing
// more on that upstream once it has ended c1's session, so such a lock
// expires L after; an upstream kept open (reused, or kept alive by any
// frame N reads) would keep it for as long as it lives: no client
// believes in it, and c2 waits for it.
const PropClusterRangesNoOrphan = "N holds no range lock for a live upstream session whose host ended the client's session"

// What becomes of locks N adopts for a session the host has ended (the
// host gave the move up with its ADOPT in flight).
const (
	ofNone    uint8 = iota // nothing said: the design as given; the upstream lives on
	ofRelease              // the host releases them at N (RANGE release) when it reads "adopted": unsafe, c1 may not have read its ERROR 0x03
	ofClose                // the host closes the upstream session when it ends c1's session, without releases (server/session.go dropUpstreams(false)): N keeps them L after it read the ADOPT
)

// Mutations of the hand-over option.
const (
	// MutCrPlaceholderShort lets N's placeholder expire L/2 after the
	// install instead of L.
	MutCrPlaceholderShort = "range-placeholder-short"
	// MutCrHostAnswersMoving lets the host answer its client while the
	// key is moving (direct: P answers c1's PING at once; relayed: R
	// counts P's answers after MOVED as confirmations).
	MutCrHostAnswersMoving = "range-host-answers-moving"
	// MutCrMovedUnordered lets R read an answer P sent on its upstream
	// session after the export before it reads MOVED.
	MutCrMovedUnordered = "range-moved-unordered"
	// MutCrAdoptAnyOrigin lets N hand the placeholder's locks to a
	// session of another origin: c2's request, at N, adopts them.
	MutCrAdoptAnyOrigin = "range-adopt-any-origin"
)

// The host's modes for c1's key.
const (
	hmNormal  uint8 = iota // not moving: answers under its usual rule
	hmMoving               // moving: holds back every answer
	hmAdopted              // N adopted the locks: answers confirmed by N
	hmEnded                // the host ended c1's session (ERROR 0x03)
)

// Answers of N to an ADOPT.
const (
	adUnavailable uint8 = iota + 1
	adAdopted
	adAdoptedLost // adopted; the answer is lost with the upstream
	adNone
)

// The move's phase after the install: the ring switch is committed; each
// node applies it on its own.
const mvCommitted = mvSwitched

type hoState struct {
	// c1
	c1   uint8
	anc  int8
	out  uint8 // its outstanding request
	sent int8
	err  bool

	c2 bool

	// c1's host (P direct, R relayed, N with RelayAtN).
	hq    uint8 // c1's request the host read and has not answered
	hRead int8  // ticks since it read it
	hRes  uint8 // P's answer to the LOCK R relayed
	hm    uint8 // the host's mode for the key
	hMov  int8  // ticks since the key began moving at the host
	hSw   bool  // the host's ring routes the key to N (RelayAtN: nSw)
	hLast int8  // RelayAtN: ticks since N last read from c1
	upP   uint8 // R's upstream request to P in transit
	upPSt int8
	upN   uint8 // the host's upstream request to N in transit (ADOPT or PING)
	upNSt int8
	conf  int8 // ticks since the send of the latest upstream request answered that counts
	moved bool // MOVED in transit to R

	// P
	lk    bool // P holds c1's lock (c1's session or R's upstream session)
	seen  int8 // ticks since P last read from that session
	ended bool // P expired that session
	mv    uint8
	xfer  bool // the exported locks are in the move state, not yet installed

	// N
	ph    bool // the placeholder holds c1's locks
	phAge int8 // ticks since the install
	nSw   bool // N's ring names it the key's owner
	nLk   bool // N holds c1's locks for the adopting session
	nSeen int8 // ticks since N last read from that session
	nDead bool // that session broke or was closed: no read refreshes them
}

// Step kinds of the hand-over option.
const (
	hkTick uint8 = iota + 1
	hkSend
	hkLost
	hkHostRead // the host reads c1's request (direct: P)
	hkGiveUp
	hkReadErr
	hkC2
	hkC2Adopt // MutCrAdoptAnyOrigin: c2's request adopts the placeholder
	hkExpire  // P drops c1's lock after L of silence
	hkHangUp  // P sees a direct c1's connection end
	hkFreeze
	hkExport
	hkInstall
	hkCommit
	hkNSwitch
	hkHSwitch
	hkMovedRead
	hkPumpP   // R sends PING upstream to P
	hkUpPLost // R's request to P is lost
	hkUpPRead // P reads R's upstream request
	hkAdopt   // the host sends ADOPT to N
	hkPumpN   // the host sends PING upstream to N
	hkUpNLost
	hkUpNRead // N reads the host's request (what: the ADOPT answer, or 0 for a PING)
	hkAnswer  // the host answers c1, which reads it at once
	hkHGiveUp // the host gives the move up: ERROR 0x03
	hkLocal   // RelayAtN: N adopts locally
	hkPhExpire
	hkNExpire
)

type hoStep struct {
	kind uint8
	what uint8
}

func (st hoStep) String() string { return fmt.Sprintf("%d/%d", st.kind, st.what) }

type hoModel struct {
	cfg        ClusterRangesConfig
	clk        *foModel
	gMin, gMax int8 // c1's clock passes 0.8·L
	eMin       int8 // an owner's clock passes L since it last read
	phMin      int8 // N's clock may have counted the placeholder's life
	hgMin      int8 // the host's clock may have counted L/2
	cap        int8
}

func newHoModel(cfg ClusterRangesConfig) *hoModel {
	clk := &foModel{cfg: FailoverConfig{Unit: cfg.Unit, Drift: cfg.Drift}}
	l := int16(cfg.Lease)
	m := &hoModel{cfg: cfg, clk: clk}
	m.gMin, m.gMax = int8(clk.mayPass(l*4/5)), int8(clk.mustPass(l*4/5))
	m.eMin = int8(clk.mayPass(l))
	m.phMin = int8(clk.mayReach(m.placeholderUnits()))
	m.hgMin = int8(clk.mayReach(l / 2))
	m.cap = m.gMax + 1
	return m
}

func (m *hoModel) placeholderUnits() int16 {
	if m.cfg.Mutation == MutCrPlaceholderShort {
		return int16(m.cfg.Lease / 2)
	}
	return int16(m.cfg.Lease)
}

func (m *hoModel) mut(name string) bool { return m.cfg.Mutation == name }

// local: the host is N and has adopted the locks: N serves c1's session
// directly.
func (m *hoModel) local(s *hoState) bool { return m.cfg.RelayAtN && s.hm == hmAdopted }

// blocked: the key is moving, so the host's confirmation is blocked
// (Confirmation.Block) and its outbox holds back every answer to c1.
// MutCrHostAnswersMoving leaves the Block out, as a bug in the host would.
func (m *hoModel) blocked(s *hoState) bool {
	return s.hm == hmMoving && !m.mut(MutCrHostAnswersMoving)
}

func (m *hoModel) done(s *hoState) {
	s.c1, s.anc, s.out, s.sent, s.err = crDone, 0, crNone, 0, false
	s.hq, s.hRead, s.hRes = crNone, 0, crResNone
}

// endSession: the host ends c1's session with ERROR 0x03.
func (m *hoModel) endSession(s *hoState) {
	s.hm, s.hq, s.hRead, s.hRes = hmEnded, crNone, 0, crResNone
	if s.c1 == crHeld || s.c1 == crPending {
		s.err = true
	}
}

// startMoving: the host marks c1's key moving.
func (m *hoModel) startMoving(s *hoState) {
	if s.hm == hmNormal {
		s.hm, s.hMov = hmMoving, 0
	}
}

// ownerLock: P handles a LOCK on the key from c1's session.
func (m *hoModel) ownerLock(s *hoState) uint8 {
	if s.mv >= mvFrozen || s.ended {
		return crResRefused
	}
	s.lk, s.seen = true, 0
	return crResGranted
}

func (m *hoModel) initial() hoState { return hoState{conf: m.cap} }

func (m *hoModel) next(s *hoState) []succ[hoState, hoStep] {
	var out []succ[hoState, hoStep]
	emit := func(t hoState, st hoStep) {
		m.norm(&t)
		var f *failure
		switch {
		case t.c1 == crHeld && t.c2:
			f = fail(PropClusterRangesOneHolder, "c1 (anchor %d ticks ago) and c2 both believe they hold conflicting range locks on the key", t.anc)
		case m.cfg.orphanCheck && t.nLk && !t.nDead && t.hm == hmEnded:
			f = fail(PropClusterRangesNoOrphan, "N holds c1's lock for %s's live upstream session; %s ended c1's session", m.host(), m.host())
		}
		out = append(out, succ[hoState, hoStep]{step: st, to: t, f: f})
	}
	relay := m.cfg.Relay
	// c1.
	if s.out == crNone {
		switch s.c1 {
		case crIdle:
			t := *s
			t.c1, t.out, t.sent = crPending, crLock, 0
			emit(t, hoStep{hkSend, crLock})
		case crHeld:
			t := *s
			t.out, t.sent = crPing, 0
			emit(t, hoStep{hkSend, crPing})
		}
	} else {
		t := *s
		if t.out == crLock {
			m.done(&t)
		} else {
			t.out, t.sent, t.hq, t.hRead = crNone, 0, crNone, 0
		}
		emit(t, hoStep{hkLost, s.out})
	}
	if s.c1 == crHeld && s.anc >= m.gMin {
		t := *s
		m.done(&t)
		emit(t, hoStep{kind: hkGiveUp})
	}
	if s.err {
		t := *s
		m.done(&t)
		emit(t, hoStep{kind: hkReadErr})
	}
	// The host reads c1's request.
	if s.out != crNone && s.hq == crNone && s.hm != hmEnded {
		t := *s
		what := t.out
		switch {
		case !relay && t.hm == hmNormal:
			// P, the owner, answers at once.
			t.out = crNone
			if what == crLock {
				if m.ownerLock(&t) == crResGranted {
					t.c1, t.anc = crHeld, t.sent
				} else {
					m.done(&t)
				}
			} else if !t.ended {
				t.seen = 0
				t.anc = min(t.anc, t.sent)
			}
			t.sent = 0
		case !relay && t.hm == hmMoving && m.mut(MutCrHostAnswersMoving):
			t.out, t.sent = crNone, 0
			t.anc = min(t.anc, s.sent)
		case m.local(&t):
			// N, the owner, answers at once.
			t.out, t.hLast = crNone, 0
			if t.nLk {
				t.nSeen = 0
				t.anc = min(t.anc, t.sent)
			}
			t.sent = 0
		default:
			t.hq, t.hRead, t.hLast = what, 0, 0
			if what == crLock {
				// R relays the LOCK upstream at once.
				t.upP, t.upPSt = crLock, 0
			}
		}
		emit(t, hoStep{hkHostRead, what})
	}
	// The host answers c1 when its outbox releases the answer, by the
	// real rule (outboxReleases). A LOCK's answer confirms its own
	// request, relayed after the read; MutCrRelayUnconfirmed queues a PONG
	// as a push.
	if s.hq != crNone && s.hm != hmEnded {
		switch {
		case s.hq == crLock && s.hRes != crResNone && outboxReleases(int(s.hRead), int(s.hRead), m.blocked(s), false):
			t := *s
			if t.hRes == crResGranted {
				t.c1, t.anc = crHeld, t.sent
				t.out, t.sent, t.hq, t.hRead, t.hRes = crNone, 0, crNone, 0, crResNone
			} else {
				m.done(&t)
			}
			emit(t, hoStep{hkAnswer, s.hRes})
		case s.hq == crPing && outboxReleases(int(s.conf), int(s.hRead), m.blocked(s), m.mut(MutCrRelayUnconfirmed)):
			t := *s
			t.anc = min(t.anc, t.sent)
			t.out, t.sent, t.hq, t.hRead = crNone, 0, crNone, 0
			emit(t, hoStep{kind: hkAnswer})
		}
	}
	// R and P.
	if relay {
		pumpP := s.hm == hmNormal || s.hm == hmMoving && m.mut(MutCrHostAnswersMoving)
		if s.hq == crPing && s.upP == crNone && s.conf > s.hRead && pumpP {
			t := *s
			t.upP, t.upPSt = crPing, 0
			emit(t, hoStep{kind: hkPumpP})
		}
		if s.upP != crNone {
			t := *s
			t.upP, t.upPSt = crNone, 0
			emit(t, hoStep{hkUpPLost, s.upP})
			t = *s
			what := t.upP
			t.upP = crNone
			answered := false
			res := crResNone
			switch what {
			case crLock:
				res, answered = m.ownerLock(&t), true
			case crPing:
				if !t.ended {
					if t.lk {
						t.seen = 0
					}
					answered = true // the session continues after the export
				}
			}
			if answered && t.moved && !m.mut(MutCrMovedUnordered) {
				// MOVED is read before the answer appended after it.
				t.moved = false
				m.startMoving(&t)
			}
			if answered {
				if t.hq == crLock && what == crLock && t.hm != hmEnded {
					t.hRes = res
				}
				if what == crPing && (t.hm == hmNormal || t.hm == hmMoving && m.mut(MutCrHostAnswersMoving)) {
					t.conf = min(t.conf, t.upPSt)
				}
			}
			t.upPSt = 0
			emit(t, hoStep{hkUpPRead, what})
		}
		if s.moved {
			t := *s
			t.moved = false
			m.startMoving(&t)
			emit(t, hoStep{kind: hkMovedRead})
		}
	}
	// P's expiry of c1's lock.
	if s.lk && s.seen >= m.eMin {
		t := *s
		t.lk, t.ended = false, true
		emit(t, hoStep{kind: hkExpire})
	}
	if !relay && s.lk && s.c1 == crDone {
		t := *s
		t.lk, t.ended = false, true
		emit(t, hoStep{kind: hkHangUp})
	}
	// The move.
	{
		t := *s
		switch s.mv {
		case mvNone:
			t.mv = mvFrozen
			emit(t, hoStep{kind: hkFreeze})
		case mvFrozen:
			t.mv = mvExported
			if t.lk {
				t.lk, t.seen, t.xfer = false, 0, true
				if relay {
					t.moved = true
				} else {
					m.startMoving(&t)
				}
			}
			emit(t, hoStep{kind: hkExport, what: b2u(s.lk)})
		case mvExported:
			t.mv = mvInstalled
			if t.xfer {
				t.xfer, t.ph, t.phAge = false, true, 0
			}
			emit(t, hoStep{kind: hkInstall})
		case mvInstalled:
			t.mv = mvCommitted
			emit(t, hoStep{kind: hkCommit})
		}
	}
	if s.mv == mvCommitted && !s.nSw {
		t := *s
		t.nSw = true
		if m.cfg.RelayAtN {
			t.hSw = true
		}
		emit(t, hoStep{kind: hkNSwitch})
	}
	if s.mv == mvCommitted && !s.hSw && !m.cfg.RelayAtN {
		t := *s
		t.hSw = true
		emit(t, hoStep{kind: hkHSwitch})
	}
	// The host's adoption.
	if s.hm == hmMoving && s.hSw {
		if m.cfg.RelayAtN {
			t := *s
			if t.ph {
				t.ph, t.nLk, t.nSeen, t.hm, t.conf = false, true, t.hLast, hmAdopted, 0
			} else {
				m.endSession(&t)
			}
			emit(t, hoStep{hkLocal, b2u(s.ph)})
		} else if s.upN == crNone {
			t := *s
			t.upN, t.upNSt = crAdopt, 0
			emit(t, hoStep{kind: hkAdopt})
		}
	}
	if s.hm == hmMoving && s.hMov >= m.hgMin {
		t := *s
		m.endSession(&t)
		emit(t, hoStep{kind: hkHGiveUp})
	}
	if s.hm == hmAdopted && !m.cfg.RelayAtN && s.hq == crPing && s.upN == crNone && s.conf > s.hRead {
		t := *s
		t.upN, t.upNSt = crPing, 0
		emit(t, hoStep{kind: hkPumpN})
	}
	if s.upN != crNone {
		t := *s
		t.upN, t.upNSt = crNone, 0
		emit(t, hoStep{hkUpNLost, s.upN})
		if s.upN == crAdopt {
			for _, ans := range m.adoptAnswers(s) {
				t := *s
				t.upN = crNone
				if ans == adAdopted || ans == adAdoptedLost {
					t.ph, t.nLk, t.nSeen, t.nDead = false, true, 0, ans == adAdoptedLost
				}
				switch {
				case ans == adAdoptedLost: // the host never reads it
				case t.hm == hmMoving:
					// The host applies the answer by the real rule; on
					// RangeAgain it sends ADOPT again.
					switch hostAdoptOutcome(ans) {
					case clustercore.RangeTaken:
						t.hm, t.conf = hmAdopted, t.upNSt
					case clustercore.RangeLost:
						m.endSession(&t)
					}
				case ans == adAdopted && m.cfg.orphanFix == ofRelease:
					t.nLk = false
				case ans == adAdopted && m.cfg.orphanFix == ofClose:
					// The ADOPT is the last frame N reads on it.
					t.nDead = true
				}
				t.upNSt = 0
				emit(t, hoStep{hkUpNRead, ans})
			}
		} else {
			t := *s
			t.upN = crNone
			if t.nLk {
				t.nSeen = 0
				t.conf = min(t.conf, t.upNSt)
			}
			t.upNSt = 0
			emit(t, hoStep{kind: hkUpNRead})
		}
	}
	// N.
	if s.ph && s.phAge >= m.phMin {
		t := *s
		t.ph = false
		emit(t, hoStep{kind: hkPhExpire})
	}
	if s.nLk && s.nSeen >= m.eMin {
		t := *s
		t.nLk = false
		emit(t, hoStep{kind: hkNExpire})
	}
	if s.nSw && !s.c2 && !s.ph && !s.nLk {
		t := *s
		t.c2 = true
		emit(t, hoStep{kind: hkC2})
	}
	if s.nSw && !s.c2 && s.ph && m.mut(MutCrAdoptAnyOrigin) {
		t := *s
		t.c2, t.ph = true, false
		emit(t, hoStep{kind: hkC2Adopt})
	}
	{
		t := *s
		m.tick(&t)
		emit(t, hoStep{kind: hkTick})
	}
	return out
}

// crAdopt is the ADOPT request on the host's upstream session to N.
const crAdopt uint8 = crPing + 1

// hostAdoptOutcome is what N's answer to the host's ADOPT leads to, by
// the real rule (clustercore.RangeMove.Answered after a planned change):
// N answers "adopted" RangeDone, "unavailable" RangeUnavailable, and
// "none" RangeFree (server/rangemove.go adoptRangesLocked).
func hostAdoptOutcome(ans uint8) clustercore.RangeOutcome {
	st := protocol.RangeFree
	switch ans {
	case adAdopted:
		st = protocol.RangeDone
	case adUnavailable:
		st = protocol.RangeUnavailable
	}
	var rm clustercore.RangeMove
	return rm.Answered(st)
}

// adoptAnswers are N's possible answers to an ADOPT it reads in s.
func (m *hoModel) adoptAnswers(s *hoState) []uint8 {
	switch {
	case !s.nSw:
		return []uint8{adUnavailable}
	case s.ph:
		return []uint8{adAdopted, adAdoptedLost}
	}
	return []uint8{adNone}
}

func (m *hoModel) tick(s *hoState) {
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
	if s.hq != crNone {
		s.hRead = min(s.hRead+1, m.gMax)
	}
	if m.cfg.RelayAtN && !m.local(s) {
		s.hLast = min(s.hLast+1, m.eMin)
	}
	s.conf = min(s.conf+1, m.cap)
	if s.upP != crNone {
		s.upPSt = min(s.upPSt+1, m.cap)
	}
	if s.upN != crNone {
		s.upNSt = min(s.upNSt+1, m.cap)
	}
	if s.hm == hmMoving {
		s.hMov = min(s.hMov+1, m.hgMin)
	}
	if s.ph {
		s.phAge = min(s.phAge+1, m.phMin)
	}
	if s.nLk {
		s.nSeen = min(s.nSeen+1, m.eMin)
	}
}

// norm canonicalizes what no longer matters.
func (m *hoModel) norm(s *hoState) {
	if !s.lk {
		s.seen = 0
	}
	if !s.ph {
		s.phAge = 0
	}
	if !s.nLk {
		s.nSeen, s.nDead = 0, false
	}
	if s.hm != hmMoving {
		s.hMov = 0
	}
	if !m.cfg.RelayAtN || m.local(s) || s.hm == hmEnded {
		s.hLast = 0
	}
	if s.c1 == crDone {
		s.anc, s.out, s.sent, s.err = 0, crNone, 0, false
		s.hq, s.hRead, s.hRes = crNone, 0, crResNone
	}
	switch {
	case s.hm == hmEnded || m.blocked(s):
		// Nothing the host reads counts until it adopts (which sets it).
		s.conf = m.cap
	case s.hq == crNone:
		s.conf = min(s.conf, 1)
	}
}

func (m *hoModel) key(s *hoState) string {
	return string([]byte{s.c1, byte(s.anc), s.out, byte(s.sent), b2u(s.err), b2u(s.c2),
		s.hq, byte(s.hRead), s.hRes, s.hm, byte(s.hMov), b2u(s.hSw), byte(s.hLast), s.upP, byte(s.upPSt),
		s.upN, byte(s.upNSt), byte(s.conf), b2u(s.moved),
		b2u(s.lk), byte(s.seen), b2u(s.ended), s.mv, b2u(s.xfer),
		b2u(s.ph), byte(s.phAge), b2u(s.nSw), b2u(s.nLk), byte(s.nSeen), b2u(s.nDead)})
}

func (m *hoModel) host() string {
	switch {
	case !m.cfg.Relay:
		return "P"
	case m.cfg.RelayAtN:
		return "N"
	}
	return "R"
}

// describe returns a line for step st from state s (before it), at real
// tick t.
func (m *hoModel) describe(s *hoState, st hoStep, t int) string {
	at := fmt.Sprintf("t=%-3d ", t)
	req := [...]string{"", "LOCK", "PING", "ADOPT"}
	host := m.host()
	switch st.kind {
	case hkTick:
		return fmt.Sprintf("t=%-3d one tick passes", t)
	case hkSend:
		if m.cfg.RelayAtN {
			return at + fmt.Sprintf("c1 sends %s to N, its host", req[st.what])
		}
		return at + fmt.Sprintf("c1 sends %s to %s", req[st.what], host)
	case hkLost:
		return at + fmt.Sprintf("c1's %s (sent %d ticks ago) is lost: it stops waiting", req[st.what], s.sent)
	case hkGiveUp:
		return at + fmt.Sprintf("c1's clock may be past anchor + 0.8·L (anchor %d ticks ago): it gives up", s.anc)
	case hkReadErr:
		return at + "c1 reads the ERROR that ends its session: it stops believing"
	case hkHostRead:
		r := at + fmt.Sprintf("%s reads c1's %s (sent %d ticks ago)", host, req[st.what], s.sent)
		switch {
		case !m.cfg.Relay && s.hm == hmNormal && st.what == crLock && !(s.mv >= mvFrozen || s.ended):
			return r + ": grants; c1 believes, anchored at the send"
		case !m.cfg.Relay && s.hm == hmNormal && st.what == crLock:
			return r + ": unavailable"
		case !m.cfg.Relay && s.hm == hmNormal && !s.ended:
			return r + ": PONG; c1 re-anchors at the send"
		case !m.cfg.Relay && s.hm == hmNormal:
			return r + ": the session expired, no answer"
		case !m.cfg.Relay && s.hm == hmMoving && m.mut(MutCrHostAnswersMoving):
			return r + ": PONG while the key is moving; c1 re-anchors at the send"
		case m.local(s) && s.nLk:
			return r + ": N owns the lock: PONG; c1 re-anchors at the send"
		case m.local(s):
			return r + ": N's lock expired, no answer"
		case st.what == crLock:
			return r + " and relays it upstream to P"
		case s.hm == hmMoving:
			return r + ": holds the answer (the key is moving)"
		}
		return r + ": holds the answer until the upstream confirms"
	case hkAnswer:
		switch {
		case s.hq == crLock && st.what == crResGranted:
			return at + fmt.Sprintf("%s answers c1's LOCK: granted; c1 believes, anchored at its send (%d ticks ago)", host, s.sent)
		case s.hq == crLock:
			return at + fmt.Sprintf("%s answers c1's LOCK: unavailable", host)
		case s.hm == hmMoving:
			return at + fmt.Sprintf("%s answers c1's PING while the key is moving: PONG; c1 re-anchors at its send (%d ticks ago)", host, s.sent)
		case s.conf <= s.hRead:
			return at + fmt.Sprintf("%s answers c1's PING (read %d ticks ago; upstream confirmed at a send %d ticks ago): PONG; c1 re-anchors at its send (%d ticks ago)", host, s.hRead, s.conf, s.sent)
		}
		return at + fmt.Sprintf("%s answers c1's PING (read %d ticks ago) without an upstream confirmation since: PONG; c1 re-anchors at its send (%d ticks ago)", host, s.hRead, s.sent)
	case hkC2:
		return at + "c2 asks N for a conflicting range lock: granted (no held or placeholder lock)"
	case hkC2Adopt:
		return at + "c2 asks N for a conflicting range lock: N lets c2's session adopt the placeholder's locks: granted"
	case hkExpire:
		return at + fmt.Sprintf("P's clock may have counted L since it last read from c1's session (%d ticks ago): drops its range lock", s.seen)
	case hkHangUp:
		return at + "P sees c1's connection end: drops its range lock"
	case hkFreeze:
		return at + "P freezes the key: range requests on it are answered \"unavailable\""
	case hkExport:
		switch {
		case st.what == 0:
			return at + "P exports: no range lock is held on the key"
		case m.cfg.Relay:
			return at + fmt.Sprintf("P exports c1's lock (origin %s, c1's session there, lease L) to the move state; appends MOVED(key) to %s's upstream session", host, host)
		}
		return at + "P exports c1's lock (origin P, c1's session, lease L) to the move state and marks c1's key moving"
	case hkInstall:
		if s.xfer {
			return at + fmt.Sprintf("N installs the move state: c1's lock under a placeholder (expires %d units after, at least %d ticks)", m.placeholderUnits(), m.phMin)
		}
		return at + "N installs the move state: no range lock"
	case hkCommit:
		return at + "the ring switch is committed"
	case hkNSwitch:
		return at + "N applies the ring: it serves the key"
	case hkHSwitch:
		return at + fmt.Sprintf("%s applies the ring: it routes the key to N", host)
	case hkMovedRead:
		return at + host + " reads MOVED(key): marks c1's key moving"
	case hkPumpP:
		return at + host + " sends PING upstream to P (not confirmed since it read c1's PING)"
	case hkUpPLost:
		return at + fmt.Sprintf("%s's upstream %s to P (sent %d ticks ago) is lost", host, req[st.what], s.upPSt)
	case hkUpPRead:
		r := at + fmt.Sprintf("P reads %s's upstream %s (sent %d ticks ago)", host, req[st.what], s.upPSt)
		switch {
		case st.what == crLock && !(s.mv >= mvFrozen || s.ended):
			r += ": grants"
		case st.what == crLock:
			r += ": unavailable"
		case !s.ended:
			r += ": PONG"
		default:
			return r + ": the session expired, no answer"
		}
		switch {
		case s.moved && m.mut(MutCrMovedUnordered):
			return r + "; " + host + " reads it before MOVED, which is still in transit"
		case s.moved:
			return r + "; " + host + " reads MOVED(key) before it (marks c1's key moving), then it"
		}
		return r + "; " + host + " reads it"
	case hkAdopt:
		return at + fmt.Sprintf("%s sends ADOPT(key) on its upstream session to N", host)
	case hkPumpN:
		return at + fmt.Sprintf("%s sends PING upstream to N (not confirmed since it read c1's PING)", host)
	case hkUpNLost:
		return at + fmt.Sprintf("%s's upstream %s to N (sent %d ticks ago) is lost", host, req[st.what], s.upNSt)
	case hkUpNRead:
		r := at + fmt.Sprintf("N reads %s's upstream %s (sent %d ticks ago)", host, req[s.upN], s.upNSt)
		switch st.what {
		case 0:
			if s.nLk {
				return r + ": PONG"
			}
			return r + ": the session's lock expired, no answer"
		case adUnavailable:
			return r + ": unavailable (N does not serve the key yet)"
		case adAdopted:
			if s.hm != hmMoving && m.cfg.orphanFix == ofRelease {
				return r + ": adopted; the host had ended c1's session already: it releases the lock at N at once"
			}
			if s.hm != hmMoving && m.cfg.orphanFix == ofClose {
				return r + ": adopted; the host had ended c1's session and closed the upstream: N keeps the lock L after this read"
			}
			if s.hm != hmMoving {
				return r + ": adopted; the host had ended c1's session already: N holds the lock for no client"
			}
			return r + ": adopted; the lock is the upstream session's at N"
		case adAdoptedLost:
			return r + ": adopted; the answer is lost (the upstream breaks)"
		}
		if s.hm == hmMoving {
			return r + ": none (no placeholder); the host ends c1's session (ERROR 0x03)"
		}
		return r + ": none (no placeholder)"
	case hkHGiveUp:
		return at + fmt.Sprintf("%s's clock may have counted L/2 since the key began moving (%d ticks ago): ends c1's session (ERROR 0x03)", host, s.hMov)
	case hkLocal:
		if st.what == 1 {
			return at + "N, c1's host, applied the ring: adopts the placeholder locally (kept as a direct session's: L after N last read from c1)"
		}
		return at + "N, c1's host, applied the ring: no placeholder; ends c1's session (ERROR 0x03)"
	case hkPhExpire:
		return at + fmt.Sprintf("N's clock may have counted %d units since the install (%d ticks ago): drops the placeholder", m.placeholderUnits(), s.phAge)
	case hkNExpire:
		return at + fmt.Sprintf("N's clock may have counted L since it last read from the adopting session (%d ticks ago): drops the lock", s.nSeen)
	}
	return "?"
}

func checkClusterRangesHandover(cfg ClusterRangesConfig, seen func(from *hoState, st hoStep)) Report {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	m := newHoModel(cfg)
	rep := Report{Model: "cluster-ranges", Config: cfg.String()}
	rep = exploreSucc(rep, m.initial(), m.key, func(s hoState) []succ[hoState, hoStep] { return m.next(&s) }, seen)
	if v := rep.Violation; v != nil {
		v.Trace = m.trace(v.Trace, v.Detail)
	}
	return rep
}

func (m *hoModel) trace(path []string, detail string) []string {
	return replayTrace("cluster-ranges hand-over", m.initial(), m.next, func(st hoStep) bool { return st.kind == hkTick }, m.describe, path, detail)
}
