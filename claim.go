package baton

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/batonlock/baton/protocol"
)

// Mode is how a claim shares its lock: Exclusive, Shared or Semaphore(n).
// A waiter is granted only when it conflicts with no holder and no
// earlier waiter (strict FIFO), so readers never overtake a queued writer.
type Mode struct {
	kind  protocol.Mode
	limit uint32
}

var (
	// Exclusive conflicts with every other claim on the name: version
	// 1's only mode.
	Exclusive = Mode{kind: protocol.ModeExclusive}
	// Shared conflicts with exclusive claims only: any number of shared
	// holders at once.
	Shared = Mode{kind: protocol.ModeShared}
)

// Semaphore admits at most n holders of the name at once. Every claim on
// the name must give the same n (else protocol.ErrLimitMismatch), and a
// semaphore name takes no exclusive or shared claims
// (protocol.ErrModeConflict). n must be at least 1.
func Semaphore(n uint32) Mode { return Mode{kind: protocol.ModeSemaphore, limit: n} }

// Limit returns the semaphore limit, 0 for the other modes.
func (m Mode) Limit() uint32 { return m.limit }

func (m Mode) String() string {
	if m.kind == protocol.ModeSemaphore {
		return fmt.Sprintf("semaphore(%d)", m.limit)
	}
	return m.kind.String()
}

// Claim is a held claim on a lock, returned once it is held by
// Client.Acquire and TryAcquire, or by a Session's Acquire, TryAcquire and
// AcquireValue. Its methods are safe for concurrent use.
//
// A claim of Client.Acquire (and every claim of a Session fallen back to
// version 1) is exclusive and has a connection of its own, with a reader
// goroutine and a heartbeat timer that Release stops: its lease is its
// own failure detector, and it has no ID and no value. A claim on a
// Session owns no goroutine or timer: the session's reader and PING
// timer serve every claim, and the session lease is the failure detector
// of them all (see Session).
type Claim struct {
	s    *Session
	id   uint32
	name string
	mode Mode
	// lock is the claim's own connection: Client.Acquire's (s is nil
	// then), or every claim's after a fallback to version 1.
	lock *v1Lock

	ready chan struct{} // closed when held or ended
	lost  chan struct{} // closed when ended

	// Guarded by s.mu.
	held      bool
	token     uint64
	ended     bool
	readyDone bool
	err       error
	releasing bool          // RELEASE sent
	dropped   bool          // Release called while held: Lost closed, RELEASED awaited
	released  chan struct{} // made by Released, closed when ended
	workDone  bool          // the guarded work has stopped (Release called)
	counted   bool          // counted in s.holding after a give-up
	onLost    func(error)   // Do's cancel of fn's context
	value     *string       // the claim's value, nil for a claim made without one (watch.go)
	proclaims []chan error  // SetValue calls waiting for PROCLAIMED, in order

	// Resumption (resume.go), guarded by s.mu.
	noWait      bool           // asked for BUSY rather than a queue place
	queued      bool           // answered QUEUED
	ticket      uint64         // the queue ticket of its latest QUEUED (0: none)
	home        *resumeIdent   // the session the claim lives on: a re-assertion's prior
	reassert    bool           // its re-assertion is due or unanswered
	until       time.Time      // while reassert: its give-up, its last anchor + 0.8 × lease
	wantRelease bool           // released while the connection was down: RELEASE after its re-assertion
	sentOn      *resumeIdent   // the session that sent its unanswered re-assertion
	cutOff      []*resumeIdent // the sessions its re-assertions were cut off on since home, oldest first
	names       []*resumeIdent // the sessions its re-assertions name in turn (resume.go)
	at          int            // the index in names of the one its unanswered re-assertion names
	pause       time.Duration  // the pause after its latest round of names
	named       *resumeIdent   // the prior session its unanswered re-assertion names
	sentTicket  bool           // that re-assertion carries its queue ticket
}

// Name returns the name of the lock.
func (cl *Claim) Name() string { return cl.name }

// ID returns the claim id on its session, as the admin API lists it with
// Session.ID. It is 0 for a claim with a connection of its own
// (Client.Acquire's, or after a fallback to version 1), which has no
// claim id.
func (cl *Claim) ID() uint32 { return cl.id }

// Mode returns the claim's mode: Exclusive for a claim of Client.Acquire.
func (cl *Claim) Mode() Mode { return cl.mode }

// Token returns the fencing token of the grant. Tokens of one lock
// increase with every grant; pass the token to storage that can reject
// writes carrying an older one. Every holder, shared ones included, has
// its own; see docs/protocol-v2-client.md ("v2 fencing with several
// holders") for how a resource uses the tokens of several readers.
func (cl *Claim) Token() uint64 {
	if cl.lock != nil {
		return cl.lock.Token()
	}
	cl.s.mu.Lock()
	defer cl.s.mu.Unlock()
	return cl.token
}

// Lost returns a channel closed the moment the claim stops being held:
// a heartbeat timeout, a lost connection, an ERROR frame or a protocol
// violation (for a claim on a Session: the session's loss, see Session),
// REVOKED by an administrator, or Release. The guarded work must stop
// then; after a heartbeat timeout, call Release once it has stopped (see
// CloseBy).
func (cl *Claim) Lost() <-chan struct{} {
	if cl.lock != nil {
		return cl.lock.Lost()
	}
	return cl.lost
}

// Err returns why the claim was lost, or nil while it is held and after
// a Release that came first: ErrHeartbeatTimeout, ErrConnectionClosed,
// ErrProtocolViolation (each possibly wrapped with details), a
// *ServerError (an ERROR frame, or REVOKED's code) or, on a Session,
// ErrSessionClosed; on a resumable session also ErrReassertRefused or
// ErrNotResumed.
func (cl *Claim) Err() error {
	if cl.lock != nil {
		return cl.lock.Err()
	}
	cl.s.mu.Lock()
	defer cl.s.mu.Unlock()
	return cl.err
}

// Release gives the claim up: the claim stops being held at once (Lost
// is closed, Err stays nil). It is idempotent and safe to call
// concurrently. It returns nil, or why the claim had been lost before
// Release was called (as Err), so a caller can tell whether the claim was
// held throughout. ctx is not waited on: neither way of releasing is
// acknowledged before Release returns.
//
// A claim with a connection of its own (Client.Acquire's, or after a
// fallback to version 1) is released by closing that connection, and the
// server promotes the next waiter at once; after a heartbeat timeout,
// this closes the connection that was kept open for the work to stop.
// Release waits until the claim's goroutines have stopped.
//
// A claim on a Session is released by sending RELEASE, without waiting
// for the server's RELEASED; the server applies the release when the
// frame arrives. The server applies one session's frames in order, so
// every later request on this session finds the claim released; another
// session may be granted the lock a round trip later at most, as after a
// close. Released tells when the server has applied it. Release waits
// only for its own write, if it makes one (frames of concurrent requests
// share writes: when another goroutine's write is in progress, RELEASE
// goes out in that writer's next write, in order). It also tells the
// Session that the claim's work has stopped: after a give-up, the
// connection closes once every held claim's work has stopped.
func (cl *Claim) Release(ctx context.Context) error {
	if cl.lock != nil {
		err := cl.lock.release()
		if cl.s != nil { // a fallen-back Session's: it closes no more
			cl.s.mu.Lock()
			delete(cl.s.v1claims, cl)
			cl.s.mu.Unlock()
		}
		return err
	}
	s := cl.s
	s.mu.Lock()
	closeNow := s.workStopped(cl)
	if cl.ended || cl.dropped {
		err := cl.err
		s.mu.Unlock()
		if closeNow {
			s.closeConn()
		}
		return err
	}
	flush := cl.releaseLocked()
	cl.dropped = true
	close(cl.lost)
	s.mu.Unlock()
	if closeNow {
		s.closeConn()
	}
	if flush {
		s.flush()
	}
	return nil
}

// Released returns a channel closed once the claim is over on the
// server too: the server's RELEASED for it has arrived, or it ended
// otherwise (REVOKED, the session's end, which releases every claim).
// After Release, until then, another session may still find the lock
// held. For a claim with a connection of its own (Client.Acquire's, or
// after a fallback to version 1), whose release is a close that the
// server does not acknowledge, it is Lost: closed by Release.
func (cl *Claim) Released() <-chan struct{} {
	if cl.lock != nil {
		return cl.lock.Lost()
	}
	cl.s.mu.Lock()
	defer cl.s.mu.Unlock()
	if cl.released == nil {
		cl.released = make(chan struct{})
		if cl.ended {
			close(cl.released)
		}
	}
	return cl.released
}

// CloseBy returns the time by which the connection is closed after a
// heartbeat timeout, whether or not Release was called: the confirmation
// anchor + the lease (docs/protocol.md, client obligation 3). Until then
// the server keeps the lock for this claim, so work that stops before
// CloseBy and then calls Release is never overlapped by the next holder.
// It is meaningful once Lost is closed by a heartbeat timeout.
//
// For a claim with a connection of its own (Client.Acquire's, or after
// a fallback to version 1) it is that connection's, and it also holds
// after a held lock's ERROR 0x01 (a server shutting down, or a cluster
// moving the name), which keeps the connection open in the same way.
// For a claim on a Session it is the Session's CloseBy: after the
// session's give-up, the connection that every claim on it shares is
// closed by then; a claim that ended otherwise (REVOKED, or the
// session's ERROR) has no such grace.
func (cl *Claim) CloseBy() time.Time {
	if cl.lock != nil {
		return cl.lock.CloseBy()
	}
	return cl.s.CloseBy()
}

// releaseLocked sends RELEASE unless the claim has ended or one was sent.
// It reports whether the caller must flush. s.mu is held.
func (cl *Claim) releaseLocked() (flush bool) {
	s := cl.s
	if cl.ended || cl.releasing || s.err != nil {
		return false
	}
	if s.resuming {
		cl.wantRelease = true // sent after its re-assertion
		return false
	}
	if err := s.rule.SentRelease(cl.id, time.Now()); err != nil {
		return false // the rule has the claim ended already
	}
	cl.releasing = true
	s.out = protocol.AppendRelease(s.out, cl.id)
	return s.startWrite()
}

// resolve closes ready once. s.mu is held.
func (cl *Claim) resolve() {
	if !cl.readyDone {
		cl.readyDone = true
		close(cl.ready)
	}
}

// endLocked ends the claim once: unless Release came first, the cause
// is recorded, Do's function is told (before anything can hand the lock
// on) and Lost is closed; Released is closed. s.mu is held.
func (cl *Claim) endLocked(cause error) {
	if cl.ended {
		return
	}
	cl.ended = true
	if !cl.dropped { // else Release came first: Lost is closed, Err nil
		cl.err = cause
		if hook := cl.s.c.cfg.OnLost; hook != nil && cause != nil && cl.held {
			hook(cl.name, cl.token, cause)
		}
		if cl.onLost != nil && cause != nil {
			cl.onLost(cause)
		}
		close(cl.lost)
	}
	if len(cl.proclaims) > 0 {
		err := cause
		if err == nil {
			err = ErrClaimEnded
		}
		cl.proclaimedAll(err)
	}
	cl.resolve()
	if cl.released != nil {
		close(cl.released)
	}
}

// Acquire claims the lock name in mode m on the session and waits in the
// lock's queue until it is held, the claim fails, the session is lost, or
// ctx is done. ctx bounds only the acquisition.
//
// When ctx is done first, the claim leaves the queue (a RELEASE is sent,
// not waited for) and Acquire returns ctx.Err(). A name or mode that the
// protocol rejects is reported with the protocol's sentinel without a
// round trip; the server's refusal is a *ServerError (for example
// protocol.ErrLimitMismatch, protocol.ErrNotAuthorized) and leaves the
// session open. On a session that has ended, Acquire returns why it
// ended (Session.Err) at once; when Temporary reports that error, a new
// session may succeed, never this one.
func (s *Session) Acquire(ctx context.Context, name string, m Mode) (*Claim, error) {
	return s.claim(ctx, name, m, false, nil)
}

// TryAcquire is Acquire without waiting: if the claim cannot be granted
// at once, the server answers BUSY and TryAcquire returns ErrBusy.
func (s *Session) TryAcquire(ctx context.Context, name string, m Mode) (*Claim, error) {
	return s.claim(ctx, name, m, true, nil)
}

// claim makes a claim; value is nil for a claim without a value.
func (s *Session) claim(ctx context.Context, name string, m Mode, noWait bool, value *string) (*Claim, error) {
	if s.rt != nil {
		return s.rt.claim(ctx, name, m, noWait, value)
	}
	return s.claimHere(ctx, name, m, noWait, value)
}

// claimHere is claim on this session's own connection.
func (s *Session) claimHere(ctx context.Context, name string, m Mode, noWait bool, value *string) (*Claim, error) {
	if err := protocol.ValidateName(name); err != nil {
		return nil, err
	}
	f := protocol.Frame{Mode: m.kind, Limit: m.limit, Name: name}
	if value != nil {
		f.Value = *value
	}
	if err := protocol.ValidateClaim(f); err != nil {
		return nil, err
	}
	if value != nil && s.v1 {
		return nil, ErrValuesNotSupported
	}
	if s.v1 {
		return s.claimV1(ctx, name, m, noWait)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cl := &Claim{s: s, name: name, mode: m, noWait: noWait, value: value, ready: make(chan struct{}), lost: make(chan struct{})}
	var flags uint8
	if noWait {
		flags = protocol.ClaimNoWait
	}
	s.mu.Lock()
	if err := s.waitResumedLocked(ctx); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	if s.err != nil {
		s.mu.Unlock()
		return nil, s.err
	}
	if value != nil && !s.values {
		s.mu.Unlock()
		return nil, ErrValuesNotSupported
	}
	cl.home = s.ident
	cl.id = s.allocID()
	if err := s.rule.SentClaim(cl.id, noWait, time.Now()); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	s.claims[cl.id] = cl
	if value != nil {
		s.out = protocol.AppendClaimValue(s.out, cl.id, m.kind, m.limit, flags, name, *value)
	} else {
		s.out = protocol.AppendClaim(s.out, cl.id, m.kind, m.limit, flags, name)
	}
	flush := s.startWrite()
	s.mu.Unlock()
	if flush {
		s.flush()
	}

	select {
	case <-cl.ready:
	case <-ctx.Done():
		s.mu.Lock()
		cl.workDone = true
		flush := cl.releaseLocked()
		s.mu.Unlock()
		if flush {
			s.flush()
		}
		return nil, ctx.Err()
	}
	s.mu.Lock()
	if cl.ended {
		// No handle reaches the caller: no work will run under it.
		closeNow := s.workStopped(cl)
		s.mu.Unlock()
		if closeNow {
			s.closeConn()
		}
		return nil, cl.err
	}
	s.mu.Unlock()
	return cl, nil
}

// claimV1 makes an exclusive claim on a version 1 connection of its own.
func (s *Session) claimV1(ctx context.Context, name string, m Mode, noWait bool) (*Claim, error) {
	if m.kind != protocol.ModeExclusive {
		return nil, ErrServerTooOld
	}
	s.mu.Lock()
	err := s.err
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	l, err := s.c.acquire(ctx, name, s.opts.Lease, noWait)
	if err != nil {
		return nil, err
	}
	cl := &Claim{s: s, name: name, mode: m, lock: l}
	s.mu.Lock()
	if s.err != nil { // closed meanwhile
		s.mu.Unlock()
		l.release()
		return nil, s.err
	}
	s.v1claims[cl] = struct{}{}
	s.mu.Unlock()
	return cl, nil
}

// Do claims the lock name in mode m on the session, waits in its queue
// as long as ctx allows, and runs fn while the claim is held; it releases
// the claim when fn returns or panics. For example:
//
//	s.Do(ctx, "orders", baton.Exclusive, write)   // one writer
//	s.Do(ctx, "orders", baton.Shared, read)       // many readers
//	s.Do(ctx, "gpu", baton.Semaphore(4), train)   // at most four holders
//
// fn's context is cancelled the moment the claim stops being held
// (REVOKED, session loss; context.Cause tells which), or when ctx is
// cancelled, always before the connection is closed: after a give-up the
// connection stays open until fn returns, at most until the session's
// CloseBy. Like Client.Do, if the claim was lost while fn ran, Do returns
// errors.Join(fnErr, cause); if fn did not run, Do returns why.
func (s *Session) Do(ctx context.Context, name string, m Mode, fn func(ctx context.Context, token uint64) error) error {
	cl, err := s.Acquire(ctx, name, m)
	if err != nil {
		return err
	}
	return cl.run(ctx, fn)
}

// run runs fn under the held claim and releases it.
func (cl *Claim) run(ctx context.Context, fn func(ctx context.Context, token uint64) error) error {
	defer cl.Release(context.Background()) // also when fn panics
	if err := ctx.Err(); err != nil {
		return err
	}
	if cl.lock != nil {
		_, err := cl.lock.run(ctx, fn)
		return err
	}
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	s := cl.s
	s.mu.Lock()
	if !cl.ended && cl.reassert && !time.Now().Before(cl.until) {
		// Its re-assertion after a broken connection is overdue: the
		// claim is lost, the session lives on.
		cl.endLocked(notResumed(s.breakCause, s.lastAttempt))
	}
	if !cl.ended && !time.Now().Before(s.rule.Deadline()) {
		// The give-up is due but the reader has not seen it yet (a
		// process frozen since the grant): give up now, before fn starts.
		closeNow := s.loseLocked(ErrHeartbeatTimeout)
		s.mu.Unlock()
		if closeNow {
			s.closeConn()
		}
		return cl.Err()
	}
	if cl.ended { // lost between the grant and now: fn must not start
		s.mu.Unlock()
		return cl.err
	}
	cl.onLost = cancel
	token := cl.token
	s.mu.Unlock()
	fnErr := fn(fctx, token)
	if cause := cl.Err(); cause != nil {
		return errors.Join(fnErr, cause)
	}
	return fnErr
}
