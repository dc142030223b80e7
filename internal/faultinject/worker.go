//go:build linux

package faultinject

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/batonlock/baton/ranges"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/batonlock/baton"
)

// WorkerConfig configures one worker process.
type WorkerConfig struct {
	ID     string        // the worker's name in its log
	Addr   string        // where baton is reached (the worker's proxy)
	Lock   string        // the lock guarding the resource
	Lease  time.Duration // the lease of every claim
	DSN    string        // the PostgreSQL holding the resource
	Writes int           // writes per tenure, after which the lock is released
	Step   time.Duration // the slow step between a write's check and its send
	// Modes, when not empty, makes the worker a protocol version 2
	// session: one Session whose claim actors, one per entry
	// ("exclusive" or "shared"), loop on Session.Do on Lock at once, so
	// the session holds several claims; a "range" actor loops on a
	// write range lock over the whole of the key Lock instead (range
	// locks and claims on one name do not exclude each other: a run
	// uses one or the other). Empty: a version 1 Client.
	Modes []string
	// Addrs, when not empty, makes a version 2 worker's session
	// resumable through these addresses (Addr first), as the Go client
	// is on a cluster.
	Addrs []string
	// Mutation breaks the worker or its fence on purpose, to show that
	// Check catches it: MutationNoWRule, MutationIgnoreLost. Empty in
	// the suite.
	Mutation string
}

// Mutations of the worker (WorkerConfig.Mutation).
const (
	// MutationNoWRule drops the W rule from the read fence: a reader
	// older than the last accepted writer gets in.
	MutationNoWRule = "no-w-rule"
	// MutationIgnoreLost makes every tenure ignore the loss of its claim:
	// no check of its context before a write, and no "lost" record.
	MutationIgnoreLost = "ignore-lost"
)

// The resource: one row of the fence table, updated only by WriteSQL
// (an exclusive holder's write) and ReadSQL (a shared holder's read).
// The row keeps the two numbers of docs/protocol-v2-client.md ("v2 fencing with
// several holders"): max_token is M, the largest token accepted from
// anyone, write_token is W, the largest accepted from an exclusive
// holder. A write is accepted only if its token is at least M, a read
// only if its token is above W; the database refuses the rest, not the
// worker. fence_log keeps every accepted operation in commit order, in
// the same statement: writes is incremented under the row lock, so its
// new value is a gapless sequence number.
const (
	SchemaSQL = `
CREATE TABLE fence (resource text PRIMARY KEY, max_token bigint NOT NULL, writes bigint NOT NULL,
	write_token bigint NOT NULL DEFAULT 0);
CREATE TABLE fence_log (seq bigint PRIMARY KEY, token bigint NOT NULL, worker text NOT NULL,
	shared boolean NOT NULL DEFAULT false);
`
	// WriteSQL: $1 token, $2 resource, $3 worker; returns the sequence
	// number, or no row when the fence refuses.
	WriteSQL = `
WITH u AS (
	UPDATE fence SET max_token = $1, write_token = $1, writes = writes + 1
	WHERE resource = $2 AND max_token <= $1
	RETURNING writes)
INSERT INTO fence_log (seq, token, worker, shared) SELECT writes, $1, $3, false FROM u
RETURNING seq`
	// ReadSQL: as WriteSQL, for a read under a shared claim.
	ReadSQL = `
WITH u AS (
	UPDATE fence SET max_token = greatest(max_token, $1), writes = writes + 1
	WHERE resource = $2 AND ` + wRule + `
	RETURNING writes)
INSERT INTO fence_log (seq, token, worker, shared) SELECT writes, $1, $3, true FROM u
RETURNING seq`
	wRule = "write_token < $1"
)

// readSQL is the read statement, without the W rule under
// MutationNoWRule.
func readSQL(mutation string) string {
	if mutation == MutationNoWRule {
		return strings.Replace(ReadSQL, wRule, "true", 1)
	}
	return ReadSQL
}

// Record is one line of a worker's log (JSON lines on its standard
// output). T is Mono() at the event. W is the worker's ID, or for the
// claim actors of a version 2 worker ID#k (Proc gives the process).
//
//	start     the worker is up (PID)
//	session   a version 2 worker opened a session (Err: it failed)
//	session-moved  a resumable session resumed on another node (Err: its
//	          id), seen at most 20 ms after
//	session-lost  its session ended (Err: why), logged once Lost() is
//	          closed, which the client does after cancelling every claim's
//	          work
//	request   Do is called: the claim is requested
//	acquired  fn was called: ownership of Tok begins (Shared: under a
//	          shared claim, whose operations are reads)
//	check     fn's ctx was found alive before an operation; Paused when
//	          the worker then waits for "resume" instead of its usual step
//	resumed   it got "resume" (or is stopping)
//	write     an operation with token Tok was attempted (Shared: a read):
//	          sent at T0, answered at T; OK if the fence accepted it, with
//	          its sequence number Seq; Late if fn's ctx was already
//	          cancelled when it was sent; Err if it failed (no answer from
//	          the database)
//	lost      fn's ctx was cancelled while fn ran (Err: the cause)
//	released  fn returned
//	done      Do returned (Err: its error)
//	exit      the worker stops
type Record struct {
	Ev     string `json:"ev"`
	W      string `json:"w"`
	T      int64  `json:"t"`
	Tok    uint64 `json:"tok,omitempty"`
	T0     int64  `json:"t0,omitempty"`
	OK     bool   `json:"ok,omitempty"`
	Seq    int64  `json:"seq,omitempty"`
	Late   bool   `json:"late,omitempty"`
	Paused bool   `json:"paused,omitempty"`
	Shared bool   `json:"shared,omitempty"`
	Err    string `json:"err,omitempty"`
	PID    int    `json:"pid,omitempty"`
}

// Proc returns the worker process of a record's W: the ID before "#".
func Proc(w string) string {
	if i := strings.IndexByte(w, '#'); i >= 0 {
		return w[:i]
	}
	return w
}

// RunWorker takes the lock over and over until stdin ends or ctx is
// done, and under each grant makes cfg.Writes operations stamped with
// the fencing token: writes under an exclusive claim, reads under a
// shared one. Before each operation it checks fn's ctx, then spends
// cfg.Step (or waits for a "resume" line on stdin after a "pause" line,
// or for a shared actor after a "pause-shared" line)
// without looking at ctx, then sends the operation whatever happened to
// ctx meanwhile: the check-then-act gap a GC pause opens in a real
// program, which only the fence in the database closes.
//
// With cfg.Modes it is a version 2 worker: one Session at a time, with
// a claim actor per mode looping on Session.Do; when the session is lost
// every actor's fn is cancelled, the actors stop, and a new session is
// opened.
func RunWorker(ctx context.Context, cfg WorkerConfig, stdin io.Reader, stdout io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := &worker{cfg: cfg, out: stdout, resume: make(chan struct{}, 1), stopped: ctx.Done(),
		tenure: map[uint64]string{}, lost: map[uint64]bool{}}
	w.log(Record{Ev: "start", PID: os.Getpid()})
	defer w.log(Record{Ev: "exit"})

	// Commands on stdin; its end stops the worker.
	go func() {
		sc := bufio.NewScanner(stdin)
		for sc.Scan() {
			switch sc.Text() {
			case "pause":
				w.pause.Store(true)
			case "pause-shared":
				w.pauseShared.Store(true)
			case "resume":
				select {
				case w.resume <- struct{}{}:
				default:
				}
			}
		}
		cancel()
	}()

	c := baton.New(baton.Config{Address: cfg.Addr, OnLost: w.onLost})
	if len(cfg.Modes) > 0 {
		for ctx.Err() == nil {
			w.session(ctx, c)
		}
		return nil
	}
	a := &actor{w: w, id: cfg.ID}
	defer a.close()
	for ctx.Err() == nil {
		var tok uint64
		w.log(Record{Ev: "request", W: a.id})
		err := c.Do(ctx, cfg.Lock, cfg.Lease, func(ctx context.Context, token uint64) error {
			tok = token
			return a.tenure(ctx, token)
		})
		a.done(ctx, tok, err)
	}
	return nil
}

// session runs one version 2 session until it is lost or ctx is done:
// each claim actor loops on Do until then; a lost session cancels every
// actor's fn (Session.Do's contract), and session returns once all have
// stopped and the session is closed.
func (w *worker) session(ctx context.Context, c *baton.Client) {
	opts := baton.SessionOptions{Lease: w.cfg.Lease, Label: w.cfg.ID, RefuseOldServer: true, Addrs: w.cfg.Addrs}
	if len(w.cfg.Addrs) > 0 {
		opts.Resume = baton.ResumeOn
	}
	s, err := c.OpenSession(ctx, opts)
	if err != nil {
		w.log(Record{Ev: "session", Err: err.Error()})
		backoff(ctx)
		return
	}
	w.log(Record{Ev: "session"})
	watched := make(chan struct{})
	tenures := &rangeTenures{cancel: map[*context.CancelCauseFunc]bool{}}
	go func() {
		defer close(watched)
		<-s.Lost() // closed by s.Close at the latest
		// A range lock has no context the client cancels before Lost
		// closes, as a claim's: its tenure ends here, before the loss
		// is logged, so that an operation sent after the log is Late.
		tenures.end(fmt.Errorf("session lost: %w", s.Err()))
		w.log(Record{Ev: "session-lost", Err: fmt.Sprint(s.Err())})
	}()
	if s.Resumable() {
		go func() {
			node := s.Node()
			t := time.NewTicker(20 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-s.Lost():
					return
				case <-t.C:
				}
				if n := s.Node(); n != node {
					node = n
					w.log(Record{Ev: "session-moved", W: w.cfg.ID, Err: n})
				}
			}
		}()
	}
	var actors sync.WaitGroup
	for k, m := range w.cfg.Modes {
		if m == "range" {
			a := &actor{w: w, id: fmt.Sprintf("%s#%d", w.cfg.ID, k)}
			actors.Go(func() {
				defer a.close()
				a.ranges(ctx, s, uint64(k+1), tenures)
			})
			continue
		}
		mode, shared := baton.Exclusive, m == "shared"
		if shared {
			mode = baton.Shared
		}
		a := &actor{w: w, id: fmt.Sprintf("%s#%d", w.cfg.ID, k), shared: shared}
		actors.Go(func() {
			defer a.close()
			for ctx.Err() == nil && s.Err() == nil {
				var tok uint64
				w.log(Record{Ev: "request", W: a.id})
				err := s.Do(ctx, w.cfg.Lock, mode, func(ctx context.Context, token uint64) error {
					tok = token
					return a.tenure(ctx, token)
				})
				a.done(ctx, tok, err)
			}
		})
	}
	actors.Wait()
	s.Close()
	<-watched
	if ctx.Err() == nil {
		backoff(ctx)
	}
}

// rangeTenures are the contexts of a session's range-lock tenures, which
// the session's loss ends.
type rangeTenures struct {
	mu     sync.Mutex
	ended  error
	cancel map[*context.CancelCauseFunc]bool
}

// start returns the context of a tenure, ended at once if the session
// is lost already, and the function that ends it.
func (rt *rangeTenures) start(ctx context.Context) (context.Context, func()) {
	held, cancel := context.WithCancelCause(ctx)
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.ended != nil {
		cancel(rt.ended)
		return held, func() {}
	}
	rt.cancel[&cancel] = true
	return held, func() {
		rt.mu.Lock()
		delete(rt.cancel, &cancel)
		rt.mu.Unlock()
		cancel(nil)
	}
}

// end ends every tenure, and those started later, with cause.
func (rt *rangeTenures) end(cause error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.ended = cause
	for c := range rt.cancel {
		(*c)(cause)
	}
}

// ranges loops, until ctx is done or s is lost, on a write range lock
// over the whole of the key Lock (ranges.Locker.Set, owner owner):
// its tenure's context ends when the session is lost (tenures), the
// moment its client stops believing in its range locks (a range lock
// has no context of its own).
func (a *actor) ranges(ctx context.Context, s *baton.Session, owner uint64, tenures *rangeTenures) {
	l := ranges.Lock{Key: a.w.cfg.Lock, Owner: owner, Type: ranges.WriteLock, End: ranges.ToEnd}
	for ctx.Err() == nil && s.Err() == nil {
		a.w.log(Record{Ev: "request", W: a.id})
		tok, err := ranges.New(s).Set(ctx, l, true)
		if err == nil {
			held, done := tenures.start(ctx)
			err = a.tenure(held, tok)
			done()
			if s.Err() == nil {
				ranges.New(s).Unlock(context.WithoutCancel(ctx), l)
			}
		}
		a.done(ctx, tok, err)
	}
}

// backoff waits 20 to 40ms, or until ctx is done.
func backoff(ctx context.Context) {
	t := time.NewTimer(20*time.Millisecond + rand.N(20*time.Millisecond))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

type worker struct {
	cfg   WorkerConfig
	out   io.Writer
	outMu sync.Mutex
	pause atomic.Bool
	// pauseShared is pause for the next check of a shared actor only.
	pauseShared atomic.Bool
	resume      chan struct{}
	stopped     <-chan struct{} // the worker is stopping

	// The actor of each token whose tenure runs, and the tokens whose
	// loss has been logged: the client's OnLost logs a loss at the
	// moment it is decided, before the client closes anything; fn's
	// context hears of it later, in a goroutine of its own, and would
	// stamp the end of the belief too late.
	lossMu sync.Mutex
	tenure map[uint64]string
	lost   map[uint64]bool
}

// onLost is the client's Config.OnLost: it logs the loss of a grant
// whose tenure runs, once.
func (w *worker) onLost(_ string, token uint64, cause error) {
	if w.cfg.Mutation == MutationIgnoreLost {
		return
	}
	w.lossMu.Lock()
	id, ok := w.tenure[token]
	first := ok && !w.lost[token]
	if first {
		w.lost[token] = true
	}
	w.lossMu.Unlock()
	if first {
		w.log(Record{Ev: "lost", W: id, Tok: token, Err: fmt.Sprint(cause)})
	}
}

// lostOnce logs the loss of token by actor id unless it has been logged.
func (w *worker) lostOnce(id string, token uint64, cause error) {
	w.lossMu.Lock()
	first := !w.lost[token]
	w.lost[token] = true
	w.lossMu.Unlock()
	if first {
		w.log(Record{Ev: "lost", W: id, Tok: token, Err: fmt.Sprint(cause)})
	}
}

// actor is one claimant of a worker: the worker itself in version 1, a
// claim actor of its session in version 2. It has its own database
// connection.
type actor struct {
	w      *worker
	id     string
	shared bool
	db     *pgx.Conn
}

func (a *actor) close() {
	if a.db != nil {
		a.db.Close(context.Background())
	}
}

// done logs the end of a Do and, after an error, backs off.
func (a *actor) done(ctx context.Context, tok uint64, err error) {
	rec := Record{Ev: "done", W: a.id, Tok: tok}
	if err != nil {
		rec.Err = err.Error()
	}
	a.w.log(rec)
	if err != nil && ctx.Err() == nil {
		backoff(ctx)
	}
}

// tenure is the work under one grant.
func (a *actor) tenure(ctx context.Context, token uint64) error {
	w := a.w
	w.log(Record{Ev: "acquired", W: a.id, Tok: token, Shared: a.shared})
	w.lossMu.Lock()
	w.tenure[token] = a.id
	w.lossMu.Unlock()
	ignore := w.cfg.Mutation == MutationIgnoreLost
	// OnLost logs a loss as it is decided; this logs one it did not see
	// (the worker's own ctx ending).
	stop := context.AfterFunc(ctx, func() {
		if !ignore {
			w.lostOnce(a.id, token, context.Cause(ctx))
		}
	})
	defer func() {
		stop()
		w.log(Record{Ev: "released", W: a.id, Tok: token})
		w.lossMu.Lock()
		delete(w.tenure, token)
		delete(w.lost, token)
		w.lossMu.Unlock()
	}()
	for range w.cfg.Writes {
		if ctx.Err() != nil && !ignore { // the check
			return nil
		}
		paused := w.pause.Swap(false) || (a.shared && w.pauseShared.Swap(false))
		w.log(Record{Ev: "check", W: a.id, Tok: token, Paused: paused, Shared: a.shared})
		if paused {
			select {
			case <-w.resume:
			case <-w.stopped:
			}
			w.log(Record{Ev: "resumed", W: a.id, Tok: token})
		} else {
			time.Sleep(w.cfg.Step)
		}
		// The act: not interrupted by a loss of the lock from here on.
		// Its time is taken before ctx is looked at: an operation sent
		// after a session-lost record must be Late.
		t0 := Mono()
		a.write(context.WithoutCancel(ctx), token, t0, ctx.Err() != nil)
	}
	return nil
}

// write makes one fenced operation (a read for a shared actor) and logs
// it.
func (a *actor) write(ctx context.Context, token uint64, t0 int64, late bool) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rec := Record{Ev: "write", W: a.id, Tok: token, Late: late, Shared: a.shared, T0: t0}
	sql := WriteSQL
	if a.shared {
		sql = readSQL(a.w.cfg.Mutation)
	}
	err := a.connect(ctx)
	if err == nil {
		err = a.db.QueryRow(ctx, sql, int64(token), a.w.cfg.Lock, a.id).Scan(&rec.Seq)
	}
	switch {
	case err == nil:
		rec.OK = true
	case errors.Is(err, pgx.ErrNoRows): // refused by the fence
	default:
		rec.Err = err.Error()
		if a.db != nil && a.db.IsClosed() {
			a.db = nil
		}
	}
	a.w.log(rec)
}

func (a *actor) connect(ctx context.Context) error {
	if a.db != nil && !a.db.IsClosed() {
		return nil
	}
	db, err := pgx.Connect(ctx, a.w.cfg.DSN)
	if err != nil {
		return err
	}
	a.db = db
	return nil
}

// log writes rec as one line, stamped now (T) and with the worker's name
// unless it has an actor's.
func (w *worker) log(rec Record) {
	if rec.W == "" {
		rec.W = w.cfg.ID
	}
	rec.T = Mono()
	b, _ := json.Marshal(rec)
	w.outMu.Lock()
	defer w.outMu.Unlock()
	w.out.Write(append(b, '\n'))
}
