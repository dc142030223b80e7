// Command baton is the baton lock server and its command-line tools.
//
//	baton serve            run the server
//	baton run NAME -- CMD  run a command while holding a lock
//	baton dirlock status PATH  show the lock kept in a shared directory
//	baton version          print the version
//
// Every flag also reads a BATON_* environment variable; a flag on the
// command line beats the environment, which beats the default.
package main

import (
	"fmt"
	"io"
	"os"
)

// Exit codes shared by every subcommand. Subcommands document their own
// additional codes.
const (
	exitOK    = 0
	exitError = 1 // runtime failure
	exitUsage = 2 // bad flags, arguments or environment
)

// runInitName is the hidden subcommand that baton run starts as the first
// process (init) of its command's own PID namespace (run_linux.go).
const runInitName = "__run-init"

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

type command struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

func commands() []command {
	return []command{
		{"serve", "run the lock server", runServe},
		{"run", "run a command while holding a lock", runRun},
		{"dirlock", "show or break the lock kept in a shared directory (run --dir)", runDirlock},
		{"locks", "list held locks and their queues (admin API)", runLocks},
		{"lock", "show a lock's holder and waiters (admin API)", runLock},
		{"release", "force-release a lock (admin API)", runRelease},
		{"kick", "remove a waiter from a lock's queue (admin API)", runKick},
		{"info", "show the server's version, configuration and counts (admin API)", runInfo},
		{"version", "print the version", runVersion},
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
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return exitOK
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
	fmt.Fprintln(w, "\nRun 'baton COMMAND -h' for the flags of a command.")
}

func runVersion(_ []string, stdout, _ io.Writer) int {
	fmt.Fprintln(stdout, "baton", version)
	return exitOK
}
