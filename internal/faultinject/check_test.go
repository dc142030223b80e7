//go:build linux

package faultinject_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/batonlock/baton/audit"
	"github.com/batonlock/baton/internal/faultinject"
)

// history builds a synthetic run for Check: grants, writes and the audit
// log, with times in milliseconds.
type history struct {
	in  faultinject.Input
	seq int64
	aud []audit.Record
}

func newHistory() *history {
	return &history{in: faultinject.Input{Killed: map[string]int64{}}}
}

func (h *history) rec(ev, w string, tok uint64, ms int64) *faultinject.Record {
	h.in.Records = append(h.in.Records, faultinject.Record{Ev: ev, W: w, Tok: tok, T: ms * 1e6})
	return &h.in.Records[len(h.in.Records)-1]
}

// hold logs an interval of w with tok from start to end, with one
// accepted write in it, and the audit grant and release.
func (h *history) hold(w string, tok uint64, start, end int64) {
	h.rec("acquired", w, tok, start)
	h.write(w, tok, start+1, true)
	h.rec("released", w, tok, end)
	h.aud = append(h.aud, audit.Record{Event: audit.Granted, Lock: "r", Token: tok}, audit.Record{Event: audit.Released, Lock: "r", Token: tok})
}

// write logs a write; an accepted one goes into the database too.
func (h *history) write(w string, tok uint64, ms int64, ok bool) *faultinject.Record {
	r := h.rec("write", w, tok, ms)
	r.T0, r.OK = r.T, ok
	if ok {
		h.seq++
		r.Seq = h.seq
		h.in.DB = append(h.in.DB, faultinject.DBWrite{Seq: h.seq, Token: tok, Worker: w})
		h.in.DBWrites = h.seq
	}
	return r
}

func (h *history) fault(kind, w string, from, to int64) {
	h.in.Faults = append(h.in.Faults, faultinject.Fault{Kind: kind, Worker: w, Start: from * 1e6, End: to * 1e6})
}

func auditData(recs []audit.Record) []byte {
	var b []byte
	for _, r := range recs {
		line, _ := json.Marshal(r)
		b = append(append(b, line...), '\n')
	}
	return b
}

func (h *history) check() *faultinject.Report {
	in := h.in
	if in.Audit == nil {
		in.Audit = []faultinject.AuditLog{{Name: "audit", Data: auditData(h.aud)}}
	}
	return faultinject.Check(in)
}

// wantViolation requires exactly one violation, containing substr.
func wantViolation(t *testing.T, r *faultinject.Report, substr string) {
	t.Helper()
	if len(r.Violations) != 1 || !strings.Contains(r.Violations[0], substr) {
		t.Fatalf("violations %q; want one containing %q", r.Violations, substr)
	}
}

func wantClean(t *testing.T, r *faultinject.Report) {
	t.Helper()
	if len(r.Violations) != 0 {
		t.Fatalf("violations: %q", r.Violations)
	}
}

func TestCheckClean(t *testing.T) {
	h := newHistory()
	h.hold("a", 10, 0, 10)
	h.hold("b", 11, 10, 20)
	h.hold("a", 12, 21, 30)
	r := h.check()
	wantClean(t, r)
	if r.Intervals != 3 || r.Grants != 3 || r.Handovers != 2 || r.Accepted != 3 || r.Workers != 2 {
		t.Fatalf("report:\n%s", r)
	}
}

func TestCheckStaleWriteAccepted(t *testing.T) {
	h := newHistory()
	h.hold("a", 10, 0, 10)
	h.hold("b", 11, 10, 20)
	// The database accepted a's token 10 after b's 11: a broken fence.
	h.in.DB = append(h.in.DB, faultinject.DBWrite{Seq: 3, Token: 10, Worker: "a"})
	h.in.DBWrites = 3
	h.in.Killed["a"] = 25 // so that a's not logging it is not the finding
	wantViolation(t, h.check(), "STALE WRITE ACCEPTED")
}

func TestCheckDatabaseAndLogsAgree(t *testing.T) {
	h := newHistory()
	h.hold("a", 10, 0, 10)
	h.in.DB = append(h.in.DB, faultinject.DBWrite{Seq: 2, Token: 10, Worker: "a"})
	h.in.DBWrites = 2
	wantViolation(t, h.check(), "never logged it")

	h = newHistory()
	h.hold("a", 10, 0, 10)
	h.in.DBWrites = 2
	wantViolation(t, h.check(), "fence row counts 2")

	h = newHistory()
	h.hold("a", 10, 0, 10)
	h.in.DB = append(h.in.DB, faultinject.DBWrite{Seq: 2, Token: 11, Worker: "b"})
	h.in.DBWrites = 2
	h.in.Killed["b"] = 0
	wantViolation(t, h.check(), "never granted")
}

func TestCheckOverlap(t *testing.T) {
	h := newHistory()
	h.hold("a", 10, 0, 15)
	h.hold("b", 11, 10, 20)
	h.write("a", 10, 14, false).Late = true // a's late write, refused
	wantViolation(t, h.check(), "OVERLAP")

	// The same, but a was frozen: excused and counted.
	h.fault(faultinject.FaultFreeze, "a", 5, 14)
	r := h.check()
	wantClean(t, r)
	if r.Overlaps[faultinject.FaultFreeze] != 1 {
		t.Fatalf("overlaps %v, want one excused by a freeze", r.Overlaps)
	}

	// A fault of another worker, or of a kind that cannot cut a holder
	// off, or outside a's interval, excuses nothing.
	for _, f := range []faultinject.Fault{
		{Kind: faultinject.FaultFreeze, Worker: "b", Start: 5e6, End: 14e6},
		{Kind: faultinject.FaultDelay, Worker: "a", Start: 5e6, End: 14e6},
		{Kind: faultinject.FaultBlackhole, Worker: "a", Start: 16e6, End: 18e6},
	} {
		h.in.Faults = []faultinject.Fault{f}
		wantViolation(t, h.check(), "OVERLAP")
	}
}

func TestCheckGrantOrder(t *testing.T) {
	// b's higher token starts before a's lower one ends: the grant went
	// to b while a still held, whichever started first.
	h := newHistory()
	h.rec("acquired", "b", 11, 0)
	h.rec("released", "b", 11, 10)
	h.rec("acquired", "a", 10, 5)
	h.rec("released", "a", 10, 20)
	h.aud = []audit.Record{
		{Event: audit.Granted, Lock: "r", Token: 10}, {Event: audit.Released, Lock: "r", Token: 10},
		{Event: audit.Granted, Lock: "r", Token: 11}, {Event: audit.Released, Lock: "r", Token: 11},
	}
	wantViolation(t, h.check(), "OVERLAP")

	h = newHistory()
	h.hold("a", 10, 0, 10)
	h.hold("b", 10, 10, 20)
	h.aud = h.aud[:2]
	wantViolation(t, h.check(), "granted to both")
}

func TestCheckIntervalEnds(t *testing.T) {
	h := newHistory()
	h.rec("acquired", "a", 10, 0)
	h.aud = []audit.Record{{Event: audit.Granted, Lock: "r", Token: 10}, {Event: audit.Released, Lock: "r", Token: 10}}
	wantViolation(t, h.check(), "never ended")

	// Killed: it ended at the kill (or its last record), before b began.
	h.in.Killed["a"] = 8e6
	h.hold("b", 11, 9, 20)
	wantClean(t, h.check())
	h.rec("check", "a", 10, 12) // it was still alive at 12ms
	wantViolation(t, h.check(), "OVERLAP")

	// A loss ends the interval even if fn returns later.
	h = newHistory()
	h.hold("a", 10, 0, 30)
	h.rec("lost", "a", 10, 9)
	h.hold("b", 11, 10, 20)
	wantClean(t, h.check())
}

func TestCheckRejectedWrites(t *testing.T) {
	base := func() *history {
		h := newHistory()
		h.hold("a", 10, 0, 10)
		h.hold("b", 11, 10, 20)
		return h
	}
	// A refused write of a live, unharmed holder: the lock moved under it.
	h := base()
	h.write("a", 10, 9, false)
	wantViolation(t, h.check(), "still had the lock confirmed")

	// The message tells when the holder learnt of its loss, if ever.
	h = base()
	h.write("a", 10, 9, false).T0 = 8e6
	h.rec("lost", "a", 10, 9).Err = "baton: server error 0x01 (server shutting down)"
	wantViolation(t, h.check(), `loss, "baton: server error 0x01 (server shutting down)", logged at +1.000ms from the write's send`)

	// The same write, from a holder cut off meanwhile: the fence at work.
	h = base()
	h.write("a", 10, 15, false)
	h.fault(faultinject.FaultBlackhole, "a", 5, 16)
	r := h.check()
	wantClean(t, r)
	if r.Rejected != 1 || r.RejectedBy[faultinject.FaultBlackhole] != 1 {
		t.Fatalf("report:\n%s", r)
	}

	// From a holder that had been told it lost the lock.
	h = base()
	h.write("a", 10, 15, false).Late = true
	r = h.check()
	wantClean(t, r)
	if r.Late != 1 || r.RejectedBy["lost without a fault"] != 1 {
		t.Fatalf("report:\n%s", r)
	}

	// Refused with no higher token ever accepted: not a fence at all.
	h = base()
	h.write("b", 11, 15, false).Late = true
	wantViolation(t, h.check(), "no higher token")

	// Faults that cut holders off, and no write refused: no bite.
	h = base()
	h.fault(faultinject.FaultFreeze, "a", 1, 2)
	wantViolation(t, h.check(), "did not bite")
}

func TestCheckAudit(t *testing.T) {
	g := func(tok uint64) audit.Record { return audit.Record{Event: audit.Granted, Lock: "r", Token: tok} }
	rel := func(tok uint64) audit.Record { return audit.Record{Event: audit.Released, Lock: "r", Token: tok} }
	run := func(files ...faultinject.AuditLog) *faultinject.Report {
		h := newHistory()
		h.hold("a", 10, 0, 10)
		h.in.Audit = files
		return h.check()
	}
	file := func(crashed bool, recs ...audit.Record) faultinject.AuditLog {
		return faultinject.AuditLog{Name: fmt.Sprint("audit", len(recs)), Data: auditData(recs), Crashed: crashed}
	}

	wantClean(t, run(file(false, g(10), rel(10), g(12), rel(12))))
	wantViolation(t, run(file(false, g(10), g(12), rel(12))), "while held")
	wantViolation(t, run(file(false, g(10), rel(9))), "released (token 9)")
	wantViolation(t, run(file(false, g(10), rel(10), rel(10))), "released (token 10)")
	wantViolation(t, run(file(false, g(12), rel(12), g(10), rel(10))), "granted after")
	wantViolation(t, run(file(false, g(10), rel(10), g(12))), "ends with lock")
	wantViolation(t, run(file(false, g(9), rel(9))), "in no audit log")
	wantViolation(t, run(file(false, g(10), rel(10)), file(false, g(8), rel(8))), "previous server")

	// A killed server: its log may end anywhere, even within a line, and
	// the grants it lost (between its last record and the next server's
	// first) are excused.
	crashed := file(true, g(5), rel(5))
	crashed.Data = append(crashed.Data, `{"event":"gra`...)
	wantClean(t, run(crashed, file(false, g(20), rel(20))))
	wantViolation(t, run(file(false, g(5), rel(5)), file(false, g(20), rel(20))), "in no audit log")
	wantViolation(t, run(file(true, g(12), rel(12)), file(false, g(20), rel(20))), "in no audit log")
	broken := file(false, g(10), rel(10))
	broken.Data = append(broken.Data, `{"event":"gra`...)
	wantViolation(t, run(broken), "line 3")
}

// holdMode is hold for a claim of either mode: a shared holder's
// operation is a read, and the audit records the mode and version 2.
func (h *history) holdMode(w string, tok uint64, shared bool, start, end int64) {
	h.rec("acquired", w, tok, start).Shared = shared
	h.write(w, tok, start+1, true).Shared = shared
	h.in.DB[len(h.in.DB)-1].Shared = shared
	h.rec("released", w, tok, end)
	mode := "exclusive"
	if shared {
		mode = "shared"
	}
	h.aud = append(h.aud, audit.Record{Event: audit.Granted, Lock: "r", Token: tok, Protocol: 2, Mode: mode},
		audit.Record{Event: audit.Released, Lock: "r", Token: tok, Protocol: 2, Mode: mode})
}

// v2Run is a clean version 2 run: a v1 writer (token 10), then two
// readers of one session at once (11, 12), then a v2 writer (13). The
// audit log is in grant order.
func v2Run() *history {
	h := newHistory()
	h.hold("w1", 10, 0, 10)
	h.holdMode("s1#1", 11, true, 10, 30)
	h.holdMode("s1#2", 12, true, 12, 25)
	h.holdMode("s2#0", 13, false, 30, 40)
	g := func(tok uint64, mode string) audit.Record {
		return audit.Record{Event: audit.Granted, Lock: "r", Token: tok, Protocol: 2, Mode: mode}
	}
	rel := func(tok uint64) audit.Record {
		return audit.Record{Event: audit.Released, Lock: "r", Token: tok, Protocol: 2}
	}
	h.aud = []audit.Record{
		{Event: audit.Granted, Lock: "r", Token: 10}, {Event: audit.Released, Lock: "r", Token: 10},
		g(11, "shared"), g(12, "shared"), rel(12), rel(11), g(13, "exclusive"), rel(13),
	}
	return h
}

func TestCheckV2Clean(t *testing.T) {
	r := v2Run().check()
	wantClean(t, r)
	if r.Reads != 2 || r.ReaderPairs != 1 || r.SessionPairs != 1 || r.Accepted != 4 || r.GrantsBy["v2 shared"] != 2 || r.GrantsBy["v1 exclusive"] != 1 || r.GrantsBy["v2 exclusive"] != 1 {
		t.Fatalf("report:\n%s", r)
	}
}

// The fence without the W rule: a reader older than the last accepted
// writer got in.
func TestCheckStaleReadAccepted(t *testing.T) {
	h := v2Run()
	h.in.DB = append(h.in.DB, faultinject.DBWrite{Seq: 5, Token: 12, Worker: "s1#2", Shared: true})
	h.in.DBWrites = 5
	h.in.Killed["s1"] = 50
	wantViolation(t, h.check(), "STALE READ ACCEPTED")

	// A write older than a read that got in is stale too (the M rule).
	h = v2Run()
	h.in.DB = append(h.in.DB, faultinject.DBWrite{Seq: 5, Token: 10, Worker: "w1"})
	h.in.DBWrites = 5
	h.in.Killed["w1"] = 50
	wantViolation(t, h.check(), "STALE WRITE ACCEPTED")

	// A read from an exclusive claim, or a write from a shared one.
	h = v2Run()
	h.in.DB[3].Shared = true
	wantViolation(t, h.check(), "a read true under a shared claim false")
}

func TestCheckV2Overlap(t *testing.T) {
	// The writer begins while a reader still holds.
	h := v2Run()
	for i := range h.in.Records {
		if r := &h.in.Records[i]; r.Ev == "released" && r.W == "s1#1" {
			r.T = 35e6
		}
	}
	wantViolation(t, h.check(), "OVERLAP of a reader and a writer")

	// Excused when the reader's session was frozen: the fault names the
	// process, and covers every claim actor of it. Its late read is
	// refused (W is 13).
	h.fault(faultinject.FaultFreeze, "s1", 20, 34)
	h.write("s1#1", 11, 34, false).Shared = true
	wantClean(t, h.check())

	// Two exclusive holders of version 2 sessions.
	h = newHistory()
	h.holdMode("s1#0", 10, false, 0, 15)
	h.holdMode("s2#0", 11, false, 10, 20)
	wantViolation(t, h.check(), "OVERLAP of two exclusive holders")
}

// A holder whose connection was cut, that overlapped its successor and
// never saw the loss of its claim: a worker ignoring Lost.
func TestCheckIgnoredLoss(t *testing.T) {
	h := newHistory()
	h.holdMode("s1#1", 10, true, 0, 15)
	h.holdMode("s2#0", 11, false, 10, 20)
	h.write("s1#1", 10, 14, false).Shared = true
	h.fault(faultinject.FaultReset, "s1", 5, 14)
	wantViolation(t, h.check(), "IGNORED LOSS")

	h.rec("lost", "s1#1", 10, 6)
	h.rec("released", "s1#1", 10, 15)
	r := h.check()
	wantClean(t, r)
	if r.ReadsRef != 1 || r.RejectedBy[faultinject.FaultReset] != 1 {
		t.Fatalf("report:\n%s", r)
	}
}

func TestCheckAuditModes(t *testing.T) {
	g := func(tok uint64, mode string) audit.Record {
		return audit.Record{Event: audit.Granted, Lock: "r", Token: tok, Protocol: 2, Mode: mode}
	}
	rel := func(tok uint64) audit.Record { return audit.Record{Event: audit.Released, Lock: "r", Token: tok} }
	run := func(recs ...audit.Record) *faultinject.Report {
		h := newHistory()
		h.hold("a", 10, 0, 10)
		h.in.Audit = []faultinject.AuditLog{{Name: "audit", Data: auditData(recs)}}
		return h.check()
	}
	wantClean(t, run(g(10, "shared"), g(11, "shared"), rel(10), rel(11)))
	wantViolation(t, run(g(10, "shared"), g(11, "exclusive"), rel(11)), "granted (token 11, exclusive) while held (token 10, shared)")
	wantViolation(t, run(g(10, "exclusive"), g(11, "shared"), rel(11)), "granted (token 11, shared) while held (token 10, exclusive)")
	wantViolation(t, run(g(10, "shared"), g(11, "shared"), rel(10)), "ends with lock")
}

// A holder frozen between its request and the start of fn, that started
// fn after its successor's grant: it could not know, as when frozen
// during fn. Before its request, the freeze excuses nothing.
func TestCheckFrozenBeforeFn(t *testing.T) {
	h := newHistory()
	h.rec("request", "s1#1", 0, 0)
	h.hold("w1", 11, 5, 20)
	h.rec("acquired", "s1#1", 10, 25).Shared = true
	h.rec("released", "s1#1", 10, 26)
	h.aud = []audit.Record{
		{Event: audit.Granted, Lock: "r", Token: 10, Protocol: 2, Mode: "shared"}, {Event: audit.Released, Lock: "r", Token: 10},
		{Event: audit.Granted, Lock: "r", Token: 11}, {Event: audit.Released, Lock: "r", Token: 11},
	}
	h.fault(faultinject.FaultFreeze, "s1", 1, 24)
	// Its read, after w1's write, is refused.
	h.write("s1#1", 10, 25, false).Shared = true
	r := h.check()
	wantClean(t, r)
	if r.Overlaps[faultinject.FaultFreeze] != 1 {
		t.Fatalf("report:\n%s", r)
	}
	h.in.Records[0].T = 2e6 // requested after the freeze began: still within
	wantClean(t, h.check())
	h.in.Faults[0].End = 1.5e6 // the freeze ended before the request
	if r := h.check(); len(r.Violations) == 0 || !strings.Contains(r.Violations[0], "OVERLAP of a reader and a writer") {
		t.Fatalf("violations %q; want an overlap first", r.Violations)
	}
}

// Property 5: an operation of a claim granted before its session ended,
// sent after the session-lost record with its context alive.
func TestCheckClaimOutlivedSession(t *testing.T) {
	h := newHistory()
	h.holdMode("s1#1", 10, true, 0, 30)
	h.rec("lost", "s1#1", 10, 10).Err = "baton: heartbeat timeout"
	h.rec("session-lost", "s1", 0, 10).Err = "baton: heartbeat timeout"
	late := h.write("s1#1", 10, 12, true)
	late.Shared, late.Late = true, true
	h.in.DB[len(h.in.DB)-1].Shared = true
	r := h.check()
	wantClean(t, r)
	if r.SessionLosses != 1 || r.LostClaims != 1 || r.MaxLostClaims != 1 {
		t.Fatalf("report:\n%s", r)
	}
	h.in.Records[len(h.in.Records)-1].Late = false
	wantViolation(t, h.check(), "CLAIM OUTLIVED ITS SESSION")

	// Sent before the end, or by the next session's claim: fine.
	h.in.Records[len(h.in.Records)-1].T0 = 9e6
	wantClean(t, h.check())
}
