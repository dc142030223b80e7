//go:build unix

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/batonlock/baton"
)

const electSynopsis = "baton elect [flags] NAME --value VALUE -- COMMAND [ARGS...]"

const electHelp = `
Campaigns to lead the election NAME on a baton server and runs COMMAND
while it leads, as 'baton run' runs one while it holds a lock: the
leader is the holder of an exclusive claim on NAME, and that claim
carries VALUE (--value, at most 1024 bytes: the leader's address, say),
which 'baton watch NAME' and the Go client's Election.Observe show to
everyone. Candidates are elected in the order they campaigned.

COMMAND gets BATON_LOCK (NAME) and BATON_TOKEN, the leadership's fencing
token, in its environment: every later leader has a larger token, so a
resource that remembers the largest token it has seen can refuse a
deposed leader (docs/election.md). If leadership is lost while COMMAND
runs, COMMAND's process group gets SIGTERM, then SIGKILL after --grace;
signals are forwarded as by 'baton run'. With --resumable, a broken
connection does not end the leadership if the session is resumed in
time.

The server must support values and watches
(docs/protocol-v2-watches.md); an older one is reported as unavailable
(exit 69).

Exit status:
  N        COMMAND's own status, when it ran as the leader throughout
           (128+S if it was killed by signal S)
  2        usage error (bad flag, NAME, value, lease or --server)
  69       EX_UNAVAILABLE: server unreachable, connection lost, the
           server does not support values and watches, or the campaign
           refused before COMMAND started
  75       EX_TEMPFAIL: not elected within --wait
  76       leadership lost while COMMAND ran, whatever its own status
  124      COMMAND ran longer than --timeout and was stopped
  126      COMMAND could not be executed
  127      COMMAND not found
  128+S    baton elect got signal S before COMMAND started
`

func electFlags(stderr io.Writer) (*flagSet, *runConfig) {
	cfg := &runConfig{prog: "baton elect", conflict: exitTempFail, elect: new(string)}
	fs := newFlagSet("baton elect", electSynopsis, stderr)
	fs.StringVar(&cfg.server, "server", "BATON_SERVER", "127.0.0.1:7070", "lock server address (host:port)")
	fs.StringVar(cfg.elect, "value", "BATON_VALUE", "", "the value the leader publishes with its leadership (at most 1024 bytes)")
	fs.DurationVar(&cfg.lease, "lease", "BATON_LEASE", 2*time.Second, "lease: silence after which the server ends the leadership (heartbeats every lease/4)")
	fs.DurationVar(&cfg.wait, "wait", "BATON_WAIT", 0, "give up (exit 75) if not elected within this time; 0 waits forever")
	fs.BoolVar(&cfg.retry, "retry", "BATON_RETRY", false, "retry an unreachable or restarting server with backoff until elected")
	fs.DurationVar(&cfg.timeout, "timeout", "BATON_TIMEOUT", 0, "stop COMMAND (SIGTERM, SIGKILL after --grace) if it runs longer than this, and exit 124; 0: no limit")
	fs.DurationVar(&cfg.grace, "grace", "BATON_GRACE", 10*time.Second, "after lost leadership, time from SIGTERM to SIGKILL of COMMAND's process group")
	fs.BoolVar(&cfg.verbose, "v", "BATON_VERBOSE", false, "say on stderr when waiting, each retry and its cause, and the time waited (on by default when stderr is a terminal)")
	fs.BoolVar(&cfg.isolate, "isolate", "BATON_ISOLATE", true, "kill every process COMMAND started when it exits or baton elect dies, even by SIGKILL (Linux; false: only COMMAND dies with baton elect)")
	fs.BoolVar(&cfg.resumable, "resumable", "BATON_RESUMABLE", false, "lead on a resumable session: a broken connection does not end the leadership if the session is resumed within 0.8 of --lease")
	fs.StringVar(&cfg.admin, "admin", "BATON_ADMIN_ADDRESS", "", "admin API to ask, when waiting, who leads (as 'baton show'; the same --tls-* files); empty: do not ask")
	cfg.tls = clientTLSFlags(fs)
	return fs, cfg
}

func runElect(args []string, stdout, stderr io.Writer) int {
	fs, cfg := electFlags(stderr)
	if code := fs.parseOrExit(args, stdout, stderr); code >= 0 {
		if code == exitOK {
			fmt.Fprint(stdout, electHelp)
		}
		return code
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "baton elect: "+format+"\n", a...)
		fmt.Fprintf(stderr, "Usage: %s\nRun 'baton elect -h' for more.\n", electSynopsis)
		return exitUsage
	}
	name, argv, code := nameAndCommand(fs, usage)
	if code >= 0 {
		return code
	}
	if err := checkValue(*cfg.elect); err != nil {
		return usage("--value: %v", err)
	}
	return runHeld(fs, cfg, name, argv, usage, stdout, stderr)
}

// takeElection campaigns once for the leadership of name on a session of
// its own (resumable with --resumable); closing the session resigns.
func takeElection(ctx context.Context, cfg *runConfig, c *baton.Client, name string) (*takenLock, error) {
	host, _ := os.Hostname()
	s, err := c.OpenSession(ctx, baton.SessionOptions{
		Lease:  cfg.lease,
		Label:  fmt.Sprintf("baton elect %s pid %d", host, os.Getpid()),
		Resume: resumeMode(cfg.resumable),
		// A version 1 server has no values: say so rather than fall back.
		RefuseOldServer: true,
	})
	if err != nil {
		return nil, err
	}
	e := baton.NewElection(s, name)
	if err := e.Campaign(ctx, *cfg.elect); err != nil {
		s.Close()
		return nil, err
	}
	cl := e.Claim()
	if cl == nil { // lost between the grant and now
		err := s.Err()
		s.Close()
		if err == nil {
			err = baton.ErrNotLeader
		}
		return nil, err
	}
	return &takenLock{held: sessionLock(s, cl), token: cl.Token(), drop: func() { s.Close() }}, nil
}
