package baton

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/batonlock/baton/internal/clientrule"
	"github.com/batonlock/baton/protocol"
)

// Resumable sessions (SessionOptions.Resume): when the connection
// breaks, the reader reconnects with backoff, opens a new resumable
// session and re-asserts every held or queued claim, naming the session it
// lived on. A claim re-granted with its own token goes on unnoticed; one
// not confirmed by anchor + 0.8 × lease is lost, as the client rule says.
// Range locks follow, under the same give-up (resume_ranges.go).
// User docs: docs/client.md; design: "Resumable sessions" and
// #resumego in docs/design/2026-12-07-go-client.md.

var (
	// ErrReassertRefused: after the connection broke, the server refused
	// the claim's re-assertion (REFUSED 0x04: the claim is not held
	// there any more, or a conflicting claim holds the lock), or
	// answered a held claim's with a queue place. The claim is lost; the
	// error also wraps the server's *ServerError when there was one. A
	// range lock's re-assertion answered conflict (or anything but done
	// or unavailable) ends the whole session with it.
	ErrReassertRefused = errors.New("baton: lock lost: its re-assertion after a broken connection was refused")
	// ErrNotResumed: a resumable session could not be resumed, or a
	// claim's or its range locks' re-assertion answered, before the
	// give-up deadline (anchor + 0.8 × lease), or the server cannot
	// resume it. The error
	// wraps ErrHeartbeatTimeout when the deadline passed, and the
	// failure that broke the connection or the last reconnection's.
	ErrNotResumed = errors.New("baton: session not resumed")
)

// Bounds of a resume's reconnection backoff; it never waits past the
// give-up deadline.
const (
	minResumeBackoff = 10 * time.Millisecond
	maxResumeBackoff = time.Second
	// maxFreshSessions bounds the fresh sessions opened in a row
	// because a re-assertion was answered "again" (REFUSED 0x05, a stale
	// ring, or 0x03, a node that cannot decide now); the give-up
	// deadline bounds them too, and their backoff grows across them.
	maxFreshSessions = 32
)

// errFreshSession is the break that a re-assertion answered "again"
// causes: it wraps the *ServerError of the refusal.
var errFreshSession = errors.New("baton: re-assertion to be made again on a fresh session")

// resumable reports whether a break is resumed after. s.mu is held.
// Range locks are re-asserted too (resume_ranges.go); a session being
// closed is not resumed.
func (s *Session) resumable() bool { return s.ident != nil && !s.closing }

// Resumable reports whether the session is resumable: it asked for it
// (SessionOptions.Resume) and the server granted it.
func (s *Session) Resumable() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ident != nil
}

// Node returns the id of the cluster node the session lives on, as the
// server's WELCOME named it: after a resume, the node of the new session.
// It is empty on a single server and for a session that is not resumable.
func (s *Session) Node() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ident == nil {
		return ""
	}
	return s.ident.node
}

// isBreak reports whether cause ends a connection but may leave its
// session to be resumed: the connection closed or failed, the server is
// shutting down (0x01) or cannot serve here now (0x03), or a
// re-assertion named a stale ring (0x05).
func isBreak(cause error) bool {
	if errors.Is(cause, errFreshSession) {
		return true
	}
	var se *ServerError
	if errors.As(cause, &se) {
		switch se.Code {
		case protocol.CodeShuttingDown, protocol.CodeNotOwner:
			return true
		}
		return false
	}
	return errors.Is(cause, ErrConnectionClosed)
}

// broken decides what a failure of the connection does: it returns the
// cause when the session is to be resumed, and otherwise ends the
// session (closing the connection when due) and returns nil.
func (s *Session) broken(cause error) error {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return nil
	}
	if s.resumable() && isBreak(cause) {
		s.mu.Unlock()
		return cause
	}
	closeNow := s.loseLocked(cause)
	s.mu.Unlock()
	if closeNow {
		s.closeConn()
	}
	return nil
}

// notResumed is the cause of a loss for want of a resume in time: it
// wraps the break and the last reconnection's failure, if any.
func notResumed(brk, last error) error {
	if last == nil || last == brk {
		return fmt.Errorf("%w before the give-up (%w): %w", ErrNotResumed, ErrHeartbeatTimeout, brk)
	}
	return fmt.Errorf("%w before the give-up (%w): %w (last attempt: %w)", ErrNotResumed, ErrHeartbeatTimeout, brk, last)
}

// silence returns how long a resumable session waits for an answer
// before it takes its connection for broken: a quarter of the lease. A
// node whose machine died, or a network cut, closes nothing; the
// session resumes elsewhere while its claims are still believed (a
// PING goes out about a quarter lease after the anchor, so the resume
// starts about half a lease after it, before the give-up at 0.8).
func silence(lease time.Duration) time.Duration { return lease / 4 }

// silent reports whether the oldest unanswered request of a resumable
// session has waited its silence out. s.mu is held.
func (s *Session) silent(now time.Time) bool {
	r, ok := s.rule.Oldest()
	return s.resumable() && ok && !now.Before(r.Sent.Add(silence(s.opts.Lease)))
}

// readDeadline is the reader's deadline: the rule's give-up, the
// earlier give-up of a claim, or of the range locks, whose re-assertion
// is unanswered, or on a resumable session the silence deadline of the
// oldest unanswered request. s.mu is held.
func (s *Session) readDeadline() time.Time {
	d := s.rule.Deadline()
	for _, cl := range s.claims {
		if cl.reassert && !cl.ended && cl.until.Before(d) {
			d = cl.until
		}
	}
	if u := s.ranges.until; !u.IsZero() && u.Before(d) {
		d = u
	}
	if r, ok := s.rule.Oldest(); ok && s.resumable() {
		if q := r.Sent.Add(silence(s.opts.Lease)); q.Before(d) {
			d = q
		}
	}
	return d
}

// setReadDeadline sets the connection's read deadline to readDeadline
// unless one at least as early is in force (s.readSet; zero: none
// known). s.mu is held, so the reader and a PING's sender do not undo
// each other's.
func (s *Session) setReadDeadline() error {
	d := s.readDeadline()
	if !s.readSet.IsZero() && !d.Before(s.readSet) {
		return nil
	}
	s.readSet = d
	return s.conn.SetReadDeadline(d)
}

// expireReasserts loses every claim whose re-assertion has not been
// answered by its give-up, and ends the session when the range locks'
// re-assertions have not all been answered by theirs: a range lock has
// no loss of its own. It reports whether the caller must close the
// connection (loseLocked). s.mu is held.
func (s *Session) expireReasserts(now time.Time) (closeNow bool) {
	for _, cl := range s.claims {
		if cl.reassert && !cl.ended && !now.Before(cl.until) {
			cl.endLocked(notResumed(s.breakCause, s.lastAttempt))
		}
	}
	if u := s.ranges.until; s.err == nil && !u.IsZero() && !now.Before(u) {
		return s.loseLocked(notResumed(s.breakCause, s.lastAttempt))
	}
	return false
}

// resume opens a new session after the connection broke with cause and
// re-asserts the session's claims on it. It runs on the reader's
// goroutine and reports whether the reader is to read the new
// connection; when it is not, the session has ended.
func (s *Session) resume(cause error) bool {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return false
	}
	old := s.conn
	fresh := errors.Is(cause, errFreshSession)
	if fresh {
		s.freshSessions++
	} else {
		s.freshSessions, s.freshBackoff = 0, 0
	}
	if s.freshSessions > maxFreshSessions {
		closeNow := s.loseLocked(fmt.Errorf("%w: %d fresh sessions in a row: %w", ErrNotResumed, s.freshSessions, cause))
		s.mu.Unlock()
		if closeNow {
			s.closeConn()
		}
		return false
	}
	s.breakCause, s.lastAttempt = cause, nil
	s.resuming = true
	s.resumed = make(chan struct{})
	s.freshNeeded = nil
	giveUp := s.rule.Deadline()
	s.rule.Close() // no PING, claim or release goes on the broken connection
	if s.pingArmed && s.pingTimer.Stop() {
		s.pingArmed = false
		s.bg.Done()
	}
	for _, cl := range s.claims {
		if !cl.reassert {
			// Confirmed on the broken session: believed until its give-up.
			cl.reassert, cl.until = true, giveUp
		}
	}
	s.breakRanges(giveUp)
	s.stopResends()
	s.armExpiry()
	addrs := s.addrs()
	first := s.addrIdx
	detach := s.detach
	s.mu.Unlock()
	s.retire(old, detach, giveUp)

	// A fresh session after an "again" waits first, its backoff growing
	// across the fresh sessions in a row; a reconnection after a break
	// tries at once.
	backoff := max(s.freshBackoff, minResumeBackoff)
	last := cause
	atOnce := false // the last attempt met a shutdown: another server may be taking over
	for attempt := 0; ; attempt++ {
		if (attempt > 0 || fresh) && !atOnce {
			wait := time.Until(giveUp)
			if w := jitter(backoff); w < wait {
				wait = w
			}
			if sleep(s.dialCtx, wait) != nil {
				return false // the session ended
			}
			backoff = min(2*backoff, maxResumeBackoff, s.opts.Lease/8+minResumeBackoff)
			s.mu.Lock()
			s.freshBackoff = backoff
			s.mu.Unlock()
		}
		now := time.Now()
		s.mu.Lock()
		s.lastAttempt = last
		s.expireReasserts(now) // the connection in use is closed already
		if s.err != nil {
			s.mu.Unlock()
			return false
		}
		if !now.Before(giveUp) {
			closeNow := s.loseLocked(notResumed(cause, last))
			s.mu.Unlock()
			if closeNow {
				s.closeConn()
			}
			return false
		}
		s.mu.Unlock()
		i := (first + attempt) % len(addrs)
		conn, w, rule, err := s.reopen(addrs[i], giveUp)
		if err == nil {
			return s.install(i, conn, w, rule)
		}
		last = err
		var se *ServerError
		if errors.Is(err, ErrProtocolViolation) || (errors.As(err, &se) && !se.Temporary()) {
			s.mu.Lock()
			closeNow := s.loseLocked(fmt.Errorf("%w: %w", ErrNotResumed, err))
			s.mu.Unlock()
			if closeNow {
				s.closeConn()
			}
			return false
		}
		atOnce = errors.Is(err, protocol.ErrShuttingDown) && !atOnce
	}
}

// waitResumedLocked waits until no resume is under way, so that a new
// request goes on the resumed session, after the re-assertions, or
// until ctx ends. s.mu is held on entry and on return.
func (s *Session) waitResumedLocked(ctx context.Context) error {
	for s.resuming && s.err == nil {
		resumed := s.resumed
		s.waitingResume++
		s.mu.Unlock()
		var err error
		select {
		case <-resumed:
		case <-ctx.Done():
			err = ctx.Err()
		}
		s.mu.Lock()
		s.waitingResume--
		if err != nil {
			return err
		}
	}
	return nil
}

// nodeAddr is the address of the node the session is on now: a resume
// may move it (install).
func (s *Session) nodeAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// addrs returns the addresses a resume may use. s.mu is held.
func (s *Session) addrs() []string {
	if len(s.opts.Addrs) > 0 {
		return s.opts.Addrs
	}
	return s.c.nodes()
}

// reopen connects to addr and opens a new resumable session, by the
// give-up deadline.
func (s *Session) reopen(addr string, giveUp time.Time) (net.Conn, welcomeInfo, *clientrule.Session, error) {
	ctx, cancel := context.WithDeadline(s.dialCtx, giveUp)
	defer cancel()
	conn, err := s.c.cfg.Dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, welcomeInfo{}, nil, &dialError{err}
	}
	rule := clientrule.NewSession(s.opts.Lease, s.c.cfg.MinHeartbeatInterval)
	w, err := s.open(ctx, conn, rule)
	if err != nil {
		conn.Close()
		return nil, w, nil, err
	}
	if w.flagRefused {
		// A server before DETACH or queue tickets: once more, without.
		conn.Close()
		return s.reopen(addr, giveUp)
	}
	f := w.frame
	switch f.Type {
	case protocol.TypeError, protocol.TypeSessionError:
		conn.Close()
		return nil, w, nil, &ServerError{Code: f.Code, Reason: f.Reason}
	}
	if w.ident == nil {
		conn.Close()
		return nil, w, nil, fmt.Errorf("%w: %s did not open a resumable session", ErrNotResumed, addr)
	}
	return conn, w, rule, nil
}

// install makes the new session the one in use and re-asserts every
// claim on it, in the order of their ids; a claim being released is
// released right after its re-assertion. The range locks' re-assertions
// follow, then the range requests that were in flight at the break
// (installRanges). It reports whether the reader reads on.
func (s *Session) install(addr int, conn net.Conn, w welcomeInfo, rule *clientrule.Session) bool {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		conn.Close()
		return false
	}
	now := time.Now()
	s.expireReasserts(now)
	if s.err != nil {
		s.mu.Unlock()
		conn.Close()
		return false
	}
	s.conn, s.br, s.rule, s.gen, s.addrIdx = conn, bufio.NewReaderSize(conn, 4096), rule, s.gen+1, addr
	s.addr = s.addrs()[addr]
	s.id, s.ident, s.ring, s.tickets, s.detach, s.values = w.frame.Session, w.ident, w.ring, w.tickets, w.detach, w.values
	s.wset, s.readSet = time.Time{}, time.Time{}
	s.out = s.out[:0]
	s.reasserts = 0
	// A claim lost already has nothing to re-assert; its session on the
	// server drops it a lease after it last heard from us.
	for _, id := range sortedLive(s.claims, func(cl *Claim) bool { return cl.ended }) {
		cl := s.claims[id]
		cl.names, cl.at = cl.reassertNames(), 0
		longest := 0
		for _, n := range cl.names {
			longest = max(longest, len(n.node))
		}
		if len(cl.name)+longest > protocol.MaxReassertText {
			cl.endLocked(fmt.Errorf("%w: name and node too long for a re-assertion", ErrNotResumed))
			delete(s.claims, id)
			continue
		}
		s.sendReassert(cl, cl.names[0], now)
		if cl.releasing || cl.wantRelease {
			if err := rule.SentRelease(id, now); err == nil {
				cl.releasing = true
				s.out = protocol.AppendRelease(s.out, id)
			}
		}
	}
	s.rewatchLocked(now)
	if err := s.installRanges(); err != nil {
		s.loseLocked(err)
		s.mu.Unlock()
		conn.Close()
		return false
	}
	s.resuming = false
	close(s.resumed)
	s.schedulePing()
	flush := len(s.out) > 0 && s.startWrite()
	s.mu.Unlock()
	if flush {
		s.flush()
	}
	return true
}

// reasserted acts on the answer to a claim's re-assertion. It returns a
// break cause when a fresh session is needed (a stale ring), once every
// re-assertion of this session has been answered, or the violation of a
// grant with another token. ticket is a QUEUED's queue ticket. s.mu is
// held.
func (s *Session) reasserted(cl *Claim, ev clientrule.Event, ticket uint64, now time.Time) error {
	s.reasserts--
	late := !now.Before(cl.until)
	lost := func(err error) {
		cl.endLocked(err)
		s.dropLocked(cl)
	}
	stale := false
	switch ev.Kind {
	case protocol.TypeGranted, protocol.TypeQueued:
		granted := ev.Kind == protocol.TypeGranted
		switch {
		case cl.ended || ev.Releasing:
			s.dropLocked(cl)
		case late:
			lost(notResumed(s.breakCause, s.lastAttempt))
		case granted && cl.held && ev.Token != cl.token:
			// docs/protocol-v2-client.md, v2 client obligation 9.
			return fmt.Errorf("%w: re-assertion of claim %d with token %d answered with token %d", ErrProtocolViolation, cl.id, cl.token, ev.Token)
		case !granted && cl.held:
			lost(fmt.Errorf("%w: answered with a queue place", ErrReassertRefused))
		case granted:
			cl.held, cl.token = true, ev.Token
			cl.resolve()
			cl.proclaimedAll(nil) // the re-assertion carried the latest value
		default:
			cl.queued, cl.ticket = true, ticket
			cl.proclaimedAll(nil)
		}
	case protocol.TypeBusy:
		cl.endLocked(ErrBusy)
	case protocol.TypeRefused:
		se := &ServerError{Code: ev.Code, Reason: ev.Reason}
		switch {
		case (ev.Code == protocol.CodeStaleRing || ev.Code == protocol.CodeNotOwner) && !cl.ended && !late:
			// Again, on a fresh session: a stale ring, or a node that
			// cannot decide now (warming up without an epoch, or the
			// owner out of reach).
			stale = true
			s.freshNeeded = se
			cl.sentOn = nil // that session did not take it
		case late:
			cl.endLocked(notResumed(s.breakCause, s.lastAttempt))
		case ev.Code == protocol.CodeUnsupportedFeature && cl.sentTicket && !cl.ended && s.rule.Free(cl.id):
			// The ticket flag, relayed to an owner of the revision
			// before queue tickets: again without the ticket.
			stale = true // its re-assertion is unanswered again
			cl.ticket = 0
			s.sendReassert(cl, cl.named, now)
			if s.startWrite() {
				go s.flush() // startWrite counted it in s.bg
			}
		case ev.Code == protocol.CodeReassertRefused && len(cl.names) > 1 && !cl.ended && s.rule.Free(cl.id):
			// Not in the session named: in another, then. While the
			// client believes, the claim is kept in one of them (nobody
			// else can hold it), and a cut-off re-assertion arriving
			// late may move it from one to another: name them in turn,
			// pausing after each round, until one takes it or the
			// give-up (the rule checked on the cluster-ranges-resume
			// model, whose range locks move between sessions as claims
			// do).
			stale = true // its re-assertion is unanswered again
			cl.at = (cl.at + 1) % len(cl.names)
			if cl.at == 0 {
				s.retryReassert(cl, now)
				break
			}
			s.sendReassert(cl, cl.names[cl.at], now)
			if s.startWrite() {
				go s.flush() // startWrite counted it in s.bg
			}
		case ev.Code == protocol.CodeReassertRefused:
			cl.endLocked(fmt.Errorf("%w: %w", ErrReassertRefused, se))
		default:
			cl.endLocked(se)
		}
	}
	if !stale {
		cl.reassert, cl.until = false, time.Time{}
		if !cl.ended {
			cl.home, cl.sentOn, cl.cutOff, cl.names, cl.pause = s.ident, nil, nil, nil, 0
			s.freshSessions, s.freshBackoff = 0, 0
		}
	}
	if s.freshNeeded != nil && s.reasserts == 0 {
		return fmt.Errorf("%w: %w", errFreshSession, s.freshNeeded)
	}
	return nil
}

// reassertNames returns the sessions cl's next re-assertion names in
// turn: those its re-assertions were cut off on since it was confirmed,
// the latest first (each may have moved the claim into itself, and one
// cut off earlier may still arrive and move it again), then the session
// it was confirmed on (docs/protocol-v2-client.md, v2 client obligation 9). s.mu
// is held.
func (cl *Claim) reassertNames() []*resumeIdent {
	if cl.sentOn != nil && cl.sentOn != cl.home && !slices.Contains(cl.cutOff, cl.sentOn) {
		cl.cutOff = append(cl.cutOff, cl.sentOn)
	}
	cl.sentOn = nil
	names := make([]*resumeIdent, 0, len(cl.cutOff)+1)
	for i := len(cl.cutOff) - 1; i >= 0; i-- {
		names = append(names, cl.cutOff[i])
	}
	return append(names, cl.home)
}

// retryReassert sends cl's re-assertion again, naming the first of its
// names, after a pause that doubles each round (as a range lock's,
// resume_ranges.go), unless the give-up comes first. s.mu is held.
func (s *Session) retryReassert(cl *Claim, now time.Time) {
	cl.pause = min(max(2*cl.pause, minRangeResumePause), maxRangeResumePause)
	if !cl.until.IsZero() && !now.Add(cl.pause).Before(cl.until) {
		return // lost at the give-up
	}
	s.resendLater(cl.pause, func() bool {
		if cl.ended || s.claims[cl.id] != cl || !cl.reassert || !s.rule.Free(cl.id) {
			return false
		}
		s.sendReassert(cl, cl.names[0], time.Now())
		return true
	})
}

// resendLater calls send after d with s.mu held, unless the session has
// ended, broken or started resuming meanwhile: the re-send of a claim's
// or a range lock's re-assertion after a pause. send appends what it
// sends to s.out and reports whether it did. s.mu is held.
func (s *Session) resendLater(d time.Duration, send func() bool) {
	gen := s.gen
	var t *time.Timer
	s.bg.Add(1)
	t = time.AfterFunc(d, func() {
		defer s.bg.Done()
		s.mu.Lock()
		delete(s.resends, t)
		if s.err != nil || s.gen != gen || s.resuming || !send() {
			s.mu.Unlock()
			return
		}
		flush := s.startWrite()
		s.mu.Unlock()
		if flush {
			s.flush()
		}
	})
	if s.resends == nil {
		s.resends = map[*time.Timer]struct{}{}
	}
	s.resends[t] = struct{}{}
}

// stopResends stops the pending re-sends (resendLater). s.mu is held.
func (s *Session) stopResends() {
	for t := range s.resends {
		if t.Stop() {
			s.bg.Done()
		}
		delete(s.resends, t)
	}
}

// sendReassert records and appends the re-assertion of cl on the session
// in use, naming prior. s.mu is held; the caller writes it out.
func (s *Session) sendReassert(cl *Claim, prior *resumeIdent, now time.Time) {
	var token, ticket uint64
	if cl.held {
		token = cl.token
	} else if cl.queued && s.tickets {
		// A server that gives tickets takes them back: on a name it
		// took over, the claim regains its place (rule 5).
		ticket = cl.ticket
	}
	noWait := cl.noWait && !cl.held && !cl.queued // not answered yet
	if err := s.rule.SentClaim(cl.id, noWait, now); err != nil {
		panic("baton: re-assertion of a claim whose id is in use: " + err.Error())
	}
	s.out = appendReassert(s.out, cl.id, cl.mode, noWait, cl.name, token, ticket, s.ring, prior, cl.value)
	s.reasserts++
	cl.sentOn, cl.named, cl.sentTicket = s.ident, prior, ticket != 0
}

// dropLocked releases on the server a claim that the client no longer
// believes held (lost, or being released) unless a RELEASE of it is
// under way. s.mu is held; the write goes with the next flush.
func (s *Session) dropLocked(cl *Claim) {
	if cl.releasing {
		return
	}
	if err := s.rule.SentRelease(cl.id, time.Now()); err != nil {
		return
	}
	cl.releasing = true
	s.out = protocol.AppendRelease(s.out, cl.id)
	if s.startWrite() {
		go s.flush() // startWrite counted it in s.bg
	}
}

// sortedLive deletes from m the entries that dead reports and returns
// the ids of the others in order.
func sortedLive[T any](m map[uint32]T, dead func(T) bool) []uint32 {
	ids := make([]uint32, 0, len(m))
	for id, v := range m {
		if dead(v) {
			delete(m, id)
			continue
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// forget drops claim id, which the rule reports free. s.mu is held.
func (s *Session) forget(id uint32) {
	delete(s.claims, id)
	s.checkDrained()
}

// checkDrained closes Close's drained once every claim is forgotten and
// every range release answered. s.mu is held.
func (s *Session) checkDrained() {
	if s.drained != nil && len(s.claims) == 0 && len(s.ranges.closeReqs) == 0 {
		close(s.drained)
		s.drained = nil
	}
}

// releaseAllLocked releases every claim and range lock of a live
// resumable session and waits, at most until the give-up deadline, until
// the server has answered every release: closing the connection of a
// resumable session does not release its claims or range locks (the
// server keeps them for the lease). s.mu is held on entry and on return,
// and released while it waits.
func (s *Session) releaseAllLocked() {
	s.closing = true
	if s.releaseRangesLocked() > 0 && s.startWrite() {
		go s.flush() // startWrite counted it in s.bg
	}
	if len(s.claims) == 0 && len(s.ranges.closeReqs) == 0 {
		return
	}
	for _, cl := range s.claims {
		cl.endLocked(ErrSessionClosed)
		s.dropLocked(cl)
	}
	drained := make(chan struct{})
	s.drained = drained
	t := time.NewTimer(time.Until(s.rule.Deadline()))
	s.mu.Unlock()
	select {
	case <-drained:
	case <-t.C:
	}
	t.Stop()
	s.mu.Lock()
}

// armExpiry arms the timer that loses each claim whose re-assertion is
// not answered by its give-up, at that instant, whatever the resume is
// doing (dialing, waiting for WELCOME, backing off). s.mu is held. A
// give-up is set only when a resume starts, never earlier than those set
// before, so the timer only ever needs the earliest one.
func (s *Session) armExpiry() {
	next := s.ranges.until
	for _, cl := range s.claims {
		if cl.reassert && !cl.ended && (next.IsZero() || cl.until.Before(next)) {
			next = cl.until
		}
	}
	if next.IsZero() || s.err != nil || s.expiryArmed {
		return
	}
	s.expiryArmed = true
	s.bg.Add(1)
	if s.expiryTimer == nil {
		s.expiryTimer = time.AfterFunc(time.Until(next), s.expire)
	} else {
		s.expiryTimer.Reset(time.Until(next))
	}
}

// expire is the expiry timer's function.
func (s *Session) expire() {
	defer s.bg.Done()
	s.mu.Lock()
	s.expiryArmed = false
	closeNow := s.expireReasserts(time.Now())
	s.armExpiry()
	s.mu.Unlock()
	if closeNow {
		s.closeConn()
	}
}
