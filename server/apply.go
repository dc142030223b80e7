package server

import (
	"errors"
	"os"
	"time"

	"github.com/batonlock/baton/internal/locktable"
)

// delivery is a frame the table asked for, resolved to its session.
type delivery struct {
	to   *session
	send locktable.Send
}

// commit turns a table result into deliveries and observer events. It is
// called with srv.mu held, right after the table operation, so events
// reach observers in table order and ended claims leave the claims map
// before anyone else can look them up.
func (srv *Server) commit(now time.Time, res locktable.Result) []delivery {
	var ds []delivery
	for _, send := range res.Sends {
		if s := srv.claims[send.Session]; s != nil {
			ds = append(ds, delivery{to: s, send: send})
		}
	}
	for _, e := range res.Events {
		if e.Kind != locktable.EventGranted {
			if s := srv.claims[e.Session]; s != nil {
				s.gone.Store(true)
			}
			delete(srv.claims, e.Session)
		}
		srv.notify(fromTable(now, e))
	}
	return ds
}

// update runs op on the table under srv.mu, then delivers what it asked
// for outside the lock.
func (srv *Server) update(op func(now time.Time, t *locktable.Table) locktable.Result) {
	srv.mu.Lock()
	now := time.Now()
	ds := srv.commit(now, op(now, srv.table))
	srv.mu.Unlock()
	srv.deliver(ds)
}

// deliver writes each frame. A session whose write fails is ended (its
// lock passes on) and closed; the frames that this causes are delivered
// in turn, iteratively rather than recursively.
func (srv *Server) deliver(ds []delivery) {
	for len(ds) > 0 {
		type failure struct {
			s      *session
			reason locktable.Reason
		}
		var failed []failure
		for _, d := range ds {
			var err error
			switch d.send.Kind {
			case locktable.SendAcquired:
				err = d.to.push(d.send.Token)
			case locktable.SendError:
				err = d.to.closeWithError(d.send.Code)
			}
			if err != nil {
				failed = append(failed, failure{d.to, writeFailureReason(err)})
			}
		}
		ds = nil
		if len(failed) == 0 {
			return
		}
		// End the claims before closing the connections: a reader woken
		// by the close would otherwise end its claim first, as graceful.
		srv.mu.Lock()
		now := time.Now()
		for _, f := range failed {
			ds = append(ds, srv.commit(now, srv.table.End(now, f.s.id, f.reason))...)
		}
		srv.mu.Unlock()
		for _, f := range failed {
			f.s.conn.Close()
		}
	}
}

// writeFailureReason tells a write that timed out (a client that stopped
// reading) from one that failed because the client went away.
func writeFailureReason(err error) locktable.Reason {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return locktable.ReasonIOTimeout
	}
	return locktable.ReasonGraceful
}
