package testkit

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/batonlock/baton/protocol"
)

// token is the fencing token the fake server grants: of the size a real
// server's tokens have (unix seconds << 20), below 2^53 so that a
// JavaScript number holds it.
const token uint64 = 1782579200000001

// raceTol bounds how far apart the kit observes two things the client
// did in one order: the adapter's stdout line (a pipe) and the close of
// its connection (a loopback socket) are both read by goroutines of this
// process, so only the scheduler, not a network, separates them: half
// the tolerance, which absorbs the same scheduling delays.
func (k *kit) raceTol() time.Duration { return k.tol / 2 }

// Session ids and secrets of the fake server's sessions.
var (
	secret1 = [protocol.SecretLen]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	secret2 = [protocol.SecretLen]byte{16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1}
)

const (
	session1 uint64 = 41
	session2 uint64 = 42
)

func scenarios() []Scenario {
	return []Scenario{
		{Name: "anchor-send-time", run: anchorSendTime,
			Checks: "the anchor is the CLAIM's send time: GRANTED is delayed by L/2, then nothing is answered; lost must come by the CLAIM's arrival + 0.8·L, not by GRANTED's arrival + 0.8·L"},
		{Name: "silent-after-grant", run: silentAfterGrant,
			Checks: "no claim is believed past anchor + 0.8·L without an answer: GRANTED at once, then the server answers nothing; lost must come by the CLAIM's arrival + 0.8·L"},
		{Name: "close-after-told", run: closeAfterTold,
			Checks: "the connection is not closed before the work was told: after a give-up, lost must reach the kit no later than the client's close, the close must wait for the work to stop (when the adapter reports stopped), and come by anchor + L"},
		{Name: "stops-answering", run: stopsAnswering,
			Checks: "PINGs keep the session alive (no gap over L/4 between requests) and move the anchor; after the server stops answering, lost must come by the last answered request's arrival + 0.8·L"},
		{Name: "violation-unsolicited-answer", run: violation(false),
			Checks: "a frame that breaks the request/answer order (a PONG nobody asked for) loses every claim at once, and the client closes the connection"},
		{Name: "violation-promoted-held", run: violation(true),
			Checks: "a PROMOTED for a claim already held breaks the order of answers and pushes: every claim is lost at once, and the client closes the connection"},
		{Name: "revoked", run: revoked,
			Checks: "REVOKED ends the claim it names at once (an administrator's force-release)"},
		{Name: "session-error", run: sessionError,
			Checks: "a session-level ERROR (0x01, shutting down) ends every claim at once"},
		{Name: "revoked-crosses-release", run: revokedCrossesRelease,
			Checks: "a REVOKED that crosses the client's RELEASE (pushed before the RELEASED that answers it) is valid: the release completes and the session stays open"},
		{Name: "push-between-answers", run: pushBetweenAnswers,
			Checks: "a PROMOTED pushed while a PING is unanswered grants the queued claim, and the PONG after it still answers the PING"},
		{Name: "push-does-not-confirm", run: pushDoesNotConfirm,
			Checks: "a push is not an answer: PROMOTED at L/2 with nothing answered after the QUEUED; lost must come by the CLAIM's arrival + 0.8·L, not by the push's + 0.8·L"},
		{Name: "split-frames", run: splitFrames,
			Checks: "every server frame arrives one byte per TCP segment; the claim is held with the right token, kept, and released"},
		{Name: "coalesced-frames", run: coalescedFrames,
			Checks: "an answer and a push arrive in one TCP segment (QUEUED and PROMOTED together); the claim is held with the right token, kept, and released"},
		{Name: "v1-anchor-send-time", run: v1AnchorSendTime,
			Checks: "after a fallback to version 1 (the server answers the version 2 opening ERROR 0x10), the anchor is the ACQUIRE's send time: ACQUIRED is delayed by L/2, then nothing is answered; lost must come by the ACQUIRE's arrival + 0.8·L"},
		{Name: "v1-push-counting", run: v1PushCounting,
			Checks: "after a fallback to version 1, a queued client takes the first ACQUIRED after WAITING as the push while a HEARTBEAT is unanswered, and the next ACQUIRED as that HEARTBEAT's answer; the lock is held and kept"},
		{Name: "resumable-reassert", Resumable: true, run: resumableReassert,
			Checks: "a resumable client re-asserts after a broken connection: the kit resets the connection and the CLAIM with the re-assertion flag, the old token, session id and secret must arrive by anchor + 0.8·L, and the work is never told lost"},
	}
}

func (k *kit) deadline() time.Time {
	d, _ := k.ctx.Deadline()
	return d
}

// sleep waits d, or until the scenario's context ends.
func (k *kit) sleep(d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-k.ctx.Done():
		return k.ctx.Err()
	}
}

// open accepts the client and answers its HELLO with a plain (or, if
// asked, resumable) session.
func (k *kit) open() (*peer, *answerer, error) {
	p, err := k.accept(k.deadline())
	if err != nil {
		return nil, nil, err
	}
	if err := p.welcome(session1, secret1, whole); err != nil {
		return nil, nil, err
	}
	return p, &answerer{p: p, token: token}, nil
}

// untilClaim answers the requests before the first CLAIM and returns the
// CLAIM, unanswered.
func (a *answerer) untilClaim() (rx, error) {
	for {
		r, err := a.p.next(a.p.k.deadline())
		if err != nil {
			return rx{}, fmt.Errorf("no CLAIM from the client: %v", err)
		}
		if r.err != nil {
			return rx{}, fmt.Errorf("the connection ended before a CLAIM: %v", r.err)
		}
		if r.f.Type == protocol.TypeClaim {
			if r.f.Reassert() || r.f.Mode != protocol.ModeExclusive || r.f.NoWait() {
				return rx{}, fmt.Errorf("the adapter must claim exclusively and wait; its CLAIM is %v", r.f)
			}
			a.p.k.mark("server: CLAIM arrived", r.at)
			return r, nil
		}
		if err := a.answer(r); err != nil {
			return rx{}, err
		}
	}
}

// grantAtOnce opens the session and grants the first CLAIM at once.
func (k *kit) grantAtOnce() (*peer, *answerer, rx, error) {
	p, a, err := k.open()
	if err != nil {
		return nil, nil, rx{}, err
	}
	c, err := a.untilClaim()
	if err != nil {
		return nil, nil, rx{}, err
	}
	if err := a.answer(c); err != nil {
		return nil, nil, rx{}, err
	}
	return p, a, c, nil
}

// expectHeld waits until deadline for the adapter's held event and checks
// its token.
func (k *kit) expectHeld(deadline time.Time, want uint64) (event, error) {
	e, err := k.waitEvent(deadline, "held", "lost", "error")
	switch {
	case errors.Is(err, errTimeout):
		return e, fmt.Errorf("the adapter did not report held by %s", k.at(deadline))
	case err != nil:
		return e, err
	case e.Event != "held":
		return e, fmt.Errorf("the adapter reported %s before held (%s)", e.Event, e.raw)
	}
	got, err := e.token()
	if err != nil {
		return e, fmt.Errorf("bad token in %s: %v", e.raw, err)
	}
	if got != want {
		return e, fmt.Errorf("the adapter reported token %d, the server granted %d", got, want)
	}
	return e, nil
}

// expectLostBy waits for lost and fails unless it came by bound. why
// names the bound in the failure message; wrong, when not zero, is where
// a client with the bug the scenario looks for would report it.
func (k *kit) expectLostBy(bound time.Time, why string, wrong time.Time) (event, error) {
	// Wait past the bound, to say when lost came if it is late.
	wait := bound.Add(k.L)
	if wrong.After(bound) {
		wait = wrong.Add(k.L / 2)
	}
	e, err := k.waitEvent(wait, "lost", "error")
	switch {
	case errors.Is(err, errTimeout):
		return e, fmt.Errorf("the adapter did not report lost by %s (bound %s: %s)", k.at(wait), k.at(bound), why)
	case err != nil:
		return e, err
	case e.Event == "error":
		return e, fmt.Errorf("the adapter reported an error instead of lost: %s", e.Message)
	case e.at.After(bound):
		msg := fmt.Sprintf("lost came at %s, after the bound %s (%s), %.0fms late", k.at(e.at), k.at(bound), why, ms(e.at.Sub(bound)))
		if !wrong.IsZero() {
			msg += fmt.Sprintf("; a client with the bug this scenario looks for reports it near %s", k.at(wrong))
		}
		return e, errors.New(msg)
	}
	return e, nil
}

// noLoss fails if the adapter reported lost or an error.
func (k *kit) noLoss() error {
	if e, ok := k.find("lost"); ok {
		return fmt.Errorf("the adapter reported lost at %s (%s) though the server kept the claim", k.at(e.at), e.Reason)
	}
	if e, ok := k.find("error"); ok {
		return fmt.Errorf("the adapter reported an error at %s: %s", k.at(e.at), e.Message)
	}
	return nil
}

// anchorSendTime delays GRANTED by L/2, then goes silent.
func anchorSendTime(k *kit) error {
	p, a, err := k.open()
	if err != nil {
		return err
	}
	c, err := a.untilClaim()
	if err != nil {
		return err
	}
	// Requests behind the CLAIM wait with it: answers keep their order.
	if err := k.sleep(k.L / 2); err != nil {
		return err
	}
	tg, err := p.write(protocol.AppendGranted(nil, c.f.Claim, token), whole, "GRANTED, delayed by L/2; nothing more is answered")
	if err != nil {
		return err
	}
	bound := c.at.Add(k.L * 8 / 10).Add(k.tol)
	if _, err := k.expectHeld(bound, token); err != nil {
		return err
	}
	_, err = k.expectLostBy(bound, "CLAIM arrival + 0.8·L + tolerance", tg.Add(k.L*8/10))
	return err
}

// silentAfterGrant grants at once, then goes silent.
func silentAfterGrant(k *kit) error {
	_, a, _, err := k.grantAtOnce()
	if err != nil {
		return err
	}
	bound := a.lastAnswered.Add(k.L * 8 / 10).Add(k.tol)
	if _, err := k.expectHeld(bound, token); err != nil {
		return err
	}
	_, err = k.expectLostBy(bound, "CLAIM arrival + 0.8·L + tolerance", time.Time{})
	return err
}

// closeAfterTold grants at once, goes silent, and watches the order of
// the adapter's lost (and stopped) and the client's close.
func closeAfterTold(k *kit) error {
	p, a, _, err := k.grantAtOnce()
	if err != nil {
		return err
	}
	anchor := a.lastAnswered // the client's anchor is no later
	giveUp := anchor.Add(k.L * 8 / 10).Add(k.tol)
	if _, err := k.expectHeld(giveUp, token); err != nil {
		return err
	}
	// The order of lost and the close is judged before lost's lateness,
	// so that a client that closes first fails for that.
	lost, err := k.waitEvent(giveUp.Add(k.L), "lost", "error")
	switch {
	case errors.Is(err, errTimeout):
		return fmt.Errorf("the adapter did not report lost by %s (the bound is %s: CLAIM arrival + 0.8·L + tolerance)", k.at(giveUp.Add(k.L)), k.at(giveUp))
	case err != nil:
		return err
	case lost.Event == "error":
		return fmt.Errorf("the adapter reported an error instead of lost: %s", lost.Message)
	}
	closeBy := anchor.Add(k.L).Add(k.tol)
	select {
	case <-p.gone:
	case <-time.After(time.Until(closeBy)):
	case <-k.ctx.Done():
		return k.ctx.Err()
	}
	fin, ok := p.endedAt()
	if !ok {
		return fmt.Errorf("the connection was still open at %s, past anchor + L + tolerance: the rule closes it by anchor + L at the latest", k.at(closeBy))
	}
	if fin.After(closeBy) {
		return fmt.Errorf("the client closed at %s, after anchor + L + tolerance (%s)", k.at(fin), k.at(closeBy))
	}
	if lost.at.After(fin.Add(k.raceTol())) {
		return fmt.Errorf("the client closed the connection at %s, before the work was told (lost at %s, %.0fms later; the kit allows %v for the race between the adapter's output and the socket)",
			k.at(fin), k.at(lost.at), ms(lost.at.Sub(fin)), k.raceTol())
	}
	// An adapter that honours BATON_TESTKIT_STOP_MS keeps its work
	// running that long after lost and then prints stopped: the close
	// must come after that, or at the close-by bound (anchor + L).
	stopped, err := k.waitEvent(lost.at.Add(k.stopDelay()+k.tol), "stopped")
	if err != nil {
		k.mark("kit: no stopped event: only the order of lost and the close was checked", time.Now())
		return nil
	}
	// The client's anchor is the CLAIM's send, at most its arrival, and
	// timers do not fire early: a close at the close-by bound comes no
	// earlier than the arrival + L, give or take the race.
	atCap := !fin.Before(anchor.Add(k.L).Add(-k.raceTol()))
	if fin.Before(stopped.at.Add(-k.raceTol())) && !atCap {
		return fmt.Errorf("the client closed the connection at %s while the work was still running (it stopped at %s): close only once the work has stopped, or at anchor + L",
			k.at(fin), k.at(stopped.at))
	}
	if lost.at.After(giveUp) {
		return fmt.Errorf("lost came at %s, after the bound %s (CLAIM arrival + 0.8·L + tolerance), %.0fms late", k.at(lost.at), k.at(giveUp), ms(lost.at.Sub(giveUp)))
	}
	return nil
}

// stopsAnswering answers every request for 1.5·L, then none.
func stopsAnswering(k *kit) error {
	_, a, c, err := k.grantAtOnce()
	if err != nil {
		return err
	}
	silentAt := time.Now().Add(k.L * 3 / 2)
	last := c.at
	var maxGap time.Duration
	var pings int
	for time.Now().Before(silentAt) {
		r, err := a.p.next(silentAt)
		if errors.Is(err, errTimeout) {
			break
		}
		if err != nil {
			return err
		}
		if r.err != nil {
			return fmt.Errorf("the client closed the connection at %s while the server answered", k.at(r.at))
		}
		maxGap = max(maxGap, r.at.Sub(last))
		last = r.at
		if r.f.Type == protocol.TypePing {
			pings++
		}
		if err := a.answer(r); err != nil {
			return err
		}
	}
	k.mark(fmt.Sprintf("kit: server goes silent (%d PINGs answered, largest gap between requests %.0fms)", pings, ms(maxGap)), time.Now())
	if err := k.noLoss(); err != nil {
		return err
	}
	if limit := k.L/4 + k.tol; maxGap > limit {
		return fmt.Errorf("a gap of %.0fms between requests while every one was answered: the heartbeat schedule sends the next PING at most L/4 after the previous one's answer (limit %.0fms with tolerance)", ms(maxGap), ms(limit))
	}
	bound := a.lastAnswered.Add(k.L * 8 / 10).Add(k.tol)
	_, err = k.expectLostBy(bound, "the last answered request's arrival + 0.8·L + tolerance", time.Time{})
	return err
}

// serveFor answers every request for d.
func (a *answerer) serveFor(d time.Duration) error {
	_, err := a.serve(time.Now().Add(d), nil)
	if errors.Is(err, errTimeout) {
		return nil
	}
	return err
}

// violation grants, answers for 0.3·L, then sends a frame out of order.
func violation(promoted bool) func(k *kit) error {
	return func(k *kit) error {
		p, a, c, err := k.grantAtOnce()
		if err != nil {
			return err
		}
		if _, err := k.expectHeld(time.Now().Add(k.L/2), token); err != nil {
			return err
		}
		if err := a.serveFor(k.L * 3 / 10); err != nil {
			return err
		}
		b, what := protocol.AppendPong(nil, 1<<62), "PONG(4611686018427387904), answering nothing the client sent"
		if promoted {
			b, what = protocol.AppendPromoted(nil, c.f.Claim, token+1), fmt.Sprintf("PROMOTED(%d) for the held claim", c.f.Claim)
		}
		tv, err := p.write(b, whole, what)
		if err != nil {
			return err
		}
		if _, err := k.expectLostBy(tv.Add(k.tol), "the violation + tolerance: at once", time.Time{}); err != nil {
			return err
		}
		closeBy := tv.Add(k.stopDelay() + k.L/2)
		select {
		case <-p.gone:
		case <-time.After(time.Until(closeBy)):
			return fmt.Errorf("the connection was still open at %s after a protocol violation: close on any doubt", k.at(closeBy))
		case <-k.ctx.Done():
			return k.ctx.Err()
		}
		return nil
	}
}

// revoked grants, answers for 0.3·L, pushes REVOKED and answers on.
func revoked(k *kit) error {
	p, a, c, err := k.grantAtOnce()
	if err != nil {
		return err
	}
	if _, err := k.expectHeld(time.Now().Add(k.L/2), token); err != nil {
		return err
	}
	if err := a.serveFor(k.L * 3 / 10); err != nil {
		return err
	}
	tr, err := p.write(protocol.AppendRevoked(nil, c.f.Claim, protocol.CodeClosedByAdmin, "ops"), whole, "REVOKED 0x02 \"ops\"")
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- a.serveFor(k.L / 2) }() // the session lives on
	_, err = k.expectLostBy(tr.Add(k.tol), "REVOKED + tolerance: at once", time.Time{})
	if err != nil {
		return err
	}
	if err := <-done; err != nil && !errors.Is(err, net.ErrClosed) {
		// Closing the session after its only claim ended is allowed.
		k.mark("kit: "+err.Error(), time.Now())
	}
	return nil
}

// revokedCrossesRelease answers the adapter's RELEASE with REVOKED and
// then RELEASED, as a server does whose administrator force-released the
// claim just before the RELEASE arrived.
func revokedCrossesRelease(k *kit) error {
	p, a, c, err := k.grantAtOnce()
	if err != nil {
		return err
	}
	if _, err := k.expectHeld(time.Now().Add(k.L/2), token); err != nil {
		return err
	}
	k.send("release")
	var rel rx
	for rel.f.Type != protocol.TypeRelease {
		if rel, err = a.untilAny(time.Now().Add(k.L/2), protocol.TypeRelease); err != nil {
			return fmt.Errorf("no RELEASE after the adapter was told to release: %v", err)
		}
	}
	b := protocol.AppendRevoked(nil, c.f.Claim, protocol.CodeClosedByAdmin, "")
	b = protocol.AppendReleased(b, rel.f.Claim)
	if _, err := p.write(b, whole, "REVOKED 0x02, then RELEASED"); err != nil {
		return err
	}
	a.lastAnswered = rel.at
	e, err := k.waitEvent(rel.at.Add(k.L/2), "released", "error")
	switch {
	case errors.Is(err, errTimeout):
		return fmt.Errorf("the adapter did not report released by %s", k.at(rel.at.Add(k.L/2)))
	case err != nil:
		return err
	case e.Event == "error":
		return fmt.Errorf("the adapter reported an error: %s", e.Message)
	}
	if _, err := a.serve(time.Now().Add(k.L/2), nil); !errors.Is(err, errTimeout) {
		return fmt.Errorf("the session did not stay open after the crossing REVOKED: %v", err)
	}
	return nil
}

// sessionError grants, answers for 0.3·L, then ends the session with
// ERROR 0x01 as a server that shuts down does.
func sessionError(k *kit) error {
	p, a, _, err := k.grantAtOnce()
	if err != nil {
		return err
	}
	if _, err := k.expectHeld(time.Now().Add(k.L/2), token); err != nil {
		return err
	}
	if err := a.serveFor(k.L * 3 / 10); err != nil {
		return err
	}
	te, err := p.write(protocol.AppendSessionError(nil, protocol.CodeShuttingDown, "shutting down"), whole, "ERROR 0x01 \"shutting down\", then half-close")
	if err != nil {
		return err
	}
	if tc, ok := p.conn.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	_, err = k.expectLostBy(te.Add(k.tol), "ERROR + tolerance: at once", time.Time{})
	return err
}

// untilAny answers the requests before the first of type t and returns
// it, unanswered.
func (a *answerer) untilAny(deadline time.Time, t protocol.Type) (rx, error) {
	for {
		r, err := a.p.next(deadline)
		if err != nil {
			return rx{}, err
		}
		if r.err != nil {
			return rx{}, fmt.Errorf("the connection ended at %s: %v", a.p.k.at(r.at), r.err)
		}
		if r.f.Type == t {
			return r, nil
		}
		if err := a.answer(r); err != nil {
			return rx{}, err
		}
	}
}

// untilPing answers the requests before the next PING and returns the
// PING, unanswered. The heartbeat schedule sends one within L/4.
func (a *answerer) untilPing() (rx, error) {
	k := a.p.k
	deadline := time.Now().Add(k.L/4 + k.tol)
	for {
		r, err := a.p.next(deadline)
		if err != nil {
			return rx{}, fmt.Errorf("no PING from the client by %s (the heartbeat schedule sends one within L/4): %v", k.at(deadline), err)
		}
		if r.err != nil {
			return rx{}, fmt.Errorf("the connection ended at %s before a PING: %v", a.p.k.at(r.at), r.err)
		}
		if r.f.Type == protocol.TypePing {
			return r, nil
		}
		if err := a.answer(r); err != nil {
			return rx{}, err
		}
	}
}

// queued opens the session and answers the first CLAIM QUEUED.
func (k *kit) queued() (*peer, *answerer, rx, error) {
	p, a, err := k.open()
	if err != nil {
		return nil, nil, rx{}, err
	}
	c, err := a.untilClaim()
	if err != nil {
		return nil, nil, rx{}, err
	}
	if _, err := p.write(protocol.AppendQueued(nil, c.f.Claim), whole, "QUEUED"); err != nil {
		return nil, nil, rx{}, err
	}
	a.lastAnswered = c.at
	return p, a, c, nil
}

// pushBetweenAnswers queues the claim, then pushes PROMOTED while a PING
// is unanswered and answers the PING after it.
func pushBetweenAnswers(k *kit) error {
	p, a, c, err := k.queued()
	if err != nil {
		return err
	}
	ping, err := a.untilPing()
	if err != nil {
		return err
	}
	tp, err := p.write(protocol.AppendPromoted(nil, c.f.Claim, token), whole, "PROMOTED, pushed while the PING waits")
	if err != nil {
		return err
	}
	if err := k.sleep(20 * time.Millisecond); err != nil {
		return err
	}
	if err := a.answer(ping); err != nil {
		return err
	}
	if _, err := k.expectHeld(tp.Add(k.tol), token); err != nil {
		return err
	}
	if err := a.serveFor(k.L); err != nil {
		return err
	}
	return k.noLoss()
}

// pushDoesNotConfirm queues the claim, answers nothing more, and pushes
// PROMOTED at L/2.
func pushDoesNotConfirm(k *kit) error {
	p, a, c, err := k.queued()
	if err != nil {
		return err
	}
	if err := k.sleep(k.L / 2); err != nil {
		return err
	}
	tp, err := p.write(protocol.AppendPromoted(nil, c.f.Claim, token), whole, "PROMOTED at L/2; nothing is answered")
	if err != nil {
		return err
	}
	bound := a.lastAnswered.Add(k.L * 8 / 10).Add(k.tol)
	if _, err := k.expectHeld(bound, token); err != nil {
		return err
	}
	_, err = k.expectLostBy(bound, "CLAIM arrival + 0.8·L + tolerance", tp.Add(k.L*8/10))
	return err
}

// releaseCheck asks the adapter to release, answers the RELEASE and
// waits for released.
func releaseCheck(k *kit, a *answerer, c rx) error {
	k.send("release")
	r, err := a.serve(time.Now().Add(k.L), func(r rx) bool { return r.f.Type == protocol.TypeRelease })
	if err != nil {
		return fmt.Errorf("no RELEASE after the adapter was told to release: %v", err)
	}
	if r.f.Claim != c.f.Claim {
		return fmt.Errorf("RELEASE names claim %d, the held claim is %d", r.f.Claim, c.f.Claim)
	}
	e, err := k.waitEvent(r.at.Add(k.L/2), "released", "lost", "error")
	switch {
	case errors.Is(err, errTimeout):
		return fmt.Errorf("the adapter did not report released by %s", k.at(r.at.Add(k.L/2)))
	case err != nil:
		return err
	case e.Event != "released":
		return fmt.Errorf("the adapter reported %s instead of released (%s)", e.Event, e.raw)
	}
	return nil
}

// splitFrames writes every server frame one byte at a time.
func splitFrames(k *kit) error {
	p, err := k.accept(k.deadline())
	if err != nil {
		return err
	}
	if err := p.welcome(session1, secret1, bytewise); err != nil {
		return err
	}
	a := &answerer{p: p, token: token, mode: bytewise}
	c, err := a.untilClaim()
	if err != nil {
		return err
	}
	if err := a.answer(c); err != nil {
		return err
	}
	if _, err := k.expectHeld(time.Now().Add(k.L/2), token); err != nil {
		return err
	}
	if err := a.serveFor(k.L); err != nil {
		return err
	}
	if err := k.noLoss(); err != nil {
		return err
	}
	return releaseCheck(k, a, c)
}

// coalescedFrames answers the CLAIM with QUEUED and PROMOTED in one write.
func coalescedFrames(k *kit) error {
	p, a, err := k.open()
	if err != nil {
		return err
	}
	c, err := a.untilClaim()
	if err != nil {
		return err
	}
	b := protocol.AppendQueued(nil, c.f.Claim)
	b = protocol.AppendPromoted(b, c.f.Claim, token)
	if _, err := p.write(b, whole, "QUEUED and PROMOTED in one write"); err != nil {
		return err
	}
	a.lastAnswered = c.at
	if _, err := k.expectHeld(time.Now().Add(k.L/2), token); err != nil {
		return err
	}
	if err := a.serveFor(k.L); err != nil {
		return err
	}
	if err := k.noLoss(); err != nil {
		return err
	}
	return releaseCheck(k, a, c)
}

// resumableReassert grants on a resumable session, resets the connection
// and expects the re-assertion on a new one.
func resumableReassert(k *kit) error {
	p, err := k.accept(k.deadline())
	if err != nil {
		return err
	}
	if !p.hello.Resumable() {
		// The adapter may say so just after it connected.
		if _, err := k.waitEvent(time.Now().Add(k.tol), "unsupported"); err != nil {
			var se errSkip
			if errors.As(err, &se) {
				return err
			}
		}
		return fmt.Errorf("asked for a resumable session (BATON_TESTKIT_RESUMABLE=1), but the HELLO does not ask for one (%v) and the adapter did not print unsupported", p.hello)
	}
	if err := p.welcome(session1, secret1, whole); err != nil {
		return err
	}
	a := &answerer{p: p, token: token}
	c, err := a.untilClaim()
	if err != nil {
		return err
	}
	if err := a.answer(c); err != nil {
		return err
	}
	if _, err := k.expectHeld(time.Now().Add(k.L/2), token); err != nil {
		return err
	}
	if err := a.serveFor(k.L * 3 / 10); err != nil {
		return err
	}
	if tc, ok := p.conn.(*net.TCPConn); ok {
		tc.SetLinger(0) // a reset, as a node that dies
	}
	p.conn.Close()
	k.mark("server: connection reset", time.Now())
	bound := a.lastAnswered.Add(k.L * 8 / 10).Add(k.tol)
	p2, err := k.accept(bound)
	if err != nil {
		return fmt.Errorf("no new connection after the reset: %v", err)
	}
	if !p2.hello.Resumable() {
		return fmt.Errorf("the new session's HELLO does not ask for a resumable session: %v", p2.hello)
	}
	if err := p2.welcome(session2, secret2, whole); err != nil {
		return err
	}
	a2 := &answerer{p: p2, token: token}
	var re rx
	for {
		r, err := p2.next(bound)
		if err != nil {
			return fmt.Errorf("no re-assertion by %s (the last answered request's arrival + 0.8·L + tolerance): %v", k.at(bound), err)
		}
		if r.err != nil {
			return fmt.Errorf("the new connection ended at %s before a re-assertion: %v", k.at(r.at), r.err)
		}
		if r.f.Type == protocol.TypeClaim {
			re = r
			break
		}
		if err := a2.answer(r); err != nil {
			return err
		}
	}
	f, old := re.f, c.f
	switch {
	case !f.Reassert():
		return fmt.Errorf("the first CLAIM on the new session is not a re-assertion (flags 0x%02x): %v", f.Flags, f)
	case f.Claim != old.Claim || f.Name != old.Name || f.Mode != old.Mode || f.Limit != old.Limit:
		return fmt.Errorf("the re-assertion %v does not name the claim %v", f, old)
	case f.Token != token:
		return fmt.Errorf("the re-assertion carries token %d, the claim's token is %d", f.Token, token)
	case f.Session != session1 || f.Secret != secret1:
		return fmt.Errorf("the re-assertion names session %d with secret %x, the prior session was %d with secret %x", f.Session, f.Secret, session1, secret1)
	}
	if err := a2.answer(re); err != nil { // GRANTED with the old token
		return err
	}
	if err := a2.serveFor(k.L / 2); err != nil {
		return err
	}
	return k.noLoss()
}

// openV1 plays a version 1 server: the client's version 2 opening is
// refused, and its version 1 connection returned. A client that does
// not fall back (the protocol allows that) is skipped.
func (k *kit) openV1() (*peer, error) {
	p, err := k.acceptV1(k.deadline())
	var ae adapterError
	if errors.As(err, &ae) {
		return nil, errSkip{feature: "a fallback to version 1 (it reported: " + ae.msg + ")"}
	}
	if err != nil {
		return nil, err
	}
	if p.acquire.Name != k.name() || p.acquire.LeaseMS != uint32(k.L.Milliseconds()) {
		return nil, fmt.Errorf("the version 1 ACQUIRE asks for %q with %dms, not %q with %dms", p.acquire.Name, p.acquire.LeaseMS, k.name(), k.L.Milliseconds())
	}
	return p, nil
}

// v1AnchorSendTime is anchorSendTime on version 1.
func v1AnchorSendTime(k *kit) error {
	p, err := k.openV1()
	if err != nil {
		return err
	}
	ta := time.Now() // the ACQUIRE was read just now
	if err := k.sleep(k.L / 2); err != nil {
		return err
	}
	tg, err := p.write(protocol.AppendAcquired(nil, token), whole, "ACQUIRED, delayed by L/2; nothing more is answered")
	if err != nil {
		return err
	}
	bound := ta.Add(k.L * 8 / 10).Add(k.tol)
	if _, err := k.expectHeld(bound, token); err != nil {
		return err
	}
	_, err = k.expectLostBy(bound, "ACQUIRE arrival + 0.8·L + tolerance", tg.Add(k.L*8/10))
	return err
}

// v1PushCounting queues the version 1 claim, pushes ACQUIRED while a
// HEARTBEAT is unanswered, then answers it and every later one.
func v1PushCounting(k *kit) error {
	p, err := k.openV1()
	if err != nil {
		return err
	}
	if _, err := p.write(protocol.AppendWaiting(nil), whole, "WAITING"); err != nil {
		return err
	}
	r, err := p.next(time.Now().Add(k.L / 2))
	if err != nil || r.err != nil {
		return fmt.Errorf("no HEARTBEAT within L/2 of WAITING: %v%v", err, r.err)
	}
	tp, err := p.write(protocol.AppendAcquired(nil, token), whole, "ACQUIRED, pushed while the HEARTBEAT waits")
	if err != nil {
		return err
	}
	if err := k.sleep(20 * time.Millisecond); err != nil {
		return err
	}
	if _, err := p.write(protocol.AppendAcquired(nil, token), whole, "ACQUIRED, the HEARTBEAT's answer"); err != nil {
		return err
	}
	if _, err := k.expectHeld(tp.Add(k.tol), token); err != nil {
		return err
	}
	end := time.Now().Add(k.L)
	for {
		r, err := p.next(end)
		if errors.Is(err, errTimeout) {
			break
		}
		if err != nil {
			return err
		}
		if r.err != nil {
			return fmt.Errorf("the client closed the connection at %s while the server answered", k.at(r.at))
		}
		if _, err := p.write(protocol.AppendAcquired(nil, token), whole, "ACQUIRED"); err != nil {
			return err
		}
	}
	return k.noLoss()
}
