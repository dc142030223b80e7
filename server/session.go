package server

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonlock/baton/internal/clustercore"
	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

// maxDrain bounds how much a closing session reads and discards while it
// waits for the client to see its ERROR frame and hang up.
const maxDrain = 64 << 10

// readBatch is how many bytes the reader takes per read once the claim
// is in the table: up to that many heartbeats are answered with one
// write. Small, because every session carries its buffers.
const readBatch = 16

// leaseFlush bounds how stale the table's record of when a claim was
// last heard from may be (Server.Snapshot reports it): a heartbeat takes the
// table mutex only when the last one that did is this old, or a quarter
// of the lease, whichever is shorter. Expiry always flushes first, so
// the lease itself is exact.
const leaseFlush = 100 * time.Millisecond

// flushDue reports whether a frame read at now, from a client of lease
// whose last time the table was told at flushed, tells the table now.
func flushDue(now, flushed time.Time, lease time.Duration) bool {
	return now.Sub(flushed) >= min(leaseFlush, lease/4)
}

// session is one connection and its one claim. A single goroutine reads
// the socket (serve); any goroutine may write to it through push and
// closeWithError, serialized by wmu.
type session struct {
	srv  *Server
	conn net.Conn
	id   locktable.SessionID
	peer locktable.Peer
	rbuf [readBatch]byte // the reader's bytes; kept here so reads do not allocate

	// Owned by the reader goroutine once the claim is in the table.
	lease   time.Duration
	seen    time.Time // when the client was last heard from
	flushed time.Time // the last seen the table has been told

	// gone is set (under srv.mu) when the claim has left the table;
	// a heartbeat reply is then not written.
	gone atomic.Bool

	// closing is set once an ERROR frame has been (or is being) sent or
	// the session is otherwise finished: nothing more is written, and the
	// reader only drains.
	closing atomic.Bool

	// movedOut is set (under srv.mu) when a planned change told this
	// version 1 holder ERROR 0x01 but left its claim in the table
	// (move_export.go): the reader keeps the claim until the client hangs up or
	// its lease runs out.
	movedOut atomic.Bool

	wmu   sync.Mutex
	state locktable.State // what the client has been told: 0, Waiting or Owner
	token uint64
	// blocked is the time the writes to this session have spent blocked
	// since the last one that went through at once; with io-timeout it
	// bounds how long a client that reads too little can keep a lock it
	// may not know it holds.
	blocked time.Duration
	wbuf    [readBatch * protocol.AcquiredLen]byte

	// forwarded is set (under wmu, before the session enters the table)
	// when another cluster node relayed this connection (hop header).
	forwarded bool
	// hopResume is the origin and secret hash of a relayed resumable
	// session (hop header version 3; resume.go), set with forwarded.
	hopResume *resumeKey

	// v2 is set (under wmu, before the session enters the table) when the
	// connection opened with the version 2 preamble; nil for version 1.
	v2 *v2conn

	// hopEnded is set by the reader when a relayed claim ended on the
	// relaying node's word that its client hung up (HopClientGone), with
	// nothing after it: finish acknowledges it (HopAck) and the
	// connection carries the next hop header (relay.go, passHop).
	hopEnded bool
	// passedOn: the connection came from the session before it on the
	// same hop, not from accept (no EventConnected).
	passedOn bool
	// client is the key this session counts against for
	// MaxSessionsPerClient (limits.go); empty when not counted.
	client string
}

// ended is run's result when the claim was ended by another goroutine.
const ended locktable.Reason = 0

// serve serves the connection's sessions: one, or on a version 1 hop
// whose claims end by the relaying node's word, one per claim
// (passHop).
func (s *session) serve() {
	for s != nil {
		s = s.serveOne()
	}
}

// serveOne serves one session and returns the next on its connection,
// if any.
func (s *session) serveOne() *session {
	defer s.srv.sessionsWG.Done()
	if !s.passedOn {
		s.connected()
	}
	reason, code := s.run()
	if reason == openedV2 {
		// Called from here, not from run, so that a version 2 session
		// blocked in a read has a small stack: the runtime then keeps it
		// at its smallest size, which a session holding few claims
		// feels.
		reason, code = s.runV2()
		s.dropRangesLater()
		s.node().ended(s, reason, code)
	}
	return s.finish(reason, code)
}

// openedV2 is run's result when the connection opened with the version 2
// preamble: serve goes on with runV2.
const openedV2 locktable.Reason = 255

// connected reports the accepted connection; a function of its own so
// that the Event does not take room in serve's frame for the session's
// life.
//
//go:noinline
func (s *session) connected() {
	s.srv.observe(Event{Kind: EventConnected, Time: time.Now(), Peer: Peer(s.peer)})
}

// run reads frames until the session ends. It returns why, and the error
// code to send the client, if any.
func (s *session) run() (locktable.Reason, protocol.Code) {
	srv := s.srv
	// The TLS handshake and the whole first ACQUIRE must arrive within
	// io-timeout of accept.
	s.conn.SetDeadline(time.Now().Add(srv.IOTimeout))
	if !s.handshake() {
		return locktable.ReasonGraceful, 0
	}
	req, v2, err := s.readOpening()
	switch {
	case err != nil:
		return s.openingFailure(err)
	case v2:
		return openedV2, 0
	}
	if srv.leaseTooLong(req.Lease()) {
		return locktable.ReasonProtocolError, protocol.CodeInvalidLease
	}
	gen := srv.authGen.Load()
	if a := srv.Authorizer; a != nil && !a.Allow(s.peer.Identity, req.Name) {
		return s.denied(req.Name)
	}
	if !s.admitClient() {
		srv.limitHit(LimitClientSession, s.peer, req.Name, 0)
		return locktable.ReasonProtocolError, protocol.CodeLimitReached
	}
	if serve, reason, code := s.route(req); !serve {
		return reason, code
	}
	deadline, err := s.acquire(req, gen)
	if err != nil {
		return s.acquireFailure(req, err)
	}
	return s.holdV1(deadline)
}

// handshake runs the TLS handshake of a TLS connection and records the
// client's identity. It tells whether the session goes on.
func (s *session) handshake() bool {
	srv := s.srv
	tc, ok := s.conn.(*tls.Conn)
	if !ok {
		return true
	}
	if err := tc.Handshake(); err != nil {
		srv.observe(Event{Kind: EventTLSHandshakeError, Time: time.Now(), Peer: Peer(s.peer), Err: err})
		srv.Logger.Info("TLS handshake failed", "remote_addr", s.peer.Addr, "err", err)
		return false
	}
	// Under wmu: closeWithError (shutdown) may read s.peer meanwhile.
	id := Identity(tc.ConnectionState())
	s.wmu.Lock()
	s.peer.Identity = id
	s.wmu.Unlock()
	return true
}

// acquireFailure says how a version 1 session ends whose ACQUIRE req
// failed with err.
func (s *session) acquireFailure(req protocol.Acquire, err error) (locktable.Reason, protocol.Code) {
	if errors.Is(err, locktable.ErrShutdown) {
		return locktable.ReasonShutdown, protocol.CodeShuttingDown
	}
	if errors.Is(err, errDenied) {
		return s.denied(req.Name)
	}
	if errors.Is(err, errMoved) {
		return locktable.ReasonGraceful, protocol.CodeShuttingDown
	}
	if errors.Is(err, errLeaseTooLong) {
		return locktable.ReasonProtocolError, protocol.CodeInvalidLease
	}
	if errors.Is(err, locktable.ErrModeConflict) {
		// A semaphore's claims: version 1 cannot express one.
		return locktable.ReasonProtocolError, protocol.CodeModeConflict
	}
	if limit := tableLimit(err); limit != "" {
		s.srv.limitHit(limit, s.peer, req.Name, s.id)
		return locktable.ReasonProtocolError, protocol.CodeLimitReached
	}
	return writeFailureReason(err), 0
}

// v1Hold is a version 1 session's state while it holds its claim.
type v1Hold struct {
	s        *session
	deadline time.Time // the lease's end: the read deadline
	// orphaned: another goroutine ended the claim (force-release, kick,
	// shutdown) and is about to send the ERROR frame; closing now would
	// lose it. Read on until that sender sets closing, for at most linger.
	orphaned bool
	// ends says how what the connection brings ends the claim: a direct
	// client's, or a relaying node's hop (relay.go).
	ends clustercore.V1End
}

func (h *v1Hold) orphan() {
	if !h.orphaned {
		h.orphaned = true
		h.deadline = time.Now().Add(h.s.srv.linger())
		h.s.conn.SetReadDeadline(h.deadline)
	}
}

// holdV1 reads a version 1 session's heartbeats until its claim ends,
// from its lease's end deadline on.
func (s *session) holdV1(deadline time.Time) (locktable.Reason, protocol.Code) {
	h := &v1Hold{s: s, deadline: deadline, ends: clustercore.V1End{Relayed: s.forwarded}}
	for {
		n, err := s.conn.Read(s.rbuf[:])
		if s.closing.Load() {
			if reason, done := h.closingRead(n, err); done {
				return reason, 0
			}
			continue
		}
		if reason, code, done := h.frames(n, err); done {
			return reason, code
		}
		if err != nil {
			if reason, done := h.readFailed(err); done {
				return reason, 0
			}
		}
	}
}

// closingRead reads on a session another goroutine is closing: it
// tells whether the session ends, and why.
func (h *v1Hold) closingRead(n int, err error) (locktable.Reason, bool) {
	s := h.s
	if !s.movedOut.Load() {
		return ended, true
	}
	// Told that the name moves (clustercore.V1End.Moved).
	e, done := h.ends.Moved(s.rbuf[:n], err != nil, errors.Is(err, os.ErrDeadlineExceeded))
	if !done {
		return 0, false
	}
	reason, _ := h.end(e)
	return reason, true
}

// frames answers the n bytes read: heartbeats first, answered together;
// then whatever else came, which ends the session.
func (h *v1Hold) frames(n int, err error) (locktable.Reason, protocol.Code, bool) {
	s := h.s
	beats := 0
	for beats < n && protocol.Type(s.rbuf[beats]) == protocol.TypeHeartbeat {
		beats++
	}
	if beats > 0 && !h.orphaned {
		d, herr := s.heartbeat(beats)
		switch {
		case herr == nil:
			h.deadline = d
		case errors.Is(herr, locktable.ErrNoClaim):
			h.orphan()
		default:
			return writeFailureReason(herr), 0, true
		}
	}
	if beats < n {
		reason, code := h.end(h.ends.Other(s.rbuf[beats:n], err == nil, h.orphaned))
		return reason, code, true
	}
	return 0, 0, false
}

// readFailed handles the read's error err: a hang-up, a broken hop, or
// the lease's end. It tells whether the session ends, and why.
func (h *v1Hold) readFailed(err error) (locktable.Reason, bool) {
	s := h.s
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		reason, _ := h.end(h.ends.Broke(h.orphaned))
		return reason, true
	}
	if h.orphaned {
		return ended, true
	}
	switch err := s.expire(); {
	case err == nil:
		return ended, true
	case errors.Is(err, locktable.ErrNoClaim):
		h.orphan()
		return 0, false
	default:
		// The deadline fired a hair early for the table's
		// strict "more than one lease" rule; look again shortly.
		h.deadline = h.deadline.Add(time.Millisecond)
	}
	s.conn.SetReadDeadline(h.deadline)
	return 0, false
}

// readOpening reads the connection's opening: a hop header if a cluster
// node relayed it (acceptHop), then a version 1 ACQUIRE, or the version 2
// preamble (v2). Its own function, so that the opening's buffer is not
// in the frame of run, which lasts as long as the session.
//
//go:noinline
func (s *session) readOpening() (req protocol.Acquire, v2 bool, err error) {
	o := opening{r: s.conn}
	if err := o.readFull(s.rbuf[:1], openingMin-1); err != nil {
		return req, false, err
	}
	if s.rbuf[0] == protocol.HopMarker {
		if err := s.acceptHop(&o); err != nil {
			return req, false, err
		}
	}
	switch protocol.Type(s.rbuf[0]) {
	case protocol.TypeAcquire:
	case protocol.TypeHeartbeat:
		return req, false, protocol.ErrFirstNotAcquire
	default:
		return req, false, protocol.ErrUnknownMessage
	}
	// The version, and then the rest of an ACQUIRE header and its name, or
	// the preamble's six zeros: seven bytes at least either way.
	o.sure = openingMin - 1
	req, err = protocol.ReadAcquireBody(&o)
	if errors.Is(err, protocol.ErrUnsupportedVersion) && req.Version == protocol.Version2 {
		return req, true, protocol.ReadPreambleTail(&o)
	}
	return req, false, err
}

// openingFailure is why a session ends whose opening could not be read:
// a protocol error with its code, or the connection's failure.
func (s *session) openingFailure(err error) (locktable.Reason, protocol.Code) {
	if errors.Is(err, errBadHop) {
		return locktable.ReasonProtocolError, protocol.CodeUnknownMessage
	}
	if code, ok := protocol.CodeOf(err); ok {
		return locktable.ReasonProtocolError, code
	}
	return s.readFailure(err)
}

// errDenied is acquire's error when a Revoke since the ACQUIRE's check
// changed the answer.
var errDenied = errors.New("server: not authorized")

func (s *session) denied(lock string) (locktable.Reason, protocol.Code) {
	srv := s.srv
	srv.observe(Event{Kind: EventDenied, Time: time.Now(), Lock: lock, Peer: Peer(s.peer)})
	srv.Logger.Info("ACQUIRE denied by ACL", "lock", lock, "identity", s.peer.Identity, "remote_addr", s.peer.Addr)
	return locktable.ReasonProtocolError, protocol.CodeNotAuthorized
}

func (s *session) readFailure(err error) (locktable.Reason, protocol.Code) {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		s.srv.Logger.Debug("closing connection: no complete ACQUIRE within io-timeout", "remote_addr", s.peer.Addr)
		return locktable.ReasonIOTimeout, 0
	}
	return locktable.ReasonGraceful, 0
}

// acquire enters the claim into the table and answers it. It holds wmu
// throughout, so that a promotion push computed by another goroutine in
// the meantime is written only after this reply.
// authGen is srv.authGen when the Authorizer allowed req: if a Revoke
// ran since, the Authorizer is asked again under srv.mu, so that no claim
// the new rules refuse enters the table after Revoke has swept it.
func (s *session) acquire(req protocol.Acquire, authGen uint64) (deadline time.Time, err error) {
	srv := s.srv
	// A token source that cannot issue yet (the process's first second)
	// is waited for here, by this session alone, so that the wait is
	// never under srv.mu. Promotions need no wait: they follow an
	// ACQUIRE that has waited.
	if d := time.Until(srv.gate); d > 0 {
		time.Sleep(d)
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()

	srv.mu.Lock()
	if a := srv.Authorizer; a != nil && srv.authGen.Load() != authGen && !a.Allow(s.peer.Identity, req.Name) {
		srv.mu.Unlock()
		return time.Time{}, errDenied
	}
	if !srv.servesLocked(req.Name, s.forwarded) {
		srv.mu.Unlock()
		return time.Time{}, errMoved
	}
	if srv.leaseTooLong(req.Lease()) {
		// The cluster's ceiling came down since the check at the opening
		// (LongestLease must not miss a session registered after it).
		srv.mu.Unlock()
		return time.Time{}, errLeaseTooLong
	}
	now := time.Now()
	st, res, err := srv.table.Acquire(now, s.id, locktable.Request{Name: req.Name, Lease: req.Lease(), Peer: s.peer})
	if err == nil {
		srv.claims[s.id] = s
		if st.State == locktable.Waiting {
			srv.queued[protocol.Version]++
		}
		srv.commit(now, res) // an Acquire only ever reports its own grant
		s.lease, s.seen, s.flushed = req.Lease(), now, now
	}
	srv.mu.Unlock()
	if err != nil {
		return time.Time{}, err
	}
	if h := srv.afterTableEntry; h != nil {
		h(s.peer.Addr)
	}
	told := s.state == locktable.Waiting // held by the Router: WAITING sent
	s.state, s.token = st.State, st.Token
	if !told || s.state != locktable.Waiting {
		if err := s.writeStateLocked(); err != nil {
			return time.Time{}, err
		}
	}
	return st.Deadline, s.conn.SetReadDeadline(st.Deadline)
}

// heartbeat refreshes the lease for k heartbeats read together and
// answers each with the state the client has been told, in one write under
// wmu, so a push and a stale WAITING never reorder. The table is told
// only every leaseFlush (see there), so a flood of heartbeats does not
// contend for the table's mutex.
func (s *session) heartbeat(k int) (deadline time.Time, err error) {
	srv := s.srv
	now := time.Now()
	s.seen = now
	if flushDue(now, s.flushed, s.lease) {
		srv.mu.Lock()
		_, err := srv.table.Heartbeat(now, s.id)
		srv.mu.Unlock()
		if err != nil {
			return time.Time{}, err
		}
		s.flushed = now
	}
	for range k {
		srv.observe(Event{Kind: EventHeartbeat, Time: now, Peer: Peer(s.peer)})
	}

	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closing.Load() || s.gone.Load() {
		return time.Time{}, locktable.ErrNoClaim
	}
	b := s.wbuf[:0]
	for range k {
		b = s.appendStateLocked(b)
	}
	if err := s.writeLocked(b); err != nil {
		return time.Time{}, err
	}
	deadline = now.Add(s.lease)
	return deadline, s.conn.SetReadDeadline(deadline)
}

// expire ends the claim if its lease has passed. It returns
// locktable.ErrNotExpired if not, and locktable.ErrNoClaim if another
// goroutine has ended the claim.
func (s *session) expire() error {
	srv := s.srv
	srv.mu.Lock()
	if s.seen.After(s.flushed) {
		if _, err := srv.table.Heartbeat(s.seen, s.id); err != nil {
			srv.mu.Unlock()
			return err
		}
		s.flushed = s.seen
	}
	now := time.Now()
	res, err := srv.table.Expire(now, s.id)
	if err != nil {
		srv.mu.Unlock()
		return err
	}
	ds := srv.commit(now, res)
	// Mark the session closing before anyone else can see it without its
	// claim: a shutdown starting now must not send 0x01 to a session
	// whose lease has already run out (expiry closes with no frame).
	s.closing.Store(true)
	srv.mu.Unlock()
	srv.deliver(ds)
	return nil
}

// push sends a promotion: ACQUIRED(token), unprompted.
func (s *session) push(token uint64) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closing.Load() {
		return nil
	}
	s.state, s.token = locktable.Owner, token
	return s.writeStateLocked()
}

// writeStateLocked writes WAITING or ACQUIRED(token) as s.state says.
func (s *session) writeStateLocked() error {
	return s.writeLocked(s.appendStateLocked(s.wbuf[:0]))
}

func (s *session) appendStateLocked(b []byte) []byte {
	if s.state == locktable.Owner {
		return protocol.AppendAcquired(b, s.token)
	}
	return protocol.AppendWaiting(b)
}

// writeStall is how long a write may take before it counts as blocked: a
// client that reads keeps the few bytes of baton replies flowing through
// its buffers, so a write that has to wait means the client is not
// reading. Anything shorter is scheduling noise.
const writeStall = time.Millisecond

// errWriteBudget ends a session whose writes have been blocked for
// io-timeout in total.
var errWriteBudget = fmt.Errorf("server: writes to the session blocked for io-timeout in total: %w", os.ErrDeadlineExceeded)

// writeLocked writes b within what is left of the session's budget of
// blocked writes, io-timeout in total: a client that reads just enough
// to let each write through before its deadline must not keep a lock
// for many io-timeouts. A write that goes through at once shows the
// client reading and refills the budget, so a holder of many days never
// loses its lock to scheduling noise that happened to slow a few writes.
func (s *session) writeLocked(b []byte) error {
	if clustercore.SelfStopBlocks(s.srv.inContact(), s.closing.Load()) {
		return s.stopLocked() // no answer from a node cut off from its quorum (selfstop.go)
	}
	budget := s.srv.IOTimeout - s.blocked
	if budget <= 0 {
		return errWriteBudget
	}
	start := time.Now()
	if err := s.conn.SetWriteDeadline(start.Add(budget)); err != nil {
		return err
	}
	_, err := s.conn.Write(b)
	if d := time.Since(start); d > writeStall {
		s.blocked += d
	} else {
		s.blocked = 0
	}
	return err
}

// closeWithError sends ERROR(code) once, half-closes the connection and
// bounds the reader's remaining wait; the reader then drains and closes.
// Closing after the client has seen the frame, rather than at once,
// avoids a TCP reset that could destroy the frame in flight.
func (s *session) closeWithError(code protocol.Code) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_, err := s.closeLocked(code, s.srv.inContact(), s.movedOut.Load())
	return err
}

// closeLocked is closeWithError with wmu held; first is false when the
// session was closing already (nothing is written). A self-stop's
// (inContact false) drops the pending frames. A moved-out holder's
// reader (movedOut) keeps its lease deadline.
func (s *session) closeLocked(code protocol.Code, inContact, movedOut bool) (first bool, err error) {
	pending, first := s.markClosing()
	if !first {
		return false, nil
	}
	err = s.writeLocked(clustercore.SessionLastWrite(pending, s.v2 != nil, code, inContact))
	if err == nil {
		s.srv.observe(Event{Kind: EventErrorSent, Time: time.Now(), Peer: Peer(s.peer), Code: code})
		if cw, ok := s.conn.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
	}
	if !movedOut {
		s.conn.SetReadDeadline(time.Now().Add(s.srv.linger()))
	}
	return true, err
}

// markClosing marks the session closing and takes a version 2 session's
// pending frames, under omu so that nothing is appended after them; first
// is false (and nothing taken) when it was closing already. Called with
// wmu held.
func (s *session) markClosing() (pending []byte, first bool) {
	v := s.v2
	if v == nil {
		return nil, !s.closing.Swap(true)
	}
	v.omu.Lock()
	defer v.omu.Unlock()
	if s.closing.Swap(true) {
		return nil, false
	}
	pending, v.out = v.out, nil
	return pending, true
}

// finish ends the claim (promoting the next waiter), sends the error code
// if there is one, and closes the connection; or, for a relayed claim
// that ended by the relaying node's word, passes the connection on to
// the session that reads its next hop header (passHop).
func (s *session) finish(reason locktable.Reason, code protocol.Code) *session {
	srv := s.srv
	if v := s.v2; v != nil {
		v.omu.Lock()
		v.ending = true
		v.omu.Unlock()
		v.stopWriter()
		s.node().finishing(s)
	}
	if reason != ended {
		srv.update(func(now time.Time, t *locktable.Table) locktable.Result {
			return t.End(now, s.id, reason)
		})
	}
	if code != 0 {
		srv.Logger.Debug("closing connection with error", "remote_addr", s.peer.Addr, "code", code)
		s.closeWithError(code)
	}
	next, passed := s.passHop(code)
	if !passed && s.closing.Load() {
		// Let an ERROR frame that another goroutine is writing go out
		// first; closeWithError then also bounds the drain.
		s.wmu.Lock()
		//lint:ignore SA2001 the empty section waits for that writer.
		s.wmu.Unlock()
		s.drain()
	}
	if next == nil {
		s.conn.Close()
	}
	srv.mu.Lock()
	delete(srv.sessions, s)
	srv.leaveClientLocked(s)
	if s.v2 != nil {
		srv.v2Sessions--
		if srv.claims[s.id] == s {
			delete(srv.claims, s.id)
		}
		srv.forgetLiveLocked(s)
	}
	srv.mu.Unlock()
	if next == nil { // the connection closed
		srv.observe(Event{Kind: EventDisconnected, Time: time.Now(), Peer: Peer(s.peer)})
	}
	return next
}

// drain reads and discards until the client hangs up, the linger deadline
// passes, or maxDrain bytes were read.
func (s *session) drain() {
	var buf [512]byte
	for n := 0; n < maxDrain; {
		m, err := s.conn.Read(buf[:])
		n += m
		if err != nil {
			return
		}
	}
}

// linger is how long a closing session waits for its client to hang up.
func (srv *Server) linger() time.Duration { return min(srv.IOTimeout, time.Second) }
