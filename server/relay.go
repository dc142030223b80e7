package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/batonlock/baton/internal/clustercore"
	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/protocol"
)

// Cluster routing of version 1 connections: for every ACQUIRE the Router
// says serve here, relay the connection one hop to the name's owner, hold
// it (WAITING, nothing granted elsewhere), or refuse a relayed request for
// a name this node does not own (ERROR 0x03). A relay sends the hop header
// and the ACQUIRE, then copies bytes both ways, so the owner ends the
// claim exactly when it would end a direct one. What is held, passed and
// ended is decided in internal/clustercore/relay_v1.go; this file holds
// the connections, the copying goroutines and the deadlines.
// Design: "Relaying a version 1 connection" and #serverrelaygo in
// docs/design/2026-12-07-cluster-relay.md.

// RouteAction is a Router's answer. Its values are those of
// clustercore.RouteAction, which the cluster's rules read
// (TestRouteActionsAreTheCores).
type RouteAction int

// Route actions.
const (
	// RouteServe: this node owns the name and grants it.
	RouteServe RouteAction = iota
	// RouteHold: the name must not be granted now (its owner is warming
	// up or not ready); answer WAITING and ask again shortly.
	RouteHold
	// RouteForward: relay the connection to Route.Addr, the owner's
	// protocol address; if it cannot be reached, hold.
	RouteForward
	// RouteNotOwner: a relayed request for a name this node does not own,
	// or any request on a node without quorum contact: answer ERROR 0x03
	// (retryable), never relay again.
	RouteNotOwner
	// RouteMoving: a planned change is moving the name to another node:
	// hold, like RouteHold (a version 2 claim is held QUEUED, then
	// relayed to the new owner); a claim routed before the move began
	// does not enter the table.
	RouteMoving
)

// String names a route action.
func (a RouteAction) String() string { return a.core().String() }

// core is the action as the cluster's rules take it.
func (a RouteAction) core() clustercore.RouteAction { return clustercore.RouteAction(a) }

// Route is a Router's decision for one lock name.
type Route struct {
	Action RouteAction
	Addr   string // RouteForward: the owner's protocol address
	// Gated (with RouteHold): this node owns the name but took it over
	// without its state (its prior owner was removed, or this node
	// restarted) and is warming up; Since is the ring version of that
	// take-over (0 for a restart). A re-assertion is answered on it.
	Gated bool
	Since uint64
}

// Router decides, for a cluster node, who serves a lock name. lease is
// the client's lease (a node records the largest granted before it
// grants; 0: already recorded); forwarded tells whether another node
// relayed the request. Route is called with the server's table mutex held
// for version 2 claims, with lease 0: it must not block.
//
// RecordLease records a version 2 session's lease before its first
// claim or range request that the ACL allows (it may block);
// false ends the session with ERROR 0x03.
//
// A version 2 claim on a name whose Route is RouteForward is relayed
// through an upstream session to the owner (relay2.go, relay2upstream.go); on RouteHold it
// is answered QUEUED and asked about again (relay2hold.go); RouteNotOwner
// refuses it with REFUSED 0x03 (retryable). It is never granted on a node
// whose Route does not say RouteServe.
type Router interface {
	Route(name string, lease time.Duration, forwarded bool) Route
	RecordLease(lease time.Duration) bool
}

// holdRetry is how often a held connection asks its Router again.
const holdRetry = 100 * time.Millisecond

// errBadHop is what reading a hop header fails with when the header is
// malformed (protocol.ReadHopBody) or its peer may not relay
// (errUntrustedHop): the connection ends with ERROR 0x13
// (openingFailure).
var errBadHop = protocol.ErrBadHop

// errUntrustedHop is returned for a hop header from a peer the server
// does not trust.
var errUntrustedHop = fmt.Errorf("server: hop header from a peer that may not relay: %w", errBadHop)

// hopVia names the relaying node and the client's session there that hop
// header h carries, as the admin API shows it: "n2/17"; empty for a
// version 1 hop header.
func hopVia(h protocol.Hop) string {
	if h.Version < protocol.HopVersion2 {
		return ""
	}
	return h.Origin + "/" + strconv.FormatUint(h.Session, 10)
}

// acceptHop handles a connection that opened with the hop marker: it
// checks that the peer may relay, reads the header and takes on the
// client's address and identity. It returns the first byte after it.
//
// A TLS connection may relay only if its client certificate's identity
// is a member node's (TrustHopIdentity); a connection without TLS only
// if TrustHop accepts its source address, which is weak: anyone on a
// member's host passes it.
func (s *session) acceptHop(o *opening) error {
	srv := s.srv
	_, isTLS := s.conn.(*tls.Conn)
	s.wmu.Lock()
	id := s.peer.Identity
	s.wmu.Unlock()
	trust := clustercore.HopTrust{Routed: srv.Router != nil, ByIdentity: srv.TrustHopIdentity}
	if srv.TrustHop != nil {
		trust.ByAddr = func() bool { return srv.TrustHop(s.conn.RemoteAddr()) }
	}
	if !trust.Trusted(isTLS, id) {
		srv.Logger.Info("hop header from a peer that may not relay", "remote_addr", s.peer.Addr, "identity", s.peer.Identity)
		return errUntrustedHop
	}
	// The hop header, and the first byte after it, in as few reads as
	// the opening allows (opening.go).
	h, err := protocol.ReadHopBody(o.readFull, s.rbuf[:1])
	if err != nil {
		return err
	}
	s.wmu.Lock()
	s.peer.Addr, s.peer.Identity, s.peer.Via = h.Addr, h.Identity, hopVia(h)
	s.forwarded = true
	if h.Resume != nil {
		s.hopResume = &resumeKey{origin: locktable.Origin{Node: h.Origin, Session: h.Session}, hash: *h.Resume}
	}
	s.wmu.Unlock()
	return nil
}

// route asks the Router what to do with req until it says serve, relays
// or refuses (clustercore.V1Route). It returns serve=true when the claim
// is to enter this node's table (always on a server without a Router);
// otherwise the session is over with reason and code.
func (s *session) route(req protocol.Acquire) (serve bool, reason locktable.Reason, code protocol.Code) {
	srv := s.srv
	if srv.Router == nil {
		return true, 0, 0
	}
	hold := clustercore.V1Hold{Lease: req.Lease(), Retry: holdRetry}
	way := clustercore.V1Route{Forwarded: s.forwarded}
	for {
		if srv.inShutdown.Load() {
			return false, clustercore.V1ShutDown.Reason, clustercore.V1ShutDown.Code
		}
		r := srv.Router.Route(req.Name, req.Lease(), s.forwarded)
		switch way.Step(r.Action.core()) {
		case clustercore.V1StepServe:
			return true, 0, 0
		case clustercore.V1StepRefuse:
			srv.Logger.Info("ACQUIRE refused with ERROR 0x03: relayed for a lock this node does not own, or no quorum contact",
				"lock", req.Name, "remote_addr", s.peer.Addr, "relayed", s.forwarded)
			return false, clustercore.V1Refused.Reason, clustercore.V1Refused.Code
		case clustercore.V1StepRelay:
			up, err := srv.hopConn(r.Addr)
			if err == nil {
				reason, code := s.relay(up, r.Addr, req)
				return false, reason, code
			}
			if way.Unreachable() {
				srv.Logger.Warn("cannot reach the owner of a lock; holding the claim", "lock", req.Name, "owner_addr", r.Addr, "err", err)
			}
		}
		if hold.Round(time.Now()) {
			s.wmu.Lock()
			s.state = locktable.Waiting
			err := s.writeStateLocked()
			s.wmu.Unlock()
			if err != nil {
				return false, writeFailureReason(err), 0
			}
		}
		if reason, code, done := s.holdFor(&hold); done {
			return false, reason, code
		}
	}
}

// holdFor reads the held client's heartbeats until the hold's round is
// over, answering each WAITING (clustercore.V1Hold).
func (s *session) holdFor(hold *clustercore.V1Hold) (locktable.Reason, protocol.Code, bool) {
	for {
		s.conn.SetReadDeadline(hold.Deadline())
		n, err := s.conn.Read(s.rbuf[:])
		if s.closing.Load() {
			return ended, 0, true
		}
		now := time.Now()
		s.wmu.Lock()
		b, code := hold.Heard(now, s.rbuf[:n], s.wbuf[:0])
		var werr error
		if code == 0 && len(b) > 0 {
			werr = s.writeLocked(b)
		}
		s.wmu.Unlock()
		switch {
		case code != 0:
			return locktable.ReasonProtocolError, code, true
		case werr != nil:
			return writeFailureReason(werr), 0, true
		case err == nil:
			continue
		case !errors.Is(err, os.ErrDeadlineExceeded):
			return locktable.ReasonGraceful, 0, true
		}
		switch hold.Timeout(now) {
		case clustercore.V1HoldEnd:
			return ended, 0, true // silent for its lease: no claim to end
		case clustercore.V1HoldAsk:
			return 0, 0, false
		}
	}
}

// dialTimeout bounds the opening of a hop: a held client's heartbeats
// wait for it, so an owner that does not answer (a dead host) must not
// keep them unanswered for long.
const dialTimeout = time.Second

// ownerDialCount returns how many connections this node has opened to
// owners: version 1 hops (for its pools, or by a relay that found none)
// and version 2 upstream sessions.
func (srv *Server) ownerDialCount() int64 { return srv.ownerDials.Load() }

// dialOwner opens the hop to an owner.
func (srv *Server) dialOwner(addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), min(srv.IOTimeout, dialTimeout))
	defer cancel()
	var c net.Conn
	var err error
	if srv.DialOwner != nil {
		c, err = srv.DialOwner(ctx, addr)
	} else {
		var d net.Dialer
		c, err = d.DialContext(ctx, "tcp", addr)
	}
	if err == nil {
		srv.ownerDials.Add(1)
	}
	return c, err
}

// relay sends the hop header and the ACQUIRE to the owner at addr over
// up, then copies bytes both ways until either side closes. If this node
// told the client WAITING while it held the claim, the owner's first
// WAITING is not passed on (the client would read it as an extra answer).
//
// The owner's bytes are copied to the client by one goroutine
// (copyBack), the client's to the owner by this one (copyToOwner), each
// writing what it read at once
// (no buffering: the frames are small and each is awaited). On a hop
// from the pool the copier is the goroutine that watched the idle
// connection (hoppool.go), whose read is already waiting for the answer;
// otherwise a new one.
//
// When the client hangs up, this node sends HopClientGone; an owner of
// this version answers HopAck after the claim's last byte, and the hop
// goes back to the pool for the next relay (finish, keepHop) instead of
// being closed and replaced by a new connection.
func (s *session) relay(up net.Conn, addr string, req protocol.Acquire) (locktable.Reason, protocol.Code) {
	srv := s.srv
	s.wmu.Lock()
	r := &hopRelay{s: s, up: up, told: s.state == locktable.Waiting, sent: make(chan bool, 1), done: make(chan struct{})}
	peer := s.peer
	s.wmu.Unlock()

	// The copier starts before the ACQUIRE goes out, but ends the
	// client's side of the relay only if it went out (sent): a hop that
	// cannot be written ends the session with ERROR 0x01 instead.
	if ph, ok := up.(*pooledHop); ok {
		ph.startCopy(r.copyBack)
	} else {
		go r.copyBack(make([]byte, relayBuf))
	}

	// Counted before the ACQUIRE goes out: the owner's answer may reach
	// the client before this goroutine runs again.
	srv.relayed.Add(1)
	srv.relayedTotal.Add(1)
	defer srv.relayed.Add(-1)
	if err := r.open(peer, req); err != nil {
		srv.Logger.Warn("cannot write to the owner of a lock", "lock", req.Name, "err", err)
		return clustercore.V1ShutDown.Reason, clustercore.V1ShutDown.Code
	}
	srv.Logger.Debug("relaying to the owner", "lock", req.Name, "remote_addr", peer.Addr, "owner_addr", up.RemoteAddr().String())
	r.finish(addr, r.copyToOwner())
	return ended, 0
}

// hopRelay is one relayed version 1 claim: its hop up to the owner, and
// what the two copying goroutines tell each other.
type hopRelay struct {
	s    *session
	up   net.Conn
	told bool // the client was told WAITING while the claim was held
	// upDone: the copier has ended (the owner's side is closed).
	upDone atomic.Bool
	// goneSent: HopClientGone is on its way, the client gone (the
	// owner's bytes are not passed on); acked: the owner's stream ended
	// with HopAck.
	goneSent, acked atomic.Bool
	sent            chan bool     // whether the opening went out
	done            chan struct{} // closed when the copier has ended
}

// open writes the hop header and the client's ACQUIRE to the owner, and
// tells the copier whether they went out. On failure the hop is closed
// and the copier has ended.
func (r *hopRelay) open(peer locktable.Peer, req protocol.Acquire) error {
	srv, up := r.s.srv, r.up
	b := protocol.AppendHop(make([]byte, 0, 64+len(req.Name)), peer.Addr, peer.Identity)
	b = protocol.AppendAcquire(b, req)
	up.SetWriteDeadline(time.Now().Add(srv.IOTimeout))
	if _, err := up.Write(b); err != nil {
		r.sent <- false
		up.Close()
		<-r.done
		return err
	}
	up.SetWriteDeadline(time.Time{})
	r.s.conn.SetDeadline(time.Time{}) // before the copier may set its linger
	r.sent <- true
	return nil
}

// copyBack copies the owner's bytes to the client until the owner's
// stream ends, or ends with HopAck. It runs on its own goroutine: the
// watcher of a pooled hop, or a new one.
func (r *hopRelay) copyBack(buf []byte) {
	s, up := r.s, r.up
	defer close(r.done)
	// The owner closed the hop (lease expired, ERROR sent, shutdown):
	// half-close the client's connection after what the owner sent,
	// and let the reader drain what the client still sends for at
	// most linger, so that no reset destroys a frame in flight.
	defer func() {
		r.upDone.Store(true)
		if !<-r.sent {
			return
		}
		if cw, ok := s.conn.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
		s.conn.SetReadDeadline(time.Now().Add(s.srv.linger()))
	}()
	cp := clustercore.NewV1Copy(r.told)
	for {
		n, err := up.Read(buf)
		pass, end, acked := cp.Owner(buf[:n], err != nil, r.goneSent.Load())
		if end {
			r.acked.Store(acked)
			return
		}
		if len(pass) > 0 && s.writeRelayed(pass) != nil {
			// The client's connection is closed: read on, so that
			// the owner's answer to HopClientGone is seen.
			cp.ClientFailed()
		}
		if err != nil {
			return
		}
	}
}

// copyToOwner copies the client's bytes to the owner, as far as
// clustercore.V1FromClient lets them pass, until the client's side ends,
// and returns the read error that ended it.
func (r *hopRelay) copyToOwner() error {
	buf := make([]byte, relayBuf)
	more := true // nothing after the first byte that is no heartbeat
	for {
		n, err := r.s.conn.Read(buf)
		var pass []byte
		if more {
			pass, more = clustercore.V1FromClient(buf[:n])
		}
		if len(pass) > 0 && !r.upDone.Load() {
			if _, werr := r.up.Write(pass); werr != nil && !r.upDone.Load() {
				return nil
			}
		}
		if err != nil {
			return err
		}
	}
}

// finish ends the relay once the client's side has ended with rerr.
//
// The client hung up: say so on the hop (HopClientGone) so the owner
// releases at once (also after an ERROR, this node's or the owner's:
// the hang-up is the client's acknowledgement), and wait, for at most
// linger, for the owner's HopAck: the hop then goes back to the pool of
// addr. Anything else (a linger or write deadline, this node closing the
// connection, a failed write to the owner) closes the hop without it,
// and the owner keeps the claim until the client's lease has passed, as
// it does when this node dies: the client may still believe.
func (r *hopRelay) finish(addr string, rerr error) {
	srv, up := r.s.srv, r.up
	var born time.Time
	if clientHungUp(rerr) {
		// The owner's io-timeout for the next header starts when it
		// writes HopAck, after this: the pool's age limit holds.
		born = time.Now()
		r.goneSent.Store(true)
		up.SetWriteDeadline(born.Add(srv.IOTimeout))
		// Waited for even when the copier has ended already (upDone):
		// it sets upDone before done closes, and may have read the ack.
		if _, err := up.Write([]byte{protocol.HopClientGone}); err == nil {
			t := time.NewTimer(srv.linger())
			select {
			case <-r.done:
			case <-t.C:
			}
			t.Stop()
		}
	}
	select {
	case <-r.done:
		if r.acked.Load() {
			srv.keepHop(addr, up, born)
			return
		}
	default:
	}
	up.Close()
	<-r.done
}

// passHop, on the owner, ends a relayed claim's use of its hop after the
// claim left the table on the relaying node's HopClientGone with nothing
// after it (hopEnded) and no ERROR to send (code): it writes HopAck,
// after which nothing of the claim can be written (the session is
// closing), and returns the session that reads the next hop header on
// the connection, with the same checks as on an accepted one. passed
// tells that the ack was attempted; next is nil when the connection is
// to be closed. An ERROR another goroutine sent first (the claim was
// ended by a force-release, kick, move or shutdown, and the connection
// half-closed) leaves passed false: the hop closes as before.
func (s *session) passHop(code protocol.Code) (next *session, passed bool) {
	srv := s.srv
	if !s.hopEnded || code != 0 {
		return nil, false
	}
	s.wmu.Lock()
	if s.closing.Swap(true) {
		s.wmu.Unlock()
		return nil, false
	}
	err := ErrServerClosed
	if !srv.inShutdown.Load() {
		err = s.writeLocked([]byte{protocol.HopAck})
	}
	s.wmu.Unlock()
	if err != nil {
		return nil, true
	}
	next = srv.addSession(s.conn)
	if next != nil {
		next.passedOn = true
	}
	return next, true
}

// end applies how a version 1 claim in this node's table ends
// (clustercore.V1End): a relayed claim whose hop broke stays until its
// lease has passed; one whose relaying node said its client hung up may
// pass the hop on to the next claim (finish, passHop).
func (h *v1Hold) end(e clustercore.V1Ending) (locktable.Reason, protocol.Code) {
	if e.KeepUntilLease {
		h.s.keepUntilLease(h.deadline)
	}
	h.s.hopEnded = e.PassHop
	return e.Reason, e.Code
}

// keepUntilLease leaves the claim of a relayed session whose hop broke in
// the table until the client's lease has passed since it was last heard
// (deadline, the reader's), then ends it as expired: no one is promoted
// while the client may still believe. The session's goroutine and
// connection end now; a timer does the rest.
func (s *session) keepUntilLease(deadline time.Time) {
	s.srv.Logger.Debug("hop to a relaying node broke; keeping the claim for the client's lease", "remote_addr", s.peer.Addr, "until", deadline)
	var expire func()
	expire = func() {
		if err := s.expire(); errors.Is(err, locktable.ErrNotExpired) {
			// The timer fired a hair early for the table's strict rule.
			time.AfterFunc(time.Millisecond, expire)
		}
	}
	time.AfterFunc(time.Until(deadline), expire)
}

// clientHungUp reports whether a read error means that the client's side
// closed the connection: its process closed it or died. (A deadline, or
// this node closing the connection, does not.)
func clientHungUp(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

// writeRelayed passes the owner's bytes to the client, under wmu so that
// they never interleave with a frame this server writes (shutdown).
func (s *session) writeRelayed(b []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closing.Load() {
		return net.ErrClosed
	}
	err := s.writeLocked(b)
	if err != nil && !wroteToHungUp(err) {
		s.conn.Close() // the reader stops too
	}
	return err
}

// wroteToHungUp reports whether a write error means that the client's
// side has closed: its reader sees the hang-up too, and must, to send
// HopClientGone (closing the connection under it would read as this
// node's own close, and the owner would keep the claim for the lease).
func wroteToHungUp(err error) bool {
	return errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
}

// relayedConns returns the number of version 1 connections this node is
// relaying to other nodes now, and how many it has relayed in all.
func (srv *Server) relayedConns() (now, total int64) {
	return srv.relayed.Load(), srv.relayedTotal.Load()
}
