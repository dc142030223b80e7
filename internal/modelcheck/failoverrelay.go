package modelcheck

import (
	"fmt"
	"strings"
)

// The relay option of the failover model (FailoverConfig.Relay): the
// relayed client c1 talks only to node R, which relays its claim to the
// owner on an upstream session (server/relay2.go, server/move_host.go). R
// answers under the pessimism rule, re-asserts a claim whose upstream
// ended at the name's owner in its ring, and only while c1 may still
// believe (clustercore's Move.Believed); the owner adopts only a claim it
// still keeps. The mutations drop each of those rules.
// Design: "The relay option" and #internalmodelcheckfailoverrelaygo in
// docs/design/2026-12-07-verification-models-cluster.md.

// Mutations of the relay option.
const (
	// MutFoRelayUnconfirmed lets R answer c1's heartbeat without an
	// owner's confirmation of an upstream request sent at or after it
	// was read: the real outbox is handed the PONG as a push.
	MutFoRelayUnconfirmed = "relay-answers-unconfirmed"
	// MutFoRelayAnswersAfterGiveUp lets R, having given the moving claim
	// up, answer c1's heartbeat with a plain PONG, its REVOKED lost (the
	// REVOKED not placed before R's later answers).
	MutFoRelayAnswersAfterGiveUp = "relay-answers-after-giveup"
	// MutFoRelayReassertUnbelieved drops the belief window: R re-asserts
	// a moving claim for L/2 after it noticed the loss, however long ago
	// its upstream last confirmed a request.
	MutFoRelayReassertUnbelieved = "relay-reassert-unbelieved"
	// MutFoRelayAdoptExpired lets A, still the owner, accept R's
	// re-assertion of a held claim after a transient break whatever its
	// record says: after it expired the claim (and perhaps granted the
	// name anew) it installs the claim again with its old token.
	MutFoRelayAdoptExpired = "relay-adopt-expired"
	// MutFoRelayDeathReleases, with FailoverConfig.RelayFails, has the
	// owner end the relayed claim at once when R dies (its upstream
	// breaks), as an owner did before hop header version 3, instead of
	// keeping it for the lease.
	MutFoRelayDeathReleases = "relay-death-releases"
	// MutFoRelayForeignSecret, with FailoverConfig.RelayFails, has R's
	// upstream carry the hash of a secret of R's own instead of its
	// client's: the owner keeps the claim when R dies, but refuses the
	// client's own re-assertion of it (the secret does not match).
	MutFoRelayForeignSecret = "relay-foreign-secret"
)

// relayBelief reports whether R keeps to the belief window.
func (c FailoverConfig) relayBelief() bool { return c.Mutation != MutFoRelayReassertUnbelieved }

// FailoverRelayMutations lists the mutations of the relay option; each
// needs FailoverConfig.Relay, and MutFoRelayDeathReleases and
// MutFoRelayForeignSecret also FailoverConfig.RelayFails.
var FailoverRelayMutations = []string{MutFoRelayUnconfirmed, MutFoRelayAnswersAfterGiveUp, MutFoRelayReassertUnbelieved,
	MutFoRelayAdoptExpired, MutFoRelayDeathReleases, MutFoRelayForeignSecret}

// The relayed claim at R.
const (
	frcNone    uint8 = iota // none (never claimed, released)
	frcPending              // its CLAIM forwarded, not answered
	frcLive                 // held or queued on node on
	frcMoving               // its upstream ended: re-asserted at the next owner
	frcGone                 // given up or ended by its owner: REVOKED told (or lost)
)

// nodeR is the relaying node, as the node of c1's requests and claim.
const nodeR = 2

type foRelay struct {
	ver    uint8 // ring version R knows
	cst    uint8 // the relayed claim
	on     int8  // node of the live claim (or of the one it moves from)
	tok    uint8 // its token (0: queued)
	ticket uint8 // its queue ticket
	conf   int16 // ticks since the send time of the latest answered request on the upstream to on
	uo     uint8 // upstream request in flight (fmClaim, fmHeartbeat: a PING, fmReassert)
	to     int8  // ... to this node
	us     int16 // ... sent this many ticks ago
	mv     int16 // ticks since the claim began moving
	rd     bool  // R has read c1's outstanding request, idle ticks ago
	idle   int16 // ticks since R last heard from c1
	dead   bool  // R died (FailoverConfig.RelayFails): every field above is zero
	plain  bool  // ... and c1's session was not resumable: it cannot re-assert
}

// isRelayed reports whether client c is the relayed client and its
// relaying node R is alive (once R died it is a client of its owners,
// failoverrelayfail.go).
func (m *foModel) isRelayed(s *foState, c int8) bool {
	return m.cfg.Relay != 0 && c == m.rc && !s.r.dead
}

// relayReleases reports whether R's ordered outbox releases the answer
// to c1's request now (outboxReleases: the real rule), given the
// upstream's confirmation and the request's read time. A moving claim is
// an upstream not confirmed yet. MutFoRelayUnconfirmed queues a
// heartbeat's PONG as a push.
func (m *foModel) relayReleases(s *foState) bool {
	cl, r := &s.c[m.rc], &s.r
	return outboxReleases(int(r.conf), int(r.idle), r.cst == frcMoving,
		cl.out == fmHeartbeat && m.cfg.Mutation == MutFoRelayUnconfirmed)
}

// relayAnswer is R's answer to c1's outstanding request when R may send
// it now (frNone: not yet).
func (m *foModel) relayAnswer(s *foState) (uint8, uint8) {
	cl, r := &s.c[m.rc], &s.r
	if !r.rd || cl.out != fmClaim && cl.out != fmHeartbeat {
		return frNone, 0
	}
	mut := m.cfg.Mutation
	switch r.cst {
	case frcLive, frcMoving:
		if !m.relayReleases(s) {
			return frNone, 0
		}
		switch {
		case r.tok == 0:
			return frQueued, r.ticket
		case cl.out == fmClaim:
			return frGranted, r.tok
		}
		return frHeld, r.tok
	case frcGone:
		if cl.out == fmHeartbeat && mut == MutFoRelayAnswersAfterGiveUp && r.tok != 0 {
			return frHeld, r.tok
		}
		return frGone, 0
	case frcNone:
		if cl.out == fmClaim {
			return frRetry, r.ver // REFUSED 0x03: its upstream ended
		}
		return frGone, 0
	}
	return frNone, 0
}

// relaySteps emits c1's requests and R's steps.
func (m *foModel) relaySteps(s *foState, emit func(foState, foStep, *failure)) {
	if s.r.dead {
		return
	}
	if m.cfg.RelayFails {
		m.relayDies(s, emit)
	}
	cl, r := &s.c[m.rc], &s.r
	c := m.rc
	// c1's requests, all to R.
	if cl.out == fmNone {
		send := func(kind, out uint8) {
			t := *s
			tc := &t.c[c]
			tc.out, tc.dst, tc.sent = out, nodeR, 0
			if out == fmClaim {
				tc.st = fcPending
			}
			emit(t, foStep{kind: kind, c: c, n: nodeR}, nil)
		}
		switch cl.st {
		case fcIdle:
			send(fsClaim, fmClaim)
		case fcQueued:
			send(fsHeartbeat, fmHeartbeat)
		case fcHeld:
			send(fsHeartbeat, fmHeartbeat)
			t := *s
			m.end(&t, c)
			t.c[c].out, t.c[c].dst = fmRelease, nodeR
			emit(t, foStep{kind: fsRelease, c: c, n: nodeR}, nil)
		}
	}
	// R reads c1's request.
	if cl.out != fmNone && !r.rd {
		switch cl.out {
		case fmHeartbeat:
			t := *s
			t.r.rd, t.r.idle = true, 0
			emit(t, foStep{kind: fsRRead, c: c, what: fmHeartbeat}, nil)
		case fmRelease:
			t := *s
			t.c[c].out, t.c[c].dst = fmNone, 0
			t.r.idle = 0
			was := t.r.cst
			t.r.cst = frcNone
			emit(t, foStep{kind: fsRRead, c: c, what: fmRelease}, nil)
			if was == frcLive && r.uo == fmNone && (r.on == nodeB || m.serving(s)) {
				_, _, f := m.handle(&t, r.on, c, fmRelease, 0, 0, 0)
				emit(t, foStep{kind: fsRRead, c: c, what: fmRelease, n: r.on, val: 1}, f)
			}
		case fmClaim:
			if r.uo != fmNone {
				break // forwarded once the upstream's request is answered
			}
			// A new claim (a new claim id); an earlier one, which c1 no
			// longer believes in, is forgotten here and expires at its
			// owner (one relayed claim at a time).
			to := int8(nodeA)
			if r.ver == 2 {
				to = nodeB
			}
			t := *s
			t.r.rd, t.r.idle = true, 0
			if to != r.on || r.cst == frcNone || r.cst == frcGone {
				t.r.conf = 0 // a new upstream: confirmed at its opening
			}
			t.r.cst, t.r.on, t.r.tok, t.r.ticket, t.r.uo, t.r.to, t.r.us = frcPending, to, 0, 0, fmClaim, to, 0
			emit(t, foStep{kind: fsRRead, c: c, what: fmClaim, n: to}, nil)
		}
	}
	// R answers c1.
	if rep, val := m.relayAnswer(s); rep != frNone {
		t := *s
		t.c[c].rep, t.c[c].rval = rep, val
		st := foStep{kind: fsRAnswer, c: c, what: cl.out, val: rep, tok: val}
		m.answer(&t, c)
		emit(t, st, nil)
	}
	// R pings the upstream for a heartbeat that waits.
	if r.cst == frcLive && r.uo == fmNone && cl.out == fmHeartbeat && r.rd && r.conf > r.idle {
		t := *s
		t.r.uo, t.r.to, t.r.us = fmHeartbeat, r.on, 0
		emit(t, foStep{kind: fsRPing, n: r.on}, nil)
	}
	// The owner reads R's upstream request; R reads the answer at once.
	if r.uo != fmNone && (r.to == nodeB || m.serving(s)) {
		t := *s
		st, f := m.relayUp(&t)
		emit(t, st, f)
	}
	// The upstream ends: to A at any moment, A serving or not (a
	// transient break leaves A serving and keeping the claim); to B only
	// for the patience of a re-assertion in flight (R stays in contact
	// with B).
	if (r.cst == frcPending || r.cst == frcLive) && r.on == nodeA || r.uo == fmReassert {
		t := *s
		tr := &t.r
		st := foStep{kind: fsRFail, n: r.to, what: r.uo}
		if r.uo == fmNone {
			st.n = r.on
		}
		if r.uo == fmReassert && r.to == nodeB && r.tok != 0 && !t.c[c].orph {
			// Written before the connection ended: B may still read it.
			tc := &t.c[c]
			tc.orph, tc.otok, tc.over = true, r.tok, r.ver
		}
		switch tr.cst {
		case frcPending:
			tr.cst = frcNone
		case frcLive:
			tr.cst, tr.mv = frcMoving, 0
		}
		tr.uo, tr.to, tr.us = fmNone, 0, 0
		emit(t, st, nil)
	}
	if r.ver < 2 && s.bVer == 2 {
		t := *s
		t.r.ver = 2
		emit(t, foStep{kind: fsRLearn}, nil)
	}
	if r.cst == frcMoving && r.uo == fmNone {
		// R routes the name by its ring: to B once it names B, to A
		// itself while it still names A (the upstream to A ended by a
		// transient break, or A is lost: the re-assertion then waits
		// unanswered until its upstream ends, and R asks again).
		if r.mv < m.rgMax && (!m.cfg.relayBelief() || r.conf < m.gMax[c]) {
			to := int8(nodeA)
			if r.ver == 2 {
				to = nodeB
			}
			t := *s
			t.r.uo, t.r.to, t.r.us = fmReassert, to, 0
			emit(t, foStep{kind: fsRReassert, n: to, val: r.ver, tok: r.tok}, nil)
		}
		if r.mv >= m.rgMin {
			t := *s
			t.r.cst = frcGone
			emit(t, foStep{kind: fsRGiveUp}, nil)
		}
	}
	// R ends c1's session once its clock may be past the lease since it
	// last heard from c1: its claim is dropped and its upstream closed
	// (the owner keeps the claim until the lease passes there).
	if (r.cst == frcPending || r.cst == frcLive || r.cst == frcMoving) && r.idle >= m.sxMin {
		t := *s
		f := m.relayEnd(&t, "ends the session of")
		emit(t, foStep{kind: fsRExpire, c: c}, f)
	}
	// c1 reads the REVOKED of a claim R gave up, or an owner ended.
	if r.cst == frcGone && (cl.st == fcHeld || cl.st == fcQueued) {
		t := *s
		m.end(&t, c)
		emit(t, foStep{kind: fsRRevoked, c: c}, nil)
	}
}

// relayUp has the owner handle R's upstream request, and R read the
// answer.
func (m *foModel) relayUp(s *foState) (foStep, *failure) {
	r := &s.r
	c := m.rc
	n := r.to
	st := foStep{kind: fsRUp, n: n, what: r.uo, tok: r.tok}
	var rep, val uint8
	var f *failure
	switch {
	case r.uo == fmReassert && n == nodeA:
		rep, val, f = m.adoptAtOwner(s, c, r.tok, r.ticket)
	case r.uo == fmReassert && r.tok != 0:
		rep, val, f = m.handle(s, n, c, fmReassert, r.tok, r.ver, 0)
	case r.uo == fmReassert:
		// A queued claim re-queues with A's ticket.
		rep, val, f = m.handle(s, n, c, fmClaim, 0, r.ver, r.ticket)
	default:
		rep, val, f = m.handle(s, n, c, r.uo, 0, 0, 0)
	}
	st.val = rep
	uo, us := r.uo, r.us
	r.uo, r.to, r.us = fmNone, 0, 0
	if rep == frRetry {
		// Not served there yet, or an older ring named: asked again.
		r.ver = max(r.ver, val)
		if uo == fmClaim {
			r.cst = frcNone
		}
		return st, f
	}
	if r.cst == frcNone || r.cst == frcGone {
		return st, f // released or given up meanwhile: the owner's record expires
	}
	r.on, r.conf = n, us
	switch rep {
	case frGranted, frHeld:
		if r.tok == 0 && uo != fmClaim {
			// A queued claim granted at its re-assertion: PROMOTED.
			if tc := &s.c[c]; tc.st == fcQueued {
				tc.st, tc.tok = fcHeld, val
			}
		}
		r.cst, r.tok, r.ticket = frcLive, val, 0
	case frQueued:
		r.cst, r.tok, r.ticket = frcLive, 0, val
	case frGone:
		// Refused, or no such claim at its owner: REVOKED.
		r.cst = frcGone
	}
	return st, f
}

// adoptAtOwner has A, still the name's owner and serving, handle R's
// re-assertion of the relayed claim (token tok, 0 for a queued claim with
// A's queue ticket ticket) on a new upstream after the old one broke: A
// adopts the claim into the new upstream session iff it still keeps that
// very claim (held with the same token; queued, at its place, with the
// same ticket; a queued claim it promoted meanwhile, as held with its new
// token), and refuses it otherwise (expired): R then tells c1 REVOKED.
func (m *foModel) adoptAtOwner(s *foState, c int8, tok, ticket uint8) (uint8, uint8, *failure) {
	var f *failure
	if s.bVer == 2 && !m.cfg.noOwnerCheck {
		f = fail(PropFailoverOneOwner, "node A handles R's re-assertion of c%d's claim after node B took the name over", c+1)
	}
	nd := &s.n[nodeA]
	r := &nd.rec[c]
	switch {
	case tok != 0 && r.st == frecHeld && r.tok == tok:
		r.seen = 0
		return frHeld, tok, f
	case tok == 0 && r.st == frecQueued && r.ticket == ticket:
		r.seen = 0
		return frQueued, ticket, f
	case tok == 0 && r.st == frecHeld:
		// Promoted while the upstream was broken, its PROMOTED lost
		// with it: adopted as held, with its new token (server/resume.go,
		// adopt), and R pushes PROMOTED.
		r.seen = 0
		return frHeld, r.tok, f
	case tok != 0 && m.cfg.Mutation == MutFoRelayAdoptExpired:
		// The mutation: the claim is installed with its old token
		// whatever A's record says.
		if r.st == frecQueued {
			nd.dequeue(c)
		}
		*r = foRec{st: frecHeld, tok: tok}
		return frHeld, tok, f
	}
	return frGone, 0, cmp(f, m.kept(s, nodeA, c, "refuses the re-assertion of", true))
}

// relayEnd: R ends the relayed client's session.
func (m *foModel) relayEnd(s *foState, what string) *failure {
	var f *failure
	if m.believes(s, m.rc) && !m.cfg.noKeptCheck {
		f = fail(PropFailoverKept, "node R %s c%d while c%d still believes it holds its claim (anchor %d ticks ago)",
			what, m.rc+1, m.rc+1, s.c[m.rc].anc)
	}
	s.r.cst, s.r.uo, s.r.to, s.r.us, s.r.idle = frcNone, fmNone, 0, 0, 0
	return f
}

// relayTick advances R's counters; a session end R's clock must have
// reached takes effect (a give-up does in relayNorm).
func (m *foModel) relayTick(s *foState) *failure {
	r := &s.r
	if r.dead {
		return nil
	}
	if r.cst == frcPending || r.cst == frcLive || r.cst == frcMoving {
		r.idle = min(r.idle+1, m.sxMax)
		if r.idle >= m.sxMax {
			return m.relayEnd(s, "must have ended the session of")
		}
	}
	g := m.gMax[m.rc]
	r.conf = min(r.conf+1, g)
	if r.uo != fmNone {
		r.us = min(r.us+1, g)
	}
	if r.cst == frcMoving {
		r.mv = min(r.mv+1, m.rgMax)
	}
	return nil
}

// relayNorm applies what must hold in every state: R has no read request
// when c1 has none outstanding, and a moving claim with nothing in flight
// whose give-up R's clock must have reached is given up.
func (m *foModel) relayNorm(s *foState) {
	r := &s.r
	if s.c[m.rc].out == fmNone {
		r.rd = false
	}
	if r.cst == frcMoving && r.uo == fmNone && r.mv >= m.rgMax {
		r.cst = frcGone
	}
	if r.cst == frcNone || r.cst == frcGone {
		r.mv = 0
	}
	if r.cst == frcNone || r.cst == frcGone {
		r.idle = 0
	}
	if r.cst != frcLive && !(r.cst == frcMoving && m.cfg.relayBelief()) {
		r.conf = 0 // not looked at: only a live claim's upstream answers
	}
}

func (m *foModel) appendRelayKey(b []byte, s *foState) []byte {
	r := &s.r
	i16 := func(v int16) { b = append(b, byte(v), byte(v>>8)) }
	b = append(b, r.ver, r.cst, byte(r.on), r.tok, r.ticket, r.uo, byte(r.to))
	i16(r.conf)
	i16(r.us)
	i16(r.mv)
	b = append(b, b2u(r.rd))
	i16(r.idle)
	b = append(b, b2u(r.dead), b2u(r.plain))
	return b
}

func (m *foModel) describeRelay(s *foState, st foStep, at string) string {
	r := &s.r
	n := "node " + foNodeName(st.n)
	c1 := fmt.Sprintf("c%d", m.rc+1)
	cs := strings.NewReplacer("c1", c1)
	return cs.Replace(m.describeRelay1(s, st, at, r, n))
}

func (m *foModel) describeRelay1(s *foState, st foStep, at string, r *foRelay, n string) string {
	req := [...]string{"", "CLAIM", "HEARTBEAT", "RE-ASSERT", "RELEASE"}
	up := [...]string{"", "CLAIM", "PING", "RE-ASSERT", "RELEASE"}
	switch st.kind {
	case fsRRead:
		switch {
		case st.what == fmClaim:
			return at + fmt.Sprintf("node R reads c1's CLAIM and forwards it upstream to %s", n)
		case st.what == fmRelease && st.val != 0:
			return at + fmt.Sprintf("node R reads c1's RELEASE and forwards it to %s, which releases", n)
		case st.what == fmRelease:
			return at + "node R reads c1's RELEASE and forgets the claim (the owner's record expires)"
		}
		return at + fmt.Sprintf("node R reads c1's HEARTBEAT (sent %d ticks ago)", s.c[m.rc].sent)
	case fsRAnswer:
		a := "?"
		switch st.val {
		case frGranted:
			a = fmt.Sprintf("GRANTED %s", foTok(st.tok))
		case frQueued:
			a = fmt.Sprintf("QUEUED (ticket %d)", st.tok)
		case frHeld:
			a = "PONG (every claim held)"
		case frGone:
			a = "REVOKED (the claim is gone)"
		case frRetry:
			a = "REFUSED 0x03 (its upstream ended)"
		}
		conf := fmt.Sprintf("upstream confirmed at a send %d ticks ago, read %d ticks ago", r.conf, r.idle)
		if r.cst != frcLive {
			conf = "its claim is not live at R"
		}
		return at + fmt.Sprintf("node R answers c1's %s: %s (%s); c1 reads it", req[st.what], a, conf)
	case fsRPing:
		return at + fmt.Sprintf("node R sends PING upstream to %s for c1's heartbeat", n)
	case fsRUp:
		res := map[uint8]string{frGranted: "granted", frQueued: "queued", frHeld: "held", frGone: "no such claim / refused", frRetry: "retry"}[st.val]
		if st.n == nodeA && st.what == fmReassert {
			res = map[uint8]string{frQueued: "adopted into the new upstream, queued at its place",
				frHeld: "adopted into the new upstream, same token", frGone: "refused: it no longer keeps that claim"}[st.val]
		}
		return at + fmt.Sprintf("%s reads R's %s (sent %d ticks ago) about c1's claim: %s; R reads the answer", n, up[st.what], r.us, res)
	case fsRFail:
		if st.what != fmNone {
			return at + fmt.Sprintf("R's upstream to %s ends with its %s in flight", n, up[st.what])
		}
		return at + fmt.Sprintf("R's upstream to %s ends (the owner is lost to R): c1's claim moves", n)
	case fsRLearn:
		return at + "node R learns ring 2 (owner B)"
	case fsRReassert:
		return at + fmt.Sprintf("node R re-asserts c1's claim (token %s, ticket %d, ring %d) at %s (moving for %d ticks)", foTok(st.tok), r.ticket, st.val, n, r.mv)
	case fsRGiveUp:
		return at + fmt.Sprintf("node R's clock may have counted L/2 since c1's claim began moving (%d ticks ago): it gives it up, REVOKED to c1", r.mv)
	case fsRRevoked:
		return at + "c1 reads REVOKED from node R: its claim is over"
	case fsRDie, fsCReassert:
		return m.describeRelayFail(s, st, at)
	case fsRExpire:
		return at + fmt.Sprintf("node R has not heard from c1 for %d ticks (its clock may be past the lease): it ends c1's session and closes its upstream", r.idle)
	}
	return "?"
}
