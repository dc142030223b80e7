// Package audit writes baton's audit log: one JSON line for every change
// of lock ownership and every administrative action.
//
// The Logger is a server.Observer. Observe runs under the server's table
// lock, so it only copies the event into a bounded buffer, never blocking;
// a single goroutine encodes and writes. Because events reach Observe in
// table order and one goroutine writes them in buffer order, the file
// shows them in the order they happened: for one lock a "released" always
// precedes the next "granted".
//
// When the disk is slow the buffer absorbs bursts; when it is full, new
// events are dropped and counted (Dropped), never waited for. A write that
// fails (a full disk) loses the events of that write, which are counted
// the same way. Both are logged.
package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonlock/baton/server"
)

// Event names, the "event" field of a Record.
const (
	Granted      = "granted"       // a client became owner: token, wait_ms
	Released     = "released"      // an owner stopped owning: token, held_ms, reason
	Denied       = "denied"        // the ACL refused a client the lock
	ForceRelease = "force_release" // an administrator took the lock from its owner: token, admin_*
	KickWaiter   = "kick_waiter"   // an administrator removed a waiter from the queue: admin_*
	AdminDenied  = "admin_denied"  // the admin API refused an administrator an action: admin_*, action
)

// TimeFormat is the layout of the "time" field: RFC 3339 in UTC with
// milliseconds.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

// Record is one line of the audit log.
type Record struct {
	Time       string `json:"time"`
	Event      string `json:"event"`
	Lock       string `json:"lock"`
	Identity   string `json:"identity"` // empty without mTLS
	RemoteAddr string `json:"remote_addr"`
	Token      uint64 `json:"token,omitempty"`   // granted, released, force_release
	WaitMS     *int64 `json:"wait_ms,omitempty"` // granted
	HeldMS     *int64 `json:"held_ms,omitempty"` // released
	Reason     string `json:"reason,omitempty"`  // released
	// The administrator behind force_release, kick_waiter and
	// admin_denied: certificate identity (empty without mTLS) and
	// address. identity and remote_addr are the client affected.
	AdminIdentity *string `json:"admin_identity,omitempty"`
	AdminAddr     string  `json:"admin_addr,omitempty"`
	Action        string  `json:"action,omitempty"` // admin_denied: read, release or kick
}

// DefaultBuffer is the number of events the Logger holds while its writer
// is busy.
const DefaultBuffer = 8192

// Config configures a Logger. The zero value is usable.
type Config struct {
	// Buffer is the capacity of the event buffer; zero means
	// DefaultBuffer.
	Buffer int
	// Logger receives the audit log's own problems; nil means
	// slog.Default().
	Logger *slog.Logger
}

// Logger writes the audit log. Create it with New or Open, install it as
// (one of) the server's observers, and Close it after the server has shut
// down.
type Logger struct {
	path string // "" for New
	log  *slog.Logger

	ch   chan entry
	ctl  chan func() // run by the writer goroutine after a flush
	stop chan struct{}
	done chan struct{}
	once sync.Once

	overflow atomic.Uint64 // dropped because the buffer was full
	failed   atomic.Uint64 // lost in failed writes

	// Owned by the writer goroutine.
	w         io.Writer
	file      *os.File // nil when w is not a file we opened
	reported  uint64   // overflow already logged
	failing   bool     // the last write failed
	lastError string
}

// entry is an event as Observe copies it: no encoding under the table
// lock.
type entry struct {
	event string
	e     server.Event
}

// New returns a Logger writing to w, which it never closes.
func New(w io.Writer, cfg Config) *Logger {
	return start(w, nil, "", cfg)
}

// Open returns a Logger appending to the file at path, created with mode
// 0640 if needed; path "-" means standard output. Reopen reopens the file
// (for log rotation).
func Open(path string, cfg Config) (*Logger, error) {
	if path == "-" {
		return start(os.Stdout, nil, "", cfg), nil
	}
	f, err := openFile(path)
	if err != nil {
		return nil, err
	}
	return start(f, f, path, cfg), nil
}

func openFile(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
}

func start(w io.Writer, f *os.File, path string, cfg Config) *Logger {
	if cfg.Buffer <= 0 {
		cfg.Buffer = DefaultBuffer
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	l := &Logger{
		path: path,
		log:  cfg.Logger,
		ch:   make(chan entry, cfg.Buffer),
		ctl:  make(chan func()),
		stop: make(chan struct{}),
		done: make(chan struct{}),
		w:    w,
		file: f,
	}
	go l.run()
	return l
}

// Observe queues the audit records for e. It never blocks: when the
// buffer is full the record is dropped and counted.
func (l *Logger) Observe(e server.Event) {
	switch e.Kind {
	case server.EventGranted:
		l.enqueue(Granted, e)
	case server.EventReleased:
		l.enqueue(Released, e)
	case server.EventForceRelease:
		// The administrative action; the ownership change it causes
		// follows as "released" with reason "force".
		l.enqueue(ForceRelease, e)
	case server.EventKick:
		l.enqueue(KickWaiter, e)
	case server.EventDenied:
		l.enqueue(Denied, e)
	case server.EventAdminDenied:
		l.enqueue(AdminDenied, e)
	}
}

func (l *Logger) enqueue(event string, e server.Event) {
	select {
	case l.ch <- entry{event, e}:
	default:
		l.overflow.Add(1)
	}
}

// Dropped returns the number of records lost so far, because the buffer
// was full or a write failed.
func (l *Logger) Dropped() uint64 { return l.overflow.Load() + l.failed.Load() }

// Reopen writes the records observed so far to the current file, then
// closes it and opens the file at its path anew, so that a log rotator can
// rename the old file away. If the new file cannot be opened, the Logger
// keeps writing to the old one and Reopen returns the error. For a Logger
// writing to standard output or to a writer given to New, Reopen only
// flushes.
func (l *Logger) Reopen() error {
	var err error
	if cerr := l.control(func() { err = l.doReopen() }); cerr != nil {
		return cerr
	}
	return err
}

// Flush returns once every record observed before the call has been
// written (or lost to a failed write).
func (l *Logger) Flush() error { return l.control(func() {}) }

// ErrClosed is returned by Reopen and Flush after Close.
var ErrClosed = errors.New("audit: logger closed")

// control runs f on the writer goroutine after it has written everything
// buffered.
func (l *Logger) control(f func()) error {
	ran := make(chan struct{})
	select {
	case l.ctl <- func() { f(); close(ran) }:
		<-ran
		return nil
	case <-l.done:
		return ErrClosed
	}
}

// Close writes every record still buffered, closes the file (never
// standard output or a writer given to New) and stops the Logger. Records
// observed after Close are not written.
func (l *Logger) Close() error {
	l.once.Do(func() { close(l.stop) })
	<-l.done
	if l.file != nil {
		return l.file.Close()
	}
	return nil
}

// maxBatch bounds how many records one write carries.
const maxBatch = 256

func (l *Logger) run() {
	defer close(l.done)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	drain := func() {
		for {
			select {
			case en := <-l.ch:
				l.writeBatch(&buf, enc, en)
			default:
				return
			}
		}
	}
	for {
		select {
		case en := <-l.ch:
			l.writeBatch(&buf, enc, en)
		case f := <-l.ctl:
			drain()
			f()
		case <-l.stop:
			drain()
			return
		}
	}
}

// writeBatch encodes en and whatever else is already buffered, up to
// maxBatch records, and writes them in one call.
func (l *Logger) writeBatch(buf *bytes.Buffer, enc *json.Encoder, en entry) {
	buf.Reset()
	n := 1
	enc.Encode(record(en))
more:
	for n < maxBatch {
		select {
		case en := <-l.ch:
			enc.Encode(record(en))
			n++
		default:
			break more
		}
	}
	if _, err := l.w.Write(buf.Bytes()); err != nil {
		l.failed.Add(uint64(n))
		if !l.failing || err.Error() != l.lastError {
			l.log.Error("audit log write failed; records are being lost", "err", err, "lost", n)
		}
		l.failing, l.lastError = true, err.Error()
	} else if l.failing {
		l.failing = false
		l.log.Info("audit log writes succeed again", "dropped_total", l.Dropped())
	}
	if o := l.overflow.Load(); o != l.reported {
		l.log.Warn("audit buffer full; records dropped", "dropped", o-l.reported, "dropped_total", l.Dropped())
		l.reported = o
	}
}

func (l *Logger) doReopen() error {
	if l.path == "" {
		return nil
	}
	f, err := openFile(l.path)
	if err != nil {
		return err
	}
	old := l.file
	l.w, l.file = f, f
	if err := old.Close(); err != nil {
		l.log.Warn("closing the old audit log", "err", err)
	}
	return nil
}

// record converts an event to its line.
func record(en entry) Record {
	e := en.e
	r := Record{
		Time:       e.Time.UTC().Format(TimeFormat),
		Event:      en.event,
		Lock:       e.Lock,
		Identity:   e.Peer.Identity,
		RemoteAddr: e.Peer.Addr,
	}
	switch en.event {
	case Granted:
		r.Token = e.Token
		r.WaitMS = ms(e.Waited)
	case Released:
		r.Token = e.Token
		r.HeldMS = ms(e.Held)
		r.Reason = e.Reason.String()
	case ForceRelease:
		r.Token = e.Token
	}
	switch en.event {
	case ForceRelease, KickWaiter, AdminDenied:
		id := e.Admin.Identity
		r.AdminIdentity, r.AdminAddr, r.Action = &id, e.Admin.Addr, e.Action
	}
	return r
}

func ms(d time.Duration) *int64 {
	v := d.Milliseconds()
	return &v
}
