// Package testkit is the client test kit behind 'baton testkit': a
// scripted fake baton server that checks, from the outside, that a client
// library keeps the client rule of docs/protocol.md (the anchor is the
// send time, nothing is believed past anchor + 0.8·L without an answer,
// the connection closes only once the work was told, a frame out of
// order or an ERROR loses every claim, REVOKED ends its claim, pushes and
// frame boundaries change nothing, a resumable session re-asserts).
//
// The client is driven through an adapter: a small program, written with
// the library under test, that the kit starts once per scenario with the
// address of its fake server in the environment and that reports what the
// library tells it as JSON lines on stdout. docs/testkit.md is the
// contract; Run is the whole kit.
package testkit

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Defaults of Options.
const (
	DefaultLease   = time.Second
	DefaultTimeout = 30 * time.Second
	// minTolerance is the smallest slack on a time check: scheduling on a
	// loaded machine (the kit, the adapter and the client's timers share
	// its cores) delays a timer or a read by tens of milliseconds.
	minTolerance = 100 * time.Millisecond
)

// Options configures Run.
type Options struct {
	// Command is the adapter and its arguments. Required.
	Command []string
	// Lease is the session lease L the adapter is told to ask for;
	// DefaultLease when 0. Every time bound of a scenario is a multiple
	// of it.
	Lease time.Duration
	// Tolerance is the slack allowed on every time bound; when 0, the
	// larger of 100ms and L/10. It must stay below L/5, or a client that
	// gives up only at anchor + L would pass.
	Tolerance time.Duration
	// Timeout bounds one scenario, the adapter's start included;
	// DefaultTimeout when 0.
	Timeout time.Duration
	// Run selects the scenarios whose names it matches; nil: all.
	Run *regexp.Regexp
	// Env is the adapter's base environment; nil: this process's.
	Env []string
	// Stderr receives the adapter's stderr; nil discards it.
	Stderr io.Writer
	// OnResult, when set, is called with each result as its scenario
	// ends.
	OnResult func(Result)
}

func (o Options) lease() time.Duration {
	if o.Lease > 0 {
		return o.Lease
	}
	return DefaultLease
}

func (o Options) tolerance() time.Duration {
	if o.Tolerance > 0 {
		return o.Tolerance
	}
	return max(minTolerance, o.lease()/10)
}

func (o Options) timeout() time.Duration {
	if o.Timeout > 0 {
		return o.Timeout
	}
	return DefaultTimeout
}

// Status is a scenario's outcome.
type Status string

const (
	Pass Status = "pass"
	Fail Status = "fail"
	Skip Status = "skip"
)

// Mark is one observed moment of a scenario, in milliseconds since the
// scenario started (the adapter's start).
type Mark struct {
	What string  `json:"what"`
	MS   float64 `json:"ms"`
}

// Result is one scenario's verdict with what was observed.
type Result struct {
	Scenario    string  `json:"scenario"`
	Checks      string  `json:"checks"`
	Status      Status  `json:"status"`
	Detail      string  `json:"detail"`
	LeaseMS     int64   `json:"lease_ms"`
	ToleranceMS int64   `json:"tolerance_ms"`
	Marks       []Mark  `json:"times"`
	ElapsedMS   float64 `json:"elapsed_ms"`
}

// Scenario is one scripted server behaviour and its verdict.
type Scenario struct {
	Name string
	// Checks says, in a sentence, what a pass proves.
	Checks string
	// Resumable: the adapter is asked for a resumable session.
	Resumable bool
	run       func(k *kit) error
}

// Scenarios returns every scenario, in the order Run runs them.
func Scenarios() []Scenario { return scenarios() }

// Run runs the scenarios that opts selects, one after the other, each
// with a fresh fake server and a fresh adapter process, and returns their
// results. It stops early only when ctx ends.
func Run(ctx context.Context, opts Options) ([]Result, error) {
	if len(opts.Command) == 0 {
		return nil, errors.New("testkit: no adapter command")
	}
	if opts.tolerance() >= opts.lease()/5 {
		return nil, fmt.Errorf("testkit: the tolerance %v must be below a fifth of the lease %v", opts.tolerance(), opts.lease())
	}
	var out []Result
	for _, sc := range scenarios() {
		if opts.Run != nil && !opts.Run.MatchString(sc.Name) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return out, err
		}
		r := runOne(ctx, opts, sc)
		if opts.OnResult != nil {
			opts.OnResult(r)
		}
		out = append(out, r)
	}
	return out, nil
}

// errSkip, returned by a scenario, reports that the adapter said its
// client lacks what the scenario needs.
type errSkip struct{ feature string }

func (e errSkip) Error() string { return "the client does not support " + e.feature }

// event is one JSON line of the adapter, stamped on arrival.
type event struct {
	Event   string          `json:"event"`
	Token   json.RawMessage `json:"token"`
	Reason  string          `json:"reason"`
	Message string          `json:"message"`
	Feature string          `json:"feature"`
	at      time.Time
	raw     string
}

// token decodes the held event's token, a number or a decimal string.
func (e event) token() (uint64, error) {
	s := strings.Trim(string(e.Token), `"`)
	if s == "" {
		return 0, fmt.Errorf("held event without a token: %s", e.raw)
	}
	return strconv.ParseUint(s, 10, 64)
}

// kit is one scenario's run: the fake server's listener, the adapter and
// everything observed.
type kit struct {
	ctx   context.Context
	sc    Scenario
	L     time.Duration
	tol   time.Duration
	t0    time.Time
	ln    net.Listener
	stdin io.WriteCloser

	mu      sync.Mutex
	events  []event
	evAdded chan struct{} // closed and replaced when an event arrives
	evDone  bool          // stdout ended
	marks   []Mark
	peers   []*peer
}

func runOne(parent context.Context, opts Options, sc Scenario) Result {
	res := Result{Scenario: sc.Name, Checks: sc.Checks, LeaseMS: opts.lease().Milliseconds(), ToleranceMS: opts.tolerance().Milliseconds()}
	ctx, cancel := context.WithTimeout(parent, opts.timeout())
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		res.Status, res.Detail = Fail, "the fake server cannot listen: "+err.Error()
		return res
	}
	k := &kit{ctx: ctx, sc: sc, L: opts.lease(), tol: opts.tolerance(), ln: ln, evAdded: make(chan struct{})}
	defer ln.Close()

	cmd := exec.Command(opts.Command[0], opts.Command[1:]...)
	env := opts.Env
	if env == nil {
		env = os.Environ()
	}
	resumable := "0"
	if sc.Resumable {
		resumable = "1"
	}
	cmd.Env = append(env,
		"BATON_TESTKIT_ADDR="+ln.Addr().String(),
		"BATON_TESTKIT_NAME="+k.name(),
		"BATON_TESTKIT_LEASE_MS="+strconv.FormatInt(k.L.Milliseconds(), 10),
		"BATON_TESTKIT_RESUMABLE="+resumable,
		"BATON_TESTKIT_SCENARIO="+sc.Name,
		"BATON_TESTKIT_STOP_MS="+strconv.FormatInt(k.stopDelay().Milliseconds(), 10),
	)
	if opts.Stderr != nil {
		cmd.Stderr = opts.Stderr
	}
	cmd.WaitDelay = time.Second // bounds the copy of a Stderr that is not a file
	ownGroup(cmd)
	// stdout is a pipe of our own rather than StdoutPipe, so that the end
	// of the adapter does not wait for a child it left holding the pipe.
	pr, pw, err := os.Pipe()
	if err != nil {
		res.Status, res.Detail = Fail, err.Error()
		return res
	}
	defer pr.Close()
	cmd.Stdout = pw
	k.stdin, err = cmd.StdinPipe()
	if err != nil {
		pw.Close()
		res.Status, res.Detail = Fail, err.Error()
		return res
	}
	k.t0 = time.Now()
	err = cmd.Start()
	pw.Close()
	if err != nil {
		res.Status, res.Detail = Fail, "cannot start the adapter: "+err.Error()
		return res
	}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		k.readEvents(pr)
	}()

	err = sc.run(k)

	// Tell the adapter to close and exit; kill it if it does not. What
	// the times show after this mark is the adapter closing.
	k.mark("kit: verdict reached; the adapter is told to close", time.Now())
	io.WriteString(k.stdin, "close\n")
	k.stdin.Close()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		kill(cmd)
		<-waited
	}
	select {
	case <-readDone:
	case <-time.After(time.Second):
		pr.Close() // a child of the adapter holds its stdout
		<-readDone
	}
	k.closePeers()

	var se errSkip
	switch {
	case err == nil:
		res.Status = Pass
	case errors.As(err, &se):
		res.Status, res.Detail = Skip, err.Error()
	default:
		res.Status, res.Detail = Fail, err.Error()
		if ctx.Err() != nil && parent.Err() == nil {
			res.Detail += fmt.Sprintf(" (the scenario's timeout of %v passed)", opts.timeout())
		}
	}
	k.mu.Lock()
	res.Marks = k.marks
	k.mu.Unlock()
	slices.SortStableFunc(res.Marks, func(a, b Mark) int { return cmp.Compare(a.MS, b.MS) })
	res.ElapsedMS = ms(time.Since(k.t0))
	return res
}

// name is the lock name the adapter claims.
func (k *kit) name() string { return "testkit/" + k.sc.Name }

// stopDelay is BATON_TESTKIT_STOP_MS: how long an adapter that honours it
// keeps its work running after it printed lost. It ends well before the
// close-by bound (anchor + L) of a give-up at anchor + 0.8·L, and is at
// least twice raceTol, so that a close at the give-up and a close after
// the work stopped are told apart.
func (k *kit) stopDelay() time.Duration { return max(k.L/10, k.tol) }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// mark records an observation at t.
func (k *kit) mark(what string, t time.Time) {
	k.mu.Lock()
	k.marks = append(k.marks, Mark{What: what, MS: ms(t.Sub(k.t0))})
	k.mu.Unlock()
}

// at renders t as milliseconds since the start, for failure messages.
func (k *kit) at(t time.Time) string {
	return fmt.Sprintf("%.0fms", ms(t.Sub(k.t0)))
}

func (k *kit) readEvents(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<10)
	for sc.Scan() {
		now := time.Now()
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		e := event{at: now, raw: line}
		if err := json.Unmarshal([]byte(line), &e); err != nil || e.Event == "" {
			e = event{Event: "bad", Message: line, at: now, raw: line}
		}
		what := "adapter: " + e.Event
		switch e.Event {
		case "held":
			what += " " + strings.Trim(string(e.Token), `"`)
		case "lost":
			what += " (" + e.Reason + ")"
		case "error", "bad":
			what += " (" + e.Message + ")"
		case "unsupported":
			what += " " + e.Feature
		}
		k.mu.Lock()
		k.events = append(k.events, e)
		k.marks = append(k.marks, Mark{What: what, MS: ms(now.Sub(k.t0))})
		close(k.evAdded)
		k.evAdded = make(chan struct{})
		k.mu.Unlock()
	}
	k.mu.Lock()
	k.evDone = true
	close(k.evAdded)
	k.evAdded = make(chan struct{})
	k.mu.Unlock()
}

// find returns the first event of kind at or after index from.
func (k *kit) find(kind string) (event, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, e := range k.events {
		if e.Event == kind {
			return e, true
		}
	}
	return event{}, false
}

// waitEvent waits until deadline for the first event of one of kinds, and
// returns it. An "unsupported" event ends the wait with errSkip, a "bad"
// line with an error.
func (k *kit) waitEvent(deadline time.Time, kinds ...string) (event, error) {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		k.mu.Lock()
		for _, e := range k.events {
			switch {
			case e.Event == "unsupported":
				k.mu.Unlock()
				return e, errSkip{feature: e.Feature}
			case e.Event == "bad":
				k.mu.Unlock()
				return e, fmt.Errorf("the adapter printed a line that is not an event: %q", e.raw)
			}
			for _, kind := range kinds {
				if e.Event == kind {
					k.mu.Unlock()
					return e, nil
				}
			}
		}
		done, ch := k.evDone, k.evAdded
		k.mu.Unlock()
		if done {
			return event{}, fmt.Errorf("the adapter ended its output without %s", strings.Join(kinds, " or "))
		}
		select {
		case <-ch:
		case <-timer.C:
			return event{}, errTimeout
		case <-k.ctx.Done():
			return event{}, k.ctx.Err()
		}
	}
}

var errTimeout = errors.New("timed out")

// send writes a line to the adapter's stdin.
func (k *kit) send(line string) {
	io.WriteString(k.stdin, line+"\n")
}

func (k *kit) closePeers() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, p := range k.peers {
		p.conn.Close()
	}
}
