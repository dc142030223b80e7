package baton

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/batonlock/baton/internal/clientrule"
	"github.com/batonlock/baton/protocol"
)

// ErrSessionClosed: Session.Close ended the session and every claim on it.
var ErrSessionClosed = errors.New("baton: session closed")

// ErrServerTooOld: the server is too old for what was asked. It has
// exclusive locks only, one per connection: no shared or semaphore
// claims and no range locks; and OpenSession with RefuseOldServer
// refuses it. It wraps protocol.ErrUnsupportedVersion, so errors.Is
// matches either.
var ErrServerTooOld = fmt.Errorf("%w: the server is too old: it has exclusive locks only, one per connection", protocol.ErrUnsupportedVersion)

// SessionOptions configures a Session.
type SessionOptions struct {
	// Lease is the session lease, the failure detector of every claim on
	// the session: if the server hears nothing for a lease it ends the
	// session. The client sends PINGs at a quarter of it and gives up
	// after 0.8 of it without an answer. Required.
	Lease time.Duration
	// Label names the session for operators (admin API, audit log); at
	// most 255 bytes of UTF-8. Optional.
	Label string
	// RefuseOldServer makes OpenSession fail with ErrServerTooOld when the
	// server is too old for sessions, instead of making each exclusive
	// claim on a connection of its own (see Session).
	RefuseOldServer bool
	// Resume says whether the session is resumable (see Session, and
	// docs/client.md): when its connection breaks, the server keeps its
	// claims for the lease, and the Session reconnects, opens a new
	// session and re-asserts every claim with its token, so that the
	// guarded work goes on uninterrupted. The zero value, ResumeAuto,
	// makes it resumable on a cluster only.
	Resume ResumeMode
	// Addrs are the addresses a resumable session may resume on, tried
	// in turn starting with the one it was connected to; empty means the
	// Client's Address and then its Nodes. The session opens on Addrs[0] when it is
	// set, else on the Client's Address.
	Addrs []string
}

// ResumeMode says whether a Session is resumable (SessionOptions.Resume).
type ResumeMode uint8

const (
	// ResumeAuto makes the session resumable when the Client is given a
	// cluster (Config.Nodes set, or Routing RoutingDirect): that is what
	// lets a holder keep its locks through the death of its node. With a
	// single Address and no routing it is not resumable: closing the
	// connection (a killed process) then releases every claim at once.
	ResumeAuto ResumeMode = iota
	// ResumeOn makes the session resumable on any server.
	ResumeOn
	// ResumeOff makes it not resumable, also on a cluster: its claims
	// are released as soon as its connection breaks.
	ResumeOff
)

// Session is one connection to the server carrying any number of claims
// (protocol version 2). It is safe for concurrent use by many goroutines:
// each claim request is one frame and costs one round trip, and frames of
// concurrent requests share writes.
//
// The session lease is the failure detector of all its claims. The
// Session keeps it alive with PINGs and is the pessimist: when no request
// has been answered for 0.8 of the lease since it was sent, every claim
// is lost at once (Lost of each is closed and Do's functions are
// cancelled first); the connection stays open until the guarded work has
// stopped (every held claim released), and at most until one lease after
// that send (CloseBy), so no other client can be granted a lock while the
// work is still stopping. A session-level ERROR, EOF, a failed write or a
// protocol violation by the server loses every claim at once and closes
// the connection. An administrator's REVOKED ends one claim only.
//
// A resumable session (SessionOptions.Resume, resumable by default on a Client
// given a cluster) survives a broken connection, a shutdown (ERROR 0x01)
// and a node that stops serving (ERROR 0x03): it reconnects, opens a new
// session and re-asserts every claim with its token, and a claim the
// server keeps goes on undisturbed (Lost open, Do's context alive, the same token). A claim
// that cannot be kept is lost with ErrReassertRefused, or with
// ErrNotResumed when its re-assertion is not answered before its
// give-up (the rule above: its last anchor + 0.8 of the lease). Its
// range locks are re-asserted after its claims, each naming the session
// it was held on; a range lock has no Lost of its own, so one that
// cannot be kept ends the whole session (ErrReassertRefused, or
// ErrNotResumed at the give-up at the break). See
// docs/design/2026-12-07-go-client.md, "Resumable sessions".
//
// Against a server too old for sessions (protocol version 1 only),
// OpenSession falls back (unless SessionOptions.RefuseOldServer): the
// Session then makes each claim on a connection of its own, with the
// session lease, as Client.Acquire does. Exclusive claims, waiting or
// not, work as on a newer server; shared and semaphore claims and range
// locks fail with ErrServerTooOld.
type Session struct {
	c     *Client
	opts  SessionOptions
	v1    bool   // fell back to version 1
	id    uint64 // WELCOME's session id
	conn  net.Conn
	br    *bufio.Reader
	lost  chan struct{} // closed when the session ends
	rdone chan struct{} // closed when the reader has returned
	bg    sync.WaitGroup

	mu         sync.Mutex
	rule       *clientrule.Session
	claims     map[uint32]*Claim // every id the rule does not report free
	v1claims   map[*Claim]struct{}
	nextID     uint32
	out, spare []byte    // frames recorded and not yet written; the writer's other buffer
	writing    bool      // a goroutine is writing out
	wset       time.Time // the write deadline in force (see write)
	err        error     // why the session ended; nil while live
	pingTimer  *time.Timer
	pingArmed  bool
	closeTimer *time.Timer
	closeArmed bool
	holding    int                  // after a give-up: held claims whose work has not stopped
	ranges     rangeReqs            // range-lock requests awaiting answers (rangelock.go)
	watches    map[uint32]*watchSub // the watches on this connection, by id (watch.go)

	addr         string  // the address the session is connected to
	welcomeFlags uint8   // WELCOME's flags
	rt           *router // sends claims to their owners (router.go); nil for a plain session
	// Resumption (resume.go).
	ident   *resumeIdent // this session's name for a resume; nil: not resumable
	ring    uint64       // the ring version of this session's WELCOME
	tickets bool         // this session's server gives queue tickets
	detach  bool         // this connection's server knows DETACH (detach.go)
	values  bool         // this connection's server gives values and watches (watch.go)
	gen     uint64       // counts connections: a write to an older one is moot
	// wconn is the connection a flush is writing to now, if any; torn
	// is the last connection a write left with part of a frame on it
	// (detach.go).
	wconn, torn net.Conn
	// resends are the pending re-sends of re-assertions after a pause
	// (resendLater).
	resends  map[*time.Timer]struct{}
	addrIdx  int           // index in addrs() of the address in use
	resuming bool          // the connection broke; the reader is opening a new session
	resumed  chan struct{} // closed when a resume ends (made when one starts)
	// waitingResume counts the new requests waiting for a resume to end
	// (waitResumedLocked).
	waitingResume int
	stopDials     context.CancelFunc
	dialCtx       context.Context // ends when the session ends: stops a resume
	// breakCause is the failure that broke the connection, or the last
	// reconnection's: what a claim lost for want of a resume wraps.
	breakCause    error
	lastAttempt   error         // the last reconnection's failure, nil before one failed
	freshSessions int           // fresh sessions in a row opened for a re-assertion answered "again"
	freshBackoff  time.Duration // the backoff those fresh sessions have reached
	freshNeeded   error         // a re-assertion was answered "again" (0x05, 0x03): its refusal
	expiryTimer   *time.Timer   // loses claims whose re-assertion is overdue (armExpiry)
	expiryArmed   bool
	reasserts     int           // re-assertions of this connection not answered yet
	readSet       time.Time     // the read deadline in force, set under s.mu (setReadDeadline)
	closing       bool          // Close is releasing every claim: no resume
	drained       chan struct{} // closed when Close's releases have all been answered
}

// OpenSession opens a version 2 session with the server: it connects,
// sends the opening and waits for the server's WELCOME, as long as ctx
// allows. ctx bounds only the opening.
//
// A lease or label that the protocol rejects is reported with the
// protocol's sentinel without connecting. A server that refuses the
// opening gives a *ServerError; one that speaks version 1 only makes a
// fallen-back Session (see Session).
func (c *Client) OpenSession(ctx context.Context, opts SessionOptions) (*Session, error) {
	s, err := c.openSession(ctx, opts, "")
	if err != nil {
		return nil, err
	}
	c.route(ctx, s)
	return s, nil
}

// openSession is OpenSession with the server at addr, without routing;
// "" means Address (or, with Nodes, the first that accepts a connection).
func (c *Client) openSession(ctx context.Context, opts SessionOptions, addr string) (*Session, error) {
	if err := protocol.ValidateLease(opts.Lease); err != nil {
		return nil, err
	}
	if len(opts.Label) > protocol.MaxLabelLen || !utf8.ValidString(opts.Label) {
		return nil, protocol.ErrInvalidLabel
	}
	if addr == "" && len(opts.Addrs) > 0 {
		addr = opts.Addrs[0]
	}
	switch {
	case opts.Resume > ResumeOff:
		return nil, fmt.Errorf("baton: SessionOptions.Resume %d: want ResumeAuto, ResumeOn or ResumeOff", opts.Resume)
	case opts.Resume == ResumeAuto && c.routes():
		opts.Resume = ResumeOn
	case opts.Resume == ResumeAuto:
		opts.Resume = ResumeOff
	}
	conn, addr, err := c.dialNode(ctx, addr)
	if err != nil {
		return nil, err
	}
	s := &Session{
		c: c, opts: opts, conn: conn, addr: addr,
		lost:   make(chan struct{}),
		rdone:  make(chan struct{}),
		rule:   clientrule.NewSession(opts.Lease, c.cfg.MinHeartbeatInterval),
		claims: map[uint32]*Claim{},
	}
	w, err := s.open(ctx, conn, s.rule)
	f := w.frame
	if err != nil {
		conn.Close()
		return nil, err
	}
	if w.flagRefused {
		// Refused by a server before queue tickets or DETACH: once
		// more, without (noDetach or noTickets is set now).
		conn.Close()
		return c.openSession(ctx, opts, addr)
	}
	switch f.Type {
	case protocol.TypeError: // a version 1 server
		conn.Close()
		if f.Code != protocol.CodeUnsupportedVersion {
			return nil, &ServerError{Code: f.Code, Reason: f.Reason}
		}
		if opts.RefuseOldServer {
			return nil, fmt.Errorf("%w (%w)", ErrServerTooOld, &ServerError{Code: f.Code, Reason: f.Reason})
		}
		s.v1, s.conn = true, nil
		s.v1claims = map[*Claim]struct{}{}
		close(s.rdone)
		return s, nil
	case protocol.TypeSessionError:
		conn.Close()
		return nil, &ServerError{Code: f.Code, Reason: f.Reason}
	}
	s.id, s.welcomeFlags = f.Session, w.flags
	s.ident, s.ring, s.tickets, s.detach, s.values = w.ident, w.ring, w.tickets, w.detach, w.values
	s.initRanges()
	s.dialCtx, s.stopDials = context.WithCancel(context.Background())
	if i := slices.Index(s.addrs(), addr); i >= 0 {
		s.addrIdx = i
	}
	s.br = bufio.NewReaderSize(conn, 4096)
	s.mu.Lock()
	s.schedulePing()
	s.mu.Unlock()
	go s.read()
	return s, nil
}

// open writes the preamble and HELLO on conn, recording them in rule,
// and reads the answer: WELCOME, a version 2 ERROR or a version 1 ERROR.
// A resumable session asks for resumption in HELLO and accepts the
// WELCOME fields of a resumable session and of a cluster node.
func (s *Session) open(ctx context.Context, conn net.Conn, rule *clientrule.Session) (welcomeInfo, error) {
	now := time.Now()
	rule.SentHello(now)
	deadline := rule.Deadline()
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	b := protocol.AppendPreamble(make([]byte, 0, protocol.PreambleLen+protocol.MaxFrameSize))
	var helloFlags uint8
	tickets := s.asksTickets()
	if s.opts.Resume == ResumeOn {
		helloFlags = protocol.HelloResumable
	}
	if tickets {
		helloFlags |= protocol.HelloTickets
	}
	detach := s.asksDetach()
	if detach {
		helloFlags |= protocol.HelloDetach
	}
	values := !s.c.noValues.Load()
	if values {
		helloFlags |= protocol.HelloValues
	}
	b = protocol.AppendFrame(b, protocol.Frame{Type: protocol.TypeHello, LeaseMS: protocol.LeaseMS(s.opts.Lease), Flags: helloFlags, Label: s.opts.Label})
	var w welcomeInfo
	err := conn.SetDeadline(deadline)
	if err == nil {
		_, err = conn.Write(b)
	}
	if err == nil {
		w, err = readHelloAnswer(conn, s.opts.Resume == ResumeOn, tickets, detach, values)
	}
	f := w.frame
	// The watch on ctx must be over before the deadline is cleared: a
	// cancellation that came meanwhile would otherwise leave a deadline
	// in the past on a live session.
	if !stop() || err != nil {
		if ctx.Err() != nil {
			return w, ctx.Err()
		}
		return w, frameErr(err)
	}
	if err := conn.SetDeadline(time.Time{}); err != nil {
		return w, connErr(err)
	}
	if f.Type == protocol.TypeError {
		return w, nil
	}
	if flagRefused(tickets || detach || values, w) {
		// A server before values, DETACH or queue tickets: open again
		// without the newest of the flags asked for.
		w.flagRefused = true
		if values {
			s.c.noValues.Store(true)
		} else if detach {
			s.c.noDetach.Store(true)
		} else {
			s.c.noTickets.Store(true)
		}
	}
	if f.Type != protocol.TypeWelcome && f.Type != protocol.TypeSessionError {
		return w, fmt.Errorf("%w: %v answers HELLO", ErrProtocolViolation, f)
	}
	if _, err := rule.Received(f, time.Now()); err != nil {
		return w, ruleErr(err)
	}
	return w, nil
}

// asksTickets reports whether the session's HELLO asks for queue
// tickets: a resumable session does, unless a server refused them before
// (docs/protocol-v2-tickets.md, "v2 queue tickets"). Only a resumable session
// re-asserts a queued claim, the one use of its ticket.
func (s *Session) asksTickets() bool {
	return s.opts.Resume == ResumeOn && !s.c.noTickets.Load()
}

// asksDetach reports whether the session's HELLO asks for detach: a
// resumable session does, unless a server refused it before
// (docs/protocol-v2-resume.md, "v2 detach").
func (s *Session) asksDetach() bool {
	return s.opts.Resume == ResumeOn && !s.c.noDetach.Load()
}

// version returns the protocol version the session speaks: 2, or 1 after
// a fallback.
func (s *Session) version() int {
	if s.v1 {
		return 1
	}
	return 2
}

// ID returns the session id the server gave in WELCOME (0 after a
// fallback); after a resume, the id of the session in use.
func (s *Session) ID() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id
}

// Lease returns the session lease.
func (s *Session) Lease() time.Duration { return s.opts.Lease }

// Lost returns a channel closed when the session ends: loss or Close.
// After a fallback it is closed by Close only; each claim is lost on its
// own.
func (s *Session) Lost() <-chan struct{} { return s.lost }

// Err returns why the session ended, or nil while it is live.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// CloseBy returns the time by which the connection is closed after a
// give-up (ErrHeartbeatTimeout), whether or not the work has stopped: the
// confirmation anchor + the lease.
func (s *Session) CloseBy() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rule.CloseBy()
}

// Close ends the session: every claim still held or queued ends (with
// ErrSessionClosed) and the connection is closed, which releases them all
// on the server at once. A resumable session's server keeps its claims
// when the connection closes, so Close releases them first and waits for
// the server's answers, at most until the give-up deadline. It waits
// until the session's goroutines have stopped. It is idempotent. It
// returns why the session had ended before, or nil.
func (s *Session) Close() error {
	if s.rt != nil {
		s.rt.close()
	}
	s.mu.Lock()
	prev := s.err
	if s.v1 {
		var locks []*Claim
		for cl := range s.v1claims {
			locks = append(locks, cl)
		}
		if s.err == nil {
			s.err = ErrSessionClosed
			close(s.lost)
		}
		s.mu.Unlock()
		for _, cl := range locks {
			cl.lock.release()
		}
		return prev
	}
	for s.err == nil && s.resuming && !s.closing {
		// Let the resume end (by the give-up at the latest), so that
		// the claims are released rather than kept for a lease.
		resumed := s.resumed
		s.mu.Unlock()
		<-resumed
		s.mu.Lock()
	}
	if s.err == nil && s.resumable() {
		s.releaseAllLocked()
	}
	s.loseLocked(ErrSessionClosed)
	if s.closeArmed && s.closeTimer.Stop() {
		s.closeArmed = false
		s.bg.Done()
	}
	s.mu.Unlock()
	s.closeConn()
	<-s.rdone
	s.bg.Wait()
	return prev
}

// closeConn closes the connection in use.
func (s *Session) closeConn() {
	s.mu.Lock()
	conn := s.conn
	s.mu.Unlock()
	conn.Close()
}

// startWrite is called under s.mu after a frame was appended to s.out:
// unless a writer is at work, it makes the caller the writer. It reports
// whether the caller must call flush after unlocking.
func (s *Session) startWrite() (flush bool) {
	if s.writing {
		return false
	}
	s.writing = true
	s.bg.Add(1) // under s.mu, so Close's Wait cannot miss it
	return true
}

// flush writes the recorded frames until none is left. Frames appended
// while a write is in progress go out together in the next write, in the
// order they were recorded, which is the order of the rule's FIFO. The
// write deadline is the give-up deadline.
func (s *Session) flush() {
	defer s.bg.Done()
	s.mu.Lock()
	for {
		if len(s.out) == 0 || s.err != nil || s.resuming {
			s.out = s.out[:0]
			s.writing = false
			s.mu.Unlock()
			return
		}
		buf := s.out
		s.out, s.spare = s.spare[:0], nil
		set := s.wset
		if !time.Now().Before(set) {
			set = s.rule.Deadline()
			s.wset = set
		} else {
			set = time.Time{} // in force already
		}
		conn, gen := s.conn, s.gen
		s.wconn = conn
		s.mu.Unlock()
		n, err := s.write(conn, buf, set)
		s.mu.Lock()
		s.wconn = nil
		s.spare = buf[:0]
		if err != nil && n > 0 && n < len(buf) {
			s.torn = conn // no DETACH may follow: it would be read as the rest of a frame
		}
		if err != nil && gen == s.gen && s.resuming {
			// The resume interrupted the write (detach.go): what was not
			// written is re-sent after the re-assertions.
			s.out = s.out[:0]
			s.writing = false
			s.mu.Unlock()
			return
		}
		if err != nil && gen == s.gen {
			s.out = s.out[:0]
			s.writing = false
			if s.resumable() && !errors.Is(err, os.ErrDeadlineExceeded) {
				// The reader resumes the session when it finds the
				// connection closed.
				s.mu.Unlock()
				conn.Close()
				return
			}
			closeNow := s.loseLocked(connErr(err))
			s.mu.Unlock()
			if closeNow {
				s.closeConn()
			}
			return
		}
		// A failed write to a connection that a resume has replaced
		// is moot: its frames were recorded in that connection's rule.
	}
}

// write writes buf with the give-up deadline as the write deadline. Like
// the read deadline it is set lazily (set is zero when the one in force
// will do): the deadline in force may be earlier than the rule's, never
// later; when it fires, the write goes on with the rule's deadline
// unless that has passed too.
func (s *Session) write(conn net.Conn, buf []byte, set time.Time) (written int, err error) {
	for {
		if !set.IsZero() {
			if err := conn.SetWriteDeadline(set); err != nil {
				return written, err
			}
		}
		n, err := conn.Write(buf)
		written += n
		if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
			return written, err
		}
		s.mu.Lock()
		set = s.rule.Deadline()
		live := s.err == nil && conn == s.conn && !s.resuming && time.Now().Before(set)
		if conn == s.conn {
			s.wset = set
		}
		s.mu.Unlock()
		if !live {
			return written, err
		}
		buf = buf[n:]
	}
}

// read is the permanent reader (docs/protocol-v2-client.md, v2 client obligation
// 1). The read deadline is the give-up deadline, so the netpoller
// enforces it. It is set lazily: the give-up deadline only moves later
// (each answer moves the anchor to its request's send time), so a
// deadline set earlier is never late; when it fires, the reader looks
// at the rule's deadline, gives up if that has passed and otherwise
// sets it and reads on. So an answer costs no timer update and no
// second hold of the mutex on the way to the goroutine waiting for it.
//
// A resumable session whose connection breaks is resumed here, by the
// reader, which then reads the new connection (resume.go).
func (s *Session) read() {
	defer close(s.rdone)
	for {
		brk := s.readConn()
		if brk == nil || !s.resume(brk) {
			return
		}
	}
}

// readConn reads the connection in use until it ends. It returns nil
// when the session has ended, or the cause of a break that the session
// is to be resumed after.
func (s *Session) readConn() error {
	s.mu.Lock()
	s.readSet = time.Time{}
	err := s.setReadDeadline()
	s.mu.Unlock()
	if err != nil {
		return s.broken(connErr(err))
	}
	for {
		f, err := s.readFrame()
		now := time.Now()
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				s.mu.Lock()
				if s.expireReasserts(now) {
					s.mu.Unlock()
					s.closeConn()
					return nil
				}
				live := s.err == nil && now.Before(s.rule.Deadline())
				silent := live && s.silent(now)
				if live && !silent {
					// Set the later deadline and read on.
					s.readSet = time.Time{}
					err := s.setReadDeadline()
					s.mu.Unlock()
					if err != nil {
						return s.broken(connErr(err))
					}
					continue
				}
				s.mu.Unlock()
				if silent {
					return s.broken(fmt.Errorf("%w: no answer for %v", ErrConnectionClosed, silence(s.opts.Lease)))
				}
			}
			return s.broken(frameErr(err))
		}
		if live, brk := s.received(f, now); !live {
			return brk
		}
	}
}

// readFrame reads one frame from the buffered reader without allocating
// for it (ReadServerFrameV2 on the buffer's bytes): the buffer holds the
// largest frame.
func (s *Session) readFrame() (protocol.Frame, error) {
	hdr, err := s.br.Peek(protocol.FrameHeaderLen)
	if err != nil {
		if len(hdr) > 0 && errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return protocol.Frame{}, err
	}
	maxLen := protocol.MaxFrameLen
	if s.values {
		maxLen = protocol.MaxValuesFrameLen // the buffer holds it
	}
	n := protocol.FrameHeaderLen + int(binary.BigEndian.Uint16(hdr))
	if n == protocol.FrameHeaderLen || n > protocol.FrameHeaderLen+maxLen {
		_, _, err := protocol.ParseServerFrameV2Max(hdr, maxLen) // the length's own error
		return protocol.Frame{}, err
	}
	b, err := s.br.Peek(n)
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return protocol.Frame{}, err
	}
	f, _, err := protocol.ParseServerFrameV2Max(b, maxLen)
	s.br.Discard(n)
	return f, err
}

// received acts on one frame and reports whether the session lives on;
// when it does not, brk is the cause of a break that the session is to
// be resumed after, or nil when it has ended.
func (s *Session) received(f protocol.Frame, now time.Time) (live bool, brk error) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return false, nil
	}
	if f.Type == protocol.TypeRangeAnswer {
		if err := s.receivedRange(f, now); err != nil {
			closeNow := s.loseLocked(err)
			s.mu.Unlock()
			if closeNow {
				s.closeConn()
			}
			return false, nil
		}
		s.mu.Unlock()
		return true, nil
	}
	ev, err := s.rule.Received(f, now)
	if err == nil && ev.Kind == protocol.TypeSessionError {
		err = &ServerError{Code: ev.Code, Reason: ev.Reason}
	}
	if err != nil {
		s.mu.Unlock()
		return false, s.broken(ruleErr(err))
	}
	if ws := s.watches[ev.Claim]; ws != nil && ev.Kind != protocol.TypeWelcome && ev.Kind != protocol.TypePong {
		flush := s.watchEvent(ws, ev, f)
		s.mu.Unlock()
		if flush {
			s.flush()
		}
		return true, nil
	}
	cl := s.claims[ev.Claim]
	switch ev.Kind {
	case protocol.TypeWelcome, protocol.TypePong:
	default:
		if cl == nil { // the rule knows the claim: a bug here, not the server's
			closeNow := s.loseLocked(fmt.Errorf("%w: %v for claim %d, unknown to the session", ErrProtocolViolation, f, ev.Claim))
			s.mu.Unlock()
			if closeNow {
				s.closeConn()
			}
			return false, nil
		}
	}
	if cl != nil && cl.reassert && ev.Answers != clientrule.ReqProclaim {
		switch ev.Kind {
		case protocol.TypeGranted, protocol.TypeQueued, protocol.TypeBusy, protocol.TypeRefused:
			brk := s.reasserted(cl, ev, f.Ticket, now)
			if !cl.reassert && s.rule.Free(ev.Claim) {
				s.forget(ev.Claim)
			}
			s.mu.Unlock()
			if brk != nil {
				return false, s.broken(brk)
			}
			return true, nil
		}
	}
	switch ev.Kind {
	case protocol.TypePong:
		s.schedulePing()
	case protocol.TypeGranted, protocol.TypePromoted:
		cl.token = ev.Token
		cl.held = true
		cl.resolve()
	case protocol.TypeQueued:
		cl.queued, cl.ticket = true, f.Ticket
	case protocol.TypeBusy:
		cl.endLocked(ErrBusy)
	case protocol.TypeProclaimed:
		cl.proclaimed(f.Proclaim, nil)
	case protocol.TypeRefused:
		if ev.Answers == clientrule.ReqProclaim {
			cl.proclaimed(0, &ServerError{Code: ev.Code, Reason: ev.Reason})
			break
		}
		cl.endLocked(&ServerError{Code: ev.Code, Reason: ev.Reason})
	case protocol.TypeRevoked:
		if !ev.Releasing {
			cl.endLocked(&ServerError{Code: ev.Code, Reason: ev.Reason})
		}
	case protocol.TypeReleased:
		cl.endLocked(nil)
	}
	if cl != nil && s.rule.Free(ev.Claim) {
		s.forget(ev.Claim)
	}
	s.mu.Unlock()
	return true, nil
}

// frameErr classifies an error from reading a version 2 frame: one that
// carries a protocol code is a frame the server must not send.
func frameErr(err error) error {
	if _, ok := protocol.CodeOf(err); ok {
		return fmt.Errorf("%w: %v", ErrProtocolViolation, err)
	}
	return readErr(err)
}

// ruleErr turns an error of the rule into the client's.
func ruleErr(err error) error {
	switch {
	case errors.Is(err, clientrule.ErrExpired):
		return ErrHeartbeatTimeout
	case errors.Is(err, clientrule.ErrViolation):
		return fmt.Errorf("%w: %v", ErrProtocolViolation, err)
	}
	return err
}

// loseLocked ends the session once: every claim is lost, its work told
// first (Do's context cancelled, Lost closed). It reports whether the
// caller must close the connection now. After a give-up
// (ErrHeartbeatTimeout) the connection stays open while a held claim's
// work runs, until its Release or CloseBy.
func (s *Session) loseLocked(cause error) (closeNow bool) {
	if s.err != nil {
		return false
	}
	s.err = cause
	s.rule.Close()
	if s.stopDials != nil {
		s.stopDials()
	}
	if s.resuming {
		s.resuming = false
		close(s.resumed)
	}
	if s.drained != nil {
		close(s.drained)
		s.drained = nil
	}
	if s.pingArmed && s.pingTimer.Stop() {
		s.pingArmed = false
		s.bg.Done()
	}
	if s.expiryArmed && s.expiryTimer.Stop() {
		s.expiryArmed = false
		s.bg.Done()
	}
	s.stopResends()
	hold := errors.Is(cause, ErrHeartbeatTimeout)
	for _, cl := range s.claims {
		if hold && cl.held && !cl.workDone && !cl.ended {
			cl.counted = true
			s.holding++
		}
		cl.endLocked(cause)
	}
	clear(s.claims)
	s.endWatchesLocked(cause)
	close(s.lost)
	if s.holding == 0 {
		return true
	}
	s.closeArmed = true
	s.bg.Add(1)
	s.closeTimer = time.AfterFunc(time.Until(s.rule.CloseBy()), func() {
		defer s.bg.Done()
		s.mu.Lock()
		s.closeArmed = false
		s.mu.Unlock()
		s.closeConn()
	})
	return false
}

// workStopped records that a claim's guarded work has stopped and
// reports whether the connection kept open for it may close now.
func (s *Session) workStopped(cl *Claim) bool {
	if cl.workDone {
		return false
	}
	cl.workDone = true
	if !cl.counted {
		return false
	}
	s.holding--
	if s.holding > 0 {
		return false
	}
	if s.closeArmed && s.closeTimer.Stop() {
		s.closeArmed = false
		s.bg.Done()
	}
	return true
}

// schedulePing arms the PING timer if a PING may be sent. s.mu is held.
func (s *Session) schedulePing() {
	next, ok := s.rule.NextPing()
	if !ok || s.pingArmed {
		return
	}
	s.pingArmed = true
	s.bg.Add(1)
	d := time.Until(next)
	if s.pingTimer == nil {
		s.pingTimer = time.AfterFunc(d, s.ping)
	} else {
		s.pingTimer.Reset(d)
	}
}

// ping sends one PING (at most one is in flight; the next is scheduled
// when its PONG arrives).
func (s *Session) ping() {
	defer s.bg.Done()
	s.mu.Lock()
	s.pingArmed = false
	if _, ok := s.rule.NextPing(); !ok || s.err != nil {
		s.mu.Unlock()
		return
	}
	seq := s.rule.SentPing(time.Now())
	s.out = protocol.AppendPing(s.out, seq)
	flush := s.startWrite()
	if s.resumable() {
		s.setReadDeadline() // the PING's silence deadline; an error shows in the reader
	}
	s.mu.Unlock()
	if flush {
		s.flush()
	}
}

// allocID returns a claim id that the rule reports free. s.mu is held.
func (s *Session) allocID() uint32 {
	for {
		s.nextID++
		if s.nextID != 0 && s.rule.Free(s.nextID) && s.claims[s.nextID] == nil && s.watches[s.nextID] == nil {
			return s.nextID
		}
	}
}
