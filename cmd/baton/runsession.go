//go:build unix

package main

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/batonlock/baton"
)

// takeSessionLock makes one attempt at a claim on a version 2 session:
// shared or semaphore (--shared, --semaphore N), or any mode with
// --resumable. It opens a session with the lease (resumable with
// --resumable) and claims the lock on it. The session carries this one
// claim; closing it releases everything.
func takeSessionLock(ctx context.Context, cfg *runConfig, c *baton.Client, name string) (*takenLock, error) {
	mode := baton.Exclusive
	switch {
	case cfg.shared:
		mode = baton.Shared
	case cfg.semaphore > 0:
		mode = baton.Semaphore(uint32(cfg.semaphore))
	}
	host, _ := os.Hostname()
	s, err := c.OpenSession(ctx, baton.SessionOptions{
		Lease:  cfg.lease,
		Label:  fmt.Sprintf("baton run %s pid %d", host, os.Getpid()),
		Resume: resumeMode(cfg.resumable),
		// A version 1 server cannot resume: refuse rather than hold
		// the lock on a connection whose break would lose it.
		RefuseOldServer: cfg.resumable,
	})
	if err != nil {
		return nil, err
	}
	var cl *baton.Claim
	if cfg.noWait {
		cl, err = s.TryAcquire(ctx, name, mode)
	} else {
		cl, err = s.Acquire(ctx, name, mode)
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	return &takenLock{held: sessionLock(s, cl), token: cl.Token(), drop: func() { s.Close() }}, nil
}

// sessionLock is a claim on a session as runCommand needs it.
func sessionLock(s *baton.Session, cl *baton.Claim) heldLock {
	return heldLock{
		what: fmt.Sprintf("%v lock %q", cl.Mode(), cl.Name()),
		env: []string{"BATON_LOCK=" + cl.Name(),
			"BATON_TOKEN=" + strconv.FormatUint(cl.Token(), 10)},
		lost:  cl.Lost(),
		cause: func() string { return cl.Err().Error() },
		// Release tells the session that the command has stopped: after
		// a give-up the session kept its connection open until then (or
		// until its CloseBy), so no writer could start while the command
		// was stopping. Closing the session releases the claim in any
		// case.
		release: func() error {
			// Release does not wait for RELEASED; closing the
			// session right after it releases the claim in any case.
			ctx, cancel := context.WithTimeout(context.Background(), s.Lease())
			defer cancel()
			err := cl.Release(ctx)
			s.Close()
			return err
		},
	}
}

// resumeMode is the session's Resume for a --resumable flag: on when
// given, else the client's default (resumable on a cluster).
func resumeMode(resumable bool) baton.ResumeMode {
	if resumable {
		return baton.ResumeOn
	}
	return baton.ResumeAuto
}
