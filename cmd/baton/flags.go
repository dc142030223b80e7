package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// flagSet is a flag.FlagSet whose flags can also be set from environment
// variables. Precedence: command line, then environment, then default.
type flagSet struct {
	*flag.FlagSet
	env      map[string]string // flag name -> env var
	order    []string          // flag names in registration order
	synopsis string
}

func newFlagSet(name, synopsis string, stderr io.Writer) *flagSet {
	fs := &flagSet{
		FlagSet:  flag.NewFlagSet(name, flag.ContinueOnError),
		env:      map[string]string{},
		synopsis: synopsis,
	}
	fs.SetOutput(stderr)
	fs.Usage = func() { fs.printUsage(fs.Output()) }
	return fs
}

// bindEnv records that flag name can be set with the env var.
func (fs *flagSet) bindEnv(name, env string) {
	if fs.Lookup(name) == nil {
		panic("bindEnv: no flag " + name)
	}
	fs.env[name] = env
	fs.order = append(fs.order, name)
}

func (fs *flagSet) StringVar(p *string, name, env, value, usage string) {
	fs.FlagSet.StringVar(p, name, value, usage)
	fs.bindEnv(name, env)
}

func (fs *flagSet) DurationVar(p *time.Duration, name, env string, value time.Duration, usage string) {
	fs.FlagSet.DurationVar(p, name, value, usage)
	fs.bindEnv(name, env)
}

func (fs *flagSet) IntVar(p *int, name, env string, value int, usage string) {
	fs.FlagSet.IntVar(p, name, value, usage)
	fs.bindEnv(name, env)
}

func (fs *flagSet) BoolVar(p *bool, name, env string, value bool, usage string) {
	fs.FlagSet.BoolVar(p, name, value, usage)
	fs.bindEnv(name, env)
}

// parse applies the environment, then the command line. It returns
// flag.ErrHelp for -h, and an error naming the flag or variable otherwise.
func (fs *flagSet) parse(args []string) error {
	for _, name := range fs.order {
		env := fs.env[name]
		v, ok := os.LookupEnv(env)
		if !ok {
			continue
		}
		if err := fs.Set(name, v); err != nil {
			return fmt.Errorf("invalid value %q for environment variable %s: %v", v, env, err)
		}
	}
	fs.SetOutput(io.Discard) // report errors once, from the caller
	err := fs.Parse(args)
	fs.SetOutput(nil)
	return err
}

// printUsage prints the synopsis and a table of flag, env var, default
// and meaning.
func (fs *flagSet) printUsage(w io.Writer) {
	fmt.Fprintf(w, "Usage: %s\n\nFlags (a flag beats its environment variable, which beats the default):\n\n", fs.synopsis)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  FLAG\tENV\tDEFAULT\tMEANING")
	for _, name := range fs.order {
		f := fs.Lookup(name)
		def := f.DefValue
		if def == "" {
			def = `""`
		}
		fmt.Fprintf(tw, "  -%s\t%s\t%s\t%s\n", name, fs.env[name], def, f.Usage)
	}
	tw.Flush()
}

// parseOrExit parses args and turns the outcome into an exit code for the
// caller: -1 to go on, exitOK after -h, exitUsage on a bad flag.
func (fs *flagSet) parseOrExit(args []string, stdout, stderr io.Writer) int {
	err := fs.parse(args)
	switch {
	case err == nil:
		return -1
	case errors.Is(err, flag.ErrHelp):
		fs.printUsage(stdout)
		return exitOK
	}
	fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), strings.TrimSpace(err.Error()))
	fmt.Fprintf(stderr, "Run '%s -h' for usage.\n", fs.Name())
	return exitUsage
}

// checkHostPort reports whether addr is host:port with a port in 1-65535,
// so that a typo is a usage error at once rather than an outage to retry.
func checkHostPort(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("address %q: want host:port (%v)", addr, strings.TrimPrefix(err.Error(), "address "+addr+": "))
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("address %q: port %q is not a number from 1 to 65535", addr, port)
	}
	return nil
}

// subcommand reads the subcommand of 'baton CMD SUB [flags]' from args:
// -h prints the synopsis and help, a missing or unknown subcommand a usage
// error. code is the exit status when the command is over, else -1; usage
// reports the command's later usage errors the same way.
func subcommand(cmd, synopsis, help string, subs, args []string, stdout, stderr io.Writer) (sub string, usage func(format string, a ...any) int, code int) {
	usage = func(format string, a ...any) int {
		fmt.Fprintf(stderr, "baton "+cmd+": "+format+"\n", a...)
		fmt.Fprintf(stderr, "Usage: %s\nRun 'baton %s -h' for more.\n", synopsis, cmd)
		return exitUsage
	}
	if len(args) == 0 {
		return "", usage, usage("missing subcommand")
	}
	sub = args[0]
	switch {
	case sub == "-h" || sub == "-help" || sub == "--help" || sub == "help":
		fmt.Fprintf(stdout, "Usage: %s\n%s", synopsis, help)
		return sub, usage, exitOK
	case !slices.Contains(subs, sub):
		return sub, usage, usage("unknown subcommand %q", sub)
	}
	return sub, usage, -1
}
