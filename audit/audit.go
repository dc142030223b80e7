// Package audit writes baton's audit log: one JSON line for every change
// of lock ownership and every administrative action. The Logger is a
// server.Observer: Observe runs under the server's table lock, so it only
// copies the event into a bounded buffer, and a single goroutine writes,
// which keeps the file in table order. Nothing waits for the log: a full
// buffer or a failed write drops records and counts them (Dropped), and a
// stalled sink is given up after Config.StallTimeout (ErrStalled).
// Torn lines and a file deleted while open are handled as
// docs/audit-log.md describes ("Torn lines", "Rotation").
package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
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
	// SessionKept: a resumable version 2 session's connection broke and
	// its claims are kept for a resume until its lease passes.
	SessionKept = "session_kept"
	// Reasserted: a version 2 re-assertion of a claim: result (adopted,
	// installed, requeued, refused, stale_ring, retry, relayed), the
	// token it keeps, or the REFUSED code.
	Reasserted = "reasserted"
	// RangeGranted: a byte-range or flock lock was granted: token,
	// wait_ms, range.
	RangeGranted = "range_granted"
	// RangeReleased: a range lock ended, wholly or in part: range (the
	// span released), reason (unlock, release, convert, session, force,
	// revoked).
	RangeReleased = "range_released"
	// RangeForceRelease: an administrator released one owner's range
	// locks on a key: admin_*, range.owner; the range_released records
	// (reason force) follow.
	RangeForceRelease = "range_force_release"
)

// RangeRecord is the range lock of a range_* record: one per request or
// owner, never one per byte.
type RangeRecord struct {
	Namespace string `json:"ns"`    // posix (fcntl) or flock
	Owner     uint64 `json:"owner"` // the lock owner within the session
	Type      string `json:"type,omitempty"`
	Start     uint64 `json:"start"`
	// Length is the number of bytes from start, 0 meaning to the end of
	// the file, as fcntl's l_len.
	Length uint64 `json:"length"`
	// Ranges is how many held ranges a release ended or cut.
	Ranges int `json:"ranges,omitempty"`
}

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
	// Result and Code of a re-assertion (reasserted): what became of it,
	// and the REFUSED code ("0x04") of a refused one.
	Result string `json:"result,omitempty"`
	Code   string `json:"code,omitempty"`
	// The claim affected (every event but admin_denied): the protocol
	// version of its session (1 or 2), the server's session id, the claim
	// id its client chose (0 for version 1), its mode (exclusive, shared,
	// semaphore) and its session's label (version 2, when set).
	Protocol int     `json:"protocol,omitempty"`
	Session  uint64  `json:"session,omitempty"`
	Claim    *uint64 `json:"claim,omitempty"`
	Mode     string  `json:"mode,omitempty"`
	Label    string  `json:"label,omitempty"`
	// A cluster node's membership and ring changes (cluster_*, see
	// ClusterEvent): the member concerned, the ring after the change
	// with its version and commit time, the Raft log index, and whether
	// the node applied it again from its data directory at start. lock,
	// identity and remote_addr are empty.
	Member      *ClusterMember `json:"member,omitempty"`
	RingVersion *uint64        `json:"ring_version,omitempty"`
	Ring        []string       `json:"ring,omitempty"`
	CommittedAt string         `json:"committed_at,omitempty"`
	LogIndex    uint64         `json:"log_index,omitempty"`
	Replayed    bool           `json:"replayed,omitempty"`
	// RelayedBy names the cluster node that relays the claim's version 2
	// session and the session's id there ("n2/17"); absent for a direct
	// one.
	RelayedBy string `json:"relayed_by,omitempty"`
	// Range is the lock of a range_* record; session and label name its
	// session, and claim is absent.
	Range *RangeRecord `json:"range,omitempty"`
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
	// StallTimeout bounds every wait for the writer: a write to a pipe
	// or FIFO, and Reopen, Flush and Close. Records that have waited this
	// long without a successful write make the sink count as stalled.
	// Zero means DefaultStallTimeout.
	StallTimeout time.Duration
}

// DefaultStallTimeout is the default Config.StallTimeout.
const DefaultStallTimeout = 10 * time.Second

// Logger writes the audit log. Create it with New or Open, install it as
// (one of) the server's observers, and Close it after the server has shut
// down.
type Logger struct {
	path  string // "" for New
	log   *slog.Logger
	stall time.Duration

	ch   chan entry
	ctl  chan func() // run by the writer goroutine after a flush
	stop chan struct{}
	done chan struct{}
	once sync.Once

	overflow atomic.Uint64 // dropped because the buffer was full
	failed   atomic.Uint64 // lost in failed or short writes
	orphaned atomic.Uint64 // written to a file that had been deleted

	// waitingSince is when the oldest record not yet written started to
	// wait for the writer (unix nanoseconds), 0 when none waits.
	waitingSince atomic.Int64

	// Owned by the writer goroutine.
	w         io.Writer
	file      *os.File // nil when w is not a file we opened
	reported  uint64   // overflow already logged
	failing   bool     // the last write failed
	lastError string
	needNL    bool  // the output ends inside a line: start the next write with '\n'
	ends      []int // end offsets of the records in the batch buffer
	unlinked  bool  // the open file has been deleted
}

// entry is an event as Observe copies it: no encoding under the table
// lock.
type entry struct {
	event   string
	e       server.Event
	cluster *ClusterEvent // cluster_* records
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
	l := start(f, f, path, cfg)
	return l, nil
}

func openFile(path string) (*os.File, error) {
	flags := os.O_WRONLY | os.O_APPEND | os.O_CREATE
	if fi, err := os.Stat(path); err == nil && fi.Mode()&os.ModeNamedPipe != 0 {
		// Opening a FIFO without a reader would block for good; without
		// O_NONBLOCK it fails at once (ENXIO) instead, and writes go
		// through the poller, with deadlines.
		flags |= syscall.O_NONBLOCK
	}
	f, err := os.OpenFile(path, flags, 0o640)
	if errors.Is(err, syscall.ENXIO) {
		return nil, fmt.Errorf("%w (a FIFO with no reader)", err)
	}
	return f, err
}

// endsInsideLine reports whether f is a regular file whose last byte is
// not a newline: a torn record the next write must not extend.
func endsInsideLine(f *os.File) bool {
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() == 0 {
		return false
	}
	r, err := os.Open(f.Name())
	if err != nil {
		return false
	}
	defer r.Close()
	b := make([]byte, 1)
	if _, err := r.ReadAt(b, fi.Size()-1); err != nil {
		return false
	}
	return b[0] != '\n'
}

func start(w io.Writer, f *os.File, path string, cfg Config) *Logger {
	if cfg.Buffer <= 0 {
		cfg.Buffer = DefaultBuffer
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.StallTimeout <= 0 {
		cfg.StallTimeout = DefaultStallTimeout
	}
	l := &Logger{
		path:  path,
		log:   cfg.Logger,
		stall: cfg.StallTimeout,
		ch:    make(chan entry, cfg.Buffer),
		ctl:   make(chan func()),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
		w:     w,
		file:  f,
	}
	if f != nil {
		l.needNL = endsInsideLine(f)
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
	case server.EventSessionKept:
		l.enqueue(SessionKept, e)
	case server.EventReasserted:
		l.enqueue(Reasserted, e)
	case server.EventRangeGranted:
		l.enqueue(RangeGranted, e)
	case server.EventRangeReleased:
		l.enqueue(RangeReleased, e)
	case server.EventRangeForceRelease:
		l.enqueue(RangeForceRelease, e)
	}
}

func (l *Logger) enqueue(event string, e server.Event) {
	select {
	case l.ch <- entry{event: event, e: e}:
	default:
		l.overflow.Add(1)
	}
}

// Dropped returns the number of records lost so far: because the buffer
// was full, a write failed or was cut short, or the file had been deleted.
func (l *Logger) Dropped() uint64 {
	return l.overflow.Load() + l.failed.Load() + l.orphaned.Load()
}

// Waiting returns how long the oldest record not yet written has waited
// for a successful write; 0 when none waits. A sink that stalls (a FIFO
// nobody reads, a hung mount, a full disk under steady traffic) makes it
// grow.
func (l *Logger) Waiting() time.Duration {
	since := l.waitingSince.Load()
	if since == 0 {
		return 0
	}
	return max(0, time.Since(time.Unix(0, since)))
}

// Stalled returns an error when records have waited longer than the
// stall timeout for a successful write, nil otherwise. It suits a
// readiness check.
func (l *Logger) Stalled() error {
	if w := l.Waiting(); w > l.stall {
		return fmt.Errorf("audit log stalled: the writer has made no progress for %v", w.Round(time.Millisecond))
	}
	return nil
}

// ErrStalled is returned by Reopen, Flush and Close when the writer did
// not finish within the stall timeout (it goes on in the background).
var ErrStalled = errors.New("audit: the writer is stalled")

// Reopen writes the records observed so far to the current file, then
// closes it and opens the file at its path anew, so that a log rotator can
// rename the old file away. If the new file cannot be opened, the Logger
// keeps writing to the old one and Reopen returns the error. For a Logger
// writing to standard output or to a writer given to New, Reopen only
// flushes.
//
// It waits at most the stall timeout; then it returns ErrStalled and the
// reopen happens when the writer gets to it.
func (l *Logger) Reopen() error {
	errc := make(chan error, 1)
	if err := l.control(func() { errc <- l.doReopen() }); err != nil {
		return err
	}
	return <-errc
}

// Flush returns once every record observed before the call has been
// written (or lost to a failed write), or ErrStalled after the stall
// timeout.
func (l *Logger) Flush() error { return l.control(func() {}) }

// ErrClosed is returned by Reopen and Flush after Close.
var ErrClosed = errors.New("audit: logger closed")

// control runs f on the writer goroutine after it has written everything
// buffered, waiting at most the stall timeout for it.
func (l *Logger) control(f func()) error {
	ran := make(chan struct{})
	timer := time.NewTimer(l.stall)
	defer timer.Stop()
	select {
	case l.ctl <- func() { f(); close(ran) }:
	case <-l.done:
		return ErrClosed
	case <-timer.C:
		return ErrStalled
	}
	select {
	case <-ran:
		return nil
	case <-timer.C:
		return ErrStalled
	}
}

// Close writes every record still buffered, closes the file (never
// standard output or a writer given to New) and stops the Logger. Records
// observed after Close are not written. When the writer does not finish
// within the stall timeout, Close returns ErrStalled with the number of
// records still buffered, which are lost, and leaves the file to the
// process's exit.
func (l *Logger) Close() error {
	l.once.Do(func() { close(l.stop) })
	timer := time.NewTimer(l.stall)
	defer timer.Stop()
	select {
	case <-l.done:
	case <-timer.C:
		return fmt.Errorf("%w: gave up after %v with %d records not written", ErrStalled, l.stall, len(l.ch))
	}
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
	l.ends = l.ends[:0]
	if l.needNL {
		buf.WriteByte('\n')
	}
	enc.Encode(record(en))
	l.ends = append(l.ends, buf.Len())
more:
	for len(l.ends) < maxBatch {
		select {
		case en := <-l.ch:
			enc.Encode(record(en))
			l.ends = append(l.ends, buf.Len())
		default:
			break more
		}
	}
	l.waitingSince.CompareAndSwap(0, time.Now().UnixNano())
	b := buf.Bytes()
	n, err := l.write(b)
	written := 0
	for _, end := range l.ends {
		if end <= n {
			written++
		}
	}
	if n > 0 {
		l.needNL = b[n-1] != '\n'
	}
	if err != nil {
		lost := len(l.ends) - written
		l.failed.Add(uint64(lost))
		if !l.failing || err.Error() != l.lastError {
			l.log.Error("audit log write failed; records are being lost", "err", err, "lost", lost, "written", written)
		}
		l.failing, l.lastError = true, err.Error()
		if len(l.ch) == 0 {
			l.waitingSince.Store(0) // nothing waits any more; what failed is counted
		}
	} else {
		l.waitingSince.Store(0)
		if l.failing {
			l.failing = false
			l.log.Info("audit log writes succeed again", "dropped_total", l.Dropped())
		}
	}
	if written > 0 {
		l.checkLinked(written)
	}
	if o := l.overflow.Load(); o != l.reported {
		l.log.Warn("audit buffer full; records dropped", "dropped", o-l.reported, "dropped_total", l.Dropped())
		l.reported = o
	}
}

// write writes p, with a deadline of the stall timeout where the output
// supports one (pipes and FIFOs, not regular files).
func (l *Logger) write(p []byte) (int, error) {
	if f, ok := l.w.(*os.File); ok {
		if f.SetWriteDeadline(time.Now().Add(l.stall)) == nil {
			defer f.SetWriteDeadline(time.Time{})
		}
	}
	return l.w.Write(p)
}

// checkLinked counts the n records just written as dropped when the file
// has been deleted, and tries to create it at its path again.
func (l *Logger) checkLinked(n int) {
	if l.file == nil || !deleted(l.file) {
		l.unlinked = false
		return
	}
	l.orphaned.Add(uint64(n))
	f, err := openFile(l.path)
	if err != nil {
		if !l.unlinked {
			l.log.Error("the audit log file was deleted and cannot be created again; records are being lost",
				"path", l.path, "err", err, "lost", n)
		}
		l.unlinked = true
		return
	}
	l.log.Error("the audit log file was deleted; created it again", "path", l.path, "lost", n,
		"dropped_total", l.Dropped())
	l.unlinked = false
	l.switchTo(f)
}

// switchTo makes f the output and closes the old file.
func (l *Logger) switchTo(f *os.File) {
	old := l.file
	l.w, l.file = f, f
	l.needNL = endsInsideLine(f)
	if err := old.Close(); err != nil {
		l.log.Warn("closing the old audit log", "err", err)
	}
}

func (l *Logger) doReopen() error {
	if l.path == "" {
		return nil
	}
	// An open that hangs (a hung network mount) stalls the writer like
	// a write that hangs: let Waiting see it.
	now := time.Now().UnixNano()
	if l.waitingSince.CompareAndSwap(0, now) {
		defer l.waitingSince.CompareAndSwap(now, 0)
	}
	f, err := openFile(l.path)
	if err != nil {
		return err
	}
	l.switchTo(f)
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
		RelayedBy:  e.Peer.Via,
	}
	if en.cluster != nil {
		clusterRecord(&r, en.cluster)
		return r
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
	case Reasserted:
		r.Token, r.Result = e.Token, e.Action
		if e.Code != 0 {
			r.Code = fmt.Sprintf("0x%02x", uint8(e.Code))
		}
	}
	if rg := e.Range; rg != nil {
		r.Protocol, r.Session, r.Label = int(e.Protocol), uint64(e.Session), e.Label
		r.Range = &RangeRecord{Namespace: rg.Namespace(), Owner: rg.Owner, Type: rg.Type, Start: rg.Start,
			Length: rangeLength(rg.Start, rg.End), Ranges: rg.Ranges}
		switch en.event {
		case RangeGranted:
			r.Token, r.WaitMS = e.Token, ms(e.Waited)
		case RangeReleased:
			r.Reason = e.Action
		case RangeForceRelease:
			id := e.Admin.Identity
			r.AdminIdentity, r.AdminAddr = &id, e.Admin.Addr
			r.Range.Type, r.Range.Start, r.Range.Length = "", 0, 0
		}
		return r
	}
	if en.event == SessionKept {
		r.Protocol, r.Session, r.Label = int(e.Protocol), uint64(e.Session), e.Label
		return r
	}
	if e.Session != 0 {
		claim := uint64(e.Claim)
		r.Protocol, r.Session, r.Claim, r.Label = int(e.Protocol), uint64(e.Session), &claim, e.Label
		if e.Mode != 0 {
			r.Mode = e.Mode.String()
		}
	}
	switch en.event {
	case ForceRelease, KickWaiter, AdminDenied:
		id := e.Admin.Identity
		r.AdminIdentity, r.AdminAddr, r.Action = &id, e.Admin.Addr, e.Action
	}
	return r
}

// rangeLength is fcntl's l_len of the bytes start..end: 0 to the end of
// the file.
func rangeLength(start, end uint64) uint64 {
	if end >= math.MaxInt64 || end < start {
		return 0
	}
	return end - start + 1
}

func ms(d time.Duration) *int64 {
	v := d.Milliseconds()
	return &v
}
