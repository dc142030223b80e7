package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"time"

	"github.com/batonlock/baton/internal/testkit"
)

const testkitSynopsis = "baton testkit [flags] -- ADAPTER_COMMAND [ARGS...]"

const testkitHelp = `
Checks a baton client library from the outside against a scripted fake
server on 127.0.0.1 (protocol version 2, and version 1 after a fallback): the anchor is the send time, no
claim is believed past anchor + 0.8 of the lease without an answer, the
connection closes only once the work was told, a frame out of order, a
REVOKED or an ERROR ends what it names, pushes and frame boundaries change
nothing, a resumable session re-asserts. For each scenario it starts the
fake server on a free port and ADAPTER_COMMAND, a small program written
with the library under test, with BATON_TESTKIT_ADDR, BATON_TESTKIT_NAME,
BATON_TESTKIT_LEASE_MS, BATON_TESTKIT_RESUMABLE, BATON_TESTKIT_SCENARIO
and BATON_TESTKIT_STOP_MS in its environment; the adapter reports what
the library tells it as JSON lines on stdout. docs/testkit.md is the
adapter contract and describes every scenario.

Each scenario prints pass, fail or skip (the adapter said its client lacks
what the scenario needs), what it checks, and the observed times in
milliseconds since the adapter started; --json prints one JSON object per
scenario instead. --list prints the scenarios and runs nothing.

Exit status:
  0   every scenario run passed or was skipped
  1   a scenario failed
  2   usage error
`

// testkitConfig is what 'baton testkit' reads from flags and env.
type testkitConfig struct {
	run       string
	list      bool
	json      bool
	timeout   time.Duration
	lease     time.Duration
	tolerance time.Duration
}

// testkitMinLease keeps every time bound of the scenarios well above the
// scheduling noise the tolerance absorbs.
const testkitMinLease = time.Second

func testkitFlags(stderr io.Writer) (*flagSet, *testkitConfig) {
	cfg := &testkitConfig{}
	fs := newFlagSet("baton testkit", testkitSynopsis, stderr)
	fs.StringVar(&cfg.run, "run", "BATON_TESTKIT_RUN", "", "run only the scenarios whose names match this regular expression")
	fs.BoolVar(&cfg.list, "list", "BATON_TESTKIT_LIST", false, "list the scenarios and what each checks; run nothing")
	fs.BoolVar(&cfg.json, "json", "BATON_TESTKIT_JSON", false, "print one JSON object per scenario")
	fs.DurationVar(&cfg.timeout, "timeout", "BATON_TESTKIT_TIMEOUT", testkit.DefaultTimeout, "give up on a scenario after this long, the adapter's start included")
	fs.DurationVar(&cfg.lease, "lease", "BATON_TESTKIT_LEASE", testkit.DefaultLease, "the session lease the adapter asks for (at least 1s); every time bound is a multiple of it")
	fs.DurationVar(&cfg.tolerance, "tolerance", "BATON_TESTKIT_TOLERANCE", 0, "slack on every time bound, below a fifth of the lease; 0 is the larger of 100ms and a tenth of the lease")
	return fs, cfg
}

func runTestkit(args []string, stdout, stderr io.Writer) int {
	fs, cfg := testkitFlags(stderr)
	if code := fs.parseOrExit(args, stdout, stderr); code >= 0 {
		if code == exitOK {
			fmt.Fprint(stdout, testkitHelp)
		}
		return code
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "baton testkit: "+format+"\n", a...)
		fmt.Fprintf(stderr, "Usage: %s\nRun 'baton testkit -h' for more.\n", testkitSynopsis)
		return exitUsage
	}
	var re *regexp.Regexp
	if cfg.run != "" {
		var err error
		if re, err = regexp.Compile(cfg.run); err != nil {
			return usage("--run: %v", err)
		}
	}
	var selected []testkit.Scenario
	for _, sc := range testkit.Scenarios() {
		if re == nil || re.MatchString(sc.Name) {
			selected = append(selected, sc)
		}
	}
	if len(selected) == 0 {
		return usage("--run %q matches no scenario (see --list)", cfg.run)
	}
	if cfg.list {
		for _, sc := range selected {
			if cfg.json {
				b, _ := json.Marshal(map[string]any{"scenario": sc.Name, "checks": sc.Checks, "resumable": sc.Resumable})
				fmt.Fprintf(stdout, "%s\n", b)
				continue
			}
			fmt.Fprintf(stdout, "%s\n    %s\n", sc.Name, sc.Checks)
		}
		return exitOK
	}
	switch {
	case fs.NArg() == 0:
		return usage("no adapter command: put it after --")
	case cfg.timeout <= 0:
		return usage("--timeout must be positive, got %v", cfg.timeout)
	case cfg.lease < testkitMinLease:
		return usage("--lease must be at least %v, got %v", testkitMinLease, cfg.lease)
	case cfg.tolerance < 0:
		return usage("--tolerance must not be negative, got %v", cfg.tolerance)
	case cfg.tolerance >= cfg.lease/5:
		// Else a client that gives up only at anchor + L would pass.
		return usage("--tolerance must be below a fifth of --lease (%v), got %v", cfg.lease/5, cfg.tolerance)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var pass, fail, skip int
	_, err := testkit.Run(ctx, testkit.Options{
		Command:   fs.Args(),
		Lease:     cfg.lease,
		Tolerance: cfg.tolerance,
		Timeout:   cfg.timeout,
		Run:       re,
		Stderr:    stderr,
		OnResult: func(r testkit.Result) {
			switch r.Status {
			case testkit.Pass:
				pass++
			case testkit.Fail:
				fail++
			default:
				skip++
			}
			if cfg.json {
				b, _ := json.Marshal(r)
				fmt.Fprintf(stdout, "%s\n", b)
				return
			}
			printTestkitResult(stdout, r)
		},
	})
	if !cfg.json {
		fmt.Fprintf(stdout, "%d passed, %d failed, %d skipped (lease %v)\n", pass, fail, skip, cfg.lease)
	}
	if err != nil {
		fmt.Fprintf(stderr, "baton testkit: %v\n", err)
		return exitError
	}
	if fail > 0 {
		return exitError
	}
	return exitOK
}

// printTestkitResult prints one scenario's verdict for a person.
func printTestkitResult(w io.Writer, r testkit.Result) {
	fmt.Fprintf(w, "%-4s  %s  (%.0fms)\n", strings.ToUpper(string(r.Status)), r.Scenario, r.ElapsedMS)
	fmt.Fprintf(w, "      checks: %s\n", r.Checks)
	if r.Detail != "" {
		fmt.Fprintf(w, "      why:    %s\n", r.Detail)
	}
	for _, m := range r.Marks {
		fmt.Fprintf(w, "      %8.1fms  %s\n", m.MS, m.What)
	}
}
