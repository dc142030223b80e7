//go:build unix

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/opstest"
	"github.com/batonlock/baton/protocol"
)

// needTool returns the path of a program the test needs. Without it the
// test is skipped, or fails when the environment variable CI is "true":
// CI installs it (.ci/run) and must not pass by skipping.
func needTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not installed (.ci/run installs it): %v", name, err)
		}
		t.Skipf("%s is not installed: %v", name, err)
	}
	return p
}

// completionScript writes 'baton completion SHELL' to a file.
func completionScript(t *testing.T, shell string) string {
	t.Helper()
	code, out, errOut := cli("completion", shell)
	if code != 0 || out == "" {
		t.Fatalf("baton completion %s = %d %q", shell, code, errOut)
	}
	p := filepath.Join(t.TempDir(), "baton."+shell)
	if err := os.WriteFile(p, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// shellEnv is an environment where 'baton' is the binary under test, the
// shells keep their files in a temporary home, and no BATON_* variable
// is set but those in extra.
func shellEnv(t *testing.T, extra ...string) []string {
	home := t.TempDir()
	env := []string{
		"PATH=" + filepath.Dir(batonBin) + string(os.PathListSeparator) + os.Getenv("PATH"),
		"HOME=" + home,
		"XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
		"XDG_DATA_HOME=" + filepath.Join(home, ".local", "share"),
		"XDG_CACHE_HOME=" + filepath.Join(home, ".cache"),
		"LANG=C.UTF-8",
	}
	return append(env, extra...)
}

func runShell(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %q: %v\n%s", name, args, err, out)
	}
	return string(out)
}

func words(c completion) []string {
	var out []string
	for _, w := range c.cands {
		out = append(out, w.word)
	}
	return out
}

// TestCompleteEngine pins what 'baton __complete' answers, the logic the
// three shell scripts share.
func TestCompleteEngine(t *testing.T) {
	t.Setenv("BATON_ADMIN_ADDRESS", "127.0.0.1:1") // no admin API: no lock names
	for _, tc := range []struct {
		words     []string
		directive string
		prefix    string
		want      []string // exactly, in order
		contains  []string // at least these
	}{
		{words: []string{"ru"}, directive: "words", want: []string{"run"}},
		{words: []string{""}, directive: "words", contains: []string{"serve", "run", "elect", "watch", "status", "dirlock", "locks", "show", "completion", "man", "help"}},
		{words: []string{"el"}, directive: "words", want: []string{"elect"}},
		{words: []string{"elect", "--val"}, directive: "words", want: []string{"--value"}},
		{words: []string{"elect", "db", "--", ""}, directive: "commands"},
		{words: []string{"watch", "--js"}, directive: "words", want: []string{"--json"}},
		{words: []string{"watch", "--on"}, directive: "words", want: []string{"--once"}},
		{words: []string{"--v"}, directive: "words", want: []string{"--version"}},
		{words: []string{"run", "--lea"}, directive: "words", want: []string{"--lease"}},
		{words: []string{"run", "-lea"}, directive: "words", want: []string{"-lease"}},
		{words: []string{"serve", "-li"}, directive: "words", want: []string{"-listen"}},
		{words: []string{"run", "--lease", "10"}, directive: "words", want: []string{"10ms", "10s", "10m", "10h"}},
		{words: []string{"run", "--lease", ""}, directive: "words", contains: []string{"2s", "100ms", "1m"}},
		{words: []string{"run", "--lease=1"}, directive: "words", want: []string{"--lease=1ms", "--lease=1s", "--lease=1m", "--lease=1h"}},
		{words: []string{"run", "--no-wait", ""}, directive: "words"},
		{words: []string{"run", "--no-wait", "job", ""}, directive: "words", want: []string{"--"}},
		{words: []string{"run", "--no-wait=t"}, directive: "words", want: []string{"--no-wait=true"}},
		{words: []string{"run", "job", "--"}, directive: "words", contains: []string{"--", "--server"}},
		{words: []string{"run", "job", "--", ""}, directive: "commands"},
		{words: []string{"run", "job", "--", "ls", ""}, directive: "files"},
		{words: []string{"run", "--server", "x:1", "job", "--wait", "5s", "--", "sh", "-"}, directive: "files"},
		{words: []string{"serve", "-log-level", ""}, directive: "words", want: []string{"debug", "info", "warn", "error"}},
		{words: []string{"serve", "-log-format", "j"}, directive: "words", want: []string{"json"}},
		{words: []string{"serve", "-admin-listen", ""}, directive: "words", want: []string{defaultAdminAddr}},
		{words: []string{"serve", "-tls-cert", ""}, directive: "files"},
		{words: []string{"serve", "--acl-file=/et"}, directive: "files", prefix: "--acl-file="},
		{words: []string{"serve", "-data-dir", ""}, directive: "dirs"},
		{words: []string{"run", "--dir=x"}, directive: "dirs", prefix: "--dir="},
		{words: []string{"status", "--server", ""}, directive: "words", want: []string{"127.0.0.1:7070"}},
		{words: []string{"status", "x"}, directive: "words"},
		{words: []string{"completion", ""}, directive: "words", want: []string{"bash", "fish", "zsh"}},
		{words: []string{"help", "ki"}, directive: "words", want: []string{"kick"}},
		{words: []string{"dirlock", ""}, directive: "words", want: []string{"status", "break"}},
		{words: []string{"dirlock", "break", "-"}, directive: "words", want: []string{"-force"}},
		{words: []string{"dirlock", "status", ""}, directive: "dirs"},
		{words: []string{"cluster", ""}, directive: "words", want: []string{"status", "join", "leave", "remove", "lease-ceiling"}},
		{words: []string{"cluster", "lease-ceiling", "--wa"}, directive: "words", want: []string{"--wait"}},
		{words: []string{"cluster", "join", "--tls-"}, directive: "words", want: []string{"--tls-ca", "--tls-cert", "--tls-key"}},
		{words: []string{"cluster", "join", "--tls-ca", ""}, directive: "files"},
		{words: []string{"serve", "-cluster-"}, directive: "words", want: []string{"-cluster-self-stop", "-cluster-remove-after", "-cluster-secret-file", "-cluster-identity"}},
		{words: []string{"serve", "-cluster-secret-file", ""}, directive: "files"},
		{words: []string{"cluster", "remove", "--cluster-secret-file", ""}, directive: "files"},
		{words: []string{"serve", "-adv"}, directive: "words", want: []string{"-advertise-host"}},
		{words: []string{"locks", "--match", ""}, directive: "words"},
		{words: []string{"show", ""}, directive: "words"},
		{words: []string{"nosuch", ""}, directive: "words"},
	} {
		got := complete(tc.words)
		w := words(got)
		ok := got.directive == tc.directive && got.prefix == tc.prefix
		if tc.want != nil && !slices.Equal(w, tc.want) {
			ok = false
		}
		for _, c := range tc.contains {
			if !slices.Contains(w, c) {
				ok = false
			}
		}
		if tc.want == nil && tc.contains == nil && len(w) != 0 {
			ok = false
		}
		if !ok {
			t.Errorf("complete(%q) = %s %q %q", tc.words, got.directive, got.prefix, w)
		}
	}
	// The deprecated name is not offered, but completes like show.
	if w := words(complete([]string{"lo"})); !slices.Equal(w, []string{"locks"}) {
		t.Errorf("complete lo = %q", w)
	}
	if w := words(complete([]string{"lock", "--ad"})); !slices.Equal(w, []string{"--admin"}) {
		t.Errorf("complete lock --ad = %q", w)
	}
}

// TestCompleteEveryFlag: every flag of every command, as its -h table
// lists it, is completed, with one dash and with two; and the flag set
// completion and the manual page use is the one -h prints.
func TestCompleteEveryFlag(t *testing.T) {
	n := 0
	check := func(path []string, fs *flagSet) {
		for _, dash := range []string{"-", "--"} {
			got := words(complete(append(slices.Clone(path), dash)))
			for _, name := range fs.order {
				n++
				if !slices.Contains(got, dash+name) {
					t.Errorf("baton %s %s: %s%s not completed (got %q)", strings.Join(path, " "), dash, dash, name, got)
				}
			}
		}
	}
	for _, c := range commands() {
		spec, ok := cliCommandNamed(c.name)
		if !ok {
			t.Fatalf("command %s is not in cliCommands", c.name)
		}
		if spec.flags != nil {
			fs := spec.flags()
			check([]string{c.name}, fs)
			if spec.hidden {
				continue
			}
			var h, table strings.Builder
			c.run([]string{"-h"}, &h, &strings.Builder{})
			fs.printUsage(&table)
			if !strings.HasPrefix(h.String(), table.String()) {
				t.Errorf("baton %s -h does not print the flag table completion uses:\n%s", c.name, h.String())
			}
		}
		for _, sub := range spec.subs {
			check([]string{c.name, sub.name}, sub.flags())
		}
	}
	if n < 100 {
		t.Errorf("only %d flags checked", n)
	}
}

// TestCompleteLocksFromAdminAPI: lock names and waiters come from the
// admin API that 'baton locks' would ask (--admin typed, or
// BATON_ADMIN_ADDRESS).
func TestCompleteLocksFromAdminAPI(t *testing.T) {
	f := startServe(t, func(c *serveConfig) { c.adminListen = "127.0.0.1:0" })
	owner := opstest.Dial(t, f.addrs.protocol)
	owner.Acquire("jobs/nightly", 10*time.Second)
	owner.Expect(protocol.TypeAcquired, 0)
	waiter := opstest.Dial(t, f.addrs.protocol)
	waiter.Acquire("jobs/nightly", 10*time.Second)
	waiter.Expect(protocol.TypeWaiting, 0)
	v2 := opstest.DialV2(t, f.addrs.protocol, 10*time.Second, "w2")
	v2.Claim(3, protocol.ModeExclusive, 0, "jobs/nightly")
	v2.ExpectV2(protocol.TypeQueued, 3, 0)
	other := opstest.Dial(t, f.addrs.protocol)
	other.Acquire("db", 10*time.Second)
	other.Expect(protocol.TypeAcquired, 0)

	t.Setenv("BATON_ADMIN_ADDRESS", "127.0.0.1:1")
	if w := words(complete([]string{"show", ""})); len(w) != 0 {
		t.Errorf("no admin API: %q", w)
	}
	if w := words(complete([]string{"show", "--admin", f.addrs.admin, "jo"})); !slices.Equal(w, []string{"jobs/nightly"}) {
		t.Errorf("show --admin ADDR jo = %q", w)
	}
	// A version 1 waiter is named by its address, a version 2 one by
	// SESSION/CLAIM, as 'baton kick' takes them.
	if w := words(complete([]string{"kick", "--admin=" + f.addrs.admin, "jobs/nightly", ""})); len(w) != 2 || w[0] != waiter.Addr() || !strings.HasSuffix(w[1], "/3") {
		t.Errorf("kick NAME = %q, want the waiter %s and a SESSION/3", w, waiter.Addr())
	}
	t.Setenv("BATON_ADMIN_ADDRESS", f.addrs.admin)
	if w := words(complete([]string{"run", "--wait", "1s", ""})); !slices.Equal(w, []string{"db", "jobs/nightly"}) {
		t.Errorf("run NAME = %q", w)
	}
	if got := complete([]string{"release", "d"}); len(got.cands) != 1 || got.cands[0].desc != "held by "+other.Addr() {
		t.Errorf("release d = %+v", got.cands)
	}
	// The same through the binary and bash (below): the admin lookup
	// works from a real shell.
	script := completionScript(t, "bash")
	out := bashComplete(t, script, []string{"BATON_ADMIN_ADDRESS=" + f.addrs.admin}, "baton release j")
	if !slices.Equal(out, []string{"jobs/nightly"}) {
		t.Errorf("bash: baton release j = %q", out)
	}
}

// bashComplete runs the bash completion function for line (completing at
// its end) as bash would: COMP_WORDS split at blanks and at the
// characters of COMP_WORDBREAKS, and returns COMPREPLY.
func bashComplete(t *testing.T, script string, env []string, line string) []string {
	t.Helper()
	bash := needTool(t, "bash")
	// Let bash split the words itself, with its default COMP_WORDBREAKS.
	prog := `
source "$1"
line=$2
COMP_LINE=$line
COMP_POINT=${#line}
# Split as readline does: blanks separate words; each of = and : is a
# word of its own (the default COMP_WORDBREAKS has both).
COMP_WORDS=()
w=
for ((i = 0; i < ${#line}; i++)); do
    ch=${line:i:1}
    case $ch in
    ' ') [[ -n $w ]] && COMP_WORDS+=("$w"); w= ;;
    '=' | ':') [[ -n $w ]] && COMP_WORDS+=("$w"); COMP_WORDS+=("$ch"); w= ;;
    *) w+=$ch ;;
    esac
done
if [[ -n $w || $line == *' ' ]]; then COMP_WORDS+=("$w"); fi
COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
_baton_complete
printf '%s\n' "${COMPREPLY[@]}"
`
	out := runShell(t, shellEnv(t, env...), bash, "-c", prog, "bash", script, line)
	var got []string
	for _, l := range strings.Split(out, "\n") {
		if l != "" {
			got = append(got, l)
		}
	}
	return got
}

// TestBashCompletion drives the real bash completion function and checks
// COMPREPLY, including the words bash splits at '=' and ':'.
func TestBashCompletion(t *testing.T) {
	t.Parallel()
	script := completionScript(t, "bash")
	dir := t.TempDir()
	for _, name := range []string{"server.crt", "server.key"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "state"), 0o755); err != nil {
		t.Fatal(err)
	}
	noAdmin := []string{"BATON_ADMIN_ADDRESS=127.0.0.1:1"}
	for _, tc := range []struct {
		line     string
		want     []string
		contains []string
	}{
		{line: "baton ru", want: []string{"run"}},
		{line: "baton se", want: []string{"serve"}},
		{line: "baton completion ", want: []string{"bash", "fish", "zsh"}},
		{line: "baton help sh", want: []string{"show"}},
		{line: "baton run --lea", want: []string{"--lease"}},
		{line: "baton serve -listen 127.0.0.1:7070 -log-l", want: []string{"-log-level"}},
		{line: "baton serve -log-level w", want: []string{"warn"}},
		{line: "baton run --lease 3", want: []string{"3ms", "3s", "3m", "3h"}},
		// bash splits "--lease=" into "--lease" "=": the reply replaces "=".
		{line: "baton run --lease=", contains: []string{"=2s", "=100ms"}},
		{line: "baton run --lease=5", want: []string{"5ms", "5s", "5m", "5h"}},
		{line: "baton serve -log-format=t", want: []string{"text"}},
		// and "127.0.0.1:" into "127.0.0.1" ":".
		{line: "baton status --server 127.0.0.1:", want: []string{":7070"}},
		{line: "baton status --server 127.0.0.1:7", want: []string{"7070"}},
		{line: "baton serve -tls-cert " + dir + "/server.c", want: []string{dir + "/server.crt"}},
		{line: "baton serve -tls-key=" + dir + "/server.k", want: []string{dir + "/server.key"}},
		{line: "baton serve -data-dir " + dir + "/", want: []string{dir + "/state"}},
		{line: "baton dirlock break --f", want: []string{"--force"}},
		{line: "baton run job -- bas", contains: []string{"bash"}},
		{line: "baton run job ", want: []string{"--"}},
		{line: "baton show ", want: nil},
	} {
		got := bashComplete(t, script, noAdmin, tc.line)
		ok := tc.want == nil && tc.contains == nil && len(got) == 0 || tc.want != nil && slices.Equal(got, tc.want)
		if tc.contains != nil {
			ok = true
			for _, c := range tc.contains {
				ok = ok && slices.Contains(got, c)
			}
		}
		if !ok {
			t.Errorf("bash %q: COMPREPLY = %q, want %q (or containing %q)", tc.line, got, tc.want, tc.contains)
		}
	}
	// Sourced in an interactive shell, it registers itself for baton.
	out := runShell(t, shellEnv(t), needTool(t, "bash"), "-c", `source "$1"; complete -p baton`, "bash", script)
	if strings.TrimSpace(out) != "complete -F _baton_complete baton" {
		t.Errorf("complete -p baton = %q", out)
	}
}

// TestZshCompletion: the script parses, registers itself with compinit,
// and its function offers the right words (compadd and _files stubbed,
// since zsh completes only inside its line editor).
func TestZshCompletion(t *testing.T) {
	t.Parallel()
	zsh := needTool(t, "zsh")
	script := completionScript(t, "zsh")
	env := shellEnv(t, "BATON_ADMIN_ADDRESS=127.0.0.1:1")
	runShell(t, env, zsh, "-n", script)
	out := runShell(t, env, zsh, "-f", "-c", `autoload -U compinit && compinit -u -d "$HOME/.zcompdump"; source "$1"; print -r -- "$_comps[baton]"`, "zsh", script)
	if strings.TrimSpace(out) != "_baton" {
		t.Errorf("zsh: _comps[baton] = %q", out)
	}
	prog := `
source "$1" 2>/dev/null || true   # compdef is missing without compinit
compadd() { [[ $1 == -- ]] && shift; print -rl -- "$@"; }
compset() { print -r -- "compset $*"; }
_files() { print -r -- "_files $*"; }
_command_names() { print -r -- "_command_names $*"; }
words=(${(z)2})
[[ $2 == *' ' ]] && words+=('')
CURRENT=${#words}
_baton
`
	for _, tc := range []struct{ line, want string }{
		{"baton ru", "run"},
		{"baton run --lease 4", "4ms 4s 4m 4h"},
		{"baton run --lease=4", "--lease=4ms --lease=4s --lease=4m --lease=4h"},
		{"baton completion ", "bash fish zsh"},
		{"baton serve -tls-cert=/e", `compset -P -tls-cert= _files`},
		{"baton serve -data-dir ", "_files -/"},
		{"baton run job -- ", "_command_names -e"},
	} {
		out := runShell(t, env, zsh, "-f", "-c", prog, "zsh", script, tc.line)
		if got := strings.Join(strings.Fields(out), " "); got != tc.want {
			t.Errorf("zsh %q: %q, want %q", tc.line, got, tc.want)
		}
	}
}

// TestFishCompletion: the script parses, and fish itself completes with
// it ('complete -C').
func TestFishCompletion(t *testing.T) {
	t.Parallel()
	fish := needTool(t, "fish")
	script := completionScript(t, "fish")
	env := shellEnv(t, "BATON_ADMIN_ADDRESS=127.0.0.1:1")
	runShell(t, env, fish, "-n", script)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "acl.json"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ line, want string }{
		{"baton ru", "run"},
		{"baton run --lea", "--lease"},
		{"baton run --lease 7", "7h 7m 7ms 7s"},
		{"baton serve -log-level e", "error"},
		{"baton completion z", "zsh"},
		{"baton serve --acl-file=" + dir + "/a", "--acl-file=" + dir + "/acl.json"},
	} {
		out := runShell(t, env, fish, "--no-config", "-c", `source $argv[1]; complete -C $argv[2]`, script, tc.line)
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			got = append(got, strings.SplitN(l, "\t", 2)[0])
		}
		slices.Sort(got)
		if strings.Join(got, " ") != tc.want {
			t.Errorf("fish %q: %q, want %q", tc.line, got, tc.want)
		}
	}
	// fish shows descriptions: the summaries and flag usages.
	out := runShell(t, env, fish, "--no-config", "-c", `source $argv[1]; complete -C $argv[2]`, script, "baton stat")
	if !strings.Contains(out, "status\tcheck that a server answers") {
		t.Errorf("fish: no description: %q", out)
	}
}

// TestCompletionCommand: usage errors exit 2; -h and 'baton help
// completion' explain how to install the scripts.
func TestCompletionCommand(t *testing.T) {
	for _, args := range [][]string{{"completion"}, {"completion", "tcsh"}, {"completion", "bash", "zsh"}, {"man", "x"}} {
		if code, _, errOut := cli(args...); code != exitUsage || !strings.Contains(errOut, "Usage: baton") {
			t.Errorf("%q = %d %q", args, code, errOut)
		}
	}
	for _, args := range [][]string{{"completion", "-h"}, {"help", "completion"}} {
		if code, out, _ := cli(args...); code != 0 || !strings.Contains(out, "source <(baton completion bash)") {
			t.Errorf("%q = %d %q", args, code, out)
		}
	}
	if code, out, _ := cli("help", "man"); code != 0 || !strings.Contains(out, "man -l") {
		t.Errorf("help man = %d %q", code, out)
	}
}
