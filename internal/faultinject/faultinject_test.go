//go:build linux

package faultinject_test

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/batonlock/baton/internal/faultinject"
	"github.com/batonlock/baton/internal/freeport"
	"github.com/batonlock/baton/internal/pgtest"
)

// workerEnv, when set, makes the test binary a worker: the variable holds
// its WorkerConfig as JSON.
const workerEnv = "BATON_FAULTINJECT_WORKER"

// testParallel is how many tests that call t.Parallel run at once when
// go test is given no -parallel (whose default is GOMAXPROCS, 2 on CI's
// machine): each suite mostly waits, on its faults, leases, failovers and
// PostgreSQL, not on the CPU.
const testParallel = 3

func TestMain(m *testing.M) {
	if cfg := os.Getenv(workerEnv); cfg != "" {
		os.Exit(workerMain(cfg))
	}
	flag.Parse()
	parallelSet := false
	flag.Visit(func(f *flag.Flag) { parallelSet = parallelSet || f.Name == "test.parallel" })
	if !parallelSet {
		flag.Set("test.parallel", strconv.Itoa(testParallel))
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) {
		if built.dir != "" {
			os.RemoveAll(built.dir)
		}
	}))
}

func workerMain(cfgJSON string) int {
	var cfg faultinject.WorkerConfig
	if err := json.Unmarshal([]byte(cfgJSON), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "worker config:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	err := faultinject.RunWorker(ctx, cfg, os.Stdin, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	// Every session, claim, connection and timer of the run must be gone
	// (the signal watcher stays once started, and so does the stdin
	// reader of a worker stopped by a signal).
	if err := goleak.Find(goleak.IgnoreTopFunction("os/signal.signal_recv"), goleak.IgnoreTopFunction("os/signal.loop"),
		goleak.IgnoreAnyFunction("bufio.(*Scanner).Scan")); err != nil {
		fmt.Fprintln(os.Stderr, "worker: goroutines leaked:", err)
		return 3
	}
	return 0
}

// The suite's parameters.
const (
	lockName = "resource"
	lease    = 2 * time.Second // of every claim
	// Worker processes, each behind its own proxy: v1Slots version 1
	// clients, then v2Slots version 2 sessions with the claim actors of
	// v2Modes each (one exclusive writer and two shared readers), all on
	// lockName.
	v1Slots = 3
	v2Slots = 2
	slots   = v1Slots + v2Slots
	writes  = 6                     // at most, per tenure
	step    = 20 * time.Millisecond // between a write's check and its send
	waitMax = 30 * time.Second      // for anything that must happen
	budget  = 3 * time.Minute       // for the whole scenario, which takes a little over a minute
	// releaseMax bounds the time from a tenure's end ("released") to the
	// end of its Do ("done"): Release closes the connection and returns at
	// once. A Release that does not close waits for the give-up deadline
	// instead (0.55 to 0.8 of a lease), and every handover then waits for
	// the server's expiry: the suite would crawl to the test timeout.
	releaseMax = lease / 4
)

// plan is the sequence of faults, with a few handovers of normal work
// between any two. "freeze", "blackhole" and "reset" are steered: they
// hit a holder between the check of its context and its write, and the
// suite requires the write to be refused by the fence. "freeze-any"
// stops a holder wherever it is. The "-reader" faults hit a version 2
// session that holds a shared claim, steered at its reader.
var plan = planFor()

func planFor() []string {
	if p := os.Getenv("BATON_FAULTINJECT_PLAN"); p != "" {
		return strings.Split(p, ",")
	}
	return defaultPlan
}

var defaultPlan = []string{
	"delay", "freeze", "reset", "blackhole", "kill", "freeze-any",
	"reset-reader", "freeze-reader",
	faultinject.FaultRestart,
	"delay-large", "freeze", "blackhole", "reset", "kill", "freeze-any",
	"blackhole-reader", "kill-reader",
	faultinject.FaultCrash,
	"freeze", "blackhole", "reset", "kill", "delay",
}

// TestFaultInjection runs the real server binary, worker processes using
// the Go client (version 1 clients and version 2 sessions) and a private
// PostgreSQL through the fault plan, then checks the run's record with
// faultinject.Check. Run it with -v for the figures.
func TestFaultInjection(t *testing.T) {
	if testing.Short() {
		t.Skip("the fault-injection suite takes about a minute; not with -short")
	}
	t.Parallel()
	rep, h := runSuite(t, plan, "")
	for _, v := range rep.Violations {
		t.Errorf("violation: %s", v)
	}
	for _, p := range h.problems {
		t.Errorf("%s", p)
	}
	// The scenario must have exercised what version 2 adds.
	if rep.ReaderPairs == 0 || rep.SessionPairs == 0 || rep.ReadsRef == 0 || rep.GrantsBy["v1 exclusive"] == 0 || rep.GrantsBy["v2 exclusive"] == 0 {
		t.Errorf("the run did not exercise version 2: %d pairs of readers at once, %d pairs of claims of one session at once, %d stale reads refused, grants %v",
			rep.ReaderPairs, rep.SessionPairs, rep.ReadsRef, rep.GrantsBy)
	}
}

// TestFaultInjectionMutants runs short plans with a broken worker or
// fence and requires Check to find the break: a suite that cannot fail
// proves nothing. Each steers a fault at a version 2 reader.
func TestFaultInjectionMutants(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the fault suite on short plans; not with -short")
	}
	t.Parallel()
	for _, tc := range []struct {
		mutation string
		plan     []string
		want     string
	}{
		// The read fence without W: the reader's late read, after a
		// writer with a higher token, gets in.
		{faultinject.MutationNoWRule, []string{"reset-reader"}, "STALE READ ACCEPTED"},
		// Claim actors that ignore the loss of their claim: the reset
		// reader reads on past its successor's grant.
		{faultinject.MutationIgnoreLost, []string{"reset-reader"}, "IGNORED LOSS"},
	} {
		t.Run(tc.mutation, func(t *testing.T) {
			t.Parallel()
			rep, h := runSuite(t, tc.plan, tc.mutation)
			found := false
			for _, v := range rep.Violations {
				found = found || strings.Contains(v, tc.want)
			}
			if !found {
				t.Errorf("mutation %s: no violation %q among %q (problems %q)", tc.mutation, tc.want, rep.Violations, h.problems)
			}
		})
	}
}

// runSuite runs the scenario: a private PostgreSQL, the server, the
// workers (broken by mutation, if not empty), the faults of plan; it
// returns what Check found and the harness, whose problems lists what
// went wrong on the way (a steered late write that got in, a worker
// that did not exit cleanly).
func runSuite(t *testing.T, plan []string, mutation string) (*faultinject.Report, *harness) {
	t.Helper()
	began := time.Now()
	h := &harness{t: t, dir: t.TempDir(), killed: map[string]int64{}, changed: make(chan struct{}), mutation: mutation}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// Build the server while PostgreSQL starts. Without PostgreSQL,
	// pgtest skips, or fails when CI=true: CI must not pass by skipping.
	building := make(chan error, 1)
	go func() { building <- h.build(ctx) }() // a skip cancels ctx, and the build
	pg := pgtest.New(t)
	h.pg = pg
	if err := <-building; err != nil {
		t.Fatal(err)
	}
	db := fenceDB(ctx, t, pg.DSN)
	if _, err := db.Exec(ctx, `INSERT INTO fence VALUES ($1, 0, 0)`, lockName); err != nil {
		t.Fatal(err)
	}
	setup := time.Since(began)

	h.addr = freeport.Addr(t) // every server process of the run listens on it: proxies and clients need not know of restarts
	h.startServer()
	for i := range slots {
		p, err := faultinject.NewProxy(h.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		h.proxies = append(h.proxies, p)
		h.workers = append(h.workers, nil)
		h.spawn(i)
	}
	t.Cleanup(h.killAll)

	h.deadline = time.Now().Add(budget)
	h.progress(10)
	scenario := time.Now()
	for _, fault := range plan {
		h.inject(fault)
		h.progress(10)
	}
	scenarioTime := time.Since(scenario)
	h.stop()

	dbWrites, dbLog := readFence(ctx, t, db, lockName)
	in := faultinject.Input{
		Records: h.records, Killed: h.killed, Faults: h.faults,
		DB: dbLog, DBWrites: dbWrites,
	}
	for _, a := range h.audits {
		data, err := os.ReadFile(a.Name)
		if err != nil {
			t.Fatal(err)
		}
		in.Audit = append(in.Audit, faultinject.AuditLog{Name: filepath.Base(a.Name), Data: data, Crashed: a.Crashed})
	}
	rep := faultinject.Check(in)
	if d := os.Getenv("BATON_FAULTINJECT_DUMP"); d != "" {
		if mutation != "" {
			d = filepath.Join(d, mutation)
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		h.dump(d, in)
	}
	t.Logf("fault injection, %d server processes, lease %v: setup %.1fs, scenario %.1fs, total %.1fs\n%s\nsteered faults whose late write the fence refused: %d of %d",
		len(h.audits), lease, setup.Seconds(), scenarioTime.Seconds(), time.Since(began).Seconds(), rep, h.steeredRefused, h.steered)
	return rep, h
}

// harness runs the processes and keeps the record.
type harness struct {
	t       *testing.T
	dir     string
	bin     string // the baton binary
	addr    string // baton's address, the same for every server process
	pg      *pgtest.Server
	srv     *proc
	audits  []faultinject.AuditLog // Name is the path; Data is read at the end
	proxies []*faultinject.Proxy
	workers []*proc // the current process of each slot
	gen     int
	killed  map[string]int64
	faults  []faultinject.Fault

	steered, steeredRefused int       // steered faults, and those whose late write was refused
	mutation                string    // WorkerConfig.Mutation of every worker
	deadline                time.Time // the scenario's time budget ends; zero: no budget yet
	lastFault               string    // the fault injected last, for failure messages

	mu       sync.Mutex
	records  []faultinject.Record
	changed  chan struct{} // closed and replaced when records grow
	problems []string      // failures noticed by reader goroutines
}

// proc is a child process.
type proc struct {
	id     string
	slot   int
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	exited chan struct{}
	stderr string // path of its standard error
}

func (p *proc) signal(sig syscall.Signal) {
	if err := p.cmd.Process.Signal(sig); err != nil {
		panic(fmt.Sprintf("%s: signal %v: %v", p.id, sig, err))
	}
}

func (p *proc) command(c string) {
	if _, err := io.WriteString(p.stdin, c+"\n"); err != nil {
		panic(fmt.Sprintf("%s: %q: %v", p.id, c, err))
	}
}

func (p *proc) wait(limit time.Duration) bool {
	select {
	case <-p.exited:
		return true
	case <-time.After(limit):
		return false
	}
}

// built is the baton binary, built once for the package's tests (a
// failed or cancelled build is tried again by the next test).
var built struct {
	mu       sync.Mutex
	dir, bin string
}

// build compiles cmd/baton, with the race detector if this test has it:
// then the build reuses the packages compiled for the test, and the
// server runs under the detector too.
func (h *harness) build(ctx context.Context) error {
	built.mu.Lock()
	defer built.mu.Unlock()
	if built.bin != "" {
		h.bin = built.bin
		return nil
	}
	if built.dir == "" {
		dir, err := os.MkdirTemp("", "baton-faultinject-")
		if err != nil {
			return err
		}
		built.dir = dir
	}
	bin := filepath.Join(built.dir, "baton")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "github.com/batonlock/baton/cmd/baton")
	out, err := exec.CommandContext(ctx, goTool(), args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	built.bin, h.bin = bin, bin
	return nil
}

func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(os.Getenv("GOROOT"), "bin", "go")
}

// startServer starts a server process with a new audit log and waits
// until it accepts connections.
func (h *harness) startServer() {
	n := len(h.audits)
	audit := filepath.Join(h.dir, fmt.Sprintf("audit-%d.jsonl", n))
	p := h.start(fmt.Sprintf("server-%d", n), -1, h.bin, nil,
		"serve", "-listen", h.addr, "-audit-log", audit, "-io-timeout", "2s", "-log-format", "json")
	h.srv = p
	h.audits = append(h.audits, faultinject.AuditLog{Name: audit})
	deadline := time.Now().Add(waitMax)
	for {
		c, err := net.DialTimeout("tcp", h.addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-p.exited:
			h.t.Fatalf("%s exited at start: %v\n%s", p.id, p.cmd.ProcessState, tail(p.stderr))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%s does not accept connections on %s after %v: %v", p.id, h.addr, waitMax, err)
		}
	}
}

var v2Modes = []string{"exclusive", "shared", "shared"}

// spawn starts a new worker process in slot i, behind the slot's proxy:
// a version 1 client ("w…") or, from slot v1Slots on, a version 2
// session ("s…").
func (h *harness) spawn(i int) {
	h.gen++
	wc := faultinject.WorkerConfig{
		ID: fmt.Sprintf("w%d.%d", i, h.gen), Addr: h.proxies[i].Addr(), Lock: lockName, Lease: lease,
		DSN: h.pg.DSN, Writes: writes, Step: step, Mutation: h.mutation,
	}
	if i >= v1Slots {
		wc.ID, wc.Modes = fmt.Sprintf("s%d.%d", i, h.gen), v2Modes
	}
	id := wc.ID
	cfg, _ := json.Marshal(wc)
	self, err := os.Executable()
	if err != nil {
		h.t.Fatal(err)
	}
	h.workers[i] = h.start(id, i, self, []string{workerEnv + "=" + string(cfg)})
}

// start starts a child; a worker's standard output is parsed into records.
func (h *harness) start(id string, slot int, path string, env []string, args ...string) *proc {
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &proc{id: id, slot: slot, cmd: cmd, exited: make(chan struct{}), stderr: filepath.Join(h.dir, id+".stderr")}
	errf, err := os.Create(p.stderr)
	if err != nil {
		h.t.Fatal(err)
	}
	defer errf.Close()
	cmd.Stderr = errf
	var stdout io.ReadCloser
	if slot >= 0 {
		if p.stdin, err = cmd.StdinPipe(); err != nil {
			h.t.Fatal(err)
		}
		if stdout, err = cmd.StdoutPipe(); err != nil {
			h.t.Fatal(err)
		}
	}
	if err := cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	var reading sync.WaitGroup
	if stdout != nil {
		reading.Go(func() { h.read(p, stdout) })
	}
	go func() {
		reading.Wait() // Wait closes stdout: read it all first
		cmd.Wait()
		close(p.exited)
	}()
	return p
}

// read parses a worker's records as they come.
func (h *harness) read(p *proc, r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var rec faultinject.Record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil || faultinject.Proc(rec.W) != p.id {
			h.problem("%s wrote a line that is not its record: %q", p.id, sc.Text())
			continue
		}
		h.mu.Lock()
		h.records = append(h.records, rec)
		close(h.changed)
		h.changed = make(chan struct{})
		h.mu.Unlock()
	}
}

func (h *harness) problem(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.problems = append(h.problems, fmt.Sprintf(format, args...))
}

// mark is the number of records so far, for waitFor.
func (h *harness) mark() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.records)
}

// waitFor returns the first record at or after index from that match
// accepts, waiting up to waitMax and not past the scenario's budget; it
// fails the test if none comes.
func (h *harness) waitFor(from int, what string, match func(faultinject.Record) bool) faultinject.Record {
	h.t.Helper()
	limit, why := waitMax, ""
	if !h.deadline.IsZero() && time.Until(h.deadline) < limit {
		limit, why = max(time.Until(h.deadline), 0), fmt.Sprintf(" (the scenario's budget of %v is used up)", budget)
	}
	timeout := time.After(limit)
	for {
		h.mu.Lock()
		for ; from < len(h.records); from++ {
			if match(h.records[from]) {
				rec := h.records[from]
				h.mu.Unlock()
				return rec
			}
		}
		changed := h.changed
		h.mu.Unlock()
		select {
		case <-changed:
		case <-timeout:
			h.t.Fatalf("no %s within %v%s (last fault: %s)", what, limit, why, cmp.Or(h.lastFault, "none"))
		}
	}
}

// progress waits for n new grants, proof that the lock keeps moving, and
// checks that the releases among them were prompt.
func (h *harness) progress(n int) {
	h.t.Helper()
	start := h.mark()
	from := start
	for i := range n {
		rec := h.waitFor(from, fmt.Sprintf("grant (%d of %d after the last fault)", i+1, n),
			func(r faultinject.Record) bool { return r.Ev == "acquired" })
		from = h.indexAfter(rec)
		h.checkReleases(start, from)
	}
}

// checkReleases fails the test at once if a worker's Do, in records
// [from, to), returned without error more than releaseMax after its
// function did: Release did not hand the lock over at once. No fault is
// injected while progress runs, so nothing else can delay it.
func (h *harness) checkReleases(from, to int) {
	h.t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	released := map[string]int64{}
	for _, r := range h.records[from:to] {
		switch r.Ev {
		case "released":
			released[r.W] = r.T
		case "done":
			at, ok := released[r.W]
			delete(released, r.W)
			if d := time.Duration(r.T - at); ok && r.Err == "" && d > releaseMax {
				h.t.Fatalf("%s's Do returned %v after its function did (more than %v): Release must close the connection and return at once, not wait for the lease",
					r.W, d.Round(time.Millisecond), releaseMax)
			}
		}
	}
}

// indexAfter returns the index after rec in the records.
func (h *harness) indexAfter(rec faultinject.Record) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := len(h.records) - 1; i >= 0; i-- {
		if h.records[i] == rec {
			return i + 1
		}
	}
	return len(h.records)
}

// holder waits for a worker that holds the lock: the process of the
// author of the latest "acquired" record, while no release or loss came
// after it.
func (h *harness) holder() (*proc, uint64) {
	h.t.Helper()
	timeout := time.After(waitMax)
	for {
		h.mu.Lock()
		var acq *faultinject.Record
		for i := len(h.records) - 1; i >= 0; i-- {
			r := &h.records[i]
			if r.Ev == "acquired" {
				acq = r
				break
			}
			if r.Ev == "released" || r.Ev == "lost" {
				break // the latest holder is done; wait for the next
			}
		}
		changed := h.changed
		h.mu.Unlock()
		if acq != nil {
			for _, w := range h.workers {
				if w.id == faultinject.Proc(acq.W) {
					return w, acq.Tok
				}
			}
		}
		select {
		case <-changed:
		case <-timeout:
			h.t.Fatalf("no holder within %v", waitMax)
		}
	}
}

// holderWhere is holder, or with reader the process of a claim actor
// that holds a shared claim: whose latest record among "acquired",
// "released" and "lost" is a shared "acquired". It prefers, for up to
// pairWait, a session whose two readers hold at once, so that the fault
// ends several claims of one session.
func (h *harness) holderWhere(reader bool) *proc {
	h.t.Helper()
	if !reader {
		w, _ := h.holder()
		return w
	}
	const pairWait = 4 * time.Second
	pairOver := time.After(pairWait) // then nil: one reader will do
	timeout := time.After(waitMax)
	for {
		h.mu.Lock()
		holds := map[string]bool{}
		for _, r := range h.records {
			switch r.Ev {
			case "acquired":
				holds[r.W] = r.Shared
			case "released", "lost":
				delete(holds, r.W)
			}
		}
		changed := h.changed
		h.mu.Unlock()
		want := 1
		if pairOver != nil {
			want = 2
		}
		for _, w := range h.workers {
			n := 0
			for actor, shared := range holds {
				if shared && faultinject.Proc(actor) == w.id {
					n++
				}
			}
			if n >= want {
				return w
			}
		}
		select {
		case <-changed:
		case <-pairOver:
			pairOver = nil
		case <-timeout:
			h.t.Fatalf("no reader holding within %v", waitMax)
		}
	}
}

// fault records a fault from start to now.
func (h *harness) fault(kind, worker string, start int64) {
	h.faults = append(h.faults, faultinject.Fault{Kind: kind, Worker: worker, Start: start, End: faultinject.Mono()})
}

// inject applies one step of the plan.
func (h *harness) inject(kind string) {
	h.t.Helper()
	switch kind {
	case "delay": // any worker, 50 to 400ms each way, for two seconds
		i := rand.IntN(slots)
		d := 50*time.Millisecond + rand.N(350*time.Millisecond)
		start := faultinject.Mono()
		h.proxies[i].SetDelay(d)
		time.Sleep(2 * time.Second)
		h.proxies[i].SetDelay(0)
		h.fault(faultinject.FaultDelay, h.workers[i].id, start)

	case "delay-large": // the holder, 0.6 of a lease each way: it must give up
		w, _ := h.holder()
		start := faultinject.Mono()
		h.proxies[w.slot].SetDelay(lease * 6 / 10)
		from := h.mark()
		h.waitFor(from, w.id+" giving up under a delay of 0.6·lease", func(r faultinject.Record) bool {
			return faultinject.Proc(r.W) == w.id && r.Ev == "done" && strings.Contains(r.Err, "heartbeat timeout")
		})
		h.proxies[w.slot].SetDelay(0)
		h.fault(faultinject.FaultDelay, w.id, start)

	case "freeze", "blackhole", "reset":
		h.steer(kind, false)

	case "freeze-reader", "blackhole-reader", "reset-reader": // steered at a version 2 reader
		h.steer(strings.TrimSuffix(kind, "-reader"), true)

	case "freeze-any": // the holder wherever it is, for 1.5 leases
		w, _ := h.holder()
		start := faultinject.Mono()
		h.freeze(w)
		time.Sleep(lease * 3 / 2)
		w.signal(syscall.SIGCONT)
		h.fault(faultinject.FaultFreeze, w.id, start)

	case "kill", "kill-reader": // the holder (a session holding a shared claim), then a new worker in its place
		w := h.holderWhere(kind == "kill-reader")
		start := faultinject.Mono()
		h.killed[w.id] = start
		w.signal(syscall.SIGKILL)
		if !w.wait(waitMax) {
			h.t.Fatalf("%s did not die of SIGKILL", w.id)
		}
		h.fault(faultinject.FaultKill, w.id, start)
		h.spawn(w.slot)

	case faultinject.FaultRestart, faultinject.FaultCrash:
		start := faultinject.Mono()
		sig := syscall.SIGTERM
		if kind == faultinject.FaultCrash {
			sig = syscall.SIGKILL
			h.audits[len(h.audits)-1].Crashed = true
		}
		h.srv.signal(sig)
		if !h.srv.wait(waitMax) {
			h.t.Fatalf("%s did not exit on %v", h.srv.id, sig)
		}
		if kind == faultinject.FaultRestart && !h.srv.cmd.ProcessState.Success() {
			h.t.Errorf("%s: graceful shutdown ended with %v\n%s", h.srv.id, h.srv.cmd.ProcessState, tail(h.srv.stderr))
		}
		// No gap: tokens keep increasing across a restart of any speed
		// (docs/fencing.md), and the fence checks that they do.
		h.startServer()
		h.fault(kind, "", start)

	default:
		panic("unknown fault " + kind)
	}
}

// steer hits a holder between the check of its context and its write:
// the holder is told to pause there; once it has, it is frozen or cut
// off, the lock moves on and the successor writes with a higher token;
// then the holder goes on with its write, which the fence must refuse.
//
// With reader, the holder is a version 2 session holding a shared claim,
// and only a shared claim actor pauses.
func (h *harness) steer(kind string, reader bool) {
	h.t.Helper()
	h.steered++
	from := h.mark()
	w := h.holderWhere(reader)
	if reader {
		w.command("pause-shared")
	} else {
		w.command("pause")
	}
	chk := h.waitFor(from, w.id+" pausing after its check", func(r faultinject.Record) bool {
		return faultinject.Proc(r.W) == w.id && r.Ev == "check" && r.Paused
	})
	start := faultinject.Mono()
	switch kind {
	case "freeze":
		h.freeze(w)
		w.command("resume") // read when it continues
	case "blackhole":
		h.proxies[w.slot].Blackhole()
	case "reset":
		h.proxies[w.slot].Reset()
	}
	// A reader's read is refused only after a write with a higher token
	// (the W rule); a writer's write after any higher operation.
	h.waitFor(from, fmt.Sprintf("accepted write with a token above %s's %d", chk.W, chk.Tok), func(r faultinject.Record) bool {
		return r.Ev == "write" && r.OK && r.Tok > chk.Tok && (!chk.Shared || !r.Shared)
	})
	switch kind {
	case "freeze":
		w.signal(syscall.SIGCONT)
	default:
		w.command("resume")
	}
	late := h.waitFor(from, chk.W+"'s late write", func(r faultinject.Record) bool {
		return r.W == chk.W && r.Ev == "write" && r.Tok == chk.Tok && r.T0 > chk.T
	})
	if kind == "blackhole" {
		h.proxies[w.slot].Heal()
	}
	h.fault(kind, w.id, start)
	if !late.OK && late.Err == "" {
		h.steeredRefused++
	} else {
		h.problem("%s: %s's write (shared %v) with token %d after the lock moved on: accepted %v, error %q; want refused by the fence",
			kind, chk.W, chk.Shared, chk.Tok, late.OK, late.Err)
	}
}

// freeze stops w and waits until all its threads have stopped.
func (h *harness) freeze(w *proc) {
	h.t.Helper()
	if err := faultinject.Freeze(w.cmd.Process.Pid, waitMax); err != nil {
		h.t.Fatalf("%s: %v", w.id, err)
	}
}

// dump writes the run's record into dir, for a closer look:
// BATON_FAULTINJECT_DUMP=dir.
func (h *harness) dump(dir string, in faultinject.Input) {
	var b []byte
	for _, r := range in.Records {
		line, _ := json.Marshal(r)
		b = append(append(b, line...), '\n')
	}
	files := map[string][]byte{"records.jsonl": b}
	files["fence_log.json"], _ = json.Marshal(in.DB)
	files["faults.json"], _ = json.Marshal(in.Faults)
	files["killed.json"], _ = json.Marshal(in.Killed)
	for _, a := range in.Audit {
		files[a.Name] = a.Data
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			h.t.Errorf("dump: %v", err)
		}
	}
	h.t.Logf("the run's record is in %s", dir)
}

// stop ends the workers (end of stdin), then the server (SIGTERM).
func (h *harness) stop() {
	h.stopWorkers()
	h.srv.signal(syscall.SIGTERM)
	if !h.srv.wait(waitMax) {
		h.t.Fatalf("%s did not exit on SIGTERM", h.srv.id)
	}
	if !h.srv.cmd.ProcessState.Success() {
		h.t.Errorf("%s: %v\n%s", h.srv.id, h.srv.cmd.ProcessState, tail(h.srv.stderr))
	}
	// Every worker that ever ran must have exited cleanly or been killed.
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.records {
		if r.Ev == "start" {
			if _, killed := h.killed[r.W]; !killed && !h.exited(r.W) {
				h.problems = append(h.problems, fmt.Sprintf("%s never logged its exit", r.W))
			}
		}
	}
}

// stopWorkers ends the workers (end of stdin) and checks that they exit
// cleanly; one that does not is killed.
func (h *harness) stopWorkers() {
	for _, w := range h.workers {
		w.stdin.Close()
	}
	for _, w := range h.workers {
		if !w.wait(waitMax) {
			h.t.Errorf("%s did not stop within %v of the end of its input; killing it", w.id, waitMax)
			h.killed[w.id] = faultinject.Mono()
			w.signal(syscall.SIGKILL)
			w.wait(waitMax)
		} else if !w.cmd.ProcessState.Success() {
			h.t.Errorf("%s: %v\n%s", w.id, w.cmd.ProcessState, tail(w.stderr))
		}
	}
}

// exited reports whether worker id logged "exit"; h.mu is held.
func (h *harness) exited(id string) bool {
	for _, r := range h.records {
		if r.W == id && r.Ev == "exit" {
			return true
		}
	}
	return false
}

// killAll kills whatever is still running (after a failure).
func (h *harness) killAll() {
	for _, p := range append(h.workers, h.srv) {
		if p == nil {
			continue
		}
		select {
		case <-p.exited:
		default:
			p.cmd.Process.Kill()
			p.cmd.Process.Signal(syscall.SIGCONT)
			p.wait(waitMax)
		}
	}
}

func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return string(b)
}
