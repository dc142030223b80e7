package docs_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/freeport"
)

// The quick start's tested blocks: a ```console fence right after this
// marker line. Its "$ " lines are commands (a trailing \ continues one),
// the other lines the output they print; a line "..." stands for any
// number of lines.
const qsMarker = "<!-- quickstart-test -->"

// qsCommand is one command of the quick start and the output shown for it.
type qsCommand struct {
	cmd  string
	want []string
	line int // in the Markdown file, for messages
}

// qsSection is the tested commands under one "## " heading: they run in
// one shell, as a reader would type them in one terminal.
type qsSection struct {
	title string
	cmds  []qsCommand
}

// parseQuickstart returns the tested commands of a Markdown text, by section.
func parseQuickstart(text string) ([]qsSection, error) {
	var secs []qsSection
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.HasPrefix(l, "## ") {
			secs = append(secs, qsSection{title: strings.TrimPrefix(l, "## ")})
			continue
		}
		if strings.TrimSpace(l) != qsMarker {
			continue
		}
		if i+1 >= len(lines) || lines[i+1] != "```console" {
			return nil, fmt.Errorf("line %d: %s is not followed by a ```console fence", i+1, qsMarker)
		}
		if len(secs) == 0 {
			return nil, fmt.Errorf("line %d: a tested block before the first ## heading", i+1)
		}
		sec := &secs[len(secs)-1]
		i += 2
		for ; i < len(lines) && lines[i] != "```"; i++ {
			l := lines[i]
			switch {
			case strings.HasPrefix(l, "$ "):
				c := qsCommand{cmd: strings.TrimPrefix(l, "$ "), line: i + 1}
				for strings.HasSuffix(c.cmd, `\`) && i+1 < len(lines) {
					i++
					c.cmd = strings.TrimSuffix(c.cmd, `\`) + " " + strings.TrimSpace(lines[i])
				}
				sec.cmds = append(sec.cmds, c)
			case len(sec.cmds) == 0:
				return nil, fmt.Errorf("line %d: output before the block's first command", i+1)
			default:
				c := &sec.cmds[len(sec.cmds)-1]
				c.want = append(c.want, l)
			}
		}
		if i == len(lines) {
			return nil, fmt.Errorf("unterminated tested block")
		}
	}
	return secs, nil
}

var (
	qsAddr = regexp.MustCompile(`127\.0\.0\.1:([0-9]+)`)
	// What varies from run to run: hex ids, then numbers with their
	// units (tokens, times, durations, ports, epochs), then spacing
	// (table columns follow the widest cell).
	qsHex    = regexp.MustCompile(`\b[0-9a-f]{16,}\b`)
	qsNumber = regexp.MustCompile(`[0-9]+(\.[0-9]+)?(ns|µs|us|ms|s|m|h)?`)
	qsSpace  = regexp.MustCompile(`\s+`)
)

// qsShape is a line with what varies from run to run replaced.
func qsShape(l string) string {
	l = qsHex.ReplaceAllStringFunc(l, func(h string) string {
		if strings.Trim(h, "0123456789") == "" {
			return h // a number, such as a token
		}
		return "H"
	})
	l = qsNumber.ReplaceAllString(l, "N")
	return strings.TrimSpace(qsSpace.ReplaceAllString(l, " "))
}

// qsMatch reports whether the output got has the shape of want, where a
// want line "..." matches any number of lines.
func qsMatch(want, got []string) bool {
	if len(want) == 0 {
		return len(got) == 0
	}
	if want[0] == "..." {
		for k := 0; k <= len(got); k++ {
			if qsMatch(want[1:], got[k:]) {
				return true
			}
		}
		return false
	}
	return len(got) > 0 && qsShape(want[0]) == qsShape(got[0]) && qsMatch(want[1:], got[1:])
}

func TestParseQuickstart(t *testing.T) {
	text := "## One\n\n" + qsMarker + "\n```console\n$ a \\\n    b\nout 1\n...\n$ c\n```\n\n```console\n$ untested\n```\n"
	secs, err := parseQuickstart(text)
	if err != nil {
		t.Fatal(err)
	}
	if len(secs) != 1 || len(secs[0].cmds) != 2 || secs[0].cmds[0].cmd != "a  b" ||
		strings.Join(secs[0].cmds[0].want, "|") != "out 1|..." || secs[0].cmds[1].cmd != "c" {
		t.Fatalf("parsed %+v", secs)
	}
	if !qsMatch([]string{"token 17 at 2026-12-07T21:00:07.382Z, 1.2ms", "..."},
		[]string{"token  1883952599007233 at 2027-01-01T00:00:00.000Z, 812µs", "x", "y"}) {
		t.Error("varying numbers do not match")
	}
	if qsMatch([]string{"lock demo is busy"}, []string{"lock demo is free"}) || qsMatch([]string{"a"}, []string{"a", "b"}) {
		t.Error("different output matches")
	}
}

// TestQuickstart runs the tested blocks of docs/quickstart.md against a
// baton built for the test, each section in a shell of its own, and
// checks the shape of every command's output. The doc's loopback ports
// are mapped to free ones, and the defaults (7070, 7072) set through
// the environment to the same free ports.
func TestQuickstart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds baton and runs servers")
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	b, err := os.ReadFile("quickstart.md")
	if err != nil {
		t.Fatal(err)
	}
	secs, err := parseQuickstart(string(b))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range secs {
		n += len(s.cmds)
	}
	if n < 10 {
		t.Fatalf("only %d tested commands in docs/quickstart.md", n)
	}

	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "baton"), "./cmd/baton")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/baton: %v\n%s", err, out)
	}

	ports := qsPorts(t, string(b))
	mapAddrs := func(s string) string {
		return qsAddr.ReplaceAllStringFunc(s, func(a string) string {
			return "127.0.0.1:" + ports[qsAddr.FindStringSubmatch(a)[1]]
		})
	}
	env := []string{"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"),
		"BATON_LISTEN_ADDRESS=127.0.0.1:" + ports["7070"],
		"BATON_SERVER=127.0.0.1:" + ports["7070"],
		"BATON_ADMIN_ADDRESS=127.0.0.1:" + ports["7072"]}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BATON_") && !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}

	for _, sec := range secs {
		if len(sec.cmds) == 0 {
			continue
		}
		t.Run(sec.title, func(t *testing.T) {
			runQuickstartSection(t, bash, env, sec, mapAddrs)
		})
	}
}

// qsPorts maps every loopback port the doc names, and the defaults, to a
// free port of this machine, below the ephemeral range (internal/freeport:
// a port from a listen on port 0 may be handed to another test's process
// before the node meant to bind it starts, as happened in CI).
func qsPorts(t *testing.T, doc string) map[string]string {
	ports := map[string]string{"7070": "", "7072": ""}
	for _, m := range qsAddr.FindAllStringSubmatch(doc, -1) {
		ports[m[1]] = ""
	}
	for p := range ports {
		ports[p] = freeport.Port(t)
	}
	return ports
}

// runQuickstartSection runs one section's commands in one bash, in a
// fresh directory, and kills what they left running at the end.
func runQuickstartSection(t *testing.T, bash string, env []string, sec qsSection, mapAddrs func(string) string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sh := exec.CommandContext(ctx, bash, "--noprofile", "--norc", "-s")
	sh.Dir = t.TempDir()
	sh.Env = env
	sh.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := sh.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	sh.Stdout, sh.Stderr = pw, pw
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		// The shell and its background jobs share its process group.
		syscall.Kill(-sh.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { sh.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			syscall.Kill(-sh.Process.Pid, syscall.SIGKILL)
			<-done
		}
		pw.Close()
		if t.Failed() {
			for _, f := range []string{"baton.log", "n1.log", "n2.log", "n3.log"} {
				if b, err := os.ReadFile(filepath.Join(sh.Dir, f)); err == nil {
					t.Logf("%s:\n%s", f, b)
				}
			}
		}
	}()
	lines := make(chan string, 1024)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()

	const end = "__quickstart_end__"
	for i, c := range sec.cmds {
		// stdin is the script: the command must not read it.
		script := fmt.Sprintf("{ %s\n} </dev/null\necho %s $?\n", mapAddrs(c.cmd), end)
		if _, err := io.WriteString(stdin, script); err != nil {
			t.Fatalf("quickstart.md:%d: %s: %v", c.line, c.cmd, err)
		}
		var got []string
		status := -1
	read:
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("quickstart.md:%d: %s: the shell ended; output:\n%s", c.line, c.cmd, strings.Join(got, "\n"))
				}
				if k := strings.Index(l, end+" "); k >= 0 {
					if k > 0 {
						got = append(got, l[:k])
					}
					status, _ = strconv.Atoi(strings.TrimSpace(l[k+len(end)+1:]))
					break read
				}
				got = append(got, l)
			case <-ctx.Done():
				t.Fatalf("quickstart.md:%d: %s: no end within the test's time; output so far:\n%s", c.line, c.cmd, strings.Join(got, "\n"))
			}
		}
		want := make([]string, len(c.want))
		for k, w := range c.want {
			want[k] = mapAddrs(w)
		}
		if !qsMatch(want, got) {
			t.Errorf("quickstart.md:%d: %s\nshown:\n%s\nprinted:\n%s", c.line, c.cmd, strings.Join(c.want, "\n"), strings.Join(got, "\n"))
		}
		// A failure the doc does not show (by an `echo $?` next) is one.
		if status != 0 && !(i+1 < len(sec.cmds) && sec.cmds[i+1].cmd == "echo $?") {
			t.Errorf("quickstart.md:%d: %s: exit status %d", c.line, c.cmd, status)
		}
	}
}
