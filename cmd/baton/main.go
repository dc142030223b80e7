// Command baton is the baton lock server and its command-line tools:
// serve, run, elect, watch, status, dirlock, testkit, version, help,
// completion and man ('baton help COMMAND' prints a command's flags).
// Every flag also reads a BATON_* environment variable; a flag on the
// command line beats the environment, which beats the default.
// The commands: docs/cli.md; every flag: docs/flags.md.
package main

import (
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
)

// Exit codes shared by every subcommand. Subcommands document their own
// additional codes.
const (
	exitOK    = 0
	exitError = 1 // runtime failure
	exitUsage = 2 // bad flags, arguments or environment
)

// runInitName is the hidden subcommand that baton run starts to run its
// command as a child subreaper (run_linux.go).
const runInitName = "__run-init"

// version is set at build time with -ldflags "-X main.version=..." (the
// release script does); when it is not, init takes it from the build
// information. commitTime is the VCS commit time when the build recorded
// one.
var version = ""

var commitTime string

func init() {
	info, ok := debug.ReadBuildInfo()
	v, t := buildVersion(info, ok)
	if version == "" {
		version = v
	}
	commitTime = t
}

// pseudoVersion matches the suffix of a Go pseudo-version
// (v0.0.0-20261207202907-1adf6c2ff1ec), which names a commit, not a
// release.
var pseudoVersion = regexp.MustCompile(`[-.][0-9]{14}-[0-9a-f]{12}(\+incompatible)?$`)

// buildVersion returns the version that info tells and the commit time it
// records: the module version of 'go install ...@v1.2.3', else
// dev-REVISION (12 hex digits, -dirty for uncommitted changes) for a build
// in a clone, else "dev". Since Go 1.24 a build in a clone also records a
// module version (a pseudo-version, or a tag with +dirty); that names no
// release, so the revision is shown instead.
func buildVersion(info *debug.BuildInfo, ok bool) (version, commitTime string) {
	if !ok || info == nil {
		return "dev", ""
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = "-dirty"
			}
		case "vcs.time":
			commitTime = s.Value
		}
	}
	v := info.Main.Version
	local := rev != "" && (pseudoVersion.MatchString(v) || strings.Contains(v, "+dirty"))
	if v != "" && v != "(devel)" && !local {
		return v, commitTime
	}
	if rev == "" {
		return "dev", commitTime
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	return "dev-" + rev + modified, commitTime
}

// versionLine is what 'baton version' prints: the version, the commit time
// when known, and the Go toolchain and platform, as 'go version' shows them.
func versionLine(version, commitTime, goVersion, goos, goarch string) string {
	line := "baton " + version
	if commitTime != "" {
		line += " (commit time " + commitTime + ")"
	}
	return line + " " + goVersion + " " + goos + "/" + goarch
}

type command struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

func commands() []command {
	return []command{
		{"serve", "run the lock server", runServe},
		{"run", "run a command while holding a lock", runRun},
		{"elect", "run a command while leading an election, publishing a value", runElect},
		{"watch", "print who holds a lock (an election's leader) at each change", runWatch},
		{"mount", "mount a directory whose flock and fcntl locks are held on the server", runMount},
		{"status", "check that a server answers on its protocol port (no admin API)", runStatus},
		{"dirlock", "show or break the lock kept in a shared directory (run --dir)", runDirlock},
		{"locks", "list held locks and their queues (admin API)", runLocks},
		{"show", "show a lock's holder and waiters (admin API)", runShow},
		{"lock", "deprecated name of show", runLock},
		{"release", "force-release a lock (admin API)", runRelease},
		{"kick", "remove a waiter from a lock's queue (admin API)", runKick},
		{"info", "show the server's version, configuration and counts (admin API)", runInfo},
		{"ranges", "list byte-range and flock locks by key (admin API)", runRanges},
		{"release-ranges", "release one owner's range locks on a key (admin API)", runReleaseRanges},
		{"cluster", "a cluster's members and health; join, leave or remove (member API)", runCluster},
		{"testkit", "check a client library against a scripted fake server (client test kit)", runTestkit},
		{"version", "print the version", runVersion},
		{"completion", "print the shell completion script (bash, zsh, fish)", runCompletion},
		{"man", "print the manual page (roff)", runMan},
	}
}

func main() {
	os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
}

func dispatch(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case runInitName:
		return runInit(args[1:], stderr)
	case completeName:
		return runComplete(args[1:], stdout)
	case "-h", "-help", "--help":
		usage(stdout)
		return exitOK
	case "help":
		if len(args) == 1 {
			usage(stdout)
			return exitOK
		}
		// 'baton help CMD' is 'baton CMD -h'.
		for _, c := range commands() {
			if c.name == args[1] {
				return c.run([]string{"-h"}, stdout, stderr)
			}
		}
		fmt.Fprintf(stderr, "baton help: unknown command %q\n\n", args[1])
		usage(stderr)
		return exitUsage
	case "-version", "--version":
		return runVersion(nil, stdout, stderr)
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "baton: unknown command %q\n\n", args[0])
	usage(stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "baton: a distributed lock service\n\nUsage: baton COMMAND [flags] [args]\n\nCommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'baton help COMMAND' or 'baton COMMAND -h' for the flags of a command;\n'baton --version' prints the version.")
}

func runVersion(args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 1 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help"):
		fmt.Fprintln(stdout, "Usage: baton version\n\nPrints the version, the commit time when the build recorded one, and the Go\nversion and platform it was built with. The version is the one the release\nscript set, else the module version of 'go install ...@VERSION', else\ndev-REVISION (with -dirty for uncommitted changes) for a build in a git\nclone, else dev.")
		return exitOK
	case len(args) > 0:
		fmt.Fprintf(stderr, "baton version: unexpected argument %q\nUsage: baton version\n", args[0])
		return exitUsage
	}
	fmt.Fprintln(stdout, versionLine(version, commitTime, runtime.Version(), runtime.GOOS, runtime.GOARCH))
	return exitOK
}
