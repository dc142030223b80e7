package baton

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/batonlock/baton/cluster/ring"
	"github.com/batonlock/baton/protocol"
)

// Routing says whether a Client learns a cluster's ring and sends each
// claim to its name's owner node directly (docs/client.md, "Clusters").
//
// Any node of a cluster serves any claim, relaying it one hop to the
// name's owner; a client that goes to the owner itself saves that hop.
// The ring is advice: a node sent a claim it does not own relays it, so a
// stale view costs one hop, never a wrong grant.
type Routing uint8

const (
	// RoutingAuto routes when Config.Nodes is set, or when the server's
	// WELCOME says it is a cluster node; otherwise the client behaves as
	// with RoutingOff.
	RoutingAuto Routing = iota
	// RoutingOff sends everything to Address (or, when it cannot be
	// reached, to the first of Nodes that can).
	RoutingOff
	// RoutingDirect routes even with a single address: the client learns
	// the other nodes from the ring.
	RoutingDirect
)

// welcomeClusterNode is the WELCOME flag of a cluster node (bit 1).
const welcomeClusterNode uint8 = 0x02

const (
	// ringTTL is how long a ring learnt by a one-time request (version 1
	// locks) is used before it is asked again; a routed Session watches
	// its ring instead.
	ringTTL = 10 * time.Second
	// nodeDownFor is how long a node that could not be dialled gets no
	// direct claim: its names go through another node meanwhile.
	nodeDownFor = time.Second
	// ringAskTimeout bounds one request for the ring.
	ringAskTimeout = 2 * time.Second
	// ringLabel is the label of the sessions that ask for the ring.
	ringLabel = "baton-ring"
)

// errNotCluster: the node answered an empty ring (a single server) or
// does not speak version 2.
var errNotCluster = errors.New("baton: not a cluster node")

// ringMember is one member of a ring view.
type ringMember struct {
	id, addr string
	inRing   bool
}

// ringCache is a Client's view of its cluster's ring.
type ringCache struct {
	mu       sync.Mutex
	r        *ring.Ring        // nil until a ring was learnt
	addrs    map[string]string // node id → lock protocol address
	learnt   time.Time
	stale    bool
	down     map[string]time.Time // node id → no direct claims until then
	fetching chan struct{}        // closed when the request in progress ends
}

// set records a ring view unless one of a higher version is known.
func (rc *ringCache) set(version uint64, members []ringMember, now time.Time) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.r != nil && version < rc.r.Version() {
		return
	}
	var ids []string
	addrs := make(map[string]string, len(members))
	for _, m := range members {
		if m.inRing {
			ids = append(ids, m.id)
		}
		if m.addr != "" {
			addrs[m.id] = m.addr
		}
	}
	rc.r, rc.addrs, rc.learnt, rc.stale = ring.New(version, ids), addrs, now, false
}

// markStale makes the next request for an owner ask for the ring again.
func (rc *ringCache) markStale() {
	rc.mu.Lock()
	rc.stale = true
	rc.mu.Unlock()
}

// markDown keeps direct claims off node id for nodeDownFor.
func (rc *ringCache) markDown(id string, now time.Time) {
	rc.mu.Lock()
	if rc.down == nil {
		rc.down = map[string]time.Time{}
	}
	rc.down[id] = now.Add(nodeDownFor)
	rc.stale = true
	rc.mu.Unlock()
}

// needsAsk reports whether the ring should be asked for (again).
func (rc *ringCache) needsAsk(now time.Time, ttl time.Duration) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.r == nil || rc.stale || (ttl > 0 && now.Sub(rc.learnt) > ttl)
}

// owner returns the owner of name and its address; the address is empty
// when no ring is known, the ring is empty, or the owner has no address
// or is marked down.
func (rc *ringCache) owner(name string, now time.Time) (id, addr string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.r == nil {
		return "", ""
	}
	id = rc.r.Owner(name)
	if now.Before(rc.down[id]) {
		return id, ""
	}
	return id, rc.addrs[id]
}

// version returns the version of the ring known, 0 when none.
func (rc *ringCache) version() uint64 {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.r == nil {
		return 0
	}
	return rc.r.Version()
}

// knownAddrs returns the addresses of the ring's members.
func (rc *ringCache) knownAddrs() []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := make([]string, 0, len(rc.addrs))
	for _, a := range rc.addrs {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

// routes reports whether the client routes claims whatever the server
// says.
func (c *Client) routes() bool {
	return c.cfg.Routing == RoutingDirect || (c.cfg.Routing == RoutingAuto && len(c.cfg.Nodes) > 0)
}

// nodes returns the configured addresses, Address first.
func (c *Client) nodes() []string { return append([]string{c.cfg.Address}, c.cfg.Nodes...) }

// dialNode connects to addr, or, when addr is "", to Address or else the
// first of Nodes that accepts. It returns the address connected to.
func (c *Client) dialNode(ctx context.Context, addr string) (net.Conn, string, error) {
	addrs := []string{addr}
	if addr == "" {
		addrs = c.nodes()
	}
	var err error
	for _, a := range addrs {
		var conn net.Conn
		if conn, err = c.cfg.Dialer.DialContext(ctx, "tcp", a); err == nil {
			return conn, a, nil
		}
		if ctx.Err() != nil {
			return nil, "", ctx.Err()
		}
	}
	return nil, "", &dialError{err}
}

// dialFor connects a version 1 lock on name: to its owner when the
// client routes and the owner can be reached, else as dialNode does.
func (c *Client) dialFor(ctx context.Context, name string, lease time.Duration) (net.Conn, error) {
	if c.routes() {
		if c.rc.needsAsk(time.Now(), ringTTL) {
			c.learnRing(ctx, lease)
		}
		if id, addr := c.rc.owner(name, time.Now()); addr != "" {
			conn, err := c.cfg.Dialer.DialContext(ctx, "tcp", addr)
			if err == nil {
				return conn, nil
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			c.rc.markDown(id, time.Now())
		}
	}
	conn, _, err := c.dialNode(ctx, "")
	return conn, err
}

// learnRing asks for the ring, one request at a time: the configured
// nodes in order, then the members known. A caller that finds a request
// in progress waits for it. Failures leave the known ring as it was: the
// claims then go through any node.
func (c *Client) learnRing(ctx context.Context, lease time.Duration) {
	rc := &c.rc
	rc.mu.Lock()
	if ch := rc.fetching; ch != nil {
		rc.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		return
	}
	ch := make(chan struct{})
	rc.fetching = ch
	rc.mu.Unlock()
	defer func() {
		rc.mu.Lock()
		rc.fetching = nil
		rc.mu.Unlock()
		close(ch)
	}()
	for _, addr := range append(c.nodes(), rc.knownAddrs()...) {
		actx, cancel := context.WithTimeout(ctx, ringAskTimeout)
		rw, err := c.openRingWatch(actx, addr, lease, false)
		if err == nil {
			var version uint64
			var members []ringMember
			version, members, _, err = rw.next(time.Now().Add(ringAskTimeout))
			rw.conn.Close()
			if err == nil {
				rc.set(version, members, time.Now())
			}
		}
		cancel()
		if errors.Is(err, errNotCluster) {
			rc.set(0, nil, time.Now())
		}
		if err == nil || errors.Is(err, errNotCluster) || ctx.Err() != nil {
			return
		}
	}
}

// ringWatch is a version 2 session that asks for the ring: once, or
// watching it (the node pushes every new ring).
type ringWatch struct {
	conn    net.Conn
	buf     []byte
	members []ringMember
	lease   time.Duration
	sent    time.Time // when the client last sent a frame
	pinged  time.Time // when the unanswered PING was sent; zero if none
	seq     uint64
}

// openRingWatch opens a session with the node at addr and sends RING
// (with watch). It returns errNotCluster for a node that does not speak
// version 2.
func (c *Client) openRingWatch(ctx context.Context, addr string, lease time.Duration, watch bool) (*ringWatch, error) {
	conn, err := c.cfg.Dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, &dialError{err}
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	var flags uint8
	if watch {
		flags = protocol.RingWatch
	}
	b := protocol.AppendPreamble(nil)
	b = protocol.AppendHello(b, protocol.LeaseMS(lease), ringLabel)
	b = protocol.AppendRing(b, flags)
	sent := time.Now()
	conn.SetDeadline(sent.Add(min(lease, ringAskTimeout)))
	var f protocol.Frame
	if _, err = conn.Write(b); err == nil {
		f, err = protocol.ReadHelloAnswer(conn)
	}
	switch {
	case err != nil:
	case f.Type == protocol.TypeError && f.Code == protocol.CodeUnsupportedVersion:
		err = errNotCluster
	case f.Type == protocol.TypeError, f.Type == protocol.TypeSessionError:
		err = &ServerError{Code: f.Code, Reason: f.Reason}
	case f.Type != protocol.TypeWelcome:
		err = ErrProtocolViolation
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	return &ringWatch{conn: conn, buf: make([]byte, 0, 2*protocol.MaxFrameSize), lease: lease, sent: sent}, nil
}

// next reads until the next RINGEND and returns the ring it closes. It
// keeps the session alive as a version 2 client does: a PING a quarter
// lease after the last frame it sent, and it gives up 0.8 of a lease
// after a PING without its PONG. It returns at deadline when that is not
// zero. An empty ring is errNotCluster.
func (w *ringWatch) next(deadline time.Time) (version uint64, members []ringMember, pushed bool, err error) {
	for {
		for {
			f, n, err := protocol.ParseServerFrameV2(w.buf)
			if err != nil {
				return 0, nil, false, err
			}
			if n == 0 {
				break
			}
			w.buf = w.buf[:copy(w.buf, w.buf[n:])]
			switch f.Type {
			case protocol.TypeRingMember:
				w.members = append(w.members, ringMember{id: f.MemberID(), addr: f.MemberAddr(), inRing: f.Flags&protocol.MemberInRing != 0})
			case protocol.TypeRingEnd:
				members := w.members
				w.members = nil
				if f.RingCount() != len(members) {
					return 0, nil, false, ErrProtocolViolation
				}
				if f.RingVersion() == 0 {
					return 0, nil, false, errNotCluster
				}
				return f.RingVersion(), members, f.Flags&protocol.RingPushed != 0, nil
			case protocol.TypePong:
				if w.pinged.IsZero() || f.Seq != w.seq {
					return 0, nil, false, ErrProtocolViolation
				}
				w.pinged = time.Time{}
			case protocol.TypeSessionError:
				return 0, nil, false, &ServerError{Code: f.Code, Reason: f.Reason}
			default:
				return 0, nil, false, ErrProtocolViolation
			}
		}
		now := time.Now()
		wake := w.sent.Add(w.lease / 4)
		if !w.pinged.IsZero() {
			if now.Sub(w.pinged) > w.lease*4/5 {
				return 0, nil, false, ErrHeartbeatTimeout
			}
			wake = w.pinged.Add(w.lease * 4 / 5)
		}
		if !deadline.IsZero() && deadline.Before(wake) {
			wake = deadline
		}
		w.conn.SetReadDeadline(wake)
		k, err := w.conn.Read(w.buf[len(w.buf):cap(w.buf)])
		w.buf = w.buf[:len(w.buf)+k]
		var ne net.Error
		switch {
		case err == nil:
		case errors.As(err, &ne) && ne.Timeout():
			now := time.Now()
			if !deadline.IsZero() && !now.Before(deadline) {
				return 0, nil, false, err
			}
			if w.pinged.IsZero() && !now.Before(w.sent.Add(w.lease/4)) {
				w.seq++
				w.sent, w.pinged = now, now
				w.conn.SetWriteDeadline(now.Add(w.lease / 4))
				if _, err := w.conn.Write(protocol.AppendPing(nil, w.seq)); err != nil {
					return 0, nil, false, err
				}
			}
		case k == 0:
			return 0, nil, false, err
		}
	}
}

// router sends the claims of a routed Session to their owners: each on
// a session of its own with the owner node, opened on the first claim for
// it, or on the Session's own connection (the front), which relays, when
// no ring is known or the owner cannot be reached.
type router struct {
	c      *Client
	front  *Session
	ctx    context.Context // cancelled by close
	cancel context.CancelFunc
	first  chan struct{} // closed when the watch has learnt a ring, or gave up
	done   chan struct{} // closed when the watch has returned

	mu   sync.Mutex
	subs map[string]*Session // by node id
	// moved are live sessions that subs no longer names (a resume took
	// them to another node): their claims live on there, and close
	// closes them.
	moved  []*Session
	closed bool
}

// route makes s a routed session when the client routes, or when s's
// server says it is a cluster node and Routing is RoutingAuto. It waits,
// at most as long as ctx allows and one lease, for the first ring.
func (c *Client) route(ctx context.Context, s *Session) {
	if s.v1 || c.cfg.Routing == RoutingOff || !(c.routes() || s.welcomeFlags&welcomeClusterNode != 0) {
		return
	}
	rctx, cancel := context.WithCancel(context.Background())
	rt := &router{c: c, front: s, ctx: rctx, cancel: cancel, first: make(chan struct{}), done: make(chan struct{}),
		subs: map[string]*Session{}}
	s.rt = rt
	go rt.watch()
	t := time.NewTimer(s.opts.Lease)
	defer t.Stop()
	select {
	case <-rt.first:
	case <-ctx.Done():
	case <-t.C:
	}
}

// watch keeps a session that watches the ring, on the front's node first,
// then on any other node, until close. It returns on an empty ring (not a
// cluster: everything goes to the front).
func (rt *router) watch() {
	defer close(rt.done)
	var once sync.Once
	signal := func() { once.Do(func() { close(rt.first) }) }
	defer signal()
	rc := &rt.c.rc
	lease := rt.front.opts.Lease
	for attempt := 0; ; attempt++ {
		addrs := append([]string{rt.front.nodeAddr()}, rt.c.nodes()...)
		addrs = append(addrs, rc.knownAddrs()...)
		addr := addrs[attempt%len(addrs)]
		w, err := rt.c.openRingWatch(rt.ctx, addr, lease, true)
		unwatch := func() bool { return false }
		if err == nil {
			unwatch = context.AfterFunc(rt.ctx, func() { w.conn.Close() })
		}
		for err == nil {
			var version uint64
			var members []ringMember
			version, members, _, err = w.next(time.Time{})
			if err == nil {
				rc.set(version, members, time.Now())
				signal()
			}
		}
		if w != nil {
			unwatch()
			w.conn.Close()
		}
		if errors.Is(err, errNotCluster) {
			rc.set(0, nil, time.Now())
			return
		}
		if attempt > 0 && attempt%len(addrs) == 0 {
			signal() // every node tried: claims go to the front meanwhile
		}
		rc.markStale()
		t := time.NewTimer(min(50*time.Millisecond<<min(attempt, 5), 2*time.Second))
		select {
		case <-rt.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// claim makes a claim on the session of name's owner. A claim refused
// 0x03 (the node it reached does not own the name: the ring moved) is
// made once more after the ring was asked again. A claim whose session
// ends while it waits fails, as on a plain session: it is not made again
// elsewhere behind the caller's back.
func (rt *router) claim(ctx context.Context, name string, m Mode, noWait bool, value *string) (*Claim, error) {
	for attempt := 0; ; attempt++ {
		s := rt.sessionFor(ctx, name)
		cl, err := s.claimHere(ctx, name, m, noWait, value)
		if err == nil || attempt > 0 || ctx.Err() != nil {
			return cl, err
		}
		var se *ServerError
		if !errors.As(err, &se) || se.Code != protocol.CodeNotOwner {
			return cl, err
		}
		rt.c.rc.markStale()
		rt.c.learnRing(ctx, rt.front.opts.Lease)
	}
}

// sessionFor returns the session to claim name on: the owner's, opened
// if need be, or the front.
func (rt *router) sessionFor(ctx context.Context, name string) *Session {
	rc := &rt.c.rc
	if rc.needsAsk(time.Now(), 0) && rc.version() > 0 {
		rt.c.learnRing(ctx, rt.front.opts.Lease)
	}
	id, addr := rc.owner(name, time.Now())
	if addr == "" || addr == rt.front.nodeAddr() {
		return rt.front
	}
	rt.mu.Lock()
	s := rt.subs[id]
	if s != nil && (s.Err() != nil || s.nodeAddr() != addr) {
		delete(rt.subs, id)
		if s.Err() == nil {
			rt.moved = append(rt.moved, s)
		}
		s = nil
	}
	rt.mu.Unlock()
	if s != nil {
		return s
	}
	opts := rt.front.opts
	opts.RefuseOldServer = true
	s, err := rt.c.openSession(ctx, opts, addr)
	if err != nil {
		if ctx.Err() == nil {
			rc.markDown(id, time.Now())
		}
		return rt.front
	}
	rt.mu.Lock()
	old, closed := rt.subs[id], rt.closed
	keep := !closed && (old == nil || old.Err() != nil)
	if keep {
		rt.subs[id] = s
	}
	rt.mu.Unlock()
	switch {
	case keep:
		return s
	case old != nil && !closed: // another claim opened one meanwhile
		s.Close()
		return old
	}
	s.Close()
	return rt.front
}

// close ends the watch and every owner's session.
func (rt *router) close() {
	rt.mu.Lock()
	rt.closed = true
	subs, moved := rt.subs, rt.moved
	rt.subs, rt.moved = nil, nil
	rt.mu.Unlock()
	rt.cancel()
	for _, s := range subs {
		s.Close()
	}
	for _, s := range moved {
		s.Close()
	}
	<-rt.done
}

// nodeSessions returns the sessions a routed Session has opened with
// owner nodes, by node id, beside its own connection; empty for a plain
// one.
func (s *Session) nodeSessions() map[string]*Session {
	out := map[string]*Session{}
	if s.rt == nil {
		return out
	}
	s.rt.mu.Lock()
	defer s.rt.mu.Unlock()
	for id, sub := range s.rt.subs {
		out[id] = sub
	}
	return out
}
