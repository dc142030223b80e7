package baton

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"time"

	"github.com/batonlock/baton/internal/clientrule"
	"github.com/batonlock/baton/protocol"
)

// Dialer opens connections to the server. *net.Dialer and *tls.Dialer
// satisfy it; a *tls.Dialer makes the client speak TLS (and present a
// client certificate for mutual TLS if its Config has one).
type Dialer interface {
	DialContext(ctx context.Context, network, addr string) (net.Conn, error)
}

// Config configures a Client.
type Config struct {
	// Address is the server's host:port. Required.
	Address string
	// OnLost, if set, is called when a held lock or claim is lost (not
	// released): a heartbeat timeout, a lost connection, an ERROR or
	// REVOKED, a protocol violation. It is called synchronously, at the
	// moment the loss is decided and before the client closes the
	// connection or does anything else that could let the server hand
	// the lock on, with the lock's name, the grant's token and the
	// cause. It must return quickly and must not call the client. (Do's
	// function is told through its context too, but a context's
	// watchers run in goroutines of their own, later.)
	OnLost func(name string, token uint64, cause error)
	// Dialer opens connections; nil means a plain &net.Dialer{}.
	Dialer Dialer
	// MinHeartbeatInterval is the floor of the heartbeat interval: however
	// slow the link, heartbeats are not sent more often than this. Zero
	// means 100ms. It is never above lease/4.
	MinHeartbeatInterval time.Duration
	// Nodes are further addresses of the same cluster (docs/cluster.md):
	// a connection that cannot be made to Address is made to the first of
	// them that accepts it, and with Nodes the client routes by default
	// (see Routing) and its sessions are resumable by default (see
	// SessionOptions.Resume).
	Nodes []string
	// Routing says whether the client learns a cluster's ring and sends
	// each claim to its name's owner directly (router.go). The zero value,
	// RoutingAuto, routes when Nodes is set or the server says it is a
	// cluster node.
	Routing Routing
}

// DefaultConfig returns a Config for the server at address with every
// other field at its default.
func DefaultConfig(address string) Config { return Config{Address: address} }

// Client makes claims on locks of one server (or, with Config.Nodes, of
// a cluster). It holds no connection of its own: Acquire and Do open a
// connection per claim, and OpenSession one per session, which carries
// many claims. A Client is safe for concurrent use and cheap; there is
// nothing to close.
type Client struct {
	cfg        Config
	minBackoff time.Duration // DoRetry's first backoff; 0 means minBackoff (tests set it)
	rc         ringCache     // the cluster's ring, when the client routes (router.go)
	// noTickets is set once a server refused HELLO's tickets flag (a
	// server of the revision before queue tickets): later sessions do
	// not ask for them (resume_wire.go).
	noTickets atomic.Bool
	// noDetach is set once a server refused HELLO's detach flag (a
	// server of the revision before DETACH): later sessions do not ask
	// for it, and keep their claims through every broken connection.
	noDetach atomic.Bool
	// noValues is set once a server refused HELLO's values flag (a
	// server before values and watches): later sessions do not ask.
	noValues atomic.Bool
}

// New returns a Client for cfg.
func New(cfg Config) *Client {
	if cfg.Dialer == nil {
		cfg.Dialer = &net.Dialer{}
	}
	return &Client{cfg: cfg}
}

// Acquire connects, claims the lock name with the given lease, and waits
// in the lock's queue until it is held, the claim fails, or ctx is done.
// ctx bounds only the acquisition: once Acquire has returned, the Claim
// heartbeats until Release or loss, whatever happens to ctx.
//
// The claim is exclusive and has a connection of its own (protocol
// version 1, which every server speaks): one round trip to the grant, no
// session to open first. For many claims on one connection, or shared
// and semaphore modes, open a Session.
//
// The lease is the failure detector: if the server hears nothing for a
// lease, it ends the claim; the client gives up 0.8 of a lease after its
// last confirmed heartbeat, first. A name or lease that the protocol
// rejects is reported with the protocol's sentinel (for example
// protocol.ErrEmptyName) without connecting.
//
// When ctx is done before the lock is held, Acquire closes the connection
// (leaving the queue) and returns ctx.Err().
func (c *Client) Acquire(ctx context.Context, name string, lease time.Duration) (*Claim, error) {
	return c.acquireClaim(ctx, name, lease, false)
}

// TryAcquire is Acquire without waiting: if the server's first answer is
// that the lock is held by someone else, it leaves the queue and returns
// ErrBusy.
func (c *Client) TryAcquire(ctx context.Context, name string, lease time.Duration) (*Claim, error) {
	return c.acquireClaim(ctx, name, lease, true)
}

// acquireClaim is acquire, its lock wrapped in a Claim of no Session.
func (c *Client) acquireClaim(ctx context.Context, name string, lease time.Duration, noWait bool) (*Claim, error) {
	l, err := c.acquire(ctx, name, lease, noWait)
	if err != nil {
		return nil, err
	}
	return &Claim{name: name, mode: Exclusive, lock: l}, nil
}

func (c *Client) acquire(ctx context.Context, name string, lease time.Duration, noWait bool) (*v1Lock, error) {
	if err := protocol.ValidateName(name); err != nil {
		return nil, err
	}
	if err := protocol.ValidateLease(lease); err != nil {
		return nil, err
	}
	conn, err := c.dialFor(ctx, name, lease)
	if err != nil {
		return nil, err
	}
	l := &v1Lock{
		name:       name,
		lostHook:   c.cfg.OnLost,
		conn:       conn,
		noWait:     noWait,
		granted:    make(chan struct{}),
		lost:       make(chan struct{}),
		readerDone: make(chan struct{}),
		rule:       clientrule.New(lease, c.cfg.MinHeartbeatInterval),
	}
	var buf [protocol.MaxAcquireLen]byte
	frame := protocol.AppendAcquire(buf[:0], protocol.Acquire{
		Version: protocol.Version, LeaseMS: protocol.LeaseMS(lease), Name: name,
	})
	// No other goroutine touches l yet: record the send, then write.
	l.rule.SentAcquire(time.Now())
	err = conn.SetWriteDeadline(l.rule.Deadline())
	if err == nil {
		_, err = conn.Write(frame)
	}
	if err != nil {
		conn.Close()
		return nil, connErr(err)
	}
	go l.read()

	select {
	case <-l.granted:
		return l, nil
	case <-l.lost:
		l.release()
		return nil, l.Err()
	case <-ctx.Done():
		l.release()
		// The grant may have raced with ctx: without it, the lock is gone.
		return nil, ctx.Err()
	}
}

// Do claims the lock name, waits in its queue as long as ctx allows, and
// runs fn while the lock is held; it releases the lock when fn returns or
// panics (a panic is re-raised after the release). It makes one attempt;
// see DoRetry for retries.
//
// fn runs only while ownership is confirmed. fn's context is cancelled the
// moment that stops being true (heartbeat timeout, connection loss, an
// ERROR frame, a protocol violation; context.Cause tells which), or when
// ctx is cancelled. fn must stop its guarded work then. The cancellation
// always comes before the connection is closed; after a heartbeat timeout
// the connection stays open until fn returns, and at most until one lease
// after the last confirmed heartbeat (Claim.CloseBy), so the server cannot
// promote the next waiter while fn is still stopping.
//
// Cancelling ctx while waiting returns ctx.Err() at once. Cancelling ctx
// while fn runs only asks fn to stop: the lock stays held and heartbeats
// go on until fn returns, and Do returns fn's result unchanged.
//
// If ownership was lost while fn ran, Do returns errors.Join(fnErr, cause),
// which is non-nil even when fn returned nil: the work was not protected
// throughout. If fn did not run, Do returns why: a validation sentinel, a
// dial error, a *ServerError, ErrHeartbeatTimeout, ErrConnectionClosed,
// ErrProtocolViolation or ctx.Err().
func (c *Client) Do(ctx context.Context, name string, lease time.Duration, fn func(ctx context.Context, token uint64) error) error {
	_, err := c.do(ctx, name, lease, fn)
	return err
}

// do is Do, also reporting whether fn was called.
func (c *Client) do(ctx context.Context, name string, lease time.Duration, fn func(ctx context.Context, token uint64) error) (ran bool, err error) {
	l, err := c.acquire(ctx, name, lease, false)
	if err != nil {
		return false, err
	}
	defer l.release() // also when fn panics
	if err := ctx.Err(); err != nil {
		return false, err
	}
	return l.run(ctx, fn)
}

// run runs fn while l is held, its context cancelled when l is lost, and
// reports whether fn ran. The caller releases l.
func (l *v1Lock) run(ctx context.Context, fn func(ctx context.Context, token uint64) error) (ran bool, err error) {
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	l.mu.Lock()
	if !l.done && !time.Now().Before(l.rule.Deadline()) {
		// The give-up is due but the reader has not seen it yet (a
		// process frozen since the grant): give up now, before fn starts.
		l.mu.Unlock()
		l.finish(ErrHeartbeatTimeout)
		return false, l.Err()
	}
	if l.done { // lost between the grant and now: fn must not start
		l.mu.Unlock()
		return false, l.Err()
	}
	l.onLost = cancel
	token := l.rule.Token()
	l.mu.Unlock()

	fnErr := fn(fctx, token)
	if cause := l.Err(); cause != nil {
		return true, errors.Join(fnErr, cause)
	}
	return true, fnErr
}
