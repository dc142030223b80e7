package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/tlsfiles"
	"github.com/batonlock/baton/protocol"
)

// watchUnavailable is EX_UNAVAILABLE, as baton run's exit 69.
const watchUnavailable = 69

const watchSynopsis = "baton watch [flags] NAME"

const watchHelp = `
Watches who holds NAME on a baton server, without claiming it, and
prints a line each time that changes: first the holders when the watch
starts, then the state after each change, in the order the server made
the changes. For an election ('baton elect') the one holder is the
leader, and its token grows from one leader to the next.

A line is "free" when nobody holds NAME, else "held" and each holder in
the order they were granted:

  held token=1765100000000001 mode=exclusive value="10.0.0.5:5432" label="baton elect db1 pid 812"

With --json each line is one JSON object:

  {"name":"db","time":"2026-12-07T17:40:00.123Z","holders":[{"token":1765100000000001,"mode":"exclusive","value":"10.0.0.5:5432","label":"baton elect db1 pid 812","identity":""}]}

It runs until interrupted (SIGINT, SIGTERM or SIGHUP), or with --once
prints the current state and exits. The session is resumable: a broken
connection is resumed within 0.8 of --lease, and the watch goes on
without printing a state older than one it printed.

Exit status:
  0        interrupted by SIGINT, SIGTERM or SIGHUP (or --once printed the state)
  1        the output could not be written
  2        usage error (bad flag, NAME, lease or --server)
  69       EX_UNAVAILABLE: server unreachable, the server does not support
           values and watches, refused the watch (not authorized, too
           many claims), or the connection was lost and not resumed
`

type watchConfig struct {
	server   string
	lease    time.Duration
	jsonOut  bool
	once     bool
	tlsFiles *tlsfiles.ClientFiles
}

func watchFlags(stderr io.Writer) (*flagSet, *watchConfig) {
	cfg := &watchConfig{}
	fs := newFlagSet("baton watch", watchSynopsis, stderr)
	fs.StringVar(&cfg.server, "server", "BATON_SERVER", "127.0.0.1:7070", "lock server address (host:port)")
	fs.DurationVar(&cfg.lease, "lease", "BATON_LEASE", 2*time.Second, "session lease: silence after which the server ends the watch (heartbeats every lease/4)")
	fs.BoolVar(&cfg.jsonOut, "json", "BATON_JSON", false, "print one JSON object per line")
	fs.BoolVar(&cfg.once, "once", "BATON_WATCH_ONCE", false, "print the current state and exit")
	cfg.tlsFiles = clientTLSFlags(fs)
	return fs, cfg
}

// checkValue checks a value given on the command line.
func checkValue(v string) error {
	if len(v) > protocol.MaxValueLen {
		return fmt.Errorf("%d bytes, at most %d", len(v), protocol.MaxValueLen)
	}
	return nil
}

func runWatch(args []string, stdout, stderr io.Writer) int {
	fs, cfg := watchFlags(stderr)
	if code := fs.parseOrExit(args, stdout, stderr); code >= 0 {
		if code == exitOK {
			fmt.Fprint(stdout, watchHelp)
		}
		return code
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "baton watch: "+format+"\n", a...)
		fmt.Fprintf(stderr, "Usage: %s\nRun 'baton watch -h' for more.\n", watchSynopsis)
		return exitUsage
	}
	rest := fs.Args()
	if len(rest) > 1 && strings.HasPrefix(rest[1], "-") {
		// Flags after NAME, as the admin commands take them.
		if err := fs.FlagSet.Parse(rest[1:]); err != nil {
			return exitUsage
		}
		rest = append([]string{rest[0]}, fs.Args()...)
	}
	switch {
	case len(rest) == 0:
		return usage("missing NAME")
	case len(rest) > 1:
		return usage("unexpected argument %q after NAME", rest[1])
	}
	name := rest[0]
	dialer, code := checkTarget(name, cfg.lease, cfg.server, cfg.tlsFiles, usage)
	if code >= 0 {
		return code
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	c := baton.New(baton.Config{Address: cfg.server, Dialer: dialer})
	host, _ := os.Hostname()
	s, err := c.OpenSession(ctx, baton.SessionOptions{
		Lease:           cfg.lease,
		Label:           fmt.Sprintf("baton watch %s pid %d", host, os.Getpid()),
		Resume:          baton.ResumeOn,
		RefuseOldServer: true,
	})
	if err != nil {
		if ctx.Err() != nil {
			return exitOK
		}
		fmt.Fprintf(stderr, "baton watch: %s: %v\n", cfg.server, err)
		return watchUnavailable
	}
	defer s.Close()
	w, err := s.Watch(ctx, name)
	if err != nil {
		if ctx.Err() != nil {
			return exitOK
		}
		fmt.Fprintf(stderr, "baton watch: %q: %v\n", name, err)
		return watchUnavailable
	}
	defer w.Close()
	for {
		select {
		case st, ok := <-w.Changes():
			if !ok {
				fmt.Fprintf(stderr, "baton watch: %q: %v\n", name, w.Err())
				return watchUnavailable
			}
			if err := printState(stdout, cfg.jsonOut, name, st); err != nil {
				fmt.Fprintf(stderr, "baton watch: %v\n", err)
				return exitError
			}
			if cfg.once {
				return exitOK
			}
		case <-ctx.Done():
			return exitOK
		}
	}
}

// checkTarget checks the NAME, lease and server of a command that talks
// to a lock server, and returns the dialer its TLS flags ask for (nil:
// plain TCP); code is a usage error's exit code, else -1.
func checkTarget(name string, lease time.Duration, server string, files *tlsfiles.ClientFiles, usage func(format string, a ...any) int) (d baton.Dialer, code int) {
	if err := protocol.ValidateName(name); err != nil {
		return nil, usage("lock name %q: %v", name, err)
	}
	if err := protocol.ValidateLease(lease); err != nil {
		return nil, usage("--lease %v: must be from 1ms to %v", lease, time.Duration(math.MaxUint32)*time.Millisecond)
	}
	if err := checkHostPort(server); err != nil {
		return nil, usage("--server: %v", err)
	}
	tlsCfg, err := clientTLSConfig(files, server)
	if err != nil {
		return nil, usage("%v", err)
	}
	if tlsCfg != nil {
		return &tls.Dialer{Config: tlsCfg}, -1
	}
	return nil, -1
}

// watchHolder is a holder in --json output.
type watchHolder struct {
	Token    uint64 `json:"token"`
	Mode     string `json:"mode"`
	Value    string `json:"value"`
	Label    string `json:"label"`
	Identity string `json:"identity"`
}

// printState prints one state of a watch as a line.
func printState(w io.Writer, asJSON bool, name string, st []baton.Holder) error {
	if asJSON {
		hs := make([]watchHolder, 0, len(st))
		for _, h := range st {
			hs = append(hs, watchHolder{h.Token, h.Mode.String(), h.Value, h.Label, h.Identity})
		}
		b, err := json.Marshal(struct {
			Name    string        `json:"name"`
			Time    time.Time     `json:"time"`
			Holders []watchHolder `json:"holders"`
		}{name, time.Now().UTC(), hs})
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	if len(st) == 0 {
		_, err := fmt.Fprintln(w, "free")
		return err
	}
	var b strings.Builder
	b.WriteString("held")
	for i, h := range st {
		if i > 0 {
			b.WriteString(";")
		}
		fmt.Fprintf(&b, " token=%d mode=%v value=%q label=%q", h.Token, h.Mode, h.Value, h.Label)
		if h.Identity != "" {
			fmt.Fprintf(&b, " identity=%q", h.Identity)
		}
	}
	_, err := fmt.Fprintln(w, b.String())
	return err
}
