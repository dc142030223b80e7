// Package server is baton's I/O shell: it accepts connections, turns
// frames into calls on the lock table, where all lock semantics live,
// and the table's results into writes and closes. Its views (Snapshot,
// Locks, SessionInfos) return copies in the server's own types.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonlock/baton/internal/clustercore"
	"github.com/batonlock/baton/internal/locktable"
	"github.com/batonlock/baton/internal/rangelock"
	"github.com/batonlock/baton/protocol"
)

// Defaults for the Server's configuration fields.
const (
	DefaultAddr      = "127.0.0.1:7070"
	DefaultIOTimeout = 5 * time.Second
	// DefaultMaxLease is the MaxLease that baton serve applies unless
	// told otherwise: ten minutes of silence is far beyond any failure
	// detector's need, and bounds a cluster's take-over warm-up.
	DefaultMaxLease = 10 * time.Minute

	// The default range-lock caps (Server.RangeWaitingPerSession and
	// the next two): far above what a machine's processes ask of one
	// mount, and small enough that nothing one session adds to a queue
	// or the wait-for graph costs the other sessions a noticeable pause.
	DefaultRangeWaitingPerSession = 1024
	DefaultRangeWaitingPerOwner   = 64
	DefaultRangeOwnersPerSession  = 4096
)

// ErrServerClosed is returned by Serve and ListenAndServe after Shutdown
// or Close.
var ErrServerClosed = errors.New("baton: server closed")

// Authorizer decides whether a client identity may take a lock. The
// server asks it for every ACQUIRE that passed validation, and for every
// claim in the table when Revoke is called.
type Authorizer interface {
	Allow(identity, lock string) bool
}

// Server is a baton lock server. Set its exported fields before calling
// Serve or ListenAndServe and do not change them afterwards; the zero
// value is ready to use.
type Server struct {
	// Addr is the TCP address ListenAndServe listens on; empty means
	// DefaultAddr.
	Addr string
	// IOTimeout bounds the TLS handshake plus the whole first ACQUIRE
	// (from accept), the rest of a started frame, and the total time the
	// writes to one session may spend blocked one after another (a client
	// that does not read); a write that goes through at once starts the
	// count anew. Zero means DefaultIOTimeout.
	IOTimeout time.Duration
	// MaxLease is the longest lease a session may ask for: a version 1
	// ACQUIRE or a version 2 HELLO with a longer one is answered ERROR
	// 0x17 and closed. Zero means no limit. A lease is how long a silent
	// client keeps what it holds, and on a cluster node it sets every
	// take-over's warm-up, so one client's long lease delays every
	// failover (docs/capacity.md).
	MaxLease time.Duration
	// MaxSessionClaims is the most claims, held and queued, one version 2
	// session may have; a CLAIM over it is answered REFUSED 0x07. Zero
	// means no limit; baton serve applies DefaultMaxSessionClaims.
	MaxSessionClaims int
	// MaxWaiters is the most claims that may wait in one lock's queue, of
	// either protocol version: a claim that would wait behind as many is
	// answered REFUSED 0x07 (version 2; a no-wait claim BUSY) or ERROR
	// 0x07 and closed (version 1). Zero means no limit; baton serve
	// applies DefaultMaxWaiters.
	MaxWaiters int
	// MaxWatchBacklog is the most bytes a version 2 session with watches
	// may have decided and not yet sent when a change is due to one of
	// its watches: over it, every watch of the session ends with REVOKED
	// 0x08 (its claims live on), so a watcher that does not read never
	// holds the server's memory. Zero means no limit; baton serve
	// applies DefaultMaxWatchBacklog.
	MaxWatchBacklog int
	// MaxRelayedWatches is the most watches a cluster node relays to the
	// names' owners at once, each over a connection of its own; a WATCH
	// over it is answered REFUSED 0x07, and a local watch whose name
	// leaves while at it ends with REVOKED 0x07 instead of following.
	// Zero means no limit; baton serve applies DefaultMaxRelayedWatches.
	MaxRelayedWatches int
	// MaxSessionsPerClient is the most open sessions (connections past
	// their first ACQUIRE or HELLO) of one client: one certificate
	// identity under mutual TLS, else one remote IP address. One more is
	// answered ERROR 0x07 and closed. Zero means no limit; baton serve
	// applies DefaultMaxSessionsPerClient.
	MaxSessionsPerClient int
	// MaxKeptSessions and MaxKeptClaims bound the resumable sessions kept
	// after their connection broke, and the claims they keep together: a
	// session that would pass either is not kept, and its claims end
	// with its connection as a plain session's do. Zero means no limit;
	// baton serve applies DefaultMaxKeptSessions and DefaultMaxKeptClaims.
	MaxKeptSessions, MaxKeptClaims int
	// TLSConfig, when set, makes the protocol port speak TLS.
	TLSConfig *tls.Config
	// Authorizer, when set, is asked for every ACQUIRE; nil allows all.
	Authorizer Authorizer
	// Tokens issues fencing tokens; nil means tokens from the wall clock
	// since this process started, so that tokens increase across a
	// restart of any speed on a wall clock that does not step back: in
	// the process's first second an ACQUIRE waits (up to a second) for
	// the next. A source that also has a method NotBefore() time.Time
	// (the first instant its Next returns at once) is waited for never
	// under the table's mutex: a version 1 ACQUIRE waits for it before
	// entering the table; a version 2 CLAIM is answered at once, QUEUED
	// (BUSY if no-wait) when it would be granted before the gate, and
	// granted by a PROMOTED when the gate opens.
	Tokens TokenSource
	// Observer receives events for metrics, audit and logs; may be nil.
	Observer Observer
	// Logger receives the server's logs; nil means slog.Default().
	Logger *slog.Logger
	// Router, when set, makes the server a cluster node: it decides for
	// every version 1 ACQUIRE whether this node serves the name, relays
	// the connection to its owner or holds it (relay.go).
	Router Router
	// TrustHop tells whether a connection from addr may open with a hop
	// header (a relaying member); nil trusts none. It is asked only of
	// connections without TLS: see TrustHopIdentity.
	TrustHop func(addr net.Addr) bool
	// TrustHopIdentity tells whether a TLS connection whose verified
	// client certificate has identity (see Identity) may open with a hop
	// header; nil trusts none. A TLS connection is never trusted by its
	// address.
	TrustHopIdentity func(identity string) bool
	// DialOwner opens a hop to an owner's protocol address; nil means
	// plain TCP.
	DialOwner func(ctx context.Context, addr string) (net.Conn, error)
	// NodeID is this cluster node's id, carried in the hop header of the
	// upstream sessions that relay version 2 claims (relay2upstream.go).
	NodeID string

	// RangeWaitingPerSession caps the waiting range requests of one
	// version 2 session, RangeWaitingPerOwner those of one of its lock
	// owners, and RangeOwnersPerSession its lock owners that hold or
	// wait: a set past a cap is answered status 0x0e (limit) and changes
	// nothing. Zero means the Default of the same name, negative no cap.
	RangeWaitingPerSession int
	RangeWaitingPerOwner   int
	RangeOwnersPerSession  int

	// afterTableEntry, when set by a test, runs between an ACQUIRE's
	// entry into the table and the reply to it, with the session's write
	// mutex held; it gets the client's address.
	afterTableEntry func(addr string)

	// authGen counts Revoke calls; an ACQUIRE checked against the
	// Authorizer before a Revoke is checked again when it enters the table.
	authGen atomic.Uint64

	relayed, relayedTotal atomic.Int64
	// Version 2 claims relayed to their owners now, and the upstream
	// sessions that carry them (relay2.go, relay2upstream.go).
	relayedClaims, upstreams atomic.Int64
	relayedWatches           atomic.Int64 // relaywatch.go
	hops                     hopPools     // idle hop connections by owner (hoppool.go)
	hopsKept                 atomic.Int64 // hops put back in a pool after their claim (keepHop)
	ownerDials               atomic.Int64 // connections opened to owners (dialOwner)

	initOnce   sync.Once
	initErr    error
	gate       time.Time   // no grant before this instant (locktable.Gate)
	gateTimer  *time.Timer // opens the table's gate; nil without one
	inShutdown atomic.Bool
	sessionsWG sync.WaitGroup
	// leaseCeiling is a cluster's ceiling on leases (SetLeaseCeiling), in
	// nanoseconds; 0 for none.
	leaseCeiling atomic.Int64

	// mu guards the table and every field below it. It is never held
	// during network I/O.
	mu        sync.Mutex
	table     *locktable.Table
	ranges    rangeState                       // POSIX range locks of version 2 sessions (ranges.go)
	claims    map[locktable.SessionID]*session // sessions with a claim in the table
	sessions  map[*session]struct{}            // every open session
	listeners map[*net.Listener]struct{}
	nextID    uint64
	// Claims held and queued, and version 2 sessions, by protocol version
	// (index 1 or 2), for ProtocolCounts.
	held, queued [3]int
	v2Sessions   int
	resume       resumeState    // resumable sessions kept after their connection broke (resume.go)
	perClient    map[string]int // open sessions by client (limits.go)
	// gatedHeld are the claims held during a name's warm-up, by name,
	// entered together when it is served (tickets.go).
	gatedHeld clustercore.TicketGates[*session]
}

// rangeCap is a range-lock cap as the table takes it (0: none) from a
// Server field (0: the default, negative: none).
func rangeCap(n, def int) int {
	switch {
	case n == 0:
		return def
	case n < 0:
		return 0
	}
	return n
}

// processStart is when this process started, as far as the server can
// tell: a previous server process on the same port stopped before it.
var processStart = time.Now()

func (srv *Server) init() error {
	srv.initOnce.Do(func() {
		tokens := srv.Tokens
		if tokens == nil {
			ct, err := locktable.NewClockTokens(processStart)
			if err != nil {
				srv.initErr = err
				tokens = &locktable.CounterTokens{} // never used: Serve fails
			} else {
				tokens = ct
			}
		}
		if g, ok := tokens.(locktable.Gate); ok {
			srv.gate = g.NotBefore()
		}
		srv.table = locktable.New(tokens)
		srv.table.SetLimits(srv.tableLimits())
		srv.ranges = newRangeState(tokens)
		gated := time.Now().Before(srv.gate)
		if gated {
			// Claims and range requests that would be granted before the
			// gate wait in their queues instead (answers are never held
			// back); the timer below grants them when it opens, unless a
			// request has opened it first.
			srv.table.SetGate(srv.gate)
			srv.ranges.table.SetGate(srv.gate)
		}
		srv.ranges.table.SetLimits(rangelock.Limits{
			WaitingPerSession: rangeCap(srv.RangeWaitingPerSession, DefaultRangeWaitingPerSession),
			WaitingPerOwner:   rangeCap(srv.RangeWaitingPerOwner, DefaultRangeWaitingPerOwner),
			OwnersPerSession:  rangeCap(srv.RangeOwnersPerSession, DefaultRangeOwnersPerSession),
		})
		srv.claims = map[locktable.SessionID]*session{}
		srv.sessions = map[*session]struct{}{}
		srv.listeners = map[*net.Listener]struct{}{}
		if srv.Logger == nil {
			srv.Logger = slog.Default()
		}
		if srv.IOTimeout <= 0 {
			srv.IOTimeout = DefaultIOTimeout
		}
		if gated {
			srv.gateTimer = time.AfterFunc(max(time.Until(srv.gate), 0), srv.openGates)
		}
	})
	return srv.initErr
}

// ListenAndServe listens on srv.Addr and calls Serve.
func (srv *Server) ListenAndServe() error {
	if srv.inShutdown.Load() {
		return ErrServerClosed
	}
	addr := srv.Addr
	if addr == "" {
		addr = DefaultAddr
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return srv.Serve(l)
}

// Serve accepts connections on l, one goroutine per session, until
// Shutdown or Close; it then returns ErrServerClosed. When accept fails,
// for example because the process ran out of file descriptors, Serve
// backs off and retries; it returns only when l is closed.
func (srv *Server) Serve(l net.Listener) error {
	if err := srv.init(); err != nil {
		l.Close()
		return err
	}
	if !srv.trackListener(&l, true) {
		l.Close()
		return ErrServerClosed
	}
	defer srv.trackListener(&l, false)

	var backoff time.Duration
	for {
		conn, err := l.Accept()
		if err != nil {
			if srv.inShutdown.Load() {
				return ErrServerClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			srv.observe(Event{Kind: EventAcceptError, Time: time.Now(), Err: err})
			srv.Logger.Warn("accept failed; retrying", "err", err, "retry_in", backoff)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		s := srv.newSession(conn)
		if s == nil {
			conn.Close()
			return ErrServerClosed
		}
		go s.serve()
	}
}

func (srv *Server) trackListener(l *net.Listener, add bool) bool {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if add {
		if srv.inShutdown.Load() {
			return false
		}
		srv.listeners[l] = struct{}{}
	} else {
		delete(srv.listeners, l)
	}
	return true
}

func (srv *Server) newSession(conn net.Conn) *session {
	if srv.TLSConfig != nil {
		conn = tls.Server(conn, srv.TLSConfig)
	}
	return srv.addSession(conn)
}

// addSession registers a session on conn, accepted or passed on by the
// session before it (passHop); nil once the server shuts down.
func (srv *Server) addSession(conn net.Conn) *session {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.inShutdown.Load() {
		return nil
	}
	srv.nextID++
	s := &session{
		srv:  srv,
		conn: conn,
		id:   locktable.SessionID(srv.nextID),
		peer: locktable.Peer{Addr: conn.RemoteAddr().String()},
	}
	srv.sessions[s] = struct{}{}
	srv.sessionsWG.Add(1)
	return s
}

// Revoke applies a changed Authorizer (after an ACL reload) to the claims
// already in the table: every waiter it refuses is sent ERROR 0x18 (not
// authorized) and closed, leaving its queue (release reason "revoked").
// With holders, an owner it refuses is ended the same way and the next
// permitted waiter is promoted; without, owners keep their locks. It
// returns how many claims it ended; with no Authorizer it does nothing.
// It applies the same rules to the range locks (revokeRanges), whose
// revocations it counts too.
func (srv *Server) Revoke(holders bool) int {
	srv.init()
	a := srv.Authorizer
	if a == nil {
		return 0
	}
	n := 0
	srv.update(func(now time.Time, t *locktable.Table) locktable.Result {
		srv.authGen.Add(1)
		res := t.Revoke(now, func(p locktable.Peer, lock string) bool { return a.Allow(p.Identity, lock) }, holders)
		for _, e := range res.Events {
			if e.Reason == locktable.ReasonRevoked {
				n++
			}
		}
		return res
	})
	return n + srv.revokeRanges(holders)
}

// Shutdown stops the server gracefully: it stops accepting, stops
// promoting (no waiter is granted a lock from now on), sends ERROR 0x01 to
// every session, holders and waiters alike, and closes them. It returns
// when every session has closed, or ctx.Err() when ctx ends first, after
// closing whatever is left.
func (srv *Server) Shutdown(ctx context.Context) error {
	srv.init()
	ds := srv.beginShutdown()
	srv.closeHops()
	done := make(chan struct{})
	go func() {
		srv.deliverAll(ds)
		srv.sessionsWG.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		srv.closeAll()
		<-done
		return ctx.Err()
	}
}

// Close closes the listeners and every connection at once, without ERROR
// frames. Nobody is promoted.
func (srv *Server) Close() error {
	srv.init()
	srv.beginShutdown()
	srv.closeHops()
	srv.closeAll()
	srv.sessionsWG.Wait()
	return nil
}

// ShuttingDown reports whether Shutdown or Close has been called. Health
// endpoints use it to answer 503 from the first moment of shutdown.
func (srv *Server) ShuttingDown() bool { return srv.inShutdown.Load() }

// beginShutdown closes the listeners and ends every claim in the table;
// it returns the ERROR 0x01 deliveries for every open session.
func (srv *Server) beginShutdown() []delivery {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.inShutdown.Swap(true) {
		return nil
	}
	if srv.gateTimer != nil {
		srv.gateTimer.Stop()
	}
	now := time.Now()
	srv.notify(Event{Kind: EventShutdown, Time: now})
	for l := range srv.listeners {
		(*l).Close()
	}
	// Sessions without a claim yet (handshake, first frame) are told too.
	var ds []delivery
	for s := range srv.sessions {
		if s.movedOut.Load() {
			// Told of a move already, its reader waits for the hang-up
			// until the lease: nothing is granted any more, so a linger
			// is enough.
			s.conn.SetReadDeadline(time.Now().Add(srv.linger()))
		}
		if _, claimed := srv.claims[s.id]; !claimed {
			ds = append(ds, delivery{to: s, send: locktable.Send{Kind: locktable.SendError, Session: s.id, Code: protocol.CodeShuttingDown}})
		}
	}
	ds = append(ds, srv.commit(now, srv.table.Shutdown(now))...)
	srv.dropKeptLocked()
	return ds
}

func (srv *Server) closeAll() {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	for s := range srv.sessions {
		s.conn.Close()
	}
}

// deliverAll sends many frames concurrently, so that one slow client
// cannot hold up the others by a whole io-timeout each.
func (srv *Server) deliverAll(ds []delivery) {
	const workers = 64
	if len(ds) <= 1 {
		srv.deliver(ds)
		return
	}
	ch := make(chan delivery)
	var wg sync.WaitGroup
	for range min(workers, len(ds)) {
		wg.Go(func() {
			for d := range ch {
				srv.deliver([]delivery{d})
			}
		})
	}
	for _, d := range ds {
		ch <- d
	}
	close(ch)
	wg.Wait()
}

func (srv *Server) observe(e Event) {
	if srv.Observer != nil {
		srv.Observer.Observe(e)
	}
}

// notify is observe for callers that hold srv.mu.
func (srv *Server) notify(e Event) { srv.observe(e) }

// leaseTooLong tells whether a session's lease exceeds MaxLease or the
// ceiling a cluster set (SetLeaseCeiling).
func (srv *Server) leaseTooLong(lease time.Duration) bool {
	c := time.Duration(srv.leaseCeiling.Load())
	return srv.MaxLease > 0 && lease > srv.MaxLease || c > 0 && lease > c
}

// errLeaseTooLong: a version 1 ACQUIRE whose lease the ceiling refused
// after the opening's check.
var errLeaseTooLong = errors.New("server: lease above the ceiling")

// setLeaseCeiling makes the server refuse, with ERROR 0x17, a session
// whose lease is above d, as MaxLease does (0: no ceiling beyond
// MaxLease): a cluster's ceiling, set by an operator to lower the
// cluster's largest lease. Sessions open already keep their lease.
func (srv *Server) setLeaseCeiling(d time.Duration) { srv.leaseCeiling.Store(int64(d)) }

// longestLease is the longest lease among the server's sessions, open or
// kept for re-assertion (0 for none): what a cluster's lowering of its
// largest lease waits for. It takes the server's mutex for a walk of the
// sessions, so it is for a slow poll, not a hot path.
func (srv *Server) longestLease() time.Duration {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return srv.table.LongestLease()
}

// openGates opens the token gate of both tables: the claims and the range
// requests that waited for it are granted in the order they came.
func (srv *Server) openGates() {
	srv.mu.Lock()
	now := time.Now()
	ds := srv.commit(now, srv.table.OpenGate(now))
	ds = append(ds, srv.rangePushes(srv.ranges.table.OpenGate(now), nil)...)
	srv.mu.Unlock()
	srv.deliver(ds)
}
