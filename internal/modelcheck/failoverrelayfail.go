package modelcheck

import "fmt"

// The relaying node's failure (FailoverConfig.RelayFails, with Relay):
// node R may die at any moment while it or its client c1 (c<Relay> in
// the traces) has a claim, and never comes back (server/relay2.go,
// server/resume.go; docs/design/2026-12-07-cluster-relay.md "Resumable sessions and
// re-assertion in a cluster"). As built:
//
//   - Every upstream R opens carries hop header version 3: for a
//     resumable client session the hash of the client's secret, for a
//     plain one the hash of a secret nobody holds. When R dies its
//     upstream breaks without R having released the claim, and the owner
//     keeps the claim, held or queued, without promoting anyone in its
//     place, until its clock has counted the lease since it last heard
//     from R on that upstream (the model's kept record: the owner that
//     holds it, A or B, expires it then, as any silent client's). Nothing
//     R does reaches anyone afterwards: a request R had in flight upstream
//     is lost (one that the owner reads before R dies is a step of its
//     own; one read later only refreshes the owner's record of a claim it
//     keeps, or grants a claim nobody waits for, as a late heartbeat or
//     claim does), except a re-assertion R wrote to B, which B may still
//     read (as when the upstream ends, failoverrelay.go). c1's request to
//     R is lost, and so is every answer R had not sent (its REVOKED too).
//   - c1's connection to R breaks at once (noticing later only delays
//     what follows, all of it optional). A CLAIM c1 was waiting for is
//     over (its client's claim call fails; a claim the owner granted for
//     it expires there). A held or queued c1 then either (its session at
//     R was plain) can do nothing but believe until its own give-up rule
//     ends its claim, or (resumable, the Go client's default on a
//     cluster) re-asserts it with its own secret, R's node and session
//     id, its token (0 and A's queue ticket for a queued claim) and the
//     ring it knows, at the name's owner by its ring, as a client that
//     connects to owners directly does (here it reaches the owner
//     itself; the server relays it there from whatever node c1 reaches):
//     while its ring names A, at A, which adopts the claim from R's kept
//     upstream session (same token, same queue place; a queued claim it
//     promoted meanwhile as held, with its new token) iff it still keeps
//     that very claim (adoptAtOwner, as for R's own re-assertion after a
//     transient break) and refuses it 0x04 otherwise; at B at any moment
//     (B's take-over path, as for a direct client: accepted with the old
//     token when nothing conflicts, a queued claim re-queued with A's
//     ticket, a ring named too old answered with the new one). Once
//     adopted at A, c1 is a direct client of A (heartbeats, and the
//     re-assertion at B when it loses A). Whether c1's session was
//     resumable is chosen when R dies: until then R and the owner treat
//     both alike.
//   - R's death may combine with A's failure: no restriction is needed
//     to keep the state space in bounds.
//
// Not modelled: c1 reaching the owner through another relaying node (the
// owner adopts the same way, into that node's upstream); a re-assertion
// of c1's at A that A reads after c1 stopped waiting for it (A adopts
// the claim into that broken session and keeps it for the lease from
// then; c1's next re-assertion names that session first, v2 client
// obligation 9 in docs/protocol-v2-client.md, and is adopted as here; after c1's
// give-up A holds the name longer for nobody); c1's connection to R
// breaking while R lives (R then re-asserts too, and the second of the
// two re-assertions of one token finds the claim in the other's
// session); c1
// claiming anew afterwards (one claim per client in the configurations
// checked); and R coming back.

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
