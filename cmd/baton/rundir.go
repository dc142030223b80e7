//go:build unix

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/batonlock/baton/dirlock"
)

const runDirSynopsis = "baton run --dir PATH [flags] -- COMMAND [ARGS...]"

// runDir is 'baton run --dir PATH -- COMMAND': the lock kept in the
// shared directory PATH (package dirlock) instead of a server's. The exit
// codes are run's; COMMAND gets BATON_LOCK=PATH (absolute) and no
// BATON_TOKEN: a directory lock has no fencing token.
func runDir(fs *flagSet, cfg *runConfig, args []string, stdout, stderr io.Writer) int {
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "baton run: "+format+"\n", a...)
		fmt.Fprintf(stderr, "Usage: %s\nRun 'baton run -h' for more.\n", runDirSynopsis)
		return exitUsage
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, name := range []string{"server", "lease", "retry", "tls-ca", "tls-cert", "tls-key"} {
		if set[name] {
			return usage("--%s is for a lock server; --dir takes the lock in a directory", name)
		}
	}
	argv := fs.Args()
	switch {
	case !terminated(args, argv):
		return usage("missing -- before COMMAND (with --dir there is no NAME)")
	case len(argv) == 0:
		return usage("missing COMMAND")
	case cfg.noWait && set["wait"]:
		return usage("--wait and --no-wait exclude each other")
	case cfg.wait < 0:
		return usage("--wait must not be negative, got %v", cfg.wait)
	case cfg.grace < 0:
		return usage("--grace must not be negative, got %v", cfg.grace)
	case cfg.timeout < 0:
		return usage("--timeout must not be negative, got %v", cfg.timeout)
	case cfg.conflict < 0 || cfg.conflict > 255:
		return usage("--conflict-exit-code must be from 0 to 255, got %d", cfg.conflict)
	}
	dir, err := filepath.Abs(cfg.dir)
	if err != nil {
		return usage("--dir %q: %v", cfg.dir, err)
	}

	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)

	m, code := runDirAcquire(cfg, dir, sigs, stderr)
	if m == nil {
		return code
	}
	return runCommand(cfg, dirLock(m), argv, sigs, stdout, stderr)
}

// runDirAcquire takes the lock, honouring --wait and --no-wait; a signal
// stops the wait. It returns the held lock, or nil and the exit code.
func runDirAcquire(cfg *runConfig, dir string, sigs <-chan os.Signal, stderr io.Writer) (*dirlock.Mutex, int) {
	ctx, stopWaiting := waitContext(cfg, sigs)
	m := dirlock.New(dir)
	var err error
	if cfg.noWait {
		err = m.TryLock()
	} else {
		err = m.Lock(ctx)
	}
	sig := stopWaiting()

	switch {
	case sig != nil:
		if err == nil {
			m.Unlock()
		}
		fmt.Fprintf(stderr, "baton run: %v while waiting for the lock in %s\n", sig, dir)
		return nil, 128 + int(sig.(syscall.Signal))
	case err == nil:
		return m, 0
	case errors.Is(err, context.DeadlineExceeded):
		fmt.Fprintf(stderr, "baton run: lock in %s not acquired within %v: %v\n", dir, cfg.wait, err)
		return nil, cfg.conflict
	case errors.Is(err, dirlock.ErrBusy):
		fmt.Fprintf(stderr, "baton run: %v\n", err)
		return nil, cfg.conflict
	}
	fmt.Fprintf(stderr, "baton run: %v\n", err)
	return nil, exitUnavailable
}

// dirLock is m as runCommand needs it. A directory lock is lost only
// when an operator breaks it, which removes its record: it is checked
// every runDirCheckInterval until release.
func dirLock(m *dirlock.Mutex) heldLock {
	lost, stop, stopped := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		check := time.NewTicker(runDirCheckInterval)
		defer check.Stop()
		for {
			select {
			case <-check.C:
				if !m.Held() {
					close(lost)
					return
				}
			case <-stop:
				return
			}
		}
	}()
	return heldLock{
		what:  "lock in " + m.Dir(),
		env:   []string{"BATON_LOCK=" + m.Dir()}, // no fencing token
		lost:  lost,
		cause: func() string { return "its record was removed (broken by an operator)" },
		release: func() error {
			close(stop)
			<-stopped
			return m.Unlock()
		},
	}
}

// runDirCheckInterval is how often 'baton run --dir' checks that the
// lock's record is still its own (a variable for tests).
var runDirCheckInterval = time.Second
