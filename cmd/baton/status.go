package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/batonlock/baton/internal/tlsfiles"
	"github.com/batonlock/baton/protocol"
)

const statusSynopsis = "baton status [flags]"

const statusHelp = `
Checks that a baton server answers on its protocol port, without the admin
API: it sends one ACQUIRE with a zero lease, which every version-1 server
refuses with ERROR 0x17 before looking at the name or the ACL, so that no
lock is taken, and reports the protocol and the round trip.

Exit status:
  0   the server answered as a baton server (protocol v1)
  2   usage error
  69  EX_UNAVAILABLE: unreachable, or not a baton server
`

// statusProbeLock names the probe's claim; the server refuses it before
// reading the name.
const statusProbeLock = "baton-status-probe"

// statusConfig is what 'baton status' reads from flags and env.
type statusConfig struct {
	server  string
	timeout time.Duration
	tls     *tlsfiles.ClientFiles
}

func statusFlags(stderr io.Writer) (*flagSet, *statusConfig) {
	cfg := &statusConfig{}
	fs := newFlagSet("baton status", statusSynopsis, stderr)
	fs.StringVar(&cfg.server, "server", "BATON_SERVER", "127.0.0.1:7070", "lock server address (host:port)")
	fs.DurationVar(&cfg.timeout, "timeout", "BATON_STATUS_TIMEOUT", 5*time.Second, "give up on a server that does not answer within this time")
	cfg.tls = clientTLSFlags(fs)
	return fs, cfg
}

func runStatus(args []string, stdout, stderr io.Writer) int {
	fs, cfg := statusFlags(stderr)
	if code := fs.parseOrExit(args, stdout, stderr); code >= 0 {
		if code == exitOK {
			fmt.Fprint(stdout, statusHelp)
		}
		return code
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "baton status: "+format+"\n", a...)
		fmt.Fprintf(stderr, "Usage: %s\nRun 'baton status -h' for more.\n", statusSynopsis)
		return exitUsage
	}
	switch {
	case fs.NArg() > 0:
		return usage("unexpected argument %q", fs.Arg(0))
	case cfg.timeout <= 0:
		return usage("--timeout must be positive, got %v", cfg.timeout)
	}
	if err := checkHostPort(cfg.server); err != nil {
		return usage("--server: %v", err)
	}
	rtt, err := statusProbe(cfg.server, cfg.tls, cfg.timeout)
	if err != nil {
		fmt.Fprintf(stderr, "baton status: %s: %v\n", cfg.server, err)
		return 69 // EX_UNAVAILABLE
	}
	fmt.Fprintf(stdout, "%s: baton server, protocol v1, round trip %v\n", cfg.server, rtt.Round(time.Microsecond))
	return exitOK
}

// statusProbe connects to server, sends the probe and times its answer.
func statusProbe(server string, tf *tlsfiles.ClientFiles, timeout time.Duration) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	tlsCfg, err := clientTLSConfig(tf, server)
	if err != nil {
		return 0, err
	}
	var d interface {
		DialContext(ctx context.Context, network, addr string) (net.Conn, error)
	} = &net.Dialer{}
	if tlsCfg != nil {
		d = &tls.Dialer{Config: tlsCfg}
	}
	c, err := d.DialContext(ctx, "tcp", server)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	deadline, _ := ctx.Deadline()
	c.SetDeadline(deadline)
	start := time.Now()
	if _, err := c.Write(protocol.AppendAcquire(nil, protocol.Acquire{Version: 1, LeaseMS: 0, Name: statusProbeLock})); err != nil {
		return 0, err
	}
	f, err := protocol.ReadServerFrame(c)
	rtt := time.Since(start)
	switch {
	case err != nil:
		return 0, fmt.Errorf("no baton answer: %v", err)
	case f.Type != protocol.TypeError || f.Code != protocol.CodeInvalidLease:
		return 0, fmt.Errorf("answered %v to an ACQUIRE with a zero lease, not the baton protocol v1's ERROR 0x17", f)
	}
	return rtt, nil
}
