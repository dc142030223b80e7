package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/batonlock/baton/admin"
	"github.com/batonlock/baton/ops"
)

// completeName is the hidden command the completion scripts call:
// 'baton __complete SHELL WORD...' with the words after 'baton', the last
// one being the word under the cursor. Its first output line is the
// directive, a tab and a prefix; the next lines are the candidates
// (followed by a tab and a description for fish). Directives:
//
//	words     the candidates, whole words to put in place of the current one
//	files     complete a file name after the prefix (the shell does it)
//	dirs      complete a directory name after the prefix
//	commands  complete the name of a program to run
const completeName = "__complete"

// completionTimeout bounds the admin API lookup of lock names and waiters,
// so that a dead server never stalls the shell.
const completionTimeout = time.Second

const completionSynopsis = "baton completion bash|zsh|fish"

const completionHelp = `Usage: baton completion bash|zsh|fish

Prints the shell completion script for bash, zsh or fish. It completes the
commands, each command's flags (with one dash or two, as typed), the values
of flags where they have a known form (durations, log levels, files,
directories, addresses), the shell of 'baton completion', and lock names
and waiters from the admin API that 'baton locks' would ask (--admin or
BATON_ADMIN_ADDRESS; nothing if it does not answer within 1s).

  bash   source <(baton completion bash)          # in ~/.bashrc
         baton completion bash > /etc/bash_completion.d/baton
  zsh    source <(baton completion zsh)           # in ~/.zshrc, after compinit
         baton completion zsh > "${fpath[1]}/_baton"
  fish   baton completion fish > ~/.config/fish/completions/baton.fish

The scripts ask the baton binary itself ('baton __complete ...'), so they
stay right when baton is upgraded.

Exit status: 0, or 2 for a missing or unknown shell.
`

func runCompletion(args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
		fmt.Fprint(stdout, completionHelp)
		return exitOK
	}
	if len(args) != 1 {
		fmt.Fprintf(stderr, "baton completion: want one shell, got %d arguments\nUsage: %s\n", len(args), completionSynopsis)
		return exitUsage
	}
	script, ok := completionScripts[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "baton completion: unknown shell %q\nUsage: %s\n", args[0], completionSynopsis)
		return exitUsage
	}
	fmt.Fprint(stdout, script)
	return exitOK
}

// runComplete is 'baton __complete SHELL WORD...'.
func runComplete(args []string, stdout io.Writer) int {
	if len(args) < 1 {
		return exitUsage
	}
	shell, words := args[0], args[1:]
	if len(words) == 0 {
		words = []string{""}
	}
	r := complete(words)
	fmt.Fprintf(stdout, "%s\t%s\n", r.directive, r.prefix)
	for _, c := range r.cands {
		if shell == "fish" && c.desc != "" {
			fmt.Fprintf(stdout, "%s\t%s\n", c.word, c.desc)
		} else {
			fmt.Fprintln(stdout, c.word)
		}
	}
	return exitOK
}

type candidate struct{ word, desc string }

type completion struct {
	directive string // words, files, dirs, commands
	prefix    string // for files and dirs: the text before the value
	cands     []candidate
}

func wordsOf(cur string, cands []candidate) completion {
	out := completion{directive: "words"}
	for _, c := range cands {
		if strings.HasPrefix(c.word, cur) {
			out.cands = append(out.cands, c)
		}
	}
	return out
}

// complete returns the completion of the last of words, the words after
// 'baton' on the command line.
func complete(words []string) completion {
	cur, done := words[len(words)-1], words[:len(words)-1]
	if len(done) == 0 {
		if strings.HasPrefix(cur, "-") {
			return wordsOf(cur, []candidate{{"--help", "list the commands"}, {"--version", "print the version"}})
		}
		return wordsOf(cur, commandCandidates())
	}
	cmd, ok := cliCommandNamed(done[0])
	if !ok {
		return completion{directive: "words"}
	}
	rest := done[1:]
	if cmd.subs != nil {
		if len(rest) == 0 {
			var cands []candidate
			for _, s := range cmd.subs {
				cands = append(cands, candidate{s.name, ""})
			}
			return wordsOf(cur, cands)
		}
		sub, found := (cliCommand{}), false
		for _, s := range cmd.subs {
			if s.name == rest[0] {
				sub, found = s, true
			}
		}
		if !found {
			return completion{directive: "words"}
		}
		cmd, rest = sub, rest[1:]
	}
	var fs *flagSet
	if cmd.flags != nil {
		fs = cmd.flags()
	}
	lookup := func(name string) *flag.Flag {
		if fs == nil {
			return nil
		}
		return fs.Lookup(name)
	}

	// Scan the finished words: flags (interspersed, as the commands
	// parse them), their values, the arguments, and a "--".
	var pos []string
	seen := map[string]string{} // flag values typed so far
	afterDash := -1             // words after the "--" of a command to run
	var pending *flag.Flag      // a flag whose value is the current word
	for i := 0; i < len(rest); i++ {
		w := rest[i]
		switch {
		case afterDash >= 0:
			afterDash++
		case w == "--" && cmd.dashCommand:
			afterDash = 0
		case w == "--":
			pos = append(pos, rest[i+1:]...)
			i = len(rest)
		case strings.HasPrefix(w, "-") && len(w) > 1:
			name, val, hasVal := strings.Cut(strings.TrimLeft(w, "-"), "=")
			f := lookup(name)
			switch {
			case f == nil:
			case hasVal || kindOf(f) == kindBool:
				seen[name] = val
			case i+1 < len(rest):
				seen[name] = rest[i+1]
				i++
			default:
				pending = f
			}
		default:
			pos = append(pos, w)
		}
	}
	switch {
	case pending != nil:
		return completeValue(pending, "", cur)
	case afterDash == 0:
		return completion{directive: "commands"}
	case afterDash > 0:
		return completion{directive: "files"}
	}
	if strings.HasPrefix(cur, "-") && fs != nil {
		if name, val, ok := strings.Cut(strings.TrimLeft(cur, "-"), "="); ok {
			if f := lookup(name); f != nil {
				return completeValue(f, cur[:len(cur)-len(val)], val)
			}
			return completion{directive: "words"}
		}
		dash := "-"
		if strings.HasPrefix(cur, "--") {
			dash = "--"
		}
		var cands []candidate
		for _, f := range fs.all() {
			cands = append(cands, candidate{dash + f.Name, shortUsage(f.Usage)})
		}
		if cmd.dashCommand && len(pos) >= len(cmd.args) {
			cands = append(cands, candidate{"--", "then the command to run"})
		}
		return wordsOf(cur, cands)
	}
	if len(pos) >= len(cmd.args) {
		if cmd.dashCommand {
			return wordsOf(cur, []candidate{{"--", "then the command to run"}})
		}
		return completion{directive: "words"}
	}
	switch cmd.args[len(pos)] {
	case argLock:
		return wordsOf(cur, adminLookup(cmd, seen, func(ctx context.Context, c *admin.Client) ([]candidate, error) {
			locks, err := c.Locks(ctx, "")
			var out []candidate
			for _, l := range locks {
				out = append(out, candidate{l.Name, holderText(l)})
			}
			return out, err
		}))
	case argWaiter:
		name := pos[len(pos)-1]
		return wordsOf(cur, adminLookup(cmd, seen, func(ctx context.Context, c *admin.Client) ([]candidate, error) {
			l, err := c.Lock(ctx, name)
			var out []candidate
			for _, w := range l.Waiters {
				// A version 2 waiter is named exactly by its claim; an
				// address names the first waiter from it.
				if w.Protocol == 2 {
					out = append(out, candidate{w.Ref(), w.RemoteAddr})
				} else {
					out = append(out, candidate{w.RemoteAddr, w.Identity})
				}
			}
			return out, err
		}))
	case argDir:
		return completion{directive: "dirs"}
	case argShell:
		var cands []candidate
		for _, s := range slices.Sorted(maps.Keys(completionScripts)) {
			cands = append(cands, candidate{s, ""})
		}
		return wordsOf(cur, cands)
	case argCommand:
		return wordsOf(cur, commandCandidates())
	}
	return completion{directive: "words"}
}

func commandCandidates() []candidate {
	var cands []candidate
	for _, c := range cliCommands() {
		if !c.hidden {
			cands = append(cands, candidate{c.name, c.summary})
		}
	}
	return cands
}

// shortUsage is the first clause of a flag's usage, for a description.
func shortUsage(u string) string {
	if i := strings.IndexAny(u, ";("); i > 0 {
		u = u[:i]
	}
	u = strings.TrimSpace(u)
	if r := []rune(u); len(r) > 60 {
		u = string(r[:59]) + "…"
	}
	return u
}

func holderText(l admin.Lock) string {
	if l.Holder == nil {
		return ""
	}
	h := "held by " + l.Holder.RemoteAddr
	if l.Holder.Identity != "" {
		h = "held by " + l.Holder.Identity
	}
	if n := l.QueueLength(); n > 0 {
		h += fmt.Sprintf(", %d waiting", n)
	}
	return h
}

// durationForms are offered for an empty duration value.
var durationForms = []string{"100ms", "1s", "2s", "10s", "30s", "1m", "5m", "1h"}

// completeValue completes val, the value of flag f typed after prefix.
func completeValue(f *flag.Flag, prefix, val string) completion {
	var vals []string
	switch kindOf(f) {
	case kindBool:
		vals = []string{"true", "false"}
	case kindDuration:
		if c := val[max(len(val)-1, 0):]; c >= "0" && c <= "9" {
			for _, u := range []string{"ms", "s", "m", "h"} {
				vals = append(vals, val+u)
			}
		} else {
			vals = append([]string{f.DefValue}, durationForms...)
		}
	case kindInt:
		vals = []string{f.DefValue}
	default:
		switch n := f.Name; {
		case strings.HasPrefix(n, "tls-") || strings.HasSuffix(n, "-file") || n == "audit-log":
			return completion{directive: "files", prefix: prefix}
		case n == "dir" || strings.HasSuffix(n, "-dir"):
			return completion{directive: "dirs", prefix: prefix}
		case n == "log-level":
			vals = ops.LogLevels
		case n == "log-format":
			vals = ops.LogFormats
		case n == "ops-listen":
			vals = []string{suggestedOpsAddr}
		case n == "admin-listen":
			vals = []string{defaultAdminAddr}
		case f.DefValue != "":
			vals = []string{f.DefValue}
		}
	}
	var cands []candidate
	for _, v := range vals {
		if !slices.ContainsFunc(cands, func(c candidate) bool { return c.word == prefix+v }) {
			cands = append(cands, candidate{prefix + v, ""})
		}
	}
	return wordsOf(prefix+val, cands)
}

// adminLookup asks the admin API that 'baton locks' would ask, given the
// environment and, for an admin command, the flags typed so far. It
// returns nothing on any error: completion must not print one.
func adminLookup(cmd cliCommand, seen map[string]string, ask func(context.Context, *admin.Client) ([]candidate, error)) []candidate {
	fs, cfg := adminFlags(adminCommandNamed("locks"), io.Discard)
	if fs.parse(nil) != nil {
		return nil
	}
	if cmd.name != "run" {
		for name, v := range seen {
			if fs.Lookup(name) != nil && fs.Set(name, v) != nil {
				return nil
			}
		}
	}
	client, err := newAdminClient(cfg)
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(completionTimeout, cfg.timeout))
	defer cancel()
	out, err := ask(ctx, client)
	if err != nil {
		return nil
	}
	return out
}
