package baton

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Leader election on a lock (docs/election.md), in the spirit of etcd's
// concurrency.Election: the leader is the holder of an exclusive claim
// on the election's name, and publishes a value (its address, say) with
// it; anyone may watch the name to learn the leader and its value.

var (
	// ErrNoLeader: Election.Leader found nobody holding the name.
	ErrNoLeader = errors.New("baton: election has no leader")
	// ErrNotLeader: Election.Proclaim when this Election does not lead
	// (it did not campaign, resigned, or lost the claim; the error then
	// wraps why).
	ErrNotLeader = errors.New("baton: not the election's leader")
)

// Leader is an election's leader as a watcher sees it.
type Leader struct {
	// Value is the value the leader campaigned with or proclaimed last.
	Value string
	// Token is the fencing token of the leader's claim: every later
	// leader of the name has a larger one. Give it to whatever the
	// leader acts on, so that a deposed leader's late action is refused.
	Token uint64
	// Label and Identity are the leader session's label and certificate
	// identity.
	Label, Identity string
}

// Election campaigns for, and observes, the leadership of one name on a
// Session. Its methods are safe for concurrent use.
type Election struct {
	s    *Session
	name string

	mu sync.Mutex
	cl *Claim // the claim while this Election leads (or led: see leading)
}

// NewElection returns the election of name on s. It sends nothing.
func NewElection(s *Session, name string) *Election {
	return &Election{s: s, name: name}
}

// Name returns the election's name.
func (e *Election) Name() string { return e.name }

// Campaign waits until this Election leads: it makes an exclusive claim
// on the name with value (at most protocol.MaxValueLen bytes) and waits
// in the name's queue, in order, as long as ctx allows. When ctx ends
// first it leaves the queue and returns ctx.Err(). Once elected, the
// Election leads until Resign, or until the claim is lost (see Claim;
// Claim().Lost() tells), and every observer learns value with it. A
// Campaign while leading proclaims value instead.
func (e *Election) Campaign(ctx context.Context, value string) error {
	if cl := e.leading(); cl != nil {
		return e.proclaim(ctx, cl, value)
	}
	cl, err := e.s.AcquireValue(ctx, e.name, Exclusive, value)
	if err != nil {
		return err
	}
	e.mu.Lock()
	old := e.cl
	e.cl = cl
	e.mu.Unlock()
	if old != nil && old != cl {
		old.Release(context.Background()) // a concurrent Campaign's: one claim leads
	}
	return nil
}

// Proclaim gives the leader a new value and waits until the server has
// it: every observer learns it before Proclaim returns. It fails with
// ErrNotLeader unless this Election leads.
func (e *Election) Proclaim(ctx context.Context, value string) error {
	cl := e.leading()
	if cl == nil {
		return e.notLeader()
	}
	return e.proclaim(ctx, cl, value)
}

func (e *Election) proclaim(ctx context.Context, cl *Claim, value string) error {
	err := cl.SetValue(ctx, value)
	if err != nil && cl.Err() != nil {
		return fmt.Errorf("%w: %w", ErrNotLeader, cl.Err())
	}
	return err
}

// Resign gives up leadership, if this Election leads, and waits as long
// as ctx allows until the server has released the claim: the next
// candidate may be elected then. It returns nil when this Election does
// not lead.
func (e *Election) Resign(ctx context.Context) error {
	e.mu.Lock()
	cl := e.cl
	e.cl = nil
	e.mu.Unlock()
	if cl == nil {
		return nil
	}
	cl.Release(ctx)
	select {
	case <-cl.Released():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Token returns the fencing token of this Election's leadership, or 0
// when it does not lead.
func (e *Election) Token() uint64 {
	if cl := e.leading(); cl != nil {
		return cl.Token()
	}
	return 0
}

// Claim returns the claim this Election leads with (its Lost channel
// closes the moment leadership is lost), or nil when it does not lead.
func (e *Election) Claim() *Claim { return e.leading() }

// leading returns the claim while it is held.
func (e *Election) leading() *Claim {
	e.mu.Lock()
	cl := e.cl
	e.mu.Unlock()
	if cl == nil {
		return nil
	}
	select {
	case <-cl.Lost():
		return nil
	default:
		return cl
	}
}

func (e *Election) notLeader() error {
	e.mu.Lock()
	cl := e.cl
	e.mu.Unlock()
	if cl != nil && cl.Err() != nil {
		return fmt.Errorf("%w: %w", ErrNotLeader, cl.Err())
	}
	return ErrNotLeader
}

// Leader returns the current leader, or ErrNoLeader when nobody holds
// the name. It watches the name for one answer (a round trip), so any
// session may ask, not only a candidate's.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	w, err := e.s.Watch(ctx, e.name)
	if err != nil {
		return Leader{}, err
	}
	defer w.Close()
	select {
	case hs, ok := <-w.Changes():
		if !ok {
			return Leader{}, w.Err()
		}
		if len(hs) == 0 {
			return Leader{}, ErrNoLeader
		}
		return leaderOf(hs[0]), nil
	case <-ctx.Done():
		return Leader{}, ctx.Err()
	}
}

// Observe returns a channel that delivers the leader when the name is
// first watched and after each change: a new leader, or a new value of
// the same one. Times without a leader are not delivered. Leaders come
// in the order they were elected, each token larger than the one
// before, never an older leader after a newer one, also across a
// reconnection or a cluster failover (see Watch). The channel is closed
// when ctx ends, when the watch cannot start (Leader tells why) or when
// the session ends.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	out := make(chan Leader)
	go func() {
		defer close(out)
		w, err := e.s.Watch(ctx, e.name)
		if err != nil {
			return
		}
		defer w.Close()
		var last Leader
		for {
			select {
			case hs, ok := <-w.Changes():
				if !ok {
					return
				}
				if len(hs) == 0 {
					continue
				}
				l := leaderOf(hs[0])
				if l.Token < last.Token || l == last {
					continue
				}
				select {
				case out <- l:
					last = l
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

func leaderOf(h Holder) Leader {
	return Leader{Value: h.Value, Token: h.Token, Label: h.Label, Identity: h.Identity}
}
