package server

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/batonlock/baton/internal/clustercore"
	"github.com/batonlock/baton/internal/rangemirror"
	"github.com/batonlock/baton/protocol"
)

// The upstream side of relaying a version 2 session (docs/design/2026-12-07-cluster-relay.md,
// "Relaying a version 2 session" and its "When the owner dies"): one
// upstream session per client session and owner, opened on the first
// claim for that owner (upstreamLocked). Its writer sends the relayed
// requests in order (write, flush); its reader matches each answer from
// the owner with the oldest request in flight and passes pushes on
// (read, handle); when the owner ends it, dies or falls silent, fail
// answers what was in flight and re-asserts or revokes its claims. What
// it decides is in internal/clustercore: the requests in flight and the
// confirmation in Ledger (relay_upstream.go), what each owner's frame is
// and where an answer goes (upstream_frames.go), what the owner's loss
// does (upstream_fail.go), what becomes of each claim in Claim
// (relay_claims.go). The client's side (the ordered outbox and the
// routing of each CLAIM) is in relay2.go.

// upReq is a request sent on an upstream, waiting for its answer.
type upReq struct {
	// Sent is what the ledger matches answers with: the kind, the send
	// time, and the claim id or RANGE req the answer names.
	clustercore.Sent
	slot *outEntry     // CLAIM, RELEASE, PROCLAIM, RANGE: where its answer goes
	rc   *relayedClaim // CLAIM, RELEASE, PROCLAIM
	// CLAIM: what it asks (a re-assertion with its fields), to hold it
	// again if the upstream cannot be opened.
	f protocol.Frame
	// RANGE: the key of an adoption or a re-assertion (rangemove.go; f
	// says which), whose req (ID) is 0.
	adopt string
}

// sendClaim sends CLAIM f on u; slot is where its answer goes (nil for a
// held claim relayed late).
func (u *upstream) sendClaim(f protocol.Frame, slot *outEntry, rc *relayedClaim) {
	rc.Req = f
	u.send(protocol.AppendFrame(nil, f), upReq{Sent: clustercore.Sent{Kind: protocol.TypeClaim, At: time.Now()}, slot: slot, rc: rc, f: f})
}

// claim returns the CLAIM frame r sent.
func (r upReq) claim() protocol.Frame {
	f := r.f
	f.Claim = r.rc.ID
	return f
}

// upstream is a version 2 session to an owner, on behalf of one client
// session. Its fields are guarded by the client session's omu, except
// the channels.
type upstream struct {
	s    *session
	addr string

	// led holds the requests sent and not answered, and the upstream's
	// confirmation (clustercore.Ledger).
	led     clustercore.Ledger[upReq]
	wbuf    []byte // frames to send
	spare   []byte // the buffer last written, reused for wbuf
	writing bool   // a goroutine is bound to write wbuf until it is empty
	claims  map[uint32]*relayedClaim
	dead    bool
	opened  bool     // the owner has answered HELLO with WELCOME
	conn    net.Conn // set once dialled
	// tickets: the HELLO asked for queue tickets (the client's session
	// did). Until the WELCOME, unopened keeps every byte queued, to send
	// again on a new connection without asking should the owner refuse
	// (reopenLocked); its first helloLen bytes are the hop header, the
	// preamble and the HELLO.
	tickets  bool
	unopened []byte
	// values: the HELLO asked for values (the client's session did):
	// valued claims and PROCLAIM are relayed on it, in frames of up to
	// 2048 bytes (relayvalues.go). Kept until the WELCOME as tickets are.
	values   bool
	helloLen int
	// ranges: the owner granted or queued a RANGE set relayed on it
	// (relayranges.go): it may hold range locks of the session, so the
	// upstream protects them (confirmedAfter), and its loss ends the
	// session. rangeOwners are the lock owners of the sets relayed on
	// it, by key and namespace: what a hang-up releases there.
	ranges      bool
	rangeOwners map[rangeOwner]bool
	// mirror is what the owner holds of the session's range locks, for
	// their re-assertion after a failover (internal/rangemirror).
	mirror *rangemirror.Mirror

	redial chan struct{} // tells the writer to dial again (reopenLocked)

	kick     chan struct{} // wakes the writer
	stop     chan struct{} // closed when the upstream ends
	stopOnce sync.Once
}

// send queues frame b with its request. The session's reader writes what
// it queued at the end of its batch (relayPump); other goroutines wake
// the upstream's writer (kickAll).
func (u *upstream) send(b []byte, r upReq) {
	if r.rc != nil {
		r.ID = r.rc.ID
	}
	if d, first := u.led.Send(r); first && u.conn != nil {
		u.conn.SetReadDeadline(d)
	}
	u.sendUnanswered(b)
}

// sendUnanswered queues frame b, which the owner answers nothing to (a
// RANGE cancel), keeping it for a reopen as every frame sent before the
// WELCOME is kept.
func (u *upstream) sendUnanswered(b []byte) {
	u.wbuf = append(u.wbuf, b...)
	if clustercore.UpstreamKeepsOpening(u.tickets || u.values, u.opened) {
		u.unopened = append(u.unopened, b...)
	}
}

// flush writes what is queued on u until nothing is. A goroutine that
// finds another writing leaves its frames to that one, which writes until
// nothing is left. It returns false when the upstream has ended.
func (u *upstream) flush() bool {
	srv, v := u.s.srv, u.s.v2
	v.omu.Lock()
	if u.writing || u.conn == nil || u.dead {
		dead := u.dead // read under omu: markDead may run once it is released
		v.omu.Unlock()
		return !dead
	}
	u.writing = true
	conn := u.conn
	for {
		b := u.wbuf
		if len(b) == 0 || u.dead {
			u.writing = false
			dead := u.dead
			v.omu.Unlock()
			return !dead
		}
		u.wbuf, u.spare = u.spare[:0], nil
		v.omu.Unlock()
		conn.SetWriteDeadline(time.Now().Add(srv.IOTimeout))
		_, err := conn.Write(b)
		v.omu.Lock()
		if u.spare == nil && cap(b) <= maxSpare {
			u.spare = b[:0]
		}
		if u.conn != conn {
			// Reopened (reopenLocked): what is queued now is for the
			// next connection, which the writer dials and then writes
			// to, woken here should it find this flush still writing.
			u.writing = false
			select {
			case u.kick <- struct{}{}:
			default:
			}
			dead := u.dead
			v.omu.Unlock()
			return !dead
		}
		if err != nil {
			u.writing = false
			v.omu.Unlock()
			u.fail(clustercore.OwnerLost{Err: fmt.Errorf("writing to the owner: %w", err)})
			return false
		}
	}
}

// upstreamLocked returns the session's live upstream to addr, opening it.
func (s *session) upstreamLocked(rel *relayState, addr string) *upstream {
	if u := rel.ups[addr]; u != nil {
		return u
	}
	srv, v := s.srv, s.v2
	now := time.Now()
	u := &upstream{s: s, addr: addr, claims: map[uint32]*relayedClaim{},
		led:  clustercore.OpenLedger[upReq](now, v.lease),
		kick: make(chan struct{}, 1), stop: make(chan struct{}), redial: make(chan struct{}, 1)}
	u.tickets, u.values = rel.noTickets.Asks(addr, v.tickets, v.values)
	b := s.upstreamHello(u.tickets, u.values)
	u.helloLen = len(b)
	u.send(b, upReq{Sent: clustercore.Sent{Kind: protocol.TypeHello, At: now}})
	rel.ups[addr] = u
	srv.upstreams.Add(1)
	srv.sessionsWG.Add(1)
	go u.write()
	srv.Logger.Debug("opening an upstream session", "owner_addr", addr, "session", s.id, "remote_addr", s.peer.Addr)
	return u
}

// attach records claim id as relayed on u.
func (u *upstream) attach(rel *relayState, id uint32, st clustercore.ClaimState) *relayedClaim {
	rc := &relayedClaim{Claim: clustercore.Claim{ID: id, State: st}, up: u}
	u.claims[id] = rc
	rel.claims[id] = rc
	u.s.srv.relayedClaims.Add(1)
	return rc
}

// end marks rc ended and forgets it.
func (u *upstream) end(rel *relayState, rc *relayedClaim) {
	if !rc.End() {
		return
	}
	if u.claims[rc.ID] == rc {
		delete(u.claims, rc.ID)
	}
	if rel.claims[rc.ID] == rc {
		delete(rel.claims, rc.ID)
	}
	u.s.srv.relayedClaims.Add(-1)
}

// markDead takes u out of the session's live upstreams.
func (u *upstream) markDead(rel *relayState) {
	u.dead = true
	if rel.ups[u.addr] == u {
		delete(rel.ups, u.addr)
	}
	u.s.srv.upstreams.Add(-1)
}

// shutdown stops u's goroutines; called without omu, once u is dead.
func (u *upstream) shutdown() {
	u.stopOnce.Do(func() { close(u.stop) })
	v := u.s.v2
	v.omu.Lock()
	c := u.conn
	v.omu.Unlock()
	if c != nil {
		c.Close()
	}
}

// upstreamHello returns what opens an upstream session of s: the hop
// header, the version 2 preamble and HELLO with the client session's
// lease and label, asking for queue tickets when tickets is set and for
// values when values is. Called with omu held.
func (s *session) upstreamHello(tickets, values bool) []byte {
	srv, v := s.srv, s.v2
	// The owner keeps the claims when this hop breaks (resume.go): a
	// resumable session's client resumes them; a plain session's are
	// released by this node when its client hangs up (dropUpstreams), so
	// a break without that is this node's death or a cut, and the
	// client may still believe. A plain session's hash is of a secret
	// nobody knows: it is never resumed.
	hash := v.plainHash
	if r := v.resume; r != nil {
		hash = r.hash
	} else if hash == ([secretHashLen]byte{}) {
		_, hash = newSecret()
		v.plainHash = hash
	}
	b := protocol.AppendHopV3(nil, s.peer.Addr, s.peer.Identity, srv.NodeID, uint64(s.id), &hash)
	b = protocol.AppendPreamble(b)
	flags := clustercore.UpstreamHelloFlags(tickets, values)
	return protocol.AppendFrame(b, protocol.Frame{Type: protocol.TypeHello, LeaseMS: protocol.LeaseMS(v.lease), Flags: flags, Label: v.label})
}

// reopenLocked answers an owner that refused the upstream's HELLO
// asking for queue tickets (ERROR 0x1e: a node of the earlier revision,
// which has closed the connection and read nothing after the HELLO):
// the owner is remembered for the session, and everything queued since
// the HELLO goes again, in order, on a new connection that opens
// without asking; the requests keep their places in the ledger. The client
// then gets no ticket for the claims relayed there. It returns the old
// connection, for the caller to close once it has released omu.
func (u *upstream) reopenLocked(rel *relayState) net.Conn {
	rel.noTickets.Refused(u.addr)
	u.tickets, u.values = false, false
	u.wbuf = clustercore.UpstreamReopenBytes(u.s.upstreamHello(false, false), u.unopened, u.helloLen)
	u.helloLen, u.unopened = 0, nil
	c := u.conn
	u.conn = nil // the writer leaves it (flush) and dials again
	select {
	case u.redial <- struct{}{}:
	default:
	}
	return c
}

// write dials the owner, starts the reader and writes what is queued
// when woken, until the upstream ends; it dials again when the owner
// refused queue tickets (reopenLocked).
func (u *upstream) write() {
	srv, v := u.s.srv, u.s.v2
	defer srv.sessionsWG.Done()
dial:
	for {
		conn, err := srv.dialOwner(u.addr)
		if err != nil {
			u.fail(fmt.Errorf("dialling the owner: %w", err))
			return
		}
		v.omu.Lock()
		if u.dead {
			v.omu.Unlock()
			conn.Close()
			return
		}
		u.conn = conn
		if d, ok := u.led.Deadline(); ok {
			conn.SetReadDeadline(d)
		}
		values := u.values
		v.omu.Unlock()
		srv.sessionsWG.Add(1)
		go u.read(conn, values)
		for u.flush() {
			select {
			case <-u.kick:
			case <-u.redial:
				continue dial
			case <-u.stop:
				return
			}
		}
		return
	}
}

// upFrame is a frame read from an upstream, with its bytes.
type upFrame struct {
	f   protocol.Frame
	raw []byte
}

// errUpstreamAnswer is an upstream frame that does not fit.
var errUpstreamAnswer = errors.New("server: the owner's frame does not fit the requests sent")

// read reads the owner's frames until the upstream ends; values: the
// upstream asked for values, and its frames may be larger.
func (u *upstream) read(conn net.Conn, values bool) {
	defer u.s.srv.sessionsWG.Done()
	maxLen, bufLen := upstreamFrames(values)
	buf := make([]byte, 0, bufLen)
	opened := false
	var frames []upFrame
	collect := func(f protocol.Frame, raw []byte) { frames = append(frames, upFrame{f: f, raw: raw}) }
	for {
		n, err := conn.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		frames = frames[:0]
		off, nowOpened, perr := clustercore.UpstreamParse(buf, opened, maxLen, collect)
		if perr != nil {
			u.fail(fmt.Errorf("reading from the owner: %w", perr))
			return
		}
		opened = nowOpened
		buf = buf[:copy(buf, buf[off:])]
		if len(frames) > 0 && !u.handle(frames) {
			return
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && !u.overdue(conn) {
				continue
			}
			u.fail(clustercore.OwnerLost{Err: fmt.Errorf("reading from the owner: %w", err)})
			return
		}
	}
}

// overdue reports whether the oldest unanswered request has waited past
// the patience (clustercore.Ledger.Overdue); if not, it sets the read
// deadline for it.
func (u *upstream) overdue(conn net.Conn) bool {
	v := u.s.v2
	v.omu.Lock()
	defer v.omu.Unlock()
	if u.dead {
		return true
	}
	d, overdue := u.led.Overdue(time.Now())
	if !overdue {
		conn.SetReadDeadline(d)
	}
	return overdue
}

// handle applies the owner's frames: answers fill their places in the
// outbox and confirm the upstream, pushes go before the answers the owner
// had not sent yet. It returns false when the upstream has ended.
func (u *upstream) handle(frames []upFrame) bool {
	s := u.s
	v := s.v2
	v.omu.Lock()
	if u.dead {
		v.omu.Unlock()
		return false
	}
	rel := v.rel.Load()
	var out upOutcome
	for _, fr := range frames {
		if u.frame(rel, v, fr, &out) {
			// An owner before queue tickets or values: again, without.
			c := u.reopenLocked(rel)
			v.omu.Unlock()
			if c != nil {
				c.Close() // its reader, this one, ends here
			}
			s.srv.Logger.Debug("the owner refused queue tickets; opening the upstream session again without", "owner_addr", u.addr, "session", s.id)
			return false
		}
		if out.bad != nil {
			break
		}
	}
	if !s.closing.Load() && !v.ending || rel.finishing {
		rel.pump(v)
		rel.kickAll()
	}
	v.omu.Unlock()
	if len(out.reholds) > 0 {
		u.rehold(out.reholds)
	}
	if out.rangesLost {
		s.srv.Logger.Warn("range locks handed over to a key's new owner are no longer kept for the session: ending the client's session",
			"owner_addr", u.addr, "session", s.id, "remote_addr", s.peer.Addr)
		s.closeWithError(protocol.CodeNotOwner)
	}
	if out.bad != nil {
		u.fail(out.bad)
		return false
	}
	s.srv.deliver([]delivery{{to: s, flush: true}})
	return true
}

// upOutcome is what handling a batch of the owner's frames leaves to do
// once the session's omu is let go.
type upOutcome struct {
	bad        error // the upstream session fails
	rangesLost bool  // an adoption found no range locks kept (rangemove.go)
	reholds    []*relayedClaim
}

// frame handles one frame from the owner, with the session's omu held:
// an answer, a push, or the owner's end. It tells whether the owner
// refused the opening's features (the upstream session opens again).
func (u *upstream) frame(rel *relayState, v *v2conn, fr upFrame, out *upOutcome) (reopen bool) {
	f := fr.f
	switch clustercore.UpstreamFrameKindOf(f, codeMoved, u.tickets || u.values, u.opened) {
	case clustercore.UpstreamMoved:
		if !u.movedFrame(rel, v, f) {
			out.bad = fmt.Errorf("%w: %v", errUpstreamAnswer, f)
		}
	case clustercore.UpstreamRangePush:
		u.rangePushed(rel, v, fr)
	case clustercore.UpstreamAnswer:
		u.answer(rel, v, fr, out)
	case clustercore.UpstreamPush:
		u.pushed(rel, v, fr, out)
	case clustercore.UpstreamReopen:
		return true
	case clustercore.UpstreamEnded:
		out.bad = clustercore.OwnerEnded{F: f}
	default:
		out.bad = fmt.Errorf("%w: %v", errUpstreamAnswer, f)
	}
	return false
}

// answer matches an answer from the owner with the oldest request
// relayed and not answered yet (clustercore.Ledger.Match), with the
// session's omu held.
func (u *upstream) answer(rel *relayState, v *v2conn, fr upFrame, out *upOutcome) {
	f := fr.f
	r, ok := u.led.Match(f, u.tickets)
	if !ok {
		out.bad = fmt.Errorf("%w: %v", errUpstreamAnswer, f)
		return
	}
	way := clustercore.UpstreamAnswerWayOf(f, r.Sent, r.slot != nil, r.adopt != "", r.rc != nil && r.rc.State == clustercore.ClaimMoving)
	switch way {
	case clustercore.UpstreamOpened:
		u.opened = true
		u.unopened = nil
		rel.openFails.Opened()
	case clustercore.UpstreamRangeAdopted:
		out.rangesLost = u.rangeMoveAnswered(rel, r.adopt, f.Status) || out.rangesLost
	case clustercore.UpstreamRangeAnswered:
		u.rangeAnswered(rel, r, fr)
	case clustercore.UpstreamAdoptAnswered: // move_host.go
		u.adoptAnswer(rel, v, r, f)
	case clustercore.UpstreamHeldAnswered:
		u.heldAnswer(rel, v, r, f)
	case clustercore.UpstreamToClient:
		r.slot.B, r.slot.Pending = fr.raw, false
		if r.rc.Answered(f) {
			u.end(rel, r.rc) // the id is free
		}
	}
}

// pushed handles a PROMOTED or REVOKED from the owner, with the
// session's omu held: passed on to the client, or the claim re-held.
func (u *upstream) pushed(rel *relayState, v *v2conn, fr upFrame, out *upOutcome) {
	f := fr.f
	rc := u.claims[f.Claim]
	if f.Type == protocol.TypeRevoked && rc != nil && clustercore.Relay2Reroutable(&rc.Claim, f, rc.move != nil) {
		out.reholds = append(out.reholds, rc) // not passed on (rehold)
		return
	}
	if rc != nil && rc.Pushed(f) {
		u.end(rel, rc)
	}
	u.push(rel, v, &outEntry{B: fr.raw, Up: u, Claim: f.Claim})
}

// push places a push from u before the first answer u has not sent yet:
// the owner sent it before those answers.
func (u *upstream) push(rel *relayState, v *v2conn, e *outEntry) {
	v.out = rel.box.Push(v.out, e, rel.confirmation())
}

// fail ends an upstream that ended without the client: the requests it
// has not answered are answered here, or held (clustercore.Claim's
// FailedRequest), and its claims re-asserted at the name's next owner or
// lost (Failed) when the owner may have died or stopped serving
// (clustercore.Reassertable; docs/design/2026-12-07-cluster-relay.md, "Relaying a version 2
// session"): a re-asserted claim moves (move_host.go, failOver) and the
// client sees nothing but the delay of its answers, unless the
// re-assertion is refused or not accepted within half the lease; a lost
// one's REVOKED 0x03 is placed in the outbox by
// clustercore.Outbox.PlaceLoss. The session lives on. Called without
// srv.mu or omu.
func (u *upstream) fail(why error) {
	s := u.s
	srv, v := s.srv, s.v2
	srv.mu.Lock() // before omu: the held claims are guarded by it
	v.omu.Lock()
	if u.dead {
		v.omu.Unlock()
		srv.mu.Unlock()
		return
	}
	rel := v.rel.Load()
	u.markDead(rel)
	end := clustercore.UpstreamEnd{Why: why, Opened: u.opened, Cluster: srv.Router != nil,
		Live: s.relayOpen(rel) && !srv.inShutdown.Load()}
	reassert, now := end.Reassert(), time.Now()
	held, moving, adopting := u.failRequests(rel, reassert)
	endSession := u.rangesFailed(rel, reassert, now)
	lost, reasserting := u.failClaims(rel, reassert, now)
	if !s.closing.Load() && !v.ending {
		rel.pump(v)
		rel.kickAll()
	}
	s.scheduleRetries(rel, held, moving+reasserting, adopting)
	fails := 0
	if !end.Opened {
		fails = rel.openFails.Failed()
	}
	v.omu.Unlock()
	srv.mu.Unlock()
	u.logFail(end, reasserting, lost, held, fails)
	u.shutdown()
	srv.deliver([]delivery{{to: s, flush: true}})
	if endSession {
		srv.Logger.Warn("upstream session to the owner ended; the range locks it served are lost: ending the client's session", "owner_addr", u.addr,
			"session", s.id, "remote_addr", s.peer.Addr, "err", why)
		s.closeWithError(protocol.CodeNotOwner)
	}
}

// failRequests answers the requests relayed through the failed u and not
// answered yet, or keeps them to be asked again: held claims of an
// upstream never opened (held), adoptions (moving) and range adoptions
// (adopting). Called with srv.mu and the session's omu held.
func (u *upstream) failRequests(rel *relayState, reassert bool) (held, moving, adopting int) {
	for _, r := range u.led.Drain() {
		if r.rc == nil {
			if r.Kind == protocol.TypeRange {
				adopting += u.failRange(rel, r, reassert)
			}
			continue
		}
		fate, answer := r.rc.FailedRequest(r.Kind, u.opened, r.slot != nil, reassert)
		switch fate {
		case clustercore.FateAdoptAgain: // asked again (move_host.go)
			delete(u.claims, r.rc.ID)
			r.rc.up = nil
			moving++
		case clustercore.FateUnopened:
			held += u.holdUnopened(rel, r)
		case clustercore.FateAnswered:
			r.slot.B, r.slot.Pending = answer, false
			u.end(rel, r.rc)
		case clustercore.FateTold:
			r.slot.B, r.slot.Pending = answer, false
		}
	}
	return held, moving, adopting
}

// failRange answers a RANGE request r relayed through the failed u
// (clustercore.FailedRange), or keeps a range adoption to be asked again
// (it returns 1 then). Called with srv.mu and the session's omu held.
func (u *upstream) failRange(rel *relayState, r upReq, reassert bool) (adopting int) {
	fate, answer := clustercore.FailedRange(r.f, r.adopt != "", reassert, u.mirror != nil)
	switch fate {
	case clustercore.RangeAskAgain:
		if rm := rel.rangeMoves[r.adopt]; rm != nil && rm.up == u {
			rm.up = nil // asked again (rangemove.go)
			return 1
		}
		return 0
	case clustercore.RangeDropped:
		u.mirror.Answered(r.f, protocol.RangeDone)
	case clustercore.RangeNotServed:
		if rel.rangeWaits[r.ID] == u {
			delete(rel.rangeWaits, r.ID) // its answer is this one
		}
	}
	r.slot.B, r.slot.Pending = answer, false
	return 0
}

// failClaims ends the claims relayed through the failed u, in claim id
// order: re-asserted at the name's next owner (reasserting) when
// reassert says so, else REVOKED to the client (lost) if granted or
// queued. Called with srv.mu and the session's omu held.
func (u *upstream) failClaims(rel *relayState, reassert bool, now time.Time) (lost, reasserting int) {
	front := 0
	for _, e := range clustercore.UpstreamFailClaims(u.claims, claimOf, reassert) {
		switch e.Fate {
		case clustercore.ClaimReassert:
			rel.failOver(e.C, now, u.s.v2.lease)
			reasserting++
			continue
		case clustercore.ClaimLost:
			lost++
			rel.box.PlaceLoss(&outEntry{B: e.Revoke, Up: u, Claim: e.ID}, &front)
		}
		u.end(rel, e.C)
	}
	return lost, reasserting
}

// claimOf is what the core decides about rc (nil: no claim).
func claimOf(rc *relayedClaim) *clustercore.Claim {
	if rc == nil {
		return nil
	}
	return &rc.Claim
}

// scheduleRetries starts the timers that ask again for the held claims,
// the claims moving or re-asserted, and the range adoptions, unless
// already running. Called with srv.mu and the session's omu held.
func (s *session) scheduleRetries(rel *relayState, held, moving, adopting int) {
	s.scheduleHeld(rel, held)
	_, move, ranges := clustercore.Relay2Retry{Moving: moving, Adopting: adopting,
		MoveTimer: rel.moveTimer, RangeTimer: rel.rangeTimer, Closed: rel.closed}.Start()
	if move {
		rel.moveTimer = true
		time.AfterFunc(moveRetry, s.retryMoving)
	}
	if ranges {
		rel.rangeTimer = true
		time.AfterFunc(moveRetry, s.retryRangeMoves)
	}
}

// logFail logs the end of u: its claims re-asserted, lost, or held
// while the owner cannot be reached (the first failure to open and one
// in 50 as warnings).
func (u *upstream) logFail(end clustercore.UpstreamEnd, reasserting, lost, held, fails int) {
	s := u.s
	log := s.srv.Logger
	attrs := []any{"owner_addr", u.addr, "session", s.id, "remote_addr", s.peer.Addr}
	switch end.Log(reasserting, lost, fails) {
	case clustercore.UpstreamLogReasserting:
		log.Warn("upstream session to the owner ended; re-asserting its relayed claims at the names' next owner",
			append(attrs, "claims_reasserting", reasserting, "claims_lost", lost, "claims_held", held, "err", end.Why)...)
	case clustercore.UpstreamLogLost:
		log.Warn("upstream session to the owner ended; its relayed claims are lost",
			append(attrs, "claims_lost", lost, "claims_held", held, "err", end.Why)...)
	case clustercore.UpstreamLogUnreachable:
		log.Warn("cannot open an upstream session to the owner; holding its claims",
			append(attrs, "claims_held", held, "attempts", fails, "err", end.Why)...)
	default:
		log.Debug("cannot open an upstream session to the owner; holding its claims",
			append(attrs, "claims_held", held, "attempts", fails, "err", end.Why)...)
	}
}
