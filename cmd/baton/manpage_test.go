//go:build unix

package main

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

var updateMan = flag.Bool("update-man", false, "rewrite docs/man/baton.1 from 'baton man'")

const manFile = "../../docs/man/baton.1"

// manSections splits the page at its command subsections.
func manSections(page string) map[string]string {
	out := map[string]string{}
	parts := strings.Split(page, ".SS \"baton ")
	for _, p := range parts[1:] {
		name, body, _ := strings.Cut(p, "\"\n")
		out[name] = body
	}
	return out
}

// TestManPageListsEveryFlag: the page has every flag of every command, in
// that command's section, with its environment variable and default.
func TestManPageListsEveryFlag(t *testing.T) {
	code, page, _ := cli("man")
	if code != 0 {
		t.Fatalf("baton man = %d", code)
	}
	sections := manSections(page)
	n := 0
	for _, c := range cliCommands() {
		if c.name == "help" {
			continue
		}
		body, ok := sections[c.name]
		if !ok {
			t.Errorf("no section for baton %s", c.name)
			continue
		}
		var sets []*flagSet
		if c.flags != nil && !c.hidden {
			sets = append(sets, c.flags())
		}
		for _, s := range c.subs {
			sets = append(sets, s.flags())
		}
		for _, fs := range sets {
			fs.VisitAll(func(f *flag.Flag) {
				n++
				entry := `\fB\-` + roff(f.Name) + `\fR`
				i := strings.Index(body, ".TP\n"+entry)
				if i < 0 {
					t.Errorf("baton %s: flag -%s missing from the man page", c.name, f.Name)
					return
				}
				item, _, _ := strings.Cut(body[i+4:], ".TP\n")
				if env := fs.env[f.Name]; !strings.Contains(item, `\fB`+roff(env)+`\fR`) {
					t.Errorf("baton %s -%s: no %s in %q", c.name, f.Name, env, item)
				}
				if f.DefValue != "" && !strings.Contains(item, `Default: \fB`+roff(f.DefValue)+`\fR`) {
					t.Errorf("baton %s -%s: no default %q in %q", c.name, f.Name, f.DefValue, item)
				}
				if !strings.Contains(page, ".B "+roff(fs.env[f.Name])+"\n") {
					t.Errorf("%s missing from ENVIRONMENT", fs.env[f.Name])
				}
			})
		}
	}
	if n < 50 {
		t.Errorf("only %d flags checked", n)
	}
	// The help text of each command is there too, not only its flags.
	for _, want := range []string{`EX_TEMPFAIL: lock busy (\-\-no\-wait)`, `SIGHUP reopens the audit log`, `source <(baton completion bash)`} {
		if !strings.Contains(page, want) {
			t.Errorf("man page lacks %q", want)
		}
	}
}

// TestManPageFileUpToDate: docs/man/baton.1 is what 'baton man' prints;
// 'go test ./cmd/baton -run TestManPageFileUpToDate -update-man' rewrites it.
func TestManPageFileUpToDate(t *testing.T) {
	page := manPage()
	if *updateMan {
		if err := os.MkdirAll(filepath.Dir(manFile), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(manFile, []byte(page), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(manFile)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != page {
		t.Errorf("docs/man/baton.1 differs from 'baton man': run 'go test ./cmd/baton -run TestManPageFileUpToDate -update-man'")
	}
}

// TestManPageRenders: groff formats the page without a warning, and man
// shows it.
func TestManPageRenders(t *testing.T) {
	groff := needTool(t, "groff")
	p := filepath.Join(t.TempDir(), "baton.1")
	if err := os.WriteFile(p, []byte(manPage()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(groff, "-man", "-Tutf8", "-ww", "-z", p).CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Errorf("groff: %v\n%s", err, out)
	}
	man := needTool(t, "man")
	cmd := exec.Command(man, "-l", p)
	cmd.Env = append(os.Environ(), "MANPAGER=cat", "PAGER=cat", "MANWIDTH=100", "LANG=C.UTF-8")
	out, err = cmd.Output()
	text := string(out)
	for _, want := range []string{"BATON(1)", "NAME", "baton run", "BATON_LEASE", "-conflict-exit-code", "EXIT STATUS"} {
		if err != nil || !strings.Contains(text, want) {
			t.Errorf("man -l: %v; no %q in\n%.2000s", err, want, text)
			break
		}
	}
}
