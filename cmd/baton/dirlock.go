package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/batonlock/baton/dirlock"
)

// exitDirlockRefused is the status of a refused 'baton dirlock break': EX_TEMPFAIL,
// the code of a busy lock in 'baton run'.
const exitDirlockRefused = 75

const dirlockSynopsis = "baton dirlock status PATH | baton dirlock break [--force] PATH"

const dirlockHelp = `
Inspects or breaks the lock kept in the shared directory PATH by
'baton run --dir PATH' and the Go package dirlock (see docs/dirlock.md).

  status PATH          show the lock's record and, on the holder's own host,
                       whether the holder is alive; on another host it says
                       that it cannot judge
  break [--force] PATH free the lock; refused (exit 75) unless the holder is
                       provably dead on this host; --force frees it anyway,
                       and a live holder is then no longer protected

Exit status:
  0   status: the lock is held; break: the lock was freed
  1   error (PATH unreadable, not supported here)
  2   usage error
  3   the lock is not held
  75  break: refused, the holder is alive, on another host, or the lock
      directory has no readable record (use --force after checking)
`

// dirlockSubcommands are the subcommands of 'baton dirlock'.
var dirlockSubcommands = []string{"status", "break"}

// dirlockFlags returns the flags of 'baton dirlock sub'.
func dirlockFlags(sub string, stderr io.Writer) (*flagSet, *bool) {
	fs := newFlagSet("baton dirlock "+sub, dirlockSynopsis, stderr)
	force := new(bool)
	if sub == "break" {
		fs.BoolVar(force, "force", "BATON_DIRLOCK_FORCE", false, "break the lock even if its holder is alive or cannot be judged from this host")
	}
	return fs, force
}

func runDirlock(args []string, stdout, stderr io.Writer) int {
	sub, usage, code := subcommand("dirlock", dirlockSynopsis, dirlockHelp, dirlockSubcommands, args, stdout, stderr)
	if code >= 0 {
		return code
	}
	fs, force := dirlockFlags(sub, stderr)
	if code := fs.parseOrExit(args[1:], stdout, stderr); code >= 0 {
		if code == exitOK {
			fmt.Fprint(stdout, dirlockHelp)
		}
		return code
	}
	pos, err := parseInterspersed(fs, args[1:])
	if err != nil {
		return usage("%v", err)
	}
	if len(pos) != 1 {
		return usage("want exactly one PATH, got %d arguments", len(pos))
	}
	dir := pos[0]
	if sub == "status" {
		st, err := dirlock.Inspect(dir)
		if err != nil {
			fmt.Fprintf(stderr, "baton dirlock: %v\n", err)
			return exitError
		}
		printDirlockStatus(stdout, st)
		if !st.Held {
			return exitAdminNotFound
		}
		return exitOK
	}
	st, err := dirlock.Break(dir, *force)
	switch {
	case err == nil && !st.Held:
		fmt.Fprintf(stdout, "%s: not held\n", dir)
		return exitAdminNotFound
	case err == nil:
		fmt.Fprintf(stdout, "%s: broken (was %s)\n", dir, describeHolder(st))
		return exitOK
	case errors.Is(err, dirlock.ErrBusy):
		printDirlockStatus(stderr, st)
		fmt.Fprintf(stderr, "baton dirlock: refusing to break: %s; use --force only if you know the holder is dead\n", verdictText(st))
		return exitDirlockRefused
	}
	fmt.Fprintf(stderr, "baton dirlock: %v\n", err)
	return exitError
}

func describeHolder(st dirlock.Status) string {
	if st.NoRecord {
		return "a lock directory with no readable record"
	}
	return fmt.Sprintf("%s entry of %v", st.Kind, st.Owner)
}

func verdictText(st dirlock.Status) string {
	switch {
	case st.NoRecord:
		return "the lock directory has no readable record: nobody can tell whose it is; look at it before 'baton dirlock break --force'"
	case st.Verdict == dirlock.Dead:
		return "dead (provably, on this host): the next lock attempt on this host, or 'baton dirlock break', frees it"
	case st.Verdict == dirlock.Alive:
		return "alive on this host"
	}
	return fmt.Sprintf("cannot judge: the holder runs on host %q, machine %s (this is %q, machine %s; or another boot or pid namespace, or a record without a machine id from another boot); only that machine, or an operator with 'baton dirlock break --force', can free it",
		st.Owner.Hostname, machineText(st.Owner), st.Self.Hostname, machineText(st.Self))
}

// machineText is o's machine id, or says that it has none (a record of
// an older version, or a machine without /etc/machine-id).
func machineText(o dirlock.Owner) string {
	if o.MachineID == "" {
		return "unknown"
	}
	return o.MachineID
}

func printDirlockStatus(w io.Writer, st dirlock.Status) {
	fmt.Fprintf(w, "directory: %s\n", st.Dir)
	switch {
	case !st.Held:
		fmt.Fprintln(w, "lock:      not held")
	case st.NoRecord:
		fmt.Fprintln(w, "lock:      held, NO READABLE RECORD")
		fmt.Fprintf(w, "holder:    %s\n", verdictText(st))
	default:
		state := map[string]string{"owner": "held", "release": "being released", "break": "being broken (its previous holder is dead)"}[st.Kind]
		fmt.Fprintf(w, "lock:      %s\n", state)
		fmt.Fprintf(w, "entry:     %s\n", st.Entry)
		fmt.Fprintf(w, "holder:    %v\n", st.Owner)
		fmt.Fprintf(w, "verdict:   %s\n", verdictText(st))
		if st.Record != "" {
			fmt.Fprintf(w, "record:\n  %s\n", strings.ReplaceAll(strings.TrimSpace(st.Record), "\n", "\n  "))
		}
	}
	for _, l := range st.Leftovers {
		v := "unreadable name"
		if l.Verdict != 0 {
			v = fmt.Sprintf("pid %d on %q: %v", l.Owner.PID, l.Owner.Hostname, l.Verdict)
		}
		fmt.Fprintf(w, "leftover:  %s (%s; not the lock, removed by the next lock attempt on its host once dead)\n", l.Name, v)
	}
}
