package modelcheck

import "fmt"

// The relaying node's failure (FailoverConfig.RelayFails, with Relay): R
// may die at any moment while it or c1 has a claim, and never comes back
// (server/relay2.go, server/resume.go). Its upstreams carry hop header
// version 3, so the owner keeps a dead R's claim for the lease without
// promoting anyone, and a resumable c1 re-asserts it itself on another
// node before its give-up.
// Design: "The relaying node dies" and
// #internalmodelcheckfailoverrelayfailgo in docs/design/2026-12-07-verification-models-cluster.md.

// relayDies emits R's death.
func (m *foModel) relayDies(s *foState, emit func(foState, foStep, *failure)) {
	c := m.rc
	cl, r := &s.c[c], &s.r
	if !(cl.st == fcPending || cl.st == fcQueued || cl.st == fcHeld ||
		r.cst == frcPending || r.cst == frcLive || r.cst == frcMoving) {
		return // nothing relayed: R's death changes nothing
	}
	for _, plain := range []bool{false, true} {
		t := *s
		tc, tr := &t.c[c], &t.r
		var f *failure
		st := foStep{kind: fsRDie, c: c}
		if r.uo == fmReassert && r.to == nodeB && r.tok != 0 && !tc.orph {
			// Written before R died: B may still read it.
			tc.orph, tc.otok, tc.over = true, r.tok, r.ver
		}
		if m.cfg.Mutation == MutFoRelayDeathReleases && r.cst == frcLive && (r.on == nodeB || m.serving(s)) {
			// The mutation: the owner ends the claims of an upstream
			// that breaks, as before hop header version 3.
			f = m.kept(&t, r.on, c, "ends at once, as R's upstream broke,", false)
			_, _, ff := m.handle(&t, r.on, c, fmRelease, 0, 0, 0)
			f = cmp(f, ff)
			st.n, st.what = r.on, 1
		}
		*tr = foRelay{dead: true}
		// c1's connection to R breaks: what it sent R, and what R had
		// not answered, is lost.
		tc.out, tc.dst, tc.sent, tc.mver, tc.mtick, tc.rep, tc.rval = fmNone, 0, 0, 0, 0, frNone, 0
		if tc.st == fcPending {
			m.end(&t, c)
		}
		live := tc.st == fcHeld || tc.st == fcQueued
		if plain && !live {
			break // the same state: resumable or not, it has nothing to re-assert
		}
		tr.plain = plain && live
		st.val = b2u(tr.plain)
		emit(t, st, f)
	}
}

// relayLostSends emits the requests of relayed client c, held or queued
// through R, after R died: it re-asserts its claim at the owner its ring
// names, A or B; a plain session can do nothing.
func (m *foModel) relayLostSends(s *foState, c int8, emit func(foState, foStep, *failure)) {
	cl := &s.c[c]
	if s.r.plain {
		return
	}
	send := func(out uint8, dst int8, tok, mtick uint8) {
		t := *s
		tc := &t.c[c]
		tc.out, tc.dst, tc.sent, tc.mver, tc.mtick = out, dst, 0, tc.ver, mtick
		emit(t, foStep{kind: fsCReassert, c: c, n: dst, what: out, val: tc.ver, tok: tok}, nil)
	}
	switch cl.st {
	case fcHeld:
		if cl.ver < 2 {
			send(fmReassert, nodeA, cl.tok, 0)
		}
		send(fmReassert, nodeB, cl.tok, 0)
	case fcQueued:
		if cl.ver < 2 {
			send(fmReassert, nodeA, 0, cl.ticket)
		}
		send(fmClaim, nodeB, 0, cl.ticket) // re-queued with A's ticket
	}
}

func (m *foModel) describeRelayFail(s *foState, st foStep, at string) string {
	switch st.kind {
	case fsRDie:
		r := at + "node R dies: its upstream to the owner and c1's connection to R break"
		if st.what != 0 {
			r += fmt.Sprintf("; node %s ends c1's claim at once", foNodeName(st.n))
		}
		if st.val != 0 {
			return r + "; c1's session was plain: it cannot re-assert"
		}
		return r + "; c1's session was resumable"
	case fsCReassert:
		cl := &s.c[m.rc]
		if st.what == fmClaim {
			return at + fmt.Sprintf("c1 (R dead) re-queues its claim on node B with A's ticket %d (knows ring %d)", cl.ticket, st.val)
		}
		if st.tok == 0 {
			return at + fmt.Sprintf("c1 (R dead) re-asserts its queued claim (ticket %d, ring %d) at node %s", cl.ticket, st.val, foNodeName(st.n))
		}
		return at + fmt.Sprintf("c1 (R dead) re-asserts its claim (token %s, ring %d) at node %s", foTok(st.tok), st.val, foNodeName(st.n))
	}
	return "?"
}
