//go:build unix

package main

import (
	"encoding/json"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/batonlock/baton/protocol"
)

// watchLine is a line of 'baton watch --json'.
type watchLine struct {
	Name    string
	Holders []struct {
		Token uint64
		Mode  string
		Value string
		Label string
	}
}

func parseWatch(t *testing.T, line string) watchLine {
	t.Helper()
	var w watchLine
	if err := json.Unmarshal([]byte(line), &w); err != nil {
		t.Fatalf("watch line %q: %v", line, err)
	}
	return w
}

// Two candidates and two watchers, as processes: the first leads and
// runs its command with its token; when it is killed, the second leads
// with a larger token and its value, and the watchers print each change
// in order; a watcher ends with 0 on SIGINT, and baton elect exits with
// its command's status.
func TestElectAndWatch(t *testing.T) {
	ts := startServer(t)
	jw := startCLI(t, nil, "watch", "--server", ts.addr, "--json", "db")
	if w := parseWatch(t, jw.line()); w.Name != "db" || len(w.Holders) != 0 {
		t.Fatalf("first state %+v, want free", w)
	}
	cmd := `echo leader $BATON_TOKEN; read x; exit 3`
	c1 := startCLI(t, nil, "elect", "--server", ts.addr, "--value", "10.0.0.1", "db", "--", "sh", "-c", cmd)
	t1 := tokenOf(t, c1.line(), "leader")
	w := parseWatch(t, jw.line())
	if len(w.Holders) != 1 || w.Holders[0].Token != t1 || w.Holders[0].Value != "10.0.0.1" ||
		w.Holders[0].Mode != "exclusive" || !strings.HasPrefix(w.Holders[0].Label, "baton elect ") {
		t.Fatalf("state %+v, want the first leader, token %d", w, t1)
	}
	tw := startCLI(t, []string{"BATON_SERVER=" + ts.addr}, "watch", "db")
	if l := tw.line(); !strings.HasPrefix(l, "held token=") || !strings.Contains(l, `value="10.0.0.1"`) {
		t.Fatalf("text line %q", l)
	}
	c2 := startCLI(t, []string{"BATON_VALUE=10.0.0.2"}, "elect", "-v", "--server", ts.addr, "db", "--", "sh", "-c", cmd)

	c1.cmd.Process.Signal(syscall.SIGKILL)
	t2 := tokenOf(t, c2.line(), "leader")
	if t2 <= t1 {
		t.Fatalf("second leader's token %d, not above %d", t2, t1)
	}
	if w := parseWatch(t, jw.line()); len(w.Holders) != 0 {
		t.Fatalf("state %+v, want free after the leader died", w)
	}
	if w := parseWatch(t, jw.line()); len(w.Holders) != 1 || w.Holders[0].Token != t2 || w.Holders[0].Value != "10.0.0.2" {
		t.Fatalf("state %+v, want the second leader, token %d", w, t2)
	}
	if l := tw.line(); l != "free" {
		t.Fatalf("text line %q, want free", l)
	}
	if l := tw.line(); !strings.Contains(l, `value="10.0.0.2"`) {
		t.Fatalf("text line %q", l)
	}

	io.WriteString(c2.stdin, "done\n")
	if code, _ := c2.wait(); code != 3 {
		t.Fatalf("baton elect exit %d, want the command's 3; stderr:\n%s", code, c2.stderr)
	}
	if e := c2.stderr.String(); !strings.Contains(e, `baton elect: leading "db" after`) {
		t.Errorf("baton elect -v said, once elected:\n%s", e)
	}
	if w := parseWatch(t, jw.line()); len(w.Holders) != 0 {
		t.Fatalf("state %+v, want free after the leader exited", w)
	}
	for _, p := range []*runProc{jw, tw} {
		p.cmd.Process.Signal(syscall.SIGINT)
		if code, _ := p.wait(); code != 0 {
			t.Fatalf("baton watch exit %d after SIGINT, want 0; stderr:\n%s", code, p.stderr)
		}
	}
	once := startCLI(t, nil, "watch", "--server", ts.addr, "--once", "db")
	if code, out := once.wait(); code != 0 || out != "free" {
		t.Fatalf("watch --once: exit %d, %q", code, out)
	}
}

// Usage errors are 2 without connecting; a server without values and
// watches is 69 with a message that says so.
func TestElectWatchErrors(t *testing.T) {
	for _, args := range [][]string{
		{"elect", "--value", strings.Repeat("v", protocol.MaxValueLen+1), "db", "--", "true"},
		{"elect", "--value", "v", "db"},
		{"elect", "--value", "v"},
		{"watch"},
		{"watch", "a", "b"},
		{"watch", "--lease", "0s", "db"},
	} {
		p := startCLI(t, nil, args...)
		if code, _ := p.wait(); code != exitUsage {
			t.Errorf("%q: exit %d, want 2; stderr:\n%s", args, code, p.stderr)
		}
	}

	// An older server: HELLO with the values flag is refused 0x1e.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var pre [protocol.PreambleLen]byte
				if _, err := io.ReadFull(c, pre[:]); err != nil {
					return
				}
				hello, err := protocol.ReadHello(c)
				if err != nil {
					return
				}
				if hello.Values() {
					c.Write(protocol.AppendSessionError(nil, protocol.CodeUnsupportedFeature, "reserved flag"))
					return
				}
				c.Write(protocol.AppendWelcome(nil, 1))
				io.Copy(io.Discard, c)
			}()
		}
	}()
	addr := ln.Addr().String()
	for _, args := range [][]string{
		{"watch", "--server", addr, "db"},
		{"elect", "--server", addr, "--value", "v", "db", "--", "true"},
	} {
		p := startCLI(t, nil, args...)
		code, _ := p.wait()
		if code != 69 || !strings.Contains(p.stderr.String(), "does not support values and watches") {
			t.Errorf("%q against an older server: exit %d, stderr:\n%s", args, code, p.stderr)
		}
	}
}
