package modelcheck

import (
	"slices"
	"testing"
)

// rrBehaviours are the behaviours the explorations must reach, so that
// the properties do not hold for lack of them; rrProbe marks those that a
// transition shows. The last two need c3 (Second).
var rrBehaviours = [...]string{
	"O moves c1's lock from u for a re-assertion c1 waits for while it believes",
	"O answers c1's PING through Y (PONG)",
	"O drops c1's lock on a session at Y once c1 gave up (c2 may then be granted)",
	"c1's re-assertion is answered \"conflict\" naming the cut-off session, then done naming the other",
	"c1's re-assertion naming its cut-off session is done, the lock moved there by the late first re-assertion",
	"a re-assertion c1 stopped waiting for moves its lock between c1's sessions while c1 believes",
	"the three-way race: c1's second name is answered \"conflict\", its late first re-assertion having moved the lock to the first",
	"c1 re-asserts on a new session naming the session at Y its lock was confirmed on",
	"a late re-assertion reaches O while c1 is confirmed on a newer session: \"conflict\", the lock stays",
	"O installs c4's re-assertion (c1's lock gone)",
	"O refuses c4's re-assertion while c1's lock is kept",
	"O reads a request of R's after R died and keeps u's lock",
	"O grants a LOCK that R relayed before it died (nobody believes in it)",
	"c1 re-asserts after its connection to R broke while R lives",
	"c1 gives up while its re-assertion is on its way",
	"O grants c3 after it dropped c1's lock (Second)",
	"O moves c3's lock for c3's re-assertion (Second)",
}

// rrNever are behaviours the design excludes: findings of
// TestRangeResumeModel. The second was reached with three sessions at Y
// while the client named only its latest cut-off session and home
// (MutRrNameLatestOnly); PropRrNamed now checks it.
var rrNever = [...]string{
	"O installs (not moves) a re-assertion whose client waits for it and believes",
	"c1 re-asserts while its lock is in a session it does not name",
}

// rrThird are the behaviours an exploration with three sessions at Y
// must reach besides rrBehaviours (TestRangeResumeThirdSession).
var rrThird = [...]string{
	"c1 re-asserts on x while its lock is in v, moved there by the late re-assertion cut off on v",
	"c1, on x, is answered \"conflict\" naming w, then done naming v, where its late re-assertion from v moved the lock",
}

// rrProbeThird marks the behaviours of rrThird.
func rrProbeThird(reached []bool) func(s *rrState, st rrStep) {
	return func(s *rrState, st rrStep) {
		p := &s.p[st.i]
		if st.i != 0 || !p.believes() || p.cur != snX || p.home != snU {
			return
		}
		// With home u, the lock is in v only by a re-assertion on v that
		// c1 never read the answer to (one it read would have made v
		// home): its late one.
		if p.reasserting() && p.lk == snV {
			reached[0] = true
		}
		if st.kind == rrRead && p.up == rqReassert && st.what == rrAdopted && p.nm == snV && p.lk == snV {
			reached[1] = true
		}
	}
}

func rrProbe(m *rrModel, reached, never []bool) func(s *rrState, st rrStep) {
	return func(s *rrState, st rrStep) {
		p := &s.p[st.i]
		if st.kind == rrRead && p.up == rqReassert && st.what == rrInstalled && p.believes() {
			never[0] = true
		}
		if st.i == 0 && p.believes() && p.reasserting() && p.lk != snNone && p.lk != p.cur && !slices.Contains(m.names(p, p.cur), p.lk) {
			never[1] = true
		}
		live := st.kind == rrRead && p.up == rqReassert
		late := st.kind == rrReadOld && p.old == rqReassert
		switch {
		case live && st.what == rrAdopted && p.nm == p.home && len(m.names(p, p.cur)) > 1 && st.i == 0:
			reached[3] = true
		case live && st.what == rrAdopted && p.lk == snU && p.believes() && st.i == 0:
			reached[0] = true
		case st.kind == rrRead && p.up == rqPing && p.at == atY && st.what == rrPong:
			reached[1] = true
		case st.kind == rrExpire && st.i == 0 && p.lk != snU && !p.believes():
			reached[2] = true
		case live && st.what == rrAdopted && p.nm != p.home && p.lk == p.nm && p.nm != snU && st.i == 0:
			reached[4] = true
		case late && st.what == rrAdopted && p.lk != p.oldS && p.believes() && st.i == 0:
			reached[5] = true
		case live && st.what == rrRefused && p.nm == p.home && p.lk == m.names(p, p.cur)[0] && p.lk != p.home && st.i == 0:
			reached[6] = true
		case st.kind == rrSend && st.what == rqReassert && p.at == atLost && p.home == snV && st.i == 0:
			reached[7] = true
		case late && st.what == rrRefused && p.believes() && p.cut == 0 && st.i == 0:
			reached[8] = true
		case st.kind == rrC4Read && st.what == rrInstalled:
			reached[9] = true
		case st.kind == rrC4Read && st.what == rrRefused && s.p[0].lk != snNone:
			reached[10] = true
		case (st.kind == rrRead || st.kind == rrReadOld) && s.rDead && p.lk == snU && (st.what == rrPong || p.at == atLost):
			reached[11] = true
		case st.kind == rrRead && p.up == rqLock && s.rDead && st.what == rrGranted:
			reached[12] = true
		case st.kind == rrSend && st.what == rqReassert && p.at == atLost && p.cur == snU && !s.rDead:
			reached[13] = true
		case st.kind == rrGiveUp && p.up == rqReassert:
			reached[14] = true
		case st.kind == rrRead && st.i == 1 && p.up == rqLock && st.what == rrGranted && s.p[0].c == rfDone:
			reached[15] = true
		case live && st.i == 1 && st.what == rrAdopted && p.lk != p.cur:
			reached[16] = true
		}
	}
}

// checkRangeResumeReaching checks cfg, which must hold, and that its
// exploration reaches the behaviours (those for c3 only with Second) and
// never the excluded ones.
func checkRangeResumeReaching(t *testing.T, cfg RangeResumeConfig, states int) {
	t.Helper()
	reached, never := make([]bool, len(rrBehaviours)), make([]bool, len(rrNever))
	m := newRrModel(cfg)
	rep := m.check(rrProbe(m, reached, never))
	t.Log(rep)
	if rep.Violation != nil {
		t.Error(rep.Violation)
	}
	// Pinned so that a change in the model is noticed (docs/design/2026-12-07-verification-models-cluster.md
	// quotes it).
	if rep.States != states {
		t.Errorf("%s: %d states, docs/design/2026-12-07-verification-models-cluster.md says %d", cfg, rep.States, states)
	}
	if !cfg.Second {
		reached = reached[:len(reached)-2]
	}
	expectReached(t, reached, rrBehaviours[:], never, rrNever[:])
}

// TestRangeResumeModel checks the configurations always checked (c1
// alone, and with c3), and with leases of 80 units instead of 40 (finer
// time; skipped under -race or -short).
//
// Findings about the rules as built: O never installs a re-assertion
// whose client waits for it and still believes: while c1 believes, O
// keeps its lock (L on O's slowest clock after a read that is not before
// c1's anchor outlasts 0.8·L on c1's fastest) in one of c1's sessions,
// and that is one of the two c1 names, so a live re-assertion moves it.
// The install path reaches only re-assertions nobody waits for or
// believes in.
func TestRangeResumeModel(t *testing.T) {
	t.Parallel()
	for i, states := range []int{5802, 154289} {
		checkRangeResumeReaching(t, DefaultRangeResumeConfigs()[i], states)
	}
	if raceEnabled || testing.Short() {
		return
	}
	for i, states := range []int{27126, 945389} {
		cfg := DefaultRangeResumeConfigs()[i]
		cfg.Lease = 80
		checkRangeResumeReaching(t, cfg, states)
	}
}

// TestRangeResumeThirdSession: with a third session at Y, c1's lock can
// be moved by a late re-assertion into a session cut off two sessions
// back (v, while c1 re-asserts on x, w cut off too). Naming only the
// latest cut-off session and home (w, u: MutRrNameLatestOnly) lost it
// to c1 until its give-up; naming every cut-off session since the lock
// was confirmed, in turn (w, v, u), finds it: the exploration reaches
// c1 on x answered done naming v after the late re-assertion moved the
// lock there, holds every property (PropRrNamed among them) and the
// behaviours of the default configurations.
func TestRangeResumeThirdSession(t *testing.T) {
	t.Parallel()
	cfg := DefaultRangeResumeConfigs()[0]
	cfg.Sessions = 3
	reached, never := make([]bool, len(rrBehaviours)), make([]bool, len(rrNever))
	third := make([]bool, len(rrThird))
	m := newRrModel(cfg)
	probe, probeThird := rrProbe(m, reached, never), rrProbeThird(third)
	rep := m.check(func(s *rrState, st rrStep) {
		probe(s, st)
		probeThird(s, st)
	})
	t.Log(rep)
	if rep.Violation != nil {
		t.Error(rep.Violation)
	}
	if rep.States != 17348 {
		t.Errorf("%s: %d states, docs/design/2026-12-07-verification-models-cluster.md says %d", cfg, rep.States, 17348)
	}
	expectReached(t, append(reached[:len(reached)-2], third...), append(rrBehaviours[:len(rrBehaviours)-2:len(rrBehaviours)-2], rrThird[:]...), never, rrNever[:])
}

// The checker must be able to fail: each mutation drops one rule and must
// be caught.
func TestRangeResumeMutations(t *testing.T) {
	t.Parallel()
	tested := map[string]bool{}
	defer func() {
		for _, mut := range RangeResumeMutations {
			if !tested[mut] {
				t.Errorf("mutation %s is not tested", mut)
			}
		}
	}()
	for _, tc := range []struct {
		mut  string
		prop string
		n    int    // length of the shortest counterexample
		says string // in the trace
	}{
		{MutRrDropAtOnce, PropRrKept, 4, "O notices u ended and drops c1's lock at once"},
		{MutRrAdoptAnySecret, PropRrAdopt, 4, "with a wrong secret"},
		{MutRrAnswerEarly, PropRrNoSteal, 4, "Y answers it at once, before O did"},
		{MutRrKeepShort, PropRrKept, 5, "drops c1's lock"},
		{MutRrNameHomeOnly, PropRrNamed, 7, "c1 re-asserts on w naming u in turn, but O holds its lock on v"},
		{MutRrNameOnce, PropRrKept, 10, "no other session to name"},
		{MutRrReleaseOnBreak, PropRrKept, 3, "releases c1's lock at O"},
		{MutRrNameLatestOnly, PropRrNamed, 9, "c1 re-asserts on x naming w, u in turn, but O holds its lock on v"},
	} {
		tested[tc.mut] = true
		if tc.mut == MutRrNameLatestOnly {
			continue
		}
		for _, cfg := range DefaultRangeResumeConfigs() {
			cfg.Mutation = tc.mut
			t.Run(cfg.String(), func(t *testing.T) {
				expectCounterexample(t, CheckRangeResume(cfg), tc.prop, tc.n, tc.says)
			})
		}
	}
	// Naming home only: with the check of PropRrNamed out of the way,
	// c1 is then refused while it believes.
	t.Run("name-home-only, refused", func(t *testing.T) {
		cfg := DefaultRangeResumeConfigs()[0]
		cfg.Mutation = MutRrNameHomeOnly
		m := newRrModel(cfg)
		m.noNamed = true
		expectCounterexample(t, m.check(nil), PropRrKept, 8, "no other session to name")
	})
	// Naming the latest cut-off session and home only is the rule itself
	// with two sessions at Y (the same exploration); with three, a late
	// re-assertion from v moves the lock out of what c1 names on x (the
	// liveness gap the model found in that rule).
	for _, cfg := range DefaultRangeResumeConfigs() {
		cfg.Mutation = MutRrNameLatestOnly
		if !cfg.Second || !raceEnabled && !testing.Short() {
			t.Run(cfg.String(), func(t *testing.T) {
				rep := CheckRangeResume(cfg)
				t.Log(rep)
				want := 5802
				if cfg.Second {
					want = 154289
				}
				if rep.Violation != nil || rep.States != want {
					t.Errorf("violation %v, %d states, want none and %d", rep.Violation, rep.States, want)
				}
			})
		}
		cfg.Sessions = 3
		t.Run(cfg.String(), func(t *testing.T) {
			expectCounterexample(t, CheckRangeResume(cfg), PropRrNamed, 9, "c1 re-asserts on x naming w, u in turn, but O holds its lock on v")
		})
	}
	// Y answering early breaks the one-holder property too, once the
	// checks of PropRrKept and PropRrNoSteal (which it breaks first) are
	// out of the way: c1 believes on a re-anchoring Y made up while c2
	// holds.
	t.Run("answer-early, one holder", func(t *testing.T) {
		cfg := DefaultRangeResumeConfigs()[0]
		cfg.Mutation = MutRrAnswerEarly
		m := newRrModel(cfg)
		m.noKept = true
		expectCounterexample(t, m.check(nil), PropClusterRangesOneHolder, 10, "c2 asks O for a conflicting range lock: granted")
	})
	// A re-assertion after the give-up is safe: O moves only a lock it
	// still keeps (nobody else holds one then) and installs only when no
	// other session holds one, so the re-anchored client is alone, as if
	// it had sent a LOCK. The pessimism rule carries it (the anchor is
	// the send, before O's read). The test fails if that changes.
	tested[MutRrReassertUnbelieved] = true
	for _, cfg := range DefaultRangeResumeConfigs() {
		if cfg.Second && (raceEnabled || testing.Short()) {
			continue // too slow under -race
		}
		cfg.Mutation = MutRrReassertUnbelieved
		believed := false
		rep := checkRangeResume(cfg, func(s *rrState, st rrStep) {
			p := &s.p[st.i]
			if st.kind == rrRead && p.up == rqReassert && p.c == rfGaveUp && (st.what == rrAdopted || st.what == rrInstalled) {
				believed = true
			}
		})
		t.Log(rep)
		if rep.Violation != nil || !believed {
			t.Errorf("%s: violation %v, a client believed again after its give-up: %v", cfg, rep.Violation, believed)
		}
	}
}

// With a drift of ρ = 0.2, above the 1/9 at which the client rule itself
// fails, O's L no longer outlasts c1's 0.8 × L: the model is not blind to
// drift.
func TestRangeResumeDrift(t *testing.T) {
	t.Parallel()
	cfg := DefaultRangeResumeConfigs()[0]
	cfg.Drift = 2
	expectCounterexample(t, CheckRangeResume(cfg), PropRrKept, 7, "drops c1's range lock while c1 still believes")
}
