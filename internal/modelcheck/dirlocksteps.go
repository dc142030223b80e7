package modelcheck

import (
	"fmt"
	"strings"
)

// The steps model: the file-system steps package dirlock really takes
// (mkdir a staging directory, write the owner record, rename it to LOCK;
// break and release by renaming the entry, moving it out and removing
// LOCK), with a crash possible between any two. Only a process on the
// holder's own machine may break its lock, and with ForcedBreak an
// operator may break it once at any moment.
// User docs: docs/dirlock.md, "The steps"; design:
// docs/design/2026-12-07-dirlock.md#internalmodelcheckdirlockstepsgo.

// Entry kinds of LOCK (stNoRecord only in the "mkdir-lock" mutation).
const (
	stAbsent = iota
	stOwner
	stRelease
	stBreak
	stNoRecord
)

// Program counters of a process.
const (
	pcIdle       = iota
	pcMkdir      // next: mkdir the staging directory
	pcWrite      // next: write the record into it
	pcRename     // next: rename staging to LOCK
	pcInspect    // next: read LOCK's entry
	pcClaim      // next: rename the entry seen to break.ME
	pcRemoveLock // next: move the break entry out of LOCK, rmdir LOCK (breaking)
	pcCleanTrash // next: remove the trash, then retry the rename
	pcHolding
	pcRelRename // next: move the release entry out of LOCK, rmdir LOCK (releasing)
	pcRelClean  // next: remove the trash
)

// Step kinds of the steps model.
const (
	skRequest = iota + 1
	skMkdir
	skWrite
	skRenameOK
	skRenameBusy
	skInspectFree
	skInspectWait
	skInspectDead
	skClaimOK
	skClaimGone
	skRemoveLock
	skCleanTrash
	skRelClaim
	skRelRename
	skRelClean
	skGiveUp
	skCrash
	skOpRead      // the operator reads LOCK's entry to force a break
	skOpClaim     // the operator renames that entry to break.OPERATOR
	skOpClaimGone // the entry changed meanwhile: the operator stops
	skOpRemove    // the operator removes LOCK
)

// The operator's progress (ForcedBreak): it acts once.
const (
	opNotYet = iota
	opClaim  // next: claim the entry it read
	opRemove // next: remove LOCK
	opDone
)

// DirlockStepsMutations are the variants of the steps model that must
// fail: "remote-break" lets a process break a record from another host
// that looks dead; "no-death-check" breaks any record of the own host
// (a timeout instead of the exact check); "no-claim" renames LOCK away
// after the check without first claiming the entry it judged;
// "mkdir-lock" creates LOCK itself with mkdir and then writes the record
// into it; "host-name" judges a record by its host name, as if a
// record of this host name with another boot id were this machine's
// before a reboot (all hosts of the model share one host name);
// "move-lock" removes the lock after a claim by renaming the whole LOCK
// away, whatever it holds by then (fails with ForcedBreak).
var DirlockStepsMutations = []string{"remote-break", "no-death-check", "no-claim", "mkdir-lock", "host-name", "move-lock"}

// CheckDirlockSteps checks the steps model.
func CheckDirlockSteps(cfg DirlockConfig) Report {
	n := cfg.procs()
	// State: LOCK's entry kind, its process (n: the operator), whether
	// that process (the incarnation named) is dead; then per process its
	// pc and, for pcClaim, the entry it saw (seenEntry), for pcHolding 1
	// if the operator took its entry; then with ForcedBreak the
	// operator's progress and the entry it saw.
	op := 3 + 2*n
	init := make([]byte, op)
	if cfg.ForcedBreak {
		init = make([]byte, op+2)
	}
	name := func(i int) string {
		if i == n {
			return "operator"
		}
		return cfg.name(i)
	}
	spec := &dlSpec{model: "dirlock-steps", config: cfg.String(), init: string(init)}
	mut := cfg.Mutation
	pc := func(s string, p int) byte { return s[3+2*p] }
	next := func(s string) []dlSucc {
		var out []dlSucc
		for p := range n {
			emit := func(k uint8, b []byte) { out = append(out, dlSucc{step: dlStep{int8(p), k}, to: string(b)}) }
			cp := func() []byte { return []byte(s) }
			setPC := func(b []byte, v byte) { b[3+2*p], b[4+2*p] = v, 0 }
			lockKind, lockProc, lockDead := s[0], int(s[1]), s[2] == 1
			switch pc(s, p) {
			case pcIdle:
				b := cp()
				setPC(b, pcMkdir)
				emit(skRequest, b)
			case pcMkdir:
				b := cp()
				if mut == "mkdir-lock" {
					if lockKind == stAbsent {
						b[0], b[1], b[2] = stNoRecord, byte(p), 0
						setPC(b, pcWrite)
						emit(skRenameOK, b)
					} else {
						setPC(b, pcInspect)
						emit(skRenameBusy, b)
					}
				} else {
					setPC(b, pcWrite)
					emit(skMkdir, b)
				}
			case pcWrite:
				b := cp()
				if mut == "mkdir-lock" {
					b[0] = stOwner
					setPC(b, pcHolding)
				} else {
					setPC(b, pcRename)
				}
				emit(skWrite, b)
			case pcRename:
				b := cp()
				if lockKind == stAbsent {
					b[0], b[1], b[2] = stOwner, byte(p), 0
					setPC(b, pcHolding)
					emit(skRenameOK, b)
				} else {
					setPC(b, pcInspect)
					emit(skRenameBusy, b)
				}
			case pcInspect:
				b := cp()
				next := byte(pcRename)
				if mut == "mkdir-lock" {
					next = pcMkdir
				}
				sameHost := lockKind != stAbsent && cfg.host(lockProc) == cfg.host(p)
				judgeable := lockKind != stAbsent && lockKind != stNoRecord
				dead := judgeable && sameHost && lockDead
				switch mut {
				case "remote-break":
					dead = judgeable && (lockDead || !sameHost)
				case "no-death-check":
					// a timeout: any record of another process looks dead
					dead = judgeable && sameHost && (lockDead || lockProc != p)
				case "host-name":
					// the same host name and another boot id: "this host
					// before a reboot"
					dead = judgeable && lockProc < n && (lockDead || !sameHost)
				}
				switch {
				case lockKind == stAbsent:
					setPC(b, next)
					emit(skInspectFree, b)
				case dead && mut == "no-claim":
					setPC(b, pcRemoveLock)
					emit(skInspectDead, b)
				case dead:
					setPC(b, pcClaim)
					b[4+2*p] = seenEntry(s)
					emit(skInspectDead, b)
				default:
					setPC(b, next)
					emit(skInspectWait, b)
				}
			case pcClaim:
				b := cp()
				// The rename succeeds only if the very entry judged is still
				// there: its name is unique to one claim by one
				// incarnation, so a later incarnation has another name.
				if lockKind != stAbsent && seenEntry(s) == s[4+2*p] {
					b[0], b[1], b[2] = stBreak, byte(p), 0
					setPC(b, pcRemoveLock)
					emit(skClaimOK, b)
				} else {
					setPC(b, pcRename)
					emit(skClaimGone, b)
				}
			case pcRemoveLock:
				b := cp()
				// Only the own claimed entry is moved out (then LOCK is
				// empty: free); another entry by now (an operator's forced
				// break, then a new holder) is left alone.
				if lockKind == stBreak && lockProc == p && !lockDead || mut == "no-claim" || mut == "move-lock" {
					b[0], b[1], b[2] = stAbsent, 0, 0
				}
				setPC(b, pcCleanTrash)
				emit(skRemoveLock, b)
			case pcCleanTrash:
				b := cp()
				if mut == "mkdir-lock" {
					setPC(b, pcMkdir)
				} else {
					setPC(b, pcRename)
				}
				emit(skCleanTrash, b)
			case pcHolding:
				b := cp()
				if lockKind == stOwner && lockProc == p && !lockDead {
					b[0] = stRelease
					setPC(b, pcRelRename)
				} else {
					setPC(b, pcIdle) // the lock was taken away: Unlock reports it
				}
				emit(skRelClaim, b)
			case pcRelRename:
				b := cp()
				if lockKind == stRelease && lockProc == p && !lockDead || mut == "move-lock" {
					b[0], b[1], b[2] = stAbsent, 0, 0
				}
				setPC(b, pcRelClean)
				emit(skRelRename, b)
			case pcRelClean:
				b := cp()
				setPC(b, pcIdle)
				emit(skRelClean, b)
			}
			if c := pc(s, p); c >= pcMkdir && c <= pcInspect {
				b := cp()
				setPC(b, pcIdle)
				emit(skGiveUp, b)
			}
			if pc(s, p) != pcIdle {
				b := cp()
				setPC(b, pcIdle)
				if lockKind != stAbsent && lockProc == p {
					b[2] = 1
				}
				emit(skCrash, b)
			}
		}
		if cfg.ForcedBreak {
			emit := func(k uint8, b []byte) { out = append(out, dlSucc{step: dlStep{int8(n), k}, to: string(b)}) }
			b := []byte(s)
			lockKind, lockProc := s[0], int(s[1])
			switch s[op] {
			case opNotYet:
				b[op] = opDone
				if lockKind != stAbsent {
					b[op], b[op+1] = opClaim, seenEntry(s)
				}
				emit(skOpRead, b)
			case opClaim:
				if lockKind != stAbsent && seenEntry(s) == s[op+1] {
					if lockKind == stOwner && lockProc < n && pc(s, lockProc) == pcHolding && s[2] == 0 {
						b[4+2*lockProc] = 1 // its holder no longer holds
					}
					b[0], b[1], b[2] = stBreak, byte(n), 0
					b[op], b[op+1] = opRemove, 0
					emit(skOpClaim, b)
				} else {
					b[op], b[op+1] = opDone, 0
					emit(skOpClaimGone, b)
				}
			case opRemove:
				if lockKind == stBreak && lockProc == n || mut == "move-lock" {
					b[0], b[1], b[2] = stAbsent, 0, 0
				}
				b[op] = opDone
				emit(skOpRemove, b)
			}
		}
		for i := range out {
			out[i].f = stepsSafety(cfg, out[i].to)
		}
		return out
	}
	spec.next = next
	spec.crash = func(st dlStep) bool { return st.kind == skCrash || st.kind == skGiveUp }
	spec.show = func(s string) string {
		var parts []string
		if s[0] == stAbsent {
			parts = append(parts, "no LOCK")
		} else {
			who := name(int(s[1]))
			if s[2] == 1 {
				who = "dead " + who
			}
			parts = append(parts, fmt.Sprintf("LOCK holds %s.%s", entryKind(s[0]), who))
		}
		for p := range n {
			c := pcName(pc(s, p))
			if pc(s, p) == pcHolding && s[4+2*p] == 1 {
				c += " (its entry taken by the operator)"
			}
			parts = append(parts, cfg.name(p)+" "+c)
		}
		return strings.Join(parts, "; ")
	}
	spec.describe = func(s string, st dlStep) string {
		p := name(int(st.proc))
		entry := func() string {
			who := name(int(s[1]))
			if s[2] == 1 {
				who = "dead " + who
			}
			return entryKind(s[0]) + "." + who
		}
		switch st.kind {
		case skRequest:
			return p + " wants the lock"
		case skMkdir:
			return p + " mkdirs its staging directory"
		case skWrite:
			if mut == "mkdir-lock" {
				return p + " writes its record into LOCK"
			}
			return p + " writes its record into the staging directory"
		case skRenameOK:
			if mut == "mkdir-lock" {
				return p + " mkdirs LOCK: it is free (no record in it yet)"
			}
			return p + " renames its staging directory to LOCK: acquired"
		case skRenameBusy:
			return p + " tries to take LOCK: it exists (" + entry() + ")"
		case skInspectFree:
			return p + " reads LOCK: gone; retries"
		case skInspectWait:
			return p + " reads LOCK (" + entry() + "): cannot break it; backs off"
		case skInspectDead:
			return p + " reads LOCK (" + entry() + "): judged dead"
		case skClaimOK:
			return p + " renames the entry it judged to break." + p
		case skClaimGone:
			return p + " cannot rename the entry it judged: it is gone; retries"
		case skRemoveLock:
			if mut == "no-claim" || mut == "move-lock" {
				return p + " renames LOCK (" + entry() + ") to its trash"
			}
			if s[0] == stBreak && int(s[1]) == int(st.proc) && s[2] == 0 {
				return p + " moves its entry break." + p + " out of LOCK and removes LOCK"
			}
			return p + " finds its entry gone from LOCK (" + entry() + "): leaves it alone"
		case skCleanTrash:
			return p + " removes its trash"
		case skRelClaim:
			return p + " renames its entry to release." + p
		case skRelRename:
			if mut == "move-lock" {
				return p + " renames LOCK (" + entry() + ") to its trash"
			}
			if s[0] == stRelease && int(s[1]) == int(st.proc) && s[2] == 0 {
				return p + " moves its entry release." + p + " out of LOCK and removes LOCK"
			}
			return p + " finds its entry gone from LOCK (" + entry() + "): leaves it alone"
		case skRelClean:
			return p + " removes its trash: released"
		case skGiveUp:
			return p + " gives up waiting (leaves LOCK alone)"
		case skCrash:
			return p + " crashes (comes back idle)"
		case skOpRead:
			if s[0] == stAbsent {
				return "the operator forces a break: no LOCK, nothing to do"
			}
			return "the operator forces a break: reads LOCK (" + entry() + ")"
		case skOpClaim:
			return "the operator renames LOCK's entry (" + entry() + ") to break.operator"
		case skOpClaimGone:
			return "the operator cannot rename the entry it read: LOCK changed; stops"
		case skOpRemove:
			if mut == "move-lock" {
				return "the operator renames LOCK (" + entry() + ") to its trash"
			}
			if s[0] == stBreak && int(s[1]) == n {
				return "the operator moves its entry out of LOCK and removes LOCK"
			}
			return "the operator finds its entry gone from LOCK: leaves it alone"
		}
		return "?"
	}
	spec.fairness = func(states []string, g *graph[dlStep]) []dlFairness {
		var fs []dlFairness
		for p := range n {
			for k := uint8(skRequest); k < skGiveUp; k++ {
				fs = append(fs, stepFairness(g, cfg.name(p), dlStep{int8(p), k}))
			}
			// Backoff with jitter: a waiter that finds LOCK free again and
			// again eventually takes it.
			fs = append(fs, predFairness(states, cfg.name(p)+" is not unlucky for ever", dlStep{int8(p), skRenameOK},
				func(s string) bool {
					c := pc(s, p)
					return s[0] == stAbsent && c >= pcMkdir && c <= pcCleanTrash
				}))
		}
		if cfg.ForcedBreak {
			// Once started, the operator's command runs to its end.
			for _, k := range []uint8{skOpClaim, skOpClaimGone, skOpRemove} {
				fs = append(fs, stepFairness(g, "operator", dlStep{int8(n), k}))
			}
		}
		return fs
	}
	spec.liveness = []dlLiveness{{
		prop:   PropDirNoWedge,
		detail: "LOCK names a dead process for ever on a fair run",
		in:     func(s string) bool { return s[0] != stAbsent && s[2] == 1 },
	}}
	for w := range n {
		spec.liveness = append(spec.liveness, dlLiveness{
			prop:   PropDirEventually,
			detail: cfg.name(w) + " waits forever on a fair run",
			in: func(s string) bool {
				c := pc(s, w)
				return c >= pcMkdir && c <= pcCleanTrash
			},
		})
	}
	return exploreDirlock(spec)
}

// stepsSafety checks the safety properties in state s. A holder whose
// entry the operator took (a forced break) no longer counts.
func stepsSafety(cfg DirlockConfig, s string) *failure {
	var hs []int
	for p := range cfg.procs() {
		if s[3+2*p] == pcHolding && s[4+2*p] == 0 {
			hs = append(hs, p)
		}
	}
	if len(hs) > 1 {
		return fail(PropDirOneHolder, "%s and %s both hold the lock", cfg.name(hs[0]), cfg.name(hs[1]))
	}
	return nil
}

// seenEntry encodes LOCK's entry in s as one byte: what a process
// remembers between reading it and claiming it.
func seenEntry(s string) byte { return s[0]<<5 | s[2]<<4 | s[1] }

func entryKind(k byte) string {
	return [...]string{"", "owner", "release", "break", "(no record)"}[k]
}

func pcName(c byte) string {
	return [...]string{"idle", "to mkdir staging", "to write record", "to rename staging to LOCK", "to read LOCK",
		"to claim the dead entry", "to take its entry out of LOCK (breaking)", "to remove its trash (breaking)",
		"holding", "to take its entry out of LOCK (releasing)", "to remove its trash (releasing)"}[c]
}
