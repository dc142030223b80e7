package server_test

// Revoke: an ACL reload applies to claims already in the table.

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/batonlock/baton/protocol"
	"github.com/batonlock/baton/server"
)

// reloadableAuthz refuses lock names with the prefix it holds, which a
// test changes as an ACL reload would; an empty prefix allows all.
type reloadableAuthz struct{ deny atomic.Pointer[string] }

func (a *reloadableAuthz) set(prefix string) { a.deny.Store(&prefix) }

func (a *reloadableAuthz) Allow(_, lock string) bool {
	p := a.deny.Load()
	return p == nil || *p == "" || !strings.HasPrefix(lock, *p)
}

// TestRevokeWaiters: after a reload that refuses a lock, its waiters get
// ERROR 0x18 and are gone (the holder's release grants them nothing); the
// holder keeps its lock, and claims on other locks are untouched.
func TestRevokeWaiters(t *testing.T) {
	t.Parallel()
	authz := &reloadableAuthz{}
	ts := startServer(t, func(s *server.Server) { s.Authorizer = authz })
	holder, waiter, other, otherWaiter := ts.dial(t), ts.dial(t), ts.dial(t), ts.dial(t)
	tok := holder.mustOwn("secret/x", longLease)
	waiter.mustWait("secret/x", longLease)
	other.mustOwn("public/y", longLease)
	otherWaiter.mustWait("public/y", longLease)

	authz.set("secret/")
	if n := ts.Revoke(false); n != 1 {
		t.Errorf("Revoke ended %d claims, want 1", n)
	}
	waiter.expectError(protocol.CodeNotAuthorized)
	e := ts.events.wait(t, "dequeued", peerEvent(server.EventDequeued, waiter))
	if e.Reason != server.ReasonRevoked {
		t.Errorf("waiter dequeued for %v, want revoked", e.Reason)
	}

	// The holder keeps its lock: a heartbeat is answered ACQUIRED.
	holder.mustWrite(protocol.AppendHeartbeat(nil))
	if got := holder.expectAcquired(); got != tok {
		t.Errorf("holder's heartbeat answered token %d, want %d", got, tok)
	}
	otherWaiter.mustWrite(protocol.AppendHeartbeat(nil))
	if f := otherWaiter.mustRead(); f.Type != protocol.TypeWaiting {
		t.Errorf("waiter on a permitted lock got %v, want WAITING", f)
	}
	// Releasing the lock grants it to nobody; a new ACQUIRE is refused.
	holder.close()
	ts.events.wait(t, "released", peerEvent(server.EventReleased, holder))
	late := ts.dial(t)
	late.sendAcquire("secret/x", longLease)
	late.expectError(protocol.CodeNotAuthorized)
	if n := ts.events.count(peerEvent(server.EventGranted, waiter)); n != 0 {
		t.Errorf("revoked waiter was granted the lock %d times", n)
	}
}

// TestRevokeHolders: with holders, a refused owner is ended with ERROR
// 0x18 (release reason revoked); the other lock's owner is untouched.
func TestRevokeHolders(t *testing.T) {
	t.Parallel()
	authz := &reloadableAuthz{}
	ts := startServer(t, func(s *server.Server) { s.Authorizer = authz })
	holder, waiter, other := ts.dial(t), ts.dial(t), ts.dial(t)
	holder.mustOwn("secret/x", longLease)
	waiter.mustWait("secret/x", longLease)
	tok := other.mustOwn("public/y", longLease)

	authz.set("secret/")
	if n := ts.Revoke(true); n != 2 {
		t.Errorf("Revoke ended %d claims, want 2", n)
	}
	holder.expectError(protocol.CodeNotAuthorized)
	waiter.expectError(protocol.CodeNotAuthorized)
	e := ts.events.wait(t, "released", peerEvent(server.EventReleased, holder))
	if e.Reason != server.ReasonRevoked {
		t.Errorf("holder released for %v, want revoked", e.Reason)
	}
	other.mustWrite(protocol.AppendHeartbeat(nil))
	if got := other.expectAcquired(); got != tok {
		t.Errorf("permitted holder's heartbeat answered token %d, want %d", got, tok)
	}
	if n := ts.events.count(peerEvent(server.EventGranted, waiter)); n != 0 {
		t.Errorf("revoked waiter was granted the lock %d times", n)
	}
}

// gatedAuthz allows everything until deny is set; its first answer about
// lock gate is held until release is closed, after telling checking.
type gatedAuthz struct {
	reloadableAuthz
	gate              string
	once              atomic.Bool
	checking, release chan struct{}
}

func (a *gatedAuthz) Allow(id, lock string) bool {
	ok := a.reloadableAuthz.Allow(id, lock)
	if lock == a.gate && a.once.CompareAndSwap(false, true) {
		close(a.checking)
		<-a.release
	}
	return ok
}

// TestRevokeRacesAcquire: an ACQUIRE allowed under the old rules but
// entered into the table after Revoke swept it is checked again, and
// refused, instead of staying queued for good.
func TestRevokeRacesAcquire(t *testing.T) {
	t.Parallel()
	authz := &gatedAuthz{gate: "secret/x", checking: make(chan struct{}), release: make(chan struct{})}
	ts := startServer(t, func(s *server.Server) { s.Authorizer = authz })
	holder, waiter := ts.dial(t), ts.dial(t)
	authz.once.Store(true) // the holder passes at once
	holder.mustOwn("secret/x", longLease)
	authz.once.Store(false)
	waiter.sendAcquire("secret/x", longLease)
	<-authz.checking // the waiter's check has said yes under the old rules
	authz.set("secret/")
	if n := ts.Revoke(false); n != 0 {
		t.Errorf("Revoke ended %d claims before the waiter entered, want 0", n)
	}
	close(authz.release)
	waiter.expectError(protocol.CodeNotAuthorized)
}
