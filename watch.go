package baton

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/batonlock/baton/internal/clientrule"
	"github.com/batonlock/baton/protocol"
)

// Values and watches (docs/protocol-v2-watches.md, "v2 values and watches";
// docs/election.md): a claim may carry a small value (AcquireValue,
// Claim.SetValue), and a session may watch a name's holders
// (Session.Watch) without claiming it. Every session asks for both in
// its HELLO; a server before them refuses the flag (ERROR 0x1e) and the
// session opens again without it, and then every call here fails with
// ErrValuesNotSupported.

var (
	// ErrValuesNotSupported: the server does not give values and watches
	// (it refused HELLO's values flag, or speaks version 1 only). It wraps
	// protocol.ErrUnsupportedFeature.
	ErrValuesNotSupported = fmt.Errorf("%w: the server does not support values and watches", protocol.ErrUnsupportedFeature)
	// ErrClaimEnded: Claim.SetValue on a claim that had ended (released,
	// or ended by the server while the PROCLAIM was on its way).
	ErrClaimEnded = errors.New("baton: the claim has ended")
	// ErrWatchClosed: Watch.Close ended the watch.
	ErrWatchClosed = errors.New("baton: watch closed")
)

// errOwnConnValue is SetValue on a claim with a connection of its own:
// its version 1 connection has no frame for a value, whatever the server.
var errOwnConnValue = fmt.Errorf("%w: a claim of Client.Acquire (or of a session fallen back to version 1) carries no value; make it with Session.AcquireValue", ErrValuesNotSupported)

// maxWatchQueue bounds the states a Watch keeps for a reader that has
// fallen behind; past it, a new state replaces the latest one queued, so
// the reader misses intermediate states but always gets the latest.
const maxWatchQueue = 1024

// Holder is one holder of a watched name, as the server reports it.
type Holder struct {
	Token    uint64        // the holder's fencing token
	Mode     protocol.Mode // exclusive, shared or semaphore
	Value    string        // the claim's value (AcquireValue, SetValue)
	Label    string        // the holder session's label
	Identity string        // the holder's certificate identity, "" without mTLS
}

// AcquireValue is Acquire with a value: the claim carries value, at most
// protocol.MaxValueLen bytes (longer is protocol.ErrValueTooLong, without
// a round trip), which the watchers of the name are told with the holder
// once it is granted. The value goes with the claim: it is kept through a
// resume and is gone when the claim ends. A server without values and
// watches gives ErrValuesNotSupported.
func (s *Session) AcquireValue(ctx context.Context, name string, m Mode, value string) (*Claim, error) {
	return s.claim(ctx, name, m, false, &value)
}

// SetValue gives the claim, held or still queued, a new value and waits
// until the server has it (PROCLAIMED): the name's watchers are told the
// new value before SetValue returns. A value over protocol.MaxValueLen is
// protocol.ErrValueTooLong, without a round trip. A claim that has ended
// gives ErrClaimEnded (or why it was lost); a server without values
// ErrValuesNotSupported, and so does a claim with a connection of its
// own (Client.Acquire's), which carries no value. When ctx ends first,
// SetValue returns ctx.Err() and the value may still be set.
func (cl *Claim) SetValue(ctx context.Context, value string) error {
	if len(value) > protocol.MaxValueLen {
		return protocol.ErrValueTooLong
	}
	if cl.lock != nil {
		return errOwnConnValue
	}
	s := cl.s
	s.mu.Lock()
	if err := s.waitResumedLocked(ctx); err != nil {
		s.mu.Unlock()
		return err
	}
	if cl.ended || cl.dropped {
		err := cl.err
		s.mu.Unlock()
		if err == nil {
			err = ErrClaimEnded
		}
		return err
	}
	if !s.values {
		s.mu.Unlock()
		return ErrValuesNotSupported
	}
	if err := s.rule.SentProclaim(cl.id, time.Now()); err != nil {
		s.mu.Unlock()
		return fmt.Errorf("%w: %w", ErrClaimEnded, err)
	}
	done := make(chan error, 1)
	cl.proclaims = append(cl.proclaims, done)
	cl.value = &value // a re-assertion carries the latest value
	s.out = protocol.AppendProclaim(s.out, cl.id, value)
	flush := s.startWrite()
	s.mu.Unlock()
	if flush {
		s.flush()
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// proclaimed answers the oldest SetValue waiting: PROCLAIMED's status,
// or the server's refusal. s.mu is held.
func (cl *Claim) proclaimed(st protocol.ProclaimStatus, refused error) {
	if len(cl.proclaims) == 0 {
		return // answered already: the claim ended meanwhile
	}
	done := cl.proclaims[0]
	cl.proclaims = cl.proclaims[1:]
	switch {
	case refused != nil:
		done <- refused
	case st == protocol.ProclaimNotInUse:
		err := cl.err
		if err == nil {
			err = ErrClaimEnded
		}
		done <- err
	default:
		done <- nil
	}
}

// proclaimedAll answers every SetValue waiting with err. s.mu is held.
func (cl *Claim) proclaimedAll(err error) {
	for _, done := range cl.proclaims {
		done <- err
	}
	cl.proclaims = nil
}

// Watch is a watch of a name's holders, made by Session.Watch. Its
// channel (Changes) delivers the holders after each change of them, in
// the order the server made the changes, starting with the holders when
// the watch began: for an exclusive lock at most one holder, whose token
// increases from one state to the next. Its methods are safe for
// concurrent use.
//
// A state is delivered only once the server has said the watch is in
// step (after its answer to WATCH, and after a reset). When the watch
// has to start again (its connection resumed, the name's owner's
// session reopened, or the server dropped it as a slow watcher), the
// holders that the new start reports with a token below the highest one
// delivered, and that the last state delivered did not have, are
// dropped, and a state equal to the last one delivered is not delivered
// again: nothing older than what was delivered comes after it.
//
// A reader that falls more than 1024 states behind misses intermediate
// states; it always gets the latest.
type Watch struct {
	s    *Session // the session Watch was called on
	name string
	c    chan []Holder
	done chan struct{} // closed when the watch ends
	wake chan struct{} // tells the pump a state is queued

	mu        sync.Mutex
	sub       *watchSub  // the binding in use; nil while there is none
	queue     [][]Holder // states not yet handed to the reader
	last      []Holder   // the latest state queued
	delivered bool       // a state was queued
	mark      uint64     // the highest token of a state queued
	ended     bool
	err       error // why it ended; ErrWatchClosed after Close
}

// watchSub is a Watch's WATCH on one connection of a session: the id it
// has there and the holders reported so far.
type watchSub struct {
	w        *Watch
	s        *Session // the session whose connection carries it
	id       uint32
	holders  []Holder
	synced   bool       // the holders are the name's: later changes follow
	answered bool       // the WATCH was answered (synced or refused)
	ready    chan error // the answer to the first WATCH: nil once synced
	closing  bool       // RELEASE sent
}

// Watch starts a watch of name's holders (see Watch) and waits until the
// server has answered with the current holders, which are then the
// first state on the channel. A name the protocol rejects is reported
// with its sentinel without a round trip; the server's refusal is a
// *ServerError (protocol.ErrNotAuthorized, or protocol.ErrLimitReached:
// a watch counts against the session's claims); a server without values
// and watches gives ErrValuesNotSupported. ctx bounds only the start.
//
// On a routed session (a cluster) the watch goes to the name's owner,
// as a claim does; when the session with the owner is lost, the watch
// starts again on a new one, and ends only when this Session ends.
// Otherwise it ends with the session, or when the server ends it (an
// access list reload). Changes is closed then, and Err tells why.
func (s *Session) Watch(ctx context.Context, name string) (*Watch, error) {
	if err := protocol.ValidateName(name); err != nil {
		return nil, err
	}
	if s.v1 {
		return nil, ErrValuesNotSupported
	}
	w := &Watch{s: s, name: name, c: make(chan []Holder), done: make(chan struct{}), wake: make(chan struct{}, 1)}
	if err := w.bind(ctx); err != nil {
		return nil, err
	}
	go w.pump()
	return w, nil
}

// Name returns the watched name.
func (w *Watch) Name() string { return w.name }

// Changes returns the channel of states: the holders in the order they
// were granted, empty when nobody holds the name. It is closed when the
// watch ends.
func (w *Watch) Changes() <-chan []Holder { return w.c }

// Done returns a channel closed when the watch ends.
func (w *Watch) Done() <-chan struct{} { return w.done }

// Err returns why the watch ended (ErrWatchClosed after Close, the
// session's loss, the server's REVOKED), or nil while it is live.
func (w *Watch) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Close ends the watch: the server is told (RELEASE of its id, not
// waited for) and Changes is closed. It is idempotent.
func (w *Watch) Close() error {
	ws := w.end(ErrWatchClosed)
	if ws != nil {
		ws.s.releaseWatch(ws)
	}
	return nil
}

// end ends the watch once with cause and returns its binding, if any.
func (w *Watch) end(cause error) *watchSub {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return nil
	}
	w.ended, w.err = true, cause
	ws := w.sub
	w.sub = nil
	close(w.done)
	return ws
}

// pump hands the queued states to the reader.
func (w *Watch) pump() {
	defer close(w.c)
	for {
		w.mu.Lock()
		if w.ended {
			w.mu.Unlock()
			return
		}
		if len(w.queue) == 0 {
			w.mu.Unlock()
			select {
			case <-w.wake:
			case <-w.done:
			}
			continue
		}
		st := w.queue[0]
		w.queue[0] = nil
		w.queue = w.queue[1:]
		w.mu.Unlock()
		select {
		case w.c <- st:
		case <-w.done:
			return
		}
	}
}

// offer queues the state that ws's holders now are, unless it is older
// than what was delivered (see Watch). s.mu of ws's session is held.
func (w *Watch) offer(ws *watchSub) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sub != ws || w.ended {
		return
	}
	st := make([]Holder, 0, len(ws.holders))
	for _, h := range ws.holders {
		if h.Token > w.mark || slices.Contains(w.last, h) || slices.ContainsFunc(w.last, func(o Holder) bool { return o.Token == h.Token }) {
			st = append(st, h)
		}
	}
	if w.delivered && slices.Equal(st, w.last) {
		return
	}
	for _, h := range st {
		w.mark = max(w.mark, h.Token)
	}
	w.last, w.delivered = st, true
	if len(w.queue) >= maxWatchQueue {
		w.queue[len(w.queue)-1] = st
	} else {
		w.queue = append(w.queue, st)
	}
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// bind starts the watch on the session that serves its name: this one,
// or on a routed session the owner's (once more after the ring was
// asked again when the node reached does not own the name).
func (w *Watch) bind(ctx context.Context) error {
	s := w.s
	if s.rt == nil {
		return s.watchHere(ctx, w)
	}
	for attempt := 0; ; attempt++ {
		sub := s.rt.sessionFor(ctx, w.name)
		err := sub.watchHere(ctx, w)
		if err == nil || attempt > 0 || ctx.Err() != nil {
			return err
		}
		var se *ServerError
		if !errors.As(err, &se) || se.Code != protocol.CodeNotOwner {
			return err
		}
		s.rt.c.rc.markStale()
		s.rt.c.learnRing(ctx, s.opts.Lease)
	}
}

// watchHere sends WATCH for w on this session's connection and waits for
// its answer.
func (s *Session) watchHere(ctx context.Context, w *Watch) error {
	if s.v1 {
		return ErrValuesNotSupported
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if err := s.waitResumedLocked(ctx); err != nil {
		s.mu.Unlock()
		return err
	}
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return err
	}
	if !s.values {
		s.mu.Unlock()
		return ErrValuesNotSupported
	}
	ws := &watchSub{w: w, s: s, ready: make(chan error, 1)}
	w.mu.Lock()
	if w.ended {
		err := w.err
		w.mu.Unlock()
		s.mu.Unlock()
		return err
	}
	w.sub = ws
	w.mu.Unlock()
	flush := s.sendWatchLocked(ws, time.Now())
	s.mu.Unlock()
	if flush {
		s.flush()
	}
	select {
	case err := <-ws.ready:
		if err != nil {
			w.mu.Lock()
			w.sub = nil // the watch did not start: nothing is bound
			w.mu.Unlock()
		}
		return err
	case <-ctx.Done():
		// The watch ends: the WATCH sent (or the one a slow-watcher drop
		// sent in its place) is released.
		if cur := w.end(ctx.Err()); cur != nil {
			cur.s.releaseWatch(cur)
		}
		return ctx.Err()
	}
}

// failWatch ends ws with err: the caller of its first WATCH is told
// (watchHere), or its Watch loses the binding (subLost). s.mu is held.
func (s *Session) failWatch(ws *watchSub, err error) {
	if !ws.answered {
		ws.answered = true
		ws.ready <- err
		return
	}
	s.subLost(ws, err)
}

// sendWatchLocked sends ws's WATCH with a new id and reports whether the
// caller must flush. s.mu is held.
func (s *Session) sendWatchLocked(ws *watchSub, now time.Time) (flush bool) {
	if s.watches == nil {
		s.watches = map[uint32]*watchSub{}
	}
	ws.id = s.allocID()
	if err := s.rule.SentWatch(ws.id, now); err != nil {
		panic("baton: WATCH with an id in use: " + err.Error())
	}
	s.watches[ws.id] = ws
	s.out = protocol.AppendWatch(s.out, ws.id, ws.w.name)
	return s.startWrite()
}

// releaseWatch ends ws on the server (RELEASE of its id, not waited for).
func (s *Session) releaseWatch(ws *watchSub) {
	s.mu.Lock()
	if s.watches[ws.id] != ws || ws.closing {
		s.mu.Unlock()
		return
	}
	ws.closing = true
	if s.err != nil || s.resuming || s.rule.SentRelease(ws.id, time.Now()) != nil {
		// Not on the wire now: a resume does not send it again, and a
		// session's end ends it on the server.
		delete(s.watches, ws.id)
		s.checkDrained()
		s.mu.Unlock()
		return
	}
	s.out = protocol.AppendRelease(s.out, ws.id)
	flush := s.startWrite()
	s.mu.Unlock()
	if flush {
		s.flush()
	}
}

// watchEvent acts on a frame for watch ws and reports whether the
// caller must flush. A watch that is over stays in s.watches until its
// id is free (a RELEASED may still be due). s.mu is held.
func (s *Session) watchEvent(ws *watchSub, ev clientrule.Event, f protocol.Frame) (flush bool) {
	w := ws.w
	switch ev.Kind {
	case protocol.TypeChange:
		if ws.closing {
			break
		}
		c := f.ChangeOf()
		switch c.Kind {
		case protocol.ChangeHeld:
			ws.holders = append(ws.holders, Holder{Token: c.Token, Mode: c.Mode, Value: c.Value, Label: c.Label, Identity: c.Identity})
		case protocol.ChangeValue:
			if i := slices.IndexFunc(ws.holders, func(h Holder) bool { return h.Token == c.Token }); i >= 0 {
				ws.holders[i].Value = c.Value
			}
		case protocol.ChangeFreed:
			ws.holders = slices.DeleteFunc(ws.holders, func(h Holder) bool { return h.Token == c.Token })
		case protocol.ChangeReset:
			ws.holders, ws.synced = ws.holders[:0], false
		case protocol.ChangeSynced:
			ws.synced = true
		}
		if ev.Answers == clientrule.ReqWatch && !ws.answered {
			ws.answered = true
			ws.ready <- nil
		}
		if ws.synced && c.Kind != protocol.ChangeReset {
			w.offer(ws)
		}
	case protocol.TypeRefused:
		// The WATCH refused: the first one's caller is told; a later
		// one's (after a resume) ends the watch.
		ws.closing = true // over: the id is forgotten once free
		s.failWatch(ws, &ServerError{Code: ev.Code, Reason: ev.Reason})
	case protocol.TypeRevoked:
		if ws.closing {
			break
		}
		ws.closing = true
		if ev.Code != protocol.CodeSlowWatcher {
			s.failWatch(ws, &ServerError{Code: ev.Code, Reason: ev.Reason})
			break
		}
		// Dropped for falling behind: start again from the current
		// state, on a new id (older states are filtered out). A first
		// WATCH dropped before its answer hands its caller on.
		nws := &watchSub{w: w, s: s, ready: ws.ready, answered: ws.answered}
		w.mu.Lock()
		live := w.sub == ws && !w.ended
		if live {
			w.sub = nws
		}
		w.mu.Unlock()
		if live {
			flush = s.sendWatchLocked(nws, time.Now())
		}
	}
	if s.rule.Free(ws.id) { // RELEASED, REVOKED or REFUSED, nothing unanswered
		delete(s.watches, ws.id)
	}
	return flush
}

// subLost handles the end of ws's binding by cause: on a routed session
// whose owner's session was lost, the watch starts again on a new one
// (rebind); otherwise the watch ends. s.mu of ws's session is held.
func (s *Session) subLost(ws *watchSub, cause error) {
	w := ws.w
	w.mu.Lock()
	if w.sub != ws || w.ended {
		w.mu.Unlock()
		return
	}
	w.sub = nil
	// On a routed Session the watch starts again through the router
	// when its session with the owner is lost (the routed Session's
	// Close closes that session too, and ends the watch), or when the
	// node its session now reaches refuses it for a name it does not
	// serve (a resume that landed on another node).
	var se *ServerError
	refused := errors.As(cause, &se) && (se.Code == protocol.CodeNotOwner || se.Code == protocol.CodeUnsupportedFeature)
	again := w.s.rt != nil && ((ws.s != w.s && s.err != nil && !errors.Is(cause, ErrSessionClosed)) || (refused && s.err == nil))
	w.mu.Unlock()
	if again {
		go w.rebind(cause)
		return
	}
	w.end(cause)
}

// rebind starts the watch again after the session it was on was lost,
// with backoff, until it starts, the watch ends, or the Session the
// watch was made on ends.
func (w *Watch) rebind(cause error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-w.done:
		case <-w.s.lost:
		case <-ctx.Done():
		}
		cancel()
	}()
	backoff := minResumeBackoff
	for {
		if err := w.s.Err(); err != nil {
			w.end(err)
			return
		}
		err := w.bind(ctx)
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			if err := w.s.Err(); err != nil {
				w.end(err)
			}
			return
		}
		var se *ServerError
		if errors.Is(err, ErrValuesNotSupported) || (errors.As(err, &se) && !se.Temporary() && se.Code != protocol.CodeUnsupportedFeature) {
			w.end(err)
			return
		}
		if sleep(ctx, jitter(backoff)) != nil {
			continue // the loop's checks end the watch
		}
		backoff = min(2*backoff, maxResumeBackoff)
	}
}

// endWatchesLocked ends the binding of every watch on the session, which
// has ended with cause (subLost). s.mu is held.
func (s *Session) endWatchesLocked(cause error) {
	for _, id := range sortedLive(s.watches, func(*watchSub) bool { return false }) {
		s.failWatch(s.watches[id], cause)
	}
	clear(s.watches)
}

// rewatchLocked sends every watch of the session again on the new
// connection of a resume, each from scratch: its state is delivered
// once the new answer is in, filtered as the Watch doc says. A watch
// being closed is dropped. s.mu is held; the caller flushes.
func (s *Session) rewatchLocked(now time.Time) {
	for _, id := range sortedLive(s.watches, func(ws *watchSub) bool { return ws.closing }) {
		ws := s.watches[id]
		ws.holders, ws.synced = ws.holders[:0], false
		if err := s.rule.SentWatch(id, now); err != nil {
			panic("baton: a watch's id in use after a resume: " + err.Error())
		}
		s.out = protocol.AppendWatch(s.out, id, ws.w.name)
	}
}
