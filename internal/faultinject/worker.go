//go:build linux

package faultinject

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
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
}

// The resource: one row of the fence table, updated only by writeSQL.
// fence_log keeps every accepted write in commit order, in the same
// statement: writes is incremented under the row lock, so its new value
// is a gapless sequence number.
const (
	SchemaSQL = `
CREATE TABLE fence (resource text PRIMARY KEY, max_token bigint NOT NULL, writes bigint NOT NULL);
CREATE TABLE fence_log (seq bigint PRIMARY KEY, token bigint NOT NULL, worker text NOT NULL);
`
	writeSQL = `
WITH u AS (
	UPDATE fence SET max_token = $1, writes = writes + 1
	WHERE resource = $2 AND max_token <= $1
	RETURNING writes)
INSERT INTO fence_log (seq, token, worker) SELECT writes, $1, $3 FROM u
RETURNING seq`
)

// Record is one line of a worker's log (JSON lines on its standard
// output). T is Mono() at the event.
//
//	start     the worker is up (PID)
//	acquired  fn was called: ownership of Tok begins
//	check     fn's ctx was found alive before a write; Paused when the
//	          worker then waits for "resume" instead of its usual step
//	resumed   it got "resume" (or is stopping)
//	write     a write with token Tok was attempted: sent at T0, answered
//	          at T; OK if the fence accepted it, with its sequence number
//	          Seq; Late if fn's ctx was already cancelled when it was sent;
//	          Err if it failed (no answer from the database)
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
	Err    string `json:"err,omitempty"`
	PID    int    `json:"pid,omitempty"`
}

// RunWorker takes the lock over and over until stdin ends or ctx is
// done, and under each grant makes cfg.Writes writes stamped with the
// fencing token. Before each write it checks fn's ctx, then spends
// cfg.Step (or waits for a "resume" line on stdin after a "pause" line)
// without looking at ctx, then sends the write whatever happened to ctx
// meanwhile: the check-then-act gap a GC pause opens in a real program,
// which only the fence in the database closes.
func RunWorker(ctx context.Context, cfg WorkerConfig, stdin io.Reader, stdout io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := &worker{cfg: cfg, out: stdout, resume: make(chan struct{}, 1), stopped: ctx.Done()}
	w.log(Record{Ev: "start", PID: os.Getpid()})
	defer w.log(Record{Ev: "exit"})

	// Commands on stdin; its end stops the worker.
	go func() {
		sc := bufio.NewScanner(stdin)
		for sc.Scan() {
			switch sc.Text() {
			case "pause":
				w.pause.Store(true)
			case "resume":
				select {
				case w.resume <- struct{}{}:
				default:
				}
			}
		}
		cancel()
	}()

	defer func() {
		if w.db != nil {
			w.db.Close(context.Background())
		}
	}()
	c := baton.New(baton.Config{Address: cfg.Addr})
	for ctx.Err() == nil {
		var tok uint64
		err := c.Do(ctx, cfg.Lock, cfg.Lease, func(ctx context.Context, token uint64) error {
			tok = token
			return w.tenure(ctx, token)
		})
		rec := Record{Ev: "done", Tok: tok}
		if err != nil {
			rec.Err = err.Error()
		}
		w.log(rec)
		if err != nil && ctx.Err() == nil {
			time.Sleep(20*time.Millisecond + rand.N(20*time.Millisecond))
		}
	}
	return nil
}

type worker struct {
	cfg     WorkerConfig
	out     io.Writer
	outMu   sync.Mutex
	db      *pgx.Conn
	pause   atomic.Bool
	resume  chan struct{}
	stopped <-chan struct{} // the worker is stopping
}

// tenure is the work under one grant.
func (w *worker) tenure(ctx context.Context, token uint64) error {
	w.log(Record{Ev: "acquired", Tok: token})
	stop := context.AfterFunc(ctx, func() {
		w.log(Record{Ev: "lost", Tok: token, Err: fmt.Sprint(context.Cause(ctx))})
	})
	defer func() {
		stop()
		w.log(Record{Ev: "released", Tok: token})
	}()
	for range w.cfg.Writes {
		if ctx.Err() != nil { // the check
			return nil
		}
		paused := w.pause.Swap(false)
		w.log(Record{Ev: "check", Tok: token, Paused: paused})
		if paused {
			select {
			case <-w.resume:
			case <-w.stopped:
			}
			w.log(Record{Ev: "resumed", Tok: token})
		} else {
			time.Sleep(w.cfg.Step)
		}
		// The act: not interrupted by a loss of the lock from here on.
		w.write(context.WithoutCancel(ctx), token, ctx.Err() != nil)
	}
	return nil
}

// write makes one fenced write and logs it.
func (w *worker) write(ctx context.Context, token uint64, late bool) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rec := Record{Ev: "write", Tok: token, Late: late, T0: Mono()}
	err := w.connect(ctx)
	if err == nil {
		err = w.db.QueryRow(ctx, writeSQL, int64(token), w.cfg.Lock, w.cfg.ID).Scan(&rec.Seq)
	}
	switch {
	case err == nil:
		rec.OK = true
	case errors.Is(err, pgx.ErrNoRows): // rejected by the fence
	default:
		rec.Err = err.Error()
		if w.db != nil && w.db.IsClosed() {
			w.db = nil
		}
	}
	w.log(rec)
}

func (w *worker) connect(ctx context.Context) error {
	if w.db != nil && !w.db.IsClosed() {
		return nil
	}
	db, err := pgx.Connect(ctx, w.cfg.DSN)
	if err != nil {
		return err
	}
	w.db = db
	return nil
}

// log writes rec as one line, stamped now (T) and with the worker's name.
func (w *worker) log(rec Record) {
	rec.W, rec.T = w.cfg.ID, Mono()
	b, _ := json.Marshal(rec)
	w.outMu.Lock()
	defer w.outMu.Unlock()
	w.out.Write(append(b, '\n'))
}
