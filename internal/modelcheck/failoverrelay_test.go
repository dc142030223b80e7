package modelcheck

import "testing"

// relayConfig is the relayed configuration checked: the default
// failover configuration with c2 (lease 20) a client of the relaying
// node R.
func relayConfig() FailoverConfig {
	cfg := DefaultFailoverConfig()
	cfg.Relay = 2
	return cfg
}

// TestFailoverRelay checks the relayed configuration (R re-asserts only
// while its client may still believe, at A while its ring names A, where
// A adopts only a claim it still keeps) and, on the same exploration,
// that it holds not for lack of behaviour.
func TestFailoverRelay(t *testing.T) {
	t.Parallel()
	if raceEnabled || testing.Short() {
		t.Skip("skipped under -race or -short")
	}
	behaviours := [...]string{
		"R re-asserts the claim on B while its client believes: accepted with the old token",
		"R answers a heartbeat once B has confirmed the re-assertion, and the client believes",
		"R pings A for a waiting heartbeat", "R gives a moving claim up", "the client reads REVOKED while it believes",
		"R ends the session of a silent client", "B promotes the relayed claim re-queued with A's ticket",
		"B accepts a re-assertion of R's whose upstream ended",
		"A accepts R's re-assertion after a transient break, with the old token, while the client believes",
		"A adopts R's re-assertion of a queued claim at its place",
		"A refuses R's re-assertion of a claim it no longer keeps",
		"A adopts R's re-assertion of a queued claim it promoted while the upstream was broken, as held",
	}
	var reached [len(behaviours)]bool
	rc := int8(1)
	rep := checkFailover(relayConfig(), func(s *foState, st foStep) {
		switch {
		case st.kind == fsRUp && st.n == nodeB && st.what == fmReassert && st.val == frHeld && s.c[rc].st == fcHeld:
			reached[0] = true
		case st.kind == fsRAnswer && st.val == frHeld && s.r.on == nodeB && s.c[rc].st == fcHeld:
			reached[1] = true
		case st.kind == fsRPing && st.n == nodeA:
			reached[2] = true
		case st.kind == fsRGiveUp:
			reached[3] = true
		case st.kind == fsRRevoked && s.c[rc].st == fcHeld:
			reached[4] = true
		case st.kind == fsRExpire:
			reached[5] = true
		case st.kind == fsPromote && st.n == nodeB && st.c == rc && s.n[nodeB].rec[rc].ticket != 0:
			reached[6] = true
		case st.kind == fsOrphan && st.c == rc && st.val == frHeld:
			reached[7] = true
		case st.kind == fsRUp && st.n == nodeA && st.what == fmReassert:
			switch {
			case st.val == frHeld && st.tok != 0 && st.tok == s.n[nodeA].rec[rc].tok && s.c[rc].st == fcHeld:
				reached[8] = true
			case st.val == frQueued && s.n[nodeA].rec[rc].ticket == s.r.ticket:
				reached[9] = true
			case st.val == frHeld && st.tok == 0 && s.n[nodeA].rec[rc].st == frecHeld:
				reached[11] = true
			case st.val == frGone:
				reached[10] = true
			}
		}
	})
	t.Log(rep)
	if rep.Violation != nil {
		t.Fatal(rep.Violation)
	}
	// Pinned so that a change in the model is noticed (docs/design/2026-12-07-verification-models-cluster.md
	// quotes it).
	if want := 4281786; rep.States != want {
		t.Errorf("%d states, docs/design/2026-12-07-verification-models-cluster.md says %d", rep.States, want)
	}
	for i, ok := range reached {
		if !ok {
			t.Errorf("never reached: %s", behaviours[i])
		}
	}
}

// TestFailoverRelayReassertUnbelieved: without the belief window (as
// the relay was built before the model found this), R re-asserts a claim
// its old owner may already have expired and granted anew (R re-asserts
// for L/2 after it noticed the loss, while A expires the claim a lease
// of R's silence on A's clock): B, warming up, accepts the older token,
// and the newer holder, who still believes, is refused. Its shortest
// counterexample is pinned (docs/verification.md).
func TestFailoverRelayReassertUnbelieved(t *testing.T) {
	t.Parallel()
	if raceEnabled || testing.Short() {
		t.Skip("skipped under -race or -short")
	}
	cfg := relayConfig()
	cfg.Mutation = MutFoRelayReassertUnbelieved
	expectCounterexample(t, CheckFailover(cfg), PropFailoverKept, 23,
		"node R re-asserts c2's claim (token (epoch 1, 1), ticket 0, ring 2) at node B")
}

// TestFailoverRelayAdoptExpired: A, still the owner, must adopt R's
// re-assertion after a transient break only if it still keeps that very
// claim. Adopting one it expired installs the old token beside the newer
// holder's; R's re-assertion of it at B then wins over the newer holder's,
// who is refused while it believes. (Only that: the relayed client gave
// up before A could expire its claim, so no two clients believe at once
// with the check turned off, 4,437,034 states by hand.) Its shortest
// counterexample is pinned (docs/verification.md).
func TestFailoverRelayAdoptExpired(t *testing.T) {
	t.Parallel()
	if raceEnabled || testing.Short() {
		t.Skip("skipped under -race or -short")
	}
	cfg := relayConfig()
	cfg.Mutation = MutFoRelayAdoptExpired
	expectCounterexample(t, CheckFailover(cfg), PropFailoverKept, 29,
		"node A reads R's RE-ASSERT (sent 1 ticks ago) about c2's claim: adopted into the new upstream, same token")
}

// The relay mutations that break its confirmation rules: each is caught
// first by a holder its node ends while it believes, and, without that
// check, by two believers.
func TestFailoverRelayMutations(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mut   string
		n, n2 int    // shortest counterexamples: kept; two believers
		says  string // in the trace
	}{
		{MutFoRelayUnconfirmed, 10, 14, "node R answers c2's HEARTBEAT: PONG (every claim held) (upstream confirmed at a send 1 ticks ago, read 0 ticks ago)"},
		{MutFoRelayAnswersAfterGiveUp, 12, 16, "it gives it up, REVOKED to c2"},
	} {
		t.Run(tc.mut, func(t *testing.T) {
			t.Parallel()
			cfg := relayConfig()
			cfg.Mutation = tc.mut
			expectCounterexample(t, CheckFailover(cfg), PropFailoverKept, tc.n, tc.says)
			cfg.noKeptCheck = true
			expectCounterexample(t, CheckFailover(cfg), PropFailoverOneBeliever, tc.n2, tc.says)
		})
	}
}

func TestFailoverRelayConfigValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []FailoverConfig{
		{Clients: 2, Lives: 1, Unit: 10, Drift: 1, Lease: 40, ShortLease: 20, TSelf: 20, T: 25, Relay: 3},
		{Clients: 2, Lives: 1, Unit: 10, Drift: 1, Lease: 40, ShortLease: 20, TSelf: 20, T: 25, Relay: -1},
		{Clients: 2, Lives: 1, Unit: 10, Drift: 1, Lease: 40, ShortLease: 20, TSelf: 20, T: 25, Mutation: MutFoRelayUnconfirmed},
		{Clients: 2, Lives: 1, Unit: 10, Drift: 1, Lease: 40, ShortLease: 20, TSelf: 20, T: 25, RelayFails: true},
		{Clients: 2, Lives: 1, Unit: 10, Drift: 1, Lease: 40, ShortLease: 20, TSelf: 20, T: 25, Relay: 2, Mutation: MutFoRelayDeathReleases},
	} {
		if c.Validate() == nil {
			t.Errorf("%+v: valid", c)
		}
	}
	for _, c := range []FailoverConfig{relayConfig(), relayFailsConfig()} {
		if err := c.Validate(); err != nil {
			t.Error(err)
		}
	}
}

// relayFailsConfig is relayConfig with the relaying node's failure.
func relayFailsConfig() FailoverConfig {
	cfg := relayConfig()
	cfg.RelayFails = true
	return cfg
}

// TestFailoverRelayFails checks the relayed configuration in which R may
// die (the owner keeps the relayed claim for the lease; a resumable
// client re-asserts it at the owner, a plain one cannot) and, on the
// same exploration, that it holds not for lack of behaviour.
func TestFailoverRelayFails(t *testing.T) {
	t.Parallel()
	if raceEnabled || testing.Short() {
		t.Skip("skipped under -race or -short")
	}
	behaviours := [...]string{
		"R dies while its resumable client believes",
		"R dies while its plain client believes",
		"A adopts the client's re-assertion after R died, with the old token, while the client believes",
		"A adopts the client's re-assertion of a queued claim after R died, at its place",
		"A adopts the client's re-assertion of a queued claim it promoted after R died, as held",
		"the client, adopted at A after R died, has a heartbeat answered by A while it believes",
		"B accepts the client's re-assertion after R died, with the old token, while the client believes",
		"B takes the client's re-queue with A's ticket after R died",
		"R dies with its re-assertion to B in flight",
		"R dies while the claim moves",
		"R dies while the client's CLAIM waits, granted at A",
		"A expires the claim of the plain client after R died",
		"A expires the claim of the resumable client after R died, never re-asserted",
		"A promotes the other client after the claim of R's dead client expired",
	}
	var reached [len(behaviours)]bool
	rc := int8(1)
	rep := checkFailover(relayFailsConfig(), func(s *foState, st foStep) {
		cl := &s.c[rc]
		switch {
		case st.kind == fsRDie && cl.st == fcHeld:
			reached[st.val] = true // 0: resumable, 1: plain
			if s.r.uo == fmReassert && s.r.to == nodeB && s.r.tok != 0 {
				reached[8] = true
			}
			if s.r.cst == frcMoving {
				reached[9] = true
			}
		case st.kind == fsRDie && cl.st == fcPending && s.r.cst == frcLive && s.n[nodeA].rec[rc].st == frecHeld:
			reached[10] = true
		case st.kind == fsDeliver && st.c == rc && st.n == nodeA && st.what == fmReassert:
			switch {
			case st.val == frHeld && cl.st == fcHeld && cl.tok == st.tok:
				reached[2] = true
			case st.val == frQueued && cl.st == fcQueued:
				reached[3] = true
			case st.val == frHeld && cl.st == fcQueued:
				reached[4] = true
			}
		case st.kind == fsDeliver && st.c == rc && st.n == nodeA && st.what == fmHeartbeat && st.val == frHeld && s.r.dead && cl.st == fcHeld:
			reached[5] = true
		case st.kind == fsDeliver && st.c == rc && st.n == nodeB && s.r.dead && cl.at == nodeR:
			switch {
			case st.what == fmReassert && st.val == frHeld && cl.st == fcHeld:
				reached[6] = true
			case st.what == fmClaim && cl.mtick != 0 && (st.val == frQueued || st.val == frGranted):
				reached[7] = true
			}
		case st.kind == fsExpire && st.n == nodeA && st.c == rc && s.r.dead && st.what == frecHeld:
			if s.r.plain {
				reached[11] = true
			} else if cl.at == nodeR || cl.st == fcDone {
				reached[12] = true
			}
		case st.kind == fsPromote && st.n == nodeA && st.c != rc && s.r.dead && s.n[nodeA].rec[rc].st == frecNone:
			reached[13] = true
		}
	})
	t.Log(rep)
	if rep.Violation != nil {
		t.Fatal(rep.Violation)
	}
	// Pinned so that a change in the model is noticed (docs/design/2026-12-07-verification-models-cluster.md
	// quotes it).
	if want := 6343789; rep.States != want {
		t.Errorf("%d states, docs/design/2026-12-07-verification-models-cluster.md says %d", rep.States, want)
	}
	for i, ok := range reached {
		if !ok {
			t.Errorf("never reached: %s", behaviours[i])
		}
	}
}

// TestFailoverRelayDeathReleases: an owner that ends a relayed session's
// claims at once when its upstream breaks (hop header version 2, before
// the owner kept them) ends the claim of a client whose relaying node
// died while the client still believes; without that check, it grants the
// name to the next client while the first still believes.
func TestFailoverRelayDeathReleases(t *testing.T) {
	t.Parallel()
	cfg := relayFailsConfig()
	cfg.Mutation = MutFoRelayDeathReleases
	expectCounterexample(t, CheckFailover(cfg), PropFailoverKept, 5, "node R dies")
	cfg.noKeptCheck = true
	expectCounterexample(t, CheckFailover(cfg), PropFailoverOneBeliever, 9, "node R dies: its upstream to the owner and c2's connection to R break; node A ends c2's claim at once")
}

// TestFailoverRelayForeignSecret: R's upstream must carry the hash of its
// client's own secret. With one that the client does not hold, the owner
// keeps the claim when R dies but refuses the client's re-assertion of it
// while the client believes.
func TestFailoverRelayForeignSecret(t *testing.T) {
	t.Parallel()
	cfg := relayFailsConfig()
	cfg.Mutation = MutFoRelayForeignSecret
	expectCounterexample(t, CheckFailover(cfg), PropFailoverKept, 7,
		"node A reads c2's RE-ASSERT (sent 0 ticks ago): refused 0x04")
}
