package main

import (
	"flag"
	"io"
	"time"
)

// This file describes the command tree once, from the same flag sets the
// commands parse and print with -h, for the shell completion
// (completion.go) and the manual page (manpage.go): a flag added to a
// command appears in both without further work.

// cliArg is the kind of a positional argument, for completion.
type cliArg int

const (
	argLock    cliArg = iota + 1 // a lock name (listed by the admin API)
	argWaiter                    // a waiter (address or SESSION/CLAIM) in the lock named before it
	argDir                       // a directory
	argShell                     // bash, zsh or fish
	argCommand                   // a baton command
)

// cliCommand is a command of the tree.
type cliCommand struct {
	name    string
	summary string
	// flags returns a fresh flag set of the command, the one its -h
	// prints; nil for a command without flags.
	flags func() *flagSet
	args  []cliArg
	// subs are the subcommands ('baton dirlock status').
	subs []cliCommand
	// dashCommand: after its arguments comes "--" and a command to run.
	dashCommand bool
	// hidden: not offered by completion (a deprecated name).
	hidden bool
}

// cliCommands returns the commands of 'baton', in the order of 'baton -h',
// then 'help'.
func cliCommands() []cliCommand {
	var out []cliCommand
	for _, c := range commands() {
		cc := cliCommand{name: c.name, summary: c.summary}
		switch c.name {
		case "serve":
			cc.flags = func() *flagSet { fs, _ := serveFlags(io.Discard); return fs }
		case "run":
			cc.flags = runFlagTable
			cc.args = []cliArg{argLock}
			cc.dashCommand = true
		case "elect":
			cc.flags = electFlagTable
			cc.args = []cliArg{argLock}
			cc.dashCommand = true
		case "watch":
			cc.flags = func() *flagSet { fs, _ := watchFlags(io.Discard); return fs }
			cc.args = []cliArg{argLock}
		case "status":
			cc.flags = func() *flagSet { fs, _ := statusFlags(io.Discard); return fs }
		case "testkit":
			cc.flags = func() *flagSet { fs, _ := testkitFlags(io.Discard); return fs }
			cc.dashCommand = true
		case "dirlock":
			for _, sub := range dirlockSubcommands {
				cc.subs = append(cc.subs, cliCommand{
					name:  sub,
					flags: func() *flagSet { fs, _ := dirlockFlags(sub, io.Discard); return fs },
					args:  []cliArg{argDir},
				})
			}
		case "cluster":
			for _, sub := range clusterSubcommands {
				cs := cliCommand{name: sub, flags: func() *flagSet { fs, _ := clusterFlags(sub, io.Discard); return fs }}
				cc.subs = append(cc.subs, cs)
			}
		case "locks", "show", "lock", "release", "kick", "info", "ranges", "release-ranges":
			name := c.name
			if name == "lock" {
				name = "show"
				cc.hidden = true
			}
			ac := adminCommandNamed(name)
			cc.flags = func() *flagSet { fs, _ := adminFlags(ac, io.Discard); return fs }
			for _, a := range ac.args {
				switch a {
				case "NAME":
					cc.args = append(cc.args, argLock)
				case "WAITER":
					cc.args = append(cc.args, argWaiter)
				}
			}
		case "completion":
			cc.args = []cliArg{argShell}
		}
		out = append(out, cc)
	}
	return append(out, cliCommand{name: "help", summary: "the flags and help of a command", args: []cliArg{argCommand}})
}

// cliCommandNamed returns the command called name, and whether there is one.
func cliCommandNamed(name string) (cliCommand, bool) {
	for _, c := range cliCommands() {
		if c.name == name {
			return c, true
		}
	}
	return cliCommand{}, false
}

// flagKind is the type of a flag's value.
type flagKind int

const (
	kindString flagKind = iota
	kindBool
	kindDuration
	kindInt
)

// kindOf tells the type of f's value.
func kindOf(f *flag.Flag) flagKind {
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		return kindBool
	}
	if g, ok := f.Value.(flag.Getter); ok {
		switch g.Get().(type) {
		case time.Duration:
			return kindDuration
		case int, int64, uint, uint64:
			return kindInt
		}
	}
	return kindString
}

// valueName is the placeholder of f's value in the manual page.
func valueName(f *flag.Flag) string {
	switch kindOf(f) {
	case kindBool:
		return ""
	case kindDuration:
		return "duration"
	case kindInt:
		return "int"
	}
	return "string"
}

// all returns the flags in the order of the -h table, then any flag
// registered without an environment variable, by name.
func (fs *flagSet) all() []*flag.Flag {
	var out []*flag.Flag
	for _, name := range fs.order {
		out = append(out, fs.Lookup(name))
	}
	fs.VisitAll(func(f *flag.Flag) {
		if _, ok := fs.env[f.Name]; !ok {
			out = append(out, f)
		}
	})
	return out
}
