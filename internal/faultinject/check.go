//go:build linux

package faultinject

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/batonlock/baton/audit"
)

// Fault kinds.
const (
	FaultDelay     = "delay"          // the proxy delays a worker's traffic
	FaultFreeze    = "freeze"         // SIGSTOP, later SIGCONT, of a holder
	FaultBlackhole = "blackhole"      // the proxy drops a holder's traffic
	FaultReset     = "reset"          // the proxy resets a holder's connection
	FaultKill      = "kill"           // SIGKILL of a holder
	FaultRestart   = "server-restart" // SIGTERM of the server, then a new one
	FaultCrash     = "server-crash"   // SIGKILL of the server, then a new one
)

// cutsOff reports whether a fault of this kind can leave a holder at work
// after the server has given its lock to someone else: the holder cannot
// learn in time that it lost the lock (frozen), or learns it only through
// a connection the fault has cut. Only such a holder may overlap its
// successor, and only its writes may be refused by the fence.
func cutsOff(kind string) bool {
	return kind == FaultFreeze || kind == FaultBlackhole || kind == FaultReset
}

// Fault is one fault the test injected, on Worker (empty for the server),
// from Start to End (Mono).
type Fault struct {
	Kind       string
	Worker     string
	Start, End int64
}

// DBWrite is a row of fence_log: an accepted write, or with Shared an
// accepted read.
type DBWrite struct {
	Seq    int64
	Token  uint64
	Worker string
	Shared bool
}

// AuditLog is the audit file of one server process.
type AuditLog struct {
	Name    string
	Data    []byte
	Crashed bool // the server was killed: the end of the file may be lost
}

// Input is everything a run leaves behind.
type Input struct {
	Records  []Record         // every worker's log, in any order across workers
	Killed   map[string]int64 // SIGKILLed worker → Mono just before the kill
	Faults   []Fault
	DB       []DBWrite // fence_log
	DBWrites int64     // fence.writes at the end
	Audit    []AuditLog
}

// Report is what Check found. Violations lists every broken property;
// the other fields are the figures of the run.
type Report struct {
	Workers    int
	Intervals  int            // ownership intervals the workers logged
	Grants     int            // "granted" records in the audit logs
	GrantsBy   map[string]int // of which, by protocol version and mode ("v2 shared")
	Handovers  int            // grants that followed a release of the same lock
	Accepted   int            // writes (and reads) the fence accepted
	Rejected   int            // writes (and reads) the fence refused: stale tokens
	Reads      int            // of the accepted, reads under a shared claim
	ReadsRef   int            // of the refused, reads under a shared claim
	Failed     int            // writes without an answer from the database
	Late       int            // writes sent after the holder's context was cancelled
	RejectedBy map[string]int // refused writes, by the fault their holder suffered
	Overlaps   map[string]int // intervals that overlapped a later one, by the fault that excuses them
	// Pairs of intervals that overlapped legitimately: two shared
	// holders at once (ReaderPairs), and two claims of one session at
	// once (SessionPairs, shared ones in this suite).
	ReaderPairs  int
	SessionPairs int
	// Version 2 sessions that ended while the worker ran on (not closed
	// by it), and the claims they held then, whose work they ended.
	SessionLosses int
	LostClaims    int
	MaxLostClaims int            // the most claims one session's loss ended
	Faults        map[string]int // faults injected, by kind

	Violations []string
}

func (r *Report) violate(format string, args ...any) {
	r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
}

// String summarizes the report in a few lines.
func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "workers %d, ownership intervals %d, audit grants %d (%s), handovers %d\n", r.Workers, r.Intervals, r.Grants, formatCounts(r.GrantsBy), r.Handovers)
	fmt.Fprintf(&b, "faults injected: %s\n", formatCounts(r.Faults))
	fmt.Fprintf(&b, "writes and reads: %d accepted (%d reads), %d stale rejected by the fence (%d reads; %s), %d failed; %d sent after the holder had lost the lock\n",
		r.Accepted, r.Reads, r.Rejected, r.ReadsRef, formatCounts(r.RejectedBy), r.Failed, r.Late)
	fmt.Fprintf(&b, "holders whose ownership overlapped a successor's, all frozen or cut off: %s\n", formatCounts(r.Overlaps))
	fmt.Fprintf(&b, "pairs of shared holders at once: %d, of them claims of one session: %d\n", r.ReaderPairs, r.SessionPairs)
	fmt.Fprintf(&b, "version 2 sessions lost: %d, ending %d held claims (at most %d at once)\n", r.SessionLosses, r.LostClaims, r.MaxLostClaims)
	fmt.Fprintf(&b, "violations: %d", len(r.Violations))
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "\n  - %s", v)
	}
	return b.String()
}

func formatCounts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// interval is one worker's ownership of one grant, on the shared clock.
type interval struct {
	w          string
	tok        uint64
	shared     bool // a shared claim: overlaps other shared ones
	lost       bool // the worker logged the loss of the claim
	lostErr    string
	req        int64 // when the claim was requested (start if not logged)
	start, end int64 // from fn's start to the first of: loss seen, fn's return, death
}

// Check checks the properties of a run:
//
//  1. the fence: in commit order, no write was accepted with a token lower
//     than any operation accepted before it (M), and no read with a token
//     not above the last accepted write's (W); the database's record and
//     the workers' agree, and only holders wrote (reads only shared ones);
//  2. mutual exclusion on the shared monotonic clock: no two conflicting
//     ownership intervals overlap (two shared ones may), and grants
//     follow token order, except where the earlier holder was frozen or
//     cut off during its interval (and, when cut off, saw its loss);
//  3. every write the fence refused came from a holder that was frozen or
//     cut off, or that had already been told it lost the lock, and some
//     were refused whenever such faults were injected;
//  4. the audit log of every server process grants a lock only to claims
//     that conflict with none of its holders, releases only what it
//     granted, with increasing tokens, and records every grant a worker
//     saw (except in the lost tail of a killed server's log);
//  5. every claim of a version 2 session ends with the session: no
//     operation is sent with its context alive after its session ended.
func Check(in Input) *Report {
	r := &Report{RejectedBy: map[string]int{}, Overlaps: map[string]int{}, Faults: map[string]int{}, GrantsBy: map[string]int{}}
	for _, f := range in.Faults {
		r.Faults[f.Kind]++
	}
	ivs := intervals(in, r)
	checkFence(in, ivs, r)
	checkExclusion(in, ivs, r)
	checkWrites(in, ivs, r)
	checkSessions(in, ivs, r)
	checkAudit(in, ivs, r)
	return r
}

type ivKey struct {
	w   string
	tok uint64
}

// intervals builds the ownership intervals from the workers' records.
func intervals(in Input, r *Report) map[ivKey]*interval {
	ivs := map[ivKey]*interval{}
	last := map[string]int64{}    // worker → time of its last record
	request := map[string]int64{} // worker → time of its last request
	workers := map[string]bool{}
	for _, rec := range in.Records {
		workers[rec.W] = true
		last[rec.W] = max(last[rec.W], rec.T)
		k := ivKey{rec.W, rec.Tok}
		switch rec.Ev {
		case "request":
			request[rec.W] = rec.T
		case "acquired":
			if ivs[k] != nil {
				r.violate("worker %s was granted token %d twice", rec.W, rec.Tok)
				continue
			}
			req, ok := request[rec.W]
			if !ok || req > rec.T {
				req = rec.T
			}
			ivs[k] = &interval{w: rec.W, tok: rec.Tok, shared: rec.Shared, req: req, start: rec.T, end: math.MaxInt64}
		}
	}
	for _, rec := range in.Records {
		if rec.Ev != "lost" && rec.Ev != "released" {
			continue
		}
		iv := ivs[ivKey{rec.W, rec.Tok}]
		if iv == nil {
			r.violate("worker %s logged %q for token %d it was never granted", rec.W, rec.Ev, rec.Tok)
			continue
		}
		iv.end = min(iv.end, rec.T)
		if rec.Ev == "lost" {
			iv.lost, iv.lostErr = true, rec.Err
		}
	}
	for _, iv := range ivs {
		if iv.end != math.MaxInt64 {
			continue
		}
		if killed, ok := in.Killed[Proc(iv.w)]; ok {
			// It ended at its death, which came after its last record
			// and after the kill was sent, and before the kernel closed
			// its connection.
			iv.end = max(killed, last[iv.w])
			continue
		}
		r.violate("ownership of token %d by %s never ended (no released record)", iv.tok, iv.w)
		iv.end = last[iv.w]
	}
	r.Workers, r.Intervals = len(workers), len(ivs)
	return ivs
}

// cutFault returns the fault that cut off or froze worker w (its
// process) at some time in [from, to], if any.
func cutFault(in Input, w string, from, to int64) (Fault, bool) {
	for _, f := range in.Faults {
		if f.Worker == Proc(w) && cutsOff(f.Kind) && f.Start <= to && f.End >= from {
			return f, true
		}
	}
	return Fault{}, false
}

// checkFence is property 1.
func checkFence(in Input, ivs map[ivKey]*interval, r *Report) {
	db := slices.Clone(in.DB)
	slices.SortFunc(db, func(a, b DBWrite) int { return int(a.Seq - b.Seq) })
	for i, w := range db {
		if w.Seq != int64(i+1) {
			r.violate("fence_log: sequence number %d at position %d, want %d (a gap or duplicate)", w.Seq, i+1, i+1)
			break
		}
	}
	if int64(len(db)) != in.DBWrites {
		r.violate("fence_log has %d writes, the fence row counts %d", len(db), in.DBWrites)
	}
	// M and W of docs/protocol.md, and the operations that set them.
	var maxTok, wTok uint64
	var maxSeq, wSeq int64
	for _, w := range db {
		switch {
		case !w.Shared && w.Token < maxTok:
			r.violate("STALE WRITE ACCEPTED: write %d by %s with token %d, after operation %d with token %d", w.Seq, w.Worker, w.Token, maxSeq, maxTok)
		case w.Shared && w.Token <= wTok && wSeq > 0:
			r.violate("STALE READ ACCEPTED: read %d by %s with token %d, after write %d with token %d", w.Seq, w.Worker, w.Token, wSeq, wTok)
		}
		if w.Token > maxTok {
			maxTok, maxSeq = w.Token, w.Seq
		}
		if !w.Shared {
			wTok, wSeq = w.Token, w.Seq
		}
		iv := ivs[ivKey{w.Worker, w.Token}]
		switch {
		case iv == nil:
			r.violate("write %d by %s with token %d, which %s was never granted", w.Seq, w.Worker, w.Token, w.Worker)
		case iv.shared != w.Shared:
			r.violate("operation %d by %s with token %d: a read %v under a shared claim %v", w.Seq, w.Worker, w.Token, w.Shared, iv.shared)
		}
	}
	bySeq := map[int64]DBWrite{}
	for _, w := range db {
		bySeq[w.Seq] = w
	}
	logged := map[int64]bool{}
	for _, rec := range in.Records {
		if rec.Ev != "write" || !rec.OK {
			continue
		}
		logged[rec.Seq] = true
		if w, ok := bySeq[rec.Seq]; !ok || w.Token != rec.Tok || w.Worker != rec.W {
			r.violate("worker %s logged write %d with token %d accepted; the database has %+v", rec.W, rec.Seq, rec.Tok, w)
		}
	}
	for _, w := range db {
		if _, killed := in.Killed[Proc(w.Worker)]; !logged[w.Seq] && !killed {
			r.violate("write %d by %s with token %d was accepted but %s never logged it", w.Seq, w.Worker, w.Token, w.Worker)
		}
	}
}

// checkExclusion is property 2.
func checkExclusion(in Input, ivs map[ivKey]*interval, r *Report) {
	byTok := slices.Collect(maps.Values(ivs))
	slices.SortFunc(byTok, func(a, b *interval) int {
		switch {
		case a.tok < b.tok:
			return -1
		case a.tok > b.tok:
			return 1
		}
		return strings.Compare(a.w, b.w)
	})
	for i := 1; i < len(byTok); i++ {
		if byTok[i].tok == byTok[i-1].tok {
			r.violate("token %d was granted to both %s and %s", byTok[i].tok, byTok[i-1].w, byTok[i].w)
		}
	}
	// Every interval must end before any conflicting interval with a
	// higher token begins (two shared ones do not conflict); a later
	// grant that starts first is an overlap too.
	for i, a := range byTok {
		overlapped := false
		for _, b := range byTok[i+1:] {
			if b.tok == a.tok || a.end <= b.start {
				continue
			}
			if a.shared && b.shared {
				if b.end > a.start { // at once, not merely out of token order
					r.ReaderPairs++
					if Proc(a.w) == Proc(b.w) {
						r.SessionPairs++
					}
				}
				continue
			}
			// A holder frozen or cut off between its grant and fn's start
			// cannot know either: the window opens at the request.
			if f, ok := cutFault(in, a.w, a.req, a.end); ok {
				if !overlapped {
					r.Overlaps[f.Kind]++
					overlapped = true
					// A cut connection is noticed (at once after a reset,
					// at the give-up after a blackhole): a holder that
					// overlapped its successor and never saw its loss
					// ignored it. A frozen one may have ended before its
					// loss was delivered.
					if f.Kind != FaultFreeze && !a.lost {
						r.violate("IGNORED LOSS: %s held token %d (%s) past the grant of token %d to %s and never logged the loss of its claim, though its connection was cut (%s)",
							a.w, a.tok, modeName(a.shared), b.tok, b.w, f.Kind)
					}
				}
				continue
			}
			what := "two exclusive holders"
			if a.shared || b.shared {
				what = "a reader and a writer"
			}
			r.violate("OVERLAP of %s: %s held token %d (%s) from %s to %s, %s held token %d (%s) from %s; %s was neither frozen nor cut off",
				what, a.w, a.tok, modeName(a.shared), ms(a.start, a.start), ms(a.start, a.end), b.w, b.tok, modeName(b.shared), ms(a.start, b.start), a.w)
		}
	}
}

// lossNote says, for a refused write of a live holder, when its holder
// learnt of its loss relative to the write, so that a run's log alone
// tells a loss delivered while the write was on its way from one never
// delivered.
func lossNote(iv *interval, rec Record) string {
	if !iv.lost {
		return "its loss was never logged"
	}
	return fmt.Sprintf("its loss, %q, logged at %s from the write's send and %s from its refusal",
		iv.lostErr, ms(rec.T0, iv.end), ms(rec.T, iv.end))
}

func modeName(shared bool) string {
	if shared {
		return "shared"
	}
	return "exclusive"
}

// ms formats t relative to origin in milliseconds.
func ms(origin, t int64) string { return fmt.Sprintf("%+.3fms", float64(t-origin)/1e6) }

// checkWrites is property 3.
func checkWrites(in Input, ivs map[ivKey]*interval, r *Report) {
	var maxTok uint64
	for _, w := range in.DB {
		maxTok = max(maxTok, w.Token)
	}
	for _, rec := range in.Records {
		if rec.Ev != "write" {
			continue
		}
		if rec.Late {
			r.Late++
		}
		switch {
		case rec.Err != "":
			r.Failed++
		case rec.OK:
			r.Accepted++
			if rec.Shared {
				r.Reads++
			}
		default:
			r.Rejected++
			if rec.Shared {
				r.ReadsRef++
			}
			if rec.Tok >= maxTok {
				r.violate("write by %s with token %d was refused, but no higher token was ever accepted", rec.W, rec.Tok)
			}
			iv := ivs[ivKey{rec.W, rec.Tok}]
			if iv == nil {
				continue // reported by intervals
			}
			if f, ok := cutFault(in, rec.W, iv.req, max(iv.end, rec.T)); ok {
				r.RejectedBy[f.Kind]++
			} else if rec.Late {
				r.RejectedBy["lost without a fault"]++
			} else {
				r.violate("write by %s with token %d was refused while its holder still had the lock confirmed and was neither frozen nor cut off: the lock moved on under a live holder (%s)", rec.W, rec.Tok, lossNote(iv, rec))
			}
		}
	}
	var cuts int
	for _, f := range in.Faults {
		if cutsOff(f.Kind) {
			cuts++
		}
	}
	if cuts > 0 && r.Rejected == 0 {
		r.violate("%d holders were frozen or cut off but the fence refused no write: the scenario did not bite", cuts)
	}
}

// checkSessions is property 5: when a version 2 session ends, every
// claim it holds ends with it. The client cancels the work of every
// claim before it closes Lost (when the worker logs "session-lost"), so
// every operation of a claim granted before that record and sent after
// it must be Late: sent with its context already cancelled.
func checkSessions(in Input, ivs map[ivKey]*interval, r *Report) {
	ends := map[string][]Record{} // process → its session-lost records
	for _, rec := range in.Records {
		if rec.Ev == "session-lost" {
			ends[rec.W] = append(ends[rec.W], rec)
		}
	}
	for p, recs := range ends {
		prev := int64(math.MinInt64) // the end of the previous session
		for _, end := range recs {
			if !strings.Contains(end.Err, "session closed") { // not by the worker, at its stop
				r.SessionLosses++
				// The claims of this session that were lost with its cause.
				n := 0
				for _, iv := range ivs {
					if Proc(iv.w) == p && iv.start > prev && iv.start < end.T && iv.lost && iv.lostErr == end.Err {
						n++
					}
				}
				r.LostClaims += n
				r.MaxLostClaims = max(r.MaxLostClaims, n)
			}
			prev = end.T
		}
	}
	for _, rec := range in.Records {
		if rec.Ev != "write" || rec.Late {
			continue
		}
		iv := ivs[ivKey{rec.W, rec.Tok}]
		if iv == nil {
			continue // reported by intervals
		}
		for _, end := range ends[Proc(rec.W)] {
			if iv.start < end.T && rec.T0 > end.T {
				r.violate("CLAIM OUTLIVED ITS SESSION: %s sent an operation with token %d %s after its session ended (%s) with its context not cancelled",
					rec.W, rec.Tok, ms(end.T, rec.T0), end.Err)
				break
			}
		}
	}
}

// checkAudit is property 4.
func checkAudit(in Input, ivs map[ivKey]*interval, r *Report) {
	granted := map[uint64]bool{}
	var bounds []struct {
		crashed  bool
		min, max uint64 // tokens granted in the file
	}
	for _, f := range in.Audit {
		held := map[string]map[uint64]string{} // lock → token of each holder → its mode
		released := map[string]bool{}
		var lastTok uint64
		fmin, fmax := uint64(math.MaxUint64), uint64(0)
		lines := bytes.SplitAfter(f.Data, []byte("\n"))
		for i, line := range lines {
			if len(line) == 0 {
				continue
			}
			var rec audit.Record
			if err := json.Unmarshal(line, &rec); err != nil {
				if f.Crashed && i == len(lines)-1 && !bytes.HasSuffix(line, []byte("\n")) {
					continue // cut short by the kill
				}
				r.violate("audit log %s line %d: %v", f.Name, i+1, err)
				continue
			}
			switch rec.Event {
			case audit.Granted:
				r.Grants++
				mode := cmp.Or(rec.Mode, "exclusive")
				r.GrantsBy[fmt.Sprintf("v%d %s", max(rec.Protocol, 1), mode)]++
				for _, tok := range slices.Sorted(maps.Keys(held[rec.Lock])) {
					if m := held[rec.Lock][tok]; mode != "shared" || m != "shared" {
						r.violate("audit log %s line %d: lock %q granted (token %d, %s) while held (token %d, %s)", f.Name, i+1, rec.Lock, rec.Token, mode, tok, m)
						delete(held[rec.Lock], tok) // reported once: the new holder replaces it
					}
				}
				if len(held[rec.Lock]) == 0 && released[rec.Lock] {
					r.Handovers++
				}
				if rec.Token <= lastTok {
					r.violate("audit log %s line %d: token %d granted after token %d", f.Name, i+1, rec.Token, lastTok)
				}
				if held[rec.Lock] == nil {
					held[rec.Lock] = map[uint64]string{}
				}
				held[rec.Lock][rec.Token], lastTok = mode, rec.Token
				granted[rec.Token] = true
				fmin, fmax = min(fmin, rec.Token), max(fmax, rec.Token)
			case audit.Released:
				if _, ok := held[rec.Lock][rec.Token]; !ok {
					r.violate("audit log %s line %d: lock %q released (token %d) but its holders are %v", f.Name, i+1, rec.Lock, rec.Token, slices.Sorted(maps.Keys(held[rec.Lock])))
					delete(held, rec.Lock) // reported once
				}
				delete(held[rec.Lock], rec.Token)
				released[rec.Lock] = true
			}
		}
		if !f.Crashed {
			for lock, toks := range held {
				for tok := range toks {
					r.violate("audit log %s ends with lock %q held (token %d) though the server shut down", f.Name, lock, tok)
				}
			}
		}
		if len(bounds) > 0 && fmax > 0 && fmin <= bounds[len(bounds)-1].max {
			r.violate("audit log %s: token %d granted after token %d of the previous server", f.Name, fmin, bounds[len(bounds)-1].max)
		}
		bounds = append(bounds, struct {
			crashed  bool
			min, max uint64
		}{f.Crashed, fmin, fmax})
	}
	// Tokens a worker saw but no audit log records: only in the lost tail
	// of a killed server's log, between its last record and the next
	// server's first grant.
	var missing []uint64
	for k := range ivs {
		if !granted[k.tok] {
			missing = append(missing, k.tok)
		}
	}
	sort.Slice(missing, func(i, j int) bool { return missing[i] < missing[j] })
	for _, tok := range missing {
		excused := false
		var below uint64
		for i, b := range bounds {
			if b.max > 0 {
				below = max(below, b.max)
			}
			if !b.crashed {
				continue
			}
			above := uint64(math.MaxUint64)
			for _, later := range bounds[i+1:] {
				if later.max > 0 {
					above = min(above, later.min)
				}
			}
			if tok > below && tok < above {
				excused = true
			}
		}
		if !excused {
			r.violate("token %d was granted to a worker but is in no audit log", tok)
		}
	}
}
