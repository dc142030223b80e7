// Command bench runs baton side by side with Redis, etcd, PostgreSQL and
// ZooKeeper on this machine and writes the results, a markdown table and
// SVG charts.
//
//	./setup            # once: installs the peers' servers if missing
//	go run .           # the full run (under 20 minutes), into ../docs/benchmarks
//	go run . -quick    # a smoke run (under 2 minutes), into results/tmp
//
// Every server is started privately on 127.0.0.1 with a free port and a
// data directory of its own, and stopped afterwards. See
// ../docs/benchmarks.md for the method.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"
)

// plan is the size of a run.
type plan struct {
	Quick           bool    `json:"quick"`
	UncontendedN    int     `json:"uncontended_n"`
	HandoverN       int     `json:"handover_n"`
	HandoverSettle  string  `json:"handover_settle"`
	Workers         int     `json:"workers"`
	Locks           int     `json:"locks"`
	ThroughputSecs  float64 `json:"throughput_seconds"`
	DeadTrials      int     `json:"dead_trials"`
	DeadCap         string  `json:"dead_cap"`
	CapacityCounts  []int   `json:"capacity_counts"`
	CapacityBudget  string  `json:"capacity_budget_per_point"`
	PostgresCount   int     `json:"postgres_count"`
	BatonTarget     int     `json:"baton_target"`
	SessionTarget   int     `json:"baton_session_target"`
	BatonBudget     string  `json:"baton_budget"`
	MinAvailableMiB int64   `json:"min_available_mib"`

	handoverSettle, deadCap, capBudget, batonBudget time.Duration
}

func newPlan(quick bool) *plan {
	p := &plan{Quick: quick, Workers: 64, Locks: 1000, MinAvailableMiB: 3 << 10}
	if quick {
		p.UncontendedN, p.HandoverN, p.ThroughputSecs = 300, 20, 1.5
		p.handoverSettle, p.DeadTrials, p.deadCap = 150*time.Millisecond, 1, 4*time.Second
		p.CapacityCounts, p.capBudget, p.PostgresCount = []int{2000}, 20*time.Second, 200
		p.BatonTarget, p.batonBudget = 5000, 15*time.Second
		p.SessionTarget = 100000
	} else {
		p.UncontendedN, p.HandoverN, p.ThroughputSecs = 2000, 100, 5
		// The waiter waits 150ms before each release: long enough that
		// etcd has moved its watcher out of the "unsynced" set (served
		// every 100ms), as it has for any waiter in real life.
		p.handoverSettle, p.DeadTrials, p.deadCap = 150*time.Millisecond, 7, 10*time.Second
		p.CapacityCounts, p.capBudget, p.PostgresCount = []int{10000, 100000}, 100*time.Second, 1000
		p.BatonTarget, p.batonBudget = 1000000, 5*time.Minute
		p.SessionTarget = 1000000
	}
	p.HandoverSettle, p.DeadCap = p.handoverSettle.String(), p.deadCap.String()
	p.CapacityBudget, p.BatonBudget = p.capBudget.String(), p.batonBudget.String()
	return p
}

// floorName is the raw-TCP baseline's key in the results.
const floorName = "tcp-floor"

type sysInfo struct {
	Name     string `json:"name"`
	Version  string `json:"version"`
	Client   string `json:"client"`
	Lease    string `json:"dead_holder_lease"`
	Capacity string `json:"capacity_sessions"`
	Error    string `json:"error,omitempty"`
}

type meta struct {
	Started     string            `json:"started"`
	Seconds     float64           `json:"seconds"`
	Plan        *plan             `json:"plan"`
	CPUs        int               `json:"cpus"`
	MemTotalMiB int64             `json:"mem_total_mib"`
	Kernel      string            `json:"kernel"`
	Go          string            `json:"go"`
	LoadBefore  string            `json:"load_before"`
	LoadAfter   string            `json:"load_after"`
	FileLimit   uint64            `json:"file_limit"`
	FileLimitOK bool              `json:"file_limit_raised"`
	DataDir     string            `json:"data_dir"`
	ClientLibs  map[string]string `json:"client_libraries"`
}

type results struct {
	Meta          meta                `json:"meta"`
	Systems       []sysInfo           `json:"systems"`
	Uncontended   map[string]*latency `json:"uncontended"`
	Handover      map[string]*latency `json:"handover"`
	HandoverRelay *latency            `json:"handover_floor_close_relay"`
	// SessionFloor is the floor of baton-session's uncontended cycle:
	// two 1-byte round trips on an open connection, measured between
	// its cycles.
	SessionFloor *latency `json:"uncontended_floor_two_round_trips,omitempty"`
	// SessionFloorRTTWrite is the floor of what that cycle waits for:
	// one 1-byte round trip and one 1-byte write (Claim.Release does
	// not wait for RELEASED), measured between its cycles too.
	SessionFloorRTTWrite *latency                     `json:"uncontended_floor_round_trip_and_write,omitempty"`
	Throughput           map[string]*throughputResult `json:"throughput_1000_locks"`
	ThroughputHot        map[string]*throughputResult `json:"throughput_hot_lock"`
	DeadKill             map[string]*deadResult       `json:"dead_holder_sigkill"`
	DeadStop             map[string]*deadResult       `json:"dead_holder_sigstop"`
	Capacity             map[string][]*capPoint       `json:"capacity"`
	BatonCapacity        []*capPoint                  `json:"baton_capacity_push"`
	Errors               []string                     `json:"errors,omitempty"`
	systemsByOrder       []string
}

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "holder":
			holderMain(os.Args[2:])
			return
		case "echo":
			echoMain(os.Args[2:])
			return
		case "hold-raw":
			holdRawMain(os.Args[2:])
			return
		case "hop":
			hopMain(os.Args[2:])
			return
		case "forward":
			forwardMain(os.Args[2:])
			return
		case "election":
			electionMain(os.Args[2:])
			return
		case "elect-leader":
			electLeaderMain(os.Args[2:])
			return
		}
	}
	quick := flag.Bool("quick", false, "smoke run: small counts, under 2 minutes")
	out := flag.String("out", "", "output directory (default: ../docs/benchmarks, or results/tmp with -quick)")
	only := flag.String("systems", "", "comma-separated systems to run (default: all): baton,baton-session,baton-cluster,baton-cluster-owner,baton-cluster-routed,baton-cluster-session,baton-cluster-session-routed,redis,etcd,postgres,zookeeper")
	noCap := flag.Bool("no-capacity", false, "skip scenario 5 (capacity)")
	batonBin := flag.String("baton-bin", "", "baton binary to benchmark (default: build ../cmd/baton)")
	reportOnly := flag.Bool("report-only", false, "rewrite results.md and the charts in -out from its results.json, without running anything")
	flag.Parse()
	log.SetFlags(log.Ltime)

	// Paths below (the repository above, ../docs/benchmarks) are relative
	// to this module's directory.
	if b, err := os.ReadFile("go.mod"); err != nil || !strings.Contains(string(b), "module github.com/batonlock/baton/bench") {
		log.Fatal("run the harness from the bench directory (cd bench && go run .), or use bench/run")
	}
	if *out == "" {
		*out = "../docs/benchmarks"
		if *quick {
			*out = "results/tmp"
		}
	}
	if *reportOnly {
		b, err := os.ReadFile(filepath.Join(*out, "results.json"))
		if err != nil {
			log.Fatal(err)
		}
		var res results
		if err := json.Unmarshal(b, &res); err != nil {
			log.Fatal(err)
		}
		if err := writeResults(*out, &res); err != nil {
			log.Fatal(err)
		}
		return
	}
	p := newPlan(*quick)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Nothing runs forever: the whole run has a hard ceiling.
	ceiling := 25 * time.Minute
	if *quick {
		ceiling = 4 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, ceiling)
	defer cancel()

	if err := run(ctx, p, *out, *only, !*noCap, *batonBin); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, p *plan, out, only string, doCapacity bool, batonBin string) error {
	started := time.Now()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	limit, err := raiseFileLimit()
	if err != nil {
		log.Printf("could not raise the file limit: %v", err)
	}
	systems := allSystems()
	if only != "" {
		want := strings.Split(only, ",")
		systems = slices.DeleteFunc(systems, func(s *system) bool { return !slices.Contains(want, s.name) })
	}
	maxConns := p.Workers * 2
	for _, n := range p.CapacityCounts {
		maxConns = max(maxConns, n)
	}
	e := &env{tmp: tempRoot(), maxConns: maxConns, pgMaxConns: max(p.PostgresCount, p.Workers*2) + 100}
	e.pgUser, e.pgUID, e.pgGID = pgUser()

	tmpDir, err := os.MkdirTemp("", "baton-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmpDir)
	e.batonBin, e.batonVersion, err = buildBaton(ctx, batonBin, tmpDir)
	if err != nil {
		return err
	}

	res := &results{
		Uncontended: map[string]*latency{}, Handover: map[string]*latency{},
		Throughput: map[string]*throughputResult{}, ThroughputHot: map[string]*throughputResult{},
		DeadKill: map[string]*deadResult{}, DeadStop: map[string]*deadResult{},
		Capacity: map[string][]*capPoint{},
	}
	res.Meta = meta{Started: started.UTC().Format(time.RFC3339), Plan: p, CPUs: runtime.NumCPU(),
		MemTotalMiB: memTotalMiB(), Kernel: firstLine("uname", "-sr"), Go: runtime.Version(),
		LoadBefore: loadAvg(), FileLimit: limit, DataDir: e.tmp, ClientLibs: clientLibs()}
	fail := func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		log.Print("ERROR: " + msg)
		res.Errors = append(res.Errors, msg)
	}
	if b, err := os.ReadFile("/proc/sys/fs/nr_open"); err == nil {
		res.Meta.FileLimitOK = strings.TrimSpace(string(b)) == fmt.Sprint(limit)
	}
	log.Printf("plan: quick=%v; load average %s; file limit %d; data on %s", p.Quick, res.Meta.LoadBefore, limit, e.tmp)

	// The floor: an echo server for the whole run. The uncontended and
	// handover floors are measured between baton's own cycles, so that
	// both see the same load on this shared machine.
	echo, err := startEcho(self)
	if err != nil {
		fail("echo server: %v", err)
	} else {
		defer echo.stop()
		log.Printf("%s: throughput (connect, round trip, close)", floorName)
		t := floorThroughput(ctx, echo.addr, p.Workers, time.Duration(p.ThroughputSecs*float64(time.Second)))
		t.Note = "connect, 1-byte round trip, close"
		res.Throughput[floorName] = t
	}

	// Scenarios 1 to 4, one system at a time.
	for _, s := range systems {
		if ctx.Err() != nil {
			break
		}
		info := sysInfo{Name: s.name, Client: s.client, Lease: s.leaseNote, Capacity: s.capacityNote}
		log.Printf("%s: starting the server", s.name)
		srv, err := s.start(ctx, e)
		if err != nil {
			info.Error = err.Error()
			fail("%s: %v", s.name, err)
			res.Systems = append(res.Systems, info)
			continue
		}
		info.Version = srv.version
		res.Systems = append(res.Systems, info)
		echoAddr := ""
		if echo != nil && (s.name == "baton" || s.name == sessionName) {
			echoAddr = echo.addr
		}
		scenarios14(ctx, p, self, s, srv, echoAddr, res, fail)
		srv.stop()
	}

	// Scenario 5: a fresh server per point.
	if doCapacity {
		for _, s := range systems {
			if s.skipCapacity != "" {
				log.Printf("%s: capacity not run: %s", s.name, s.skipCapacity)
				continue
			}
			counts := p.CapacityCounts
			switch s.name {
			case "postgres":
				counts = append([]int{p.PostgresCount}, counts...)
			case "baton-session":
				// Version 2 claims share sessions: the million held
				// claims on one server process (with the push's budget).
				counts = append(slices.Clone(counts), p.SessionTarget)
			}
			for _, n := range counts {
				if ctx.Err() != nil {
					break
				}
				if s.connPerSession && uint64(n) > limit-500 {
					pt := &capPoint{Target: n, Stop: fmt.Sprintf("not possible here: every session is a connection to the one server process, which may have at most %d open files (the hard limit, which cannot be raised on this machine)", limit)}
					res.Capacity[s.name] = append(res.Capacity[s.name], pt)
					log.Printf("%s: capacity %d: %s", s.name, n, pt.Stop)
					continue
				}
				if s.name == "postgres" && n > p.PostgresCount {
					pt := postgresCapacityLimit(res, n)
					res.Capacity[s.name] = append(res.Capacity[s.name], pt)
					log.Printf("%s: capacity %d: %s", s.name, n, pt.Stop)
					continue
				}
				budget := p.capBudget
				if s.name == "baton-session" && n == p.SessionTarget {
					budget = p.batonBudget
				}
				pt, err := capacityPoint(ctx, p, e, s, n, budget)
				if err != nil {
					fail("%s capacity %d: %v", s.name, n, err)
					continue
				}
				res.Capacity[s.name] = append(res.Capacity[s.name], pt)
				log.Printf("%s: capacity %d: held %d, server %d MiB (idle %d MiB), %.0f B/lock, %.1fs, client side +%d MiB; %s",
					s.name, n, pt.Held, pt.RSSKiB>>10, pt.IdleKiB>>10, pt.PerLockBytes, pt.Seconds, pt.ClientKiB>>10, pt.Stop)
			}
		}
		if slices.ContainsFunc(systems, func(s *system) bool { return s.name == "baton" }) && ctx.Err() == nil {
			log.Printf("baton: pushing towards %d sessions (budget %v)", p.BatonTarget, p.batonBudget)
			srv, err := startBaton(ctx, e)
			if err != nil {
				fail("baton capacity push: %v", err)
			} else {
				pts, teardown := batonPush(ctx, self, srv, p.BatonTarget, p.batonBudget, p.MinAvailableMiB<<10, limit)
				res.BatonCapacity = pts
				srv.proc.stop(0)
				teardown()
				if len(pts) > 0 {
					last := pts[len(pts)-1]
					log.Printf("baton: reached %d sessions, server %d MiB; %s", last.Held, last.RSSKiB>>10, last.Stop)
				}
			}
		}
	}

	res.Meta.Seconds = time.Since(started).Seconds()
	res.Meta.LoadAfter = loadAvg()
	if err := writeResults(out, res); err != nil {
		return err
	}
	log.Printf("done in %s; results in %s", time.Since(started).Round(time.Second), out)
	return nil
}

// scenarios14 runs scenarios 1 to 4 on one system; if echoAddr is set,
// the floors are measured between its uncontended and handover cycles.
func scenarios14(ctx context.Context, p *plan, self string, s *system, srv *server, echoAddr string, res *results, fail func(string, ...any)) {
	var uFloors, hFloors *pairedFloors
	if echoAddr != "" && s.name == sessionName {
		two, closeTwo, err1 := twoRTTProbe(echoAddr)
		rw, closeRW, err2 := rttWriteProbe(echoAddr)
		if err1 == nil && err2 == nil {
			defer closeTwo()
			defer closeRW()
			uFloors = newPairedFloors(two, rw)
		} else {
			fail("floor probes: %v %v", err1, err2)
		}
		echoAddr = ""
	}
	if echoAddr != "" {
		uFloors = newPairedFloors(connectProbe(echoAddr))
		rtt, closeRTT, err1 := rttProbe(echoAddr, p.handoverSettle)
		relay, closeRelay, err2 := relayProbe(echoAddr, p.handoverSettle)
		if err1 == nil && err2 == nil {
			defer closeRTT()
			defer closeRelay()
			hFloors = newPairedFloors(rtt, relay)
		} else {
			fail("floor probes: %v %v", err1, err2)
		}
	}
	log.Printf("%s: uncontended acquire+release ×%d", s.name, p.UncontendedN)
	if l, err := uncontended(ctx, s, srv.addr, p.UncontendedN, uFloors); err != nil {
		fail("%s uncontended: %v", s.name, err)
	} else {
		res.Uncontended[s.name] = l
		if f := uFloors.results(); f != nil {
			if s.name == sessionName {
				res.SessionFloor, res.SessionFloorRTTWrite = f[0], f[1]
			} else {
				res.Uncontended[floorName] = f[0]
			}
		}
	}
	log.Printf("%s: handover ×%d", s.name, p.HandoverN)
	if l, err := handover(ctx, s, srv.addr, p.HandoverN, p.handoverSettle, hFloors); err != nil {
		fail("%s handover: %v", s.name, err)
	} else {
		res.Handover[s.name] = l
		if f := hFloors.results(); f != nil {
			res.Handover[floorName], res.HandoverRelay = f[0], f[1]
		}
	}
	dur := time.Duration(p.ThroughputSecs * float64(time.Second))
	log.Printf("%s: throughput, %d workers over %d locks, %v", s.name, p.Workers, p.Locks, dur)
	if t, err := throughput(ctx, s, srv.addr, p.Workers, p.Locks, dur); err != nil {
		fail("%s throughput: %v", s.name, err)
	} else {
		res.Throughput[s.name] = t
	}
	log.Printf("%s: throughput, %d workers on one hot lock, %v", s.name, p.Workers, dur)
	if t, err := throughput(ctx, s, srv.addr, p.Workers, 1, dur); err != nil {
		fail("%s throughput hot: %v", s.name, err)
	} else {
		res.ThroughputHot[s.name] = t
	}
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGSTOP} {
		log.Printf("%s: dead holder, %v ×%d", s.name, sigName(sig), p.DeadTrials)
		r, err := deadHolder(ctx, self, s, srv.addr, sig, p.DeadTrials, p.deadCap, 300*time.Millisecond)
		if err != nil {
			fail("%s dead holder %v: %v", s.name, sigName(sig), err)
			continue
		}
		if sig == syscall.SIGKILL {
			res.DeadKill[s.name] = r
		} else {
			res.DeadStop[s.name] = r
		}
	}
}

func capacityPoint(ctx context.Context, p *plan, e *env, s *system, n int, budget time.Duration) (*capPoint, error) {
	log.Printf("%s: capacity, %d locks", s.name, n)
	srv, err := s.start(ctx, e)
	if err != nil {
		return nil, err
	}
	pt, teardown := capacity(ctx, s, srv, n, budget, p.MinAvailableMiB<<10)
	// Stop the server first (no polite goodbyes from 100,000 sessions),
	// then drop the client side. The grace lets PostgreSQL remove its
	// shared-memory segments, which a kill would leave in /dev/shm.
	srv.proc.stop(5 * time.Second)
	teardown()
	srv.stop()
	return pt, nil
}

// postgresCapacityLimit explains why PostgreSQL is not run at n sessions:
// every session is a backend process.
func postgresCapacityLimit(res *results, n int) *capPoint {
	pt := &capPoint{Target: n}
	pts := res.Capacity["postgres"]
	if len(pts) == 0 || pts[0].Held == 0 {
		pt.Stop = "not attempted: one backend process per session"
		return pt
	}
	per := pts[0].PerLockBytes
	pt.Stop = fmt.Sprintf("not attempted: one backend process per session; at the measured %.0f KiB per session, %d sessions would need %.1f GiB and %d processes",
		per/1024, n, per*float64(n)/(1<<30), n)
	return pt
}

// buildBaton builds cmd/baton from the repository this module replaces
// github.com/batonlock/baton with (the parent directory).
func buildBaton(ctx context.Context, bin, tmpDir string) (string, string, error) {
	root, err := filepath.Abs("..")
	if err != nil {
		return "", "", err
	}
	version := "commit " + strings.TrimSpace(firstLineIn(root, "git", "describe", "--always", "--dirty"))
	if bin != "" {
		return bin, version, nil
	}
	out := filepath.Join(tmpDir, "baton")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/baton")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("building baton: %v\n%s", err, b)
	}
	return out, version, nil
}

func firstLineIn(dir string, argv ...string) string {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	b, _ := cmd.Output()
	s := strings.TrimSpace(string(b))
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func memTotalMiB() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	v, _ := kibField(b, "MemTotal")
	return v >> 10
}

func clientLibs() map[string]string {
	m := map[string]string{}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return m
	}
	for _, d := range bi.Deps {
		switch d.Path {
		case "github.com/go-redsync/redsync/v4", "github.com/redis/go-redis/v9", "go.etcd.io/etcd/client/v3",
			"github.com/jackc/pgx/v5", "github.com/go-zookeeper/zk":
			m[d.Path] = d.Version
		}
	}
	return m
}

func writeResults(dir string, res *results) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(markdown(res)), 0o644); err != nil {
		return err
	}
	return writeCharts(dir, res)
}
