// Command modelcheck runs baton's exhaustive model checker on one bounded
// configuration and prints the number of distinct states, transitions and
// the time it took, for example:
//
//	modelcheck -model=table -sessions=3 -locks=2
//
// It exits 0 when every property holds, 1 on a violation (after printing
// the shortest counterexample) and 2 on bad flags. A command line for
// each model:
// docs/design/2026-12-07-verification-models-single-server.md#internalmodelcheckcmdmodelcheckmaingo.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/batonlock/baton/internal/modelcheck"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("modelcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	def := modelcheck.DefaultClientConfig()
	var (
		model    = fs.String("model", "table", "which model: table (the lock table, one claim per connection), claims (the lock table, sessions with several claims and modes), client (the client rule), session (the v2 client rule, two claims on one session), dirlock-seed or dirlock-steps (the directory lock), cluster (lock ownership across nodes), cluster-continue (v2 claims that continue through the new owner of a planned move), ranges (the POSIX byte-range and flock lock table), cluster-ranges (range locks across a planned move, their sessions ended or the locks handed over, and a relay loss, timed, with clock drift), cluster-ranges-failover (relayed range locks re-asserted at the new owner after a failover, timed, with clock drift), cluster-ranges-resume (range locks re-asserted by their client through another node after its own node dies, timed, with clock drift), failover (an owner node cut off and its names taken over, timed, with clock drift), lease-lower (an operator lowers the cluster's largest lease while nodes die, restart and are removed), detach (how a resumable session's claim ends with its connection: FIN, DETACH, silence, a relay's death)")
		sessions = fs.Int("sessions", 3, "table, claims: number of sessions (1..8; claims: 1..6)")
		claims   = fs.Int("claims", 2, "claims: claims each session makes (1..6), any number live at once")
		rw       = fs.Int("rw", 1, "claims: exclusive/shared locks")
		sems     = fs.Int("sems", 0, "claims: semaphore locks")
		limit    = fs.Int("limit", 2, "claims: the semaphores' limit (1..4)")
		noWait   = fs.Bool("nowait", false, "claims, ranges: also explore no-wait claims (requests)")
		watches  = fs.Int("watches", 0, "claims: watches each session starts (0..3)")
		values   = fs.Bool("values", false, "claims: claims carry a value, which may change once")
		locks    = fs.Int("locks", 2, "table: number of locks (1..8)")
		lives    = fs.Int("lives", 2, "table: claims each session makes, one after another (1..8)")
		lease    = fs.Int("lease", def.Lease, "client: lease, in time steps")
		delay    = fs.Int("delay", def.MaxDelay, "client: longest delay of a frame in the channel, in time steps")
		giveUp   = fs.Float64("giveup", def.GiveUp, "client: give-up factor; the client gives up after anchor + factor·lease")
		lag      = fs.Int("lag", def.TimerLag, "client: how many steps late the client's give-up and close-by timers may fire")
		workStop = fs.Int("workstop", def.WorkStop, "client: longest time, in steps, the guarded work takes to stop once told")
		hosts    = fs.Int("hosts", 2, "dirlock: number of hosts (1..3)")
		forced   = fs.Bool("forced-break", false, "dirlock-steps: an operator forces a break once, at any moment")
		procs    = fs.Int("procs", 2, "dirlock: processes on each host (1..3)")
		cdef     = modelcheck.DefaultClusterConfig()
		nodes    = fs.Int("nodes", cdef.Nodes, "cluster, cluster-continue: nodes (2..3)")
		clients  = fs.Int("clients", cdef.Clients, "cluster, cluster-continue: clients (1..3)")
		acquires = fs.Int("acquisitions", cdef.Lives, "cluster, cluster-continue: times each client takes the lock, one after another (1..2)")
		changes  = fs.Int("changes", cdef.Changes, "cluster, cluster-continue: ring changes, planned moves and removals of a dead owner (0..3)")
		deaths   = fs.Int("deaths", cdef.Deaths, "cluster, cluster-continue: node deaths (0..2)")
		restarts = fs.Int("restarts", cdef.Restarts, "cluster, cluster-continue: node restarts from the data directory (0..2)")
		wipes    = fs.Int("wipes", cdef.Wipes, "cluster: how many of the restarts find the data directory wiped (0..restarts)")
		v1       = fs.Int("v1", cdef.V1, "cluster: clients, counted from the last, that speak protocol version 1: a planned move tells them ERROR 0x01 instead of handing their claims over (0..clients; the default is capped at -clients)")
		settings = fs.Int("settings", modelcheck.DefaultLeaseLowerConfig().Settings, "lease-lower: lease ceilings an operator sets, alternately a lowering and none (1..3)")
		owners   = fs.Int("owners", 3, "ranges: lock owners (1..3)")
		rsess    = fs.Int("range-sessions", 0, "ranges: sessions the owners are grouped into (1..owners; 0: one per owner)")
		posns    = fs.Int("positions", 2, "ranges: byte positions (1..3)")
		files    = fs.Int("files", 1, "ranges: files (1..2)")
		flock    = fs.Bool("flock", false, "ranges: also flock locks on the first file")
		fdef     = modelcheck.DefaultFailoverConfig()
		shared   = fs.Int("shared", fdef.Shared, "failover: clients, counted from the last, that claim shared")
		unit     = fs.Int("unit", fdef.Unit, "failover: clock units per tick at the nominal rate")
		drift    = fs.Int("drift", fdef.Drift, "failover: a clock advances unit±drift units per tick (ρ = drift/unit)")
		short    = fs.Int("short-lease", fdef.ShortLease, "failover: lease of the clients after the first, in units (-lease is the first's)")
		tself    = fs.Int("tself", fdef.TSelf, "failover, cluster-ranges-failover: the old owner stops serving after this long without quorum contact, in units")
		removal  = fs.Int("removal", fdef.T, "failover, cluster-ranges-failover: the leader removes a node silent this long (T), in units")
		slack    = fs.Int("slack", fdef.Slack, "failover, cluster-ranges-failover: warm-up W = the largest committed lease + slack, in units")
		relay    = fs.Int("relay", 0, "failover: client (1..clients) that node R relays to the owner (a version 2 client of a relaying node); 0: none; detach: not 0 relays the holder through R")
		rfails   = fs.Bool("relay-fails", false, "failover with -relay: node R may die while it relays the claim")
		rmove    = fs.Bool("range-move", false, "cluster-ranges: the key moves from P to N by a planned change (without -range-relay: implied)")
		rrelay   = fs.Bool("range-relay", false, "cluster-ranges: c1 is relayed through node R to the key's owner")
		waiter   = fs.Bool("waiter", false, "cluster-ranges with -range-move and a direct c1: client w waits at P behind c1's lock")
		wlease   = fs.Int("waiter-lease", 0, "cluster-ranges with -waiter: w's lease, in units (0: -lease)")
		handover = fs.Bool("range-handover", false, "cluster-ranges: the move hands c1's range lock over to N instead of ending its session (implies -range-move)")
		hostN    = fs.Bool("range-host-n", false, "cluster-ranges with -range-handover and -range-relay: c1 is relayed through N itself (R = N)")
		second   = fs.Bool("range-second", false, "cluster-ranges-failover: client c3, relayed by node R2, holds a conflicting range lock too")
		rsecond  = fs.Bool("resume-second", false, "cluster-ranges-resume: client c3 at R asks for a conflicting range lock too and re-asserts with its own origin and secret")
		rysess   = fs.Int("resume-sessions", 2, "cluster-ranges-resume: successive sessions at Y each client may re-assert on (1..3)")
		mutation = fs.String("mutation", "", "claims, session, dirlock, cluster, cluster-continue, ranges, cluster-ranges, cluster-ranges-failover, cluster-ranges-resume, failover: drop one rule so that the check must fail; claims: "+
			strings.Join(modelcheck.ClaimsMutations, ", ")+"; session: "+strings.Join(modelcheck.SessionMutations, ", ")+"; dirlock seed: "+
			strings.Join(modelcheck.DirlockSeedMutations, ", ")+"; steps: "+strings.Join(modelcheck.DirlockStepsMutations, ", ")+
			"; cluster: "+strings.Join(modelcheck.ClusterMutations, ", ")+"; cluster-continue: "+strings.Join(modelcheck.ContinueMutations, ", ")+"; ranges: "+strings.Join(modelcheck.RangeMutations, ", ")+
			"; cluster-ranges: "+strings.Join(modelcheck.ClusterRangesMutations, ", ")+"; cluster-ranges-failover: "+strings.Join(modelcheck.RangeFailoverMutations, ", ")+
			"; cluster-ranges-resume: "+strings.Join(modelcheck.RangeResumeMutations, ", ")+"; failover: "+strings.Join(modelcheck.FailoverMutations, ", ")+"; lease-lower: "+strings.Join(modelcheck.LeaseLowerMutations, ", ")+"; failover with -relay, also: "+strings.Join(modelcheck.FailoverRelayMutations, ", "))
	)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: modelcheck [flags]\n\nExplores every interleaving of a bounded configuration; exits 0 if every\nproperty holds, 1 on a violation (printing the shortest counterexample),\n2 on bad flags.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "modelcheck: unexpected arguments %q\n", fs.Args())
		fs.Usage()
		return 2
	}
	// leaseOr is -lease when it was given, else a model's own default.
	leaseOr := func(def int) int {
		l := def
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "lease" {
				l = *lease
			}
		})
		return l
	}
	var rep modelcheck.Report
	switch *model {
	case "table":
		cfg := modelcheck.TableConfig{Sessions: *sessions, Locks: *locks, Lives: *lives}
		if err := cfg.Validate(); err != nil {
			fmt.Fprintf(stderr, "modelcheck: %v\n", err)
			return 2
		}
		rep = modelcheck.CheckTable(cfg)
	case "claims":
		cfg := modelcheck.ClaimsConfig{Sessions: *sessions, Claims: *claims, RW: *rw, Sems: *sems, Limit: *limit, NoWait: *noWait,
			Watches: *watches, Values: *values}
		if err := cfg.Validate(); err != nil {
			fmt.Fprintf(stderr, "modelcheck: %v\n", err)
			return 2
		}
		if *mutation != "" {
			if cfg.New = modelcheck.NewClaimsMutant(*mutation); cfg.New == nil {
				fmt.Fprintf(stderr, "modelcheck: -mutation for claims must be one of %s, not %q\n", strings.Join(modelcheck.ClaimsMutations, ", "), *mutation)
				return 2
			}
		}
		rep = modelcheck.CheckClaims(cfg)
	case "client":
		cfg := modelcheck.ClientConfig{Lease: *lease, MaxDelay: *delay, GiveUp: *giveUp, TimerLag: *lag, WorkStop: *workStop}
		if err := cfg.Validate(); err != nil {
			fmt.Fprintf(stderr, "modelcheck: %v\n", err)
			return 2
		}
		rep = modelcheck.CheckClient(cfg)
	case "session":
		// The client flags, with the session model's own defaults for
		// those not given.
		cfg := modelcheck.DefaultSessionConfig()
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "lease":
				cfg.Lease = *lease
			case "delay":
				cfg.MaxDelay = *delay
			case "lag":
				cfg.TimerLag = *lag
			case "workstop":
				cfg.WorkStop = *workStop
			}
		})
		cfg.Mutation = *mutation
		if err := cfg.Validate(); err != nil {
			fmt.Fprintf(stderr, "modelcheck: %v\n", err)
			return 2
		}
		rep = modelcheck.CheckSession(cfg)
	case "dirlock-seed", "dirlock-steps":
		cfg := modelcheck.DirlockConfig{Hosts: *hosts, ProcsPerHost: *procs, Mutation: *mutation, ForcedBreak: *forced}
		muts, check := modelcheck.DirlockSeedMutations, modelcheck.CheckDirlockSeed
		if *model == "dirlock-steps" {
			muts, check = modelcheck.DirlockStepsMutations, modelcheck.CheckDirlockSteps
		}
		if err := cfg.Validate(); err != nil {
			fmt.Fprintf(stderr, "modelcheck: %v\n", err)
			return 2
		}
		if cfg.ForcedBreak && *model != "dirlock-steps" {
			fmt.Fprintln(stderr, "modelcheck: -forced-break is for -model=dirlock-steps")
			return 2
		}
		if *mutation != "" && !slices.Contains(muts, *mutation) {
			fmt.Fprintf(stderr, "modelcheck: -mutation for %s must be one of %s, not %q\n", *model, strings.Join(muts, ", "), *mutation)
			return 2
		}
		rep = check(cfg)
	case "cluster":
		cfg := modelcheck.ClusterConfig{Nodes: *nodes, Clients: *clients, Lives: *acquires, Changes: *changes,
			Deaths: *deaths, Restarts: *restarts, Wipes: *wipes, V1: min(*v1, *clients), Mutation: *mutation}
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "v1" {
				cfg.V1 = *v1 // given: checked as given
			}
		})
		if err := cfg.Validate(); err != nil {
			fmt.Fprintf(stderr, "modelcheck: %v\n", err)
			return 2
		}
		rep = modelcheck.CheckCluster(cfg)
	case "lease-lower":
		// -nodes, -deaths and -restarts keep the model's defaults unless given.
		cfg := modelcheck.DefaultLeaseLowerConfig()
		cfg.Settings, cfg.Mutation = *settings, *mutation
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "nodes":
				cfg.Nodes = *nodes
			case "deaths":
				cfg.Deaths = *deaths
			case "restarts":
				cfg.Restarts = *restarts
			}
		})
		if err := cfg.Validate(); err != nil {
			fmt.Fprintf(stderr, "modelcheck: %v\n", err)
			return 2
		}
		rep = modelcheck.CheckLeaseLower(cfg)
	case "cluster-continue":
		cfg := modelcheck.ContinueConfig{Nodes: *nodes, Clients: *clients, Lives: *acquires, Changes: *changes,
			Deaths: *deaths, Restarts: *restarts, Mutation: *mutation}
		if err := cfg.Validate(); err != nil {
			fmt.Fprintf(stderr, "modelcheck: %v\n", err)
			return 2
		}
		rep = modelcheck.CheckContinue(cfg)
	case "ranges":
		cfg := modelcheck.RangeConfig{Owners: *owners, Sessions: *rsess, Positions: *posns, Keys: *files, Flock: *flock, NoWait: *noWait}
		if err := cfg.Validate(); err != nil {
			fmt.Fprintf(stderr, "modelcheck: %v\n", err)
			return 2
		}
		if *mutation != "" {
			if cfg.New = modelcheck.NewRangeMutant(*mutation); cfg.New == nil {
				fmt.Fprintf(stderr, "modelcheck: -mutation for ranges must be one of %s, not %q\n", strings.Join(modelcheck.RangeMutations, ", "), *mutation)
				return 2
			}
		}
		rep = modelcheck.CheckRanges(cfg)
	case "cluster-ranges":
		// -lease keeps the model's own default (40 units) unless given.
		cfg := modelcheck.ClusterRangesConfig{Relay: *rrelay, Move: *rmove || !*rrelay || *handover, Unit: *unit, Drift: *drift,
			Lease: leaseOr(40), Waiter: *waiter, WaiterLease: *wlease, Handover: *handover, RelayAtN: *hostN, Mutation: *mutation}
		if err := cfg.Validate(); err != nil {
			fmt.Fprintf(stderr, "modelcheck: %v\n", err)
			return 2
		}
		rep = modelcheck.CheckClusterRanges(cfg)
	case "cluster-ranges-failover":
		// -lease keeps the model's own default (40 units) unless given.
		cfg := modelcheck.RangeFailoverConfig{Second: *second, Unit: *unit, Drift: *drift, Lease: leaseOr(40), TSelf: *tself, T: *removal,
			Slack: *slack, Mutation: *mutation}
		if err := cfg.Validate(); err != nil {
			fmt.Fprintf(stderr, "modelcheck: %v\n", err)
			return 2
		}
		rep = modelcheck.CheckRangeFailover(cfg)
	case "cluster-ranges-resume":
		// -lease keeps the model's own default (40 units) unless given.
		cfg := modelcheck.RangeResumeConfig{Second: *rsecond, Sessions: *rysess, Unit: *unit, Drift: *drift, Lease: leaseOr(40), Mutation: *mutation}
		if err := cfg.Validate(); err != nil {
			fmt.Fprintf(stderr, "modelcheck: %v\n", err)
			return 2
		}
		rep = modelcheck.CheckRangeResume(cfg)
	case "detach":
		// -lease keeps the model's own default (5 ticks) unless given;
		// the give-up is 0.8 × the lease, rounded down.
		cfg := modelcheck.DefaultDetachConfig()
		cfg.Lease, cfg.Relay, cfg.Mutation = leaseOr(cfg.Lease), *relay != 0, *mutation
		cfg.GiveUp = cfg.Lease * 4 / 5
		if cfg.Lease < 2 || cfg.Lease > 100 {
			fmt.Fprintf(stderr, "modelcheck: -lease %d: the detach model takes 2 to 100 ticks\n", cfg.Lease)
			return 2
		}
		rep = modelcheck.CheckDetach(cfg)
	case "failover":
		// -clients, -lease and -acquisitions keep the failover model's
		// own defaults unless given.
		cfg := modelcheck.FailoverConfig{Clients: fdef.Clients, Shared: *shared, Lives: fdef.Lives, Unit: *unit, Drift: *drift,
			Lease: fdef.Lease, ShortLease: *short, TSelf: *tself, T: *removal, Slack: *slack, Mutation: *mutation,
			Relay: *relay, RelayFails: *rfails}
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "clients":
				cfg.Clients = *clients
			case "lease":
				cfg.Lease = *lease
			case "acquisitions":
				cfg.Lives = *acquires
			}
		})
		if err := cfg.Validate(); err != nil {
			fmt.Fprintf(stderr, "modelcheck: %v\n", err)
			return 2
		}
		rep = modelcheck.CheckFailover(cfg)
	default:
		fmt.Fprintf(stderr, "modelcheck: -model must be table, claims, client, session, dirlock-seed, dirlock-steps, cluster, cluster-continue, ranges, cluster-ranges, cluster-ranges-failover, cluster-ranges-resume or failover, not %q\n", *model)
		return 2
	}
	fmt.Fprintln(stdout, rep)
	if rep.Violation != nil {
		return 1
	}
	fmt.Fprintln(stdout, "ok: every property holds")
	return 0
}
