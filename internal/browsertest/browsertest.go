// Package browsertest drives the web dashboard in headless Chromium
// (Debian's chromium package) through github.com/chromedp/chromedp, for
// the tests of admin/ui and cmd/baton. Only tests import it, so chromedp
// is never linked into baton.
//
// Outside CI the tests skip when chromium is missing; under CI=true they
// fail. With BATON_DASHBOARD_SCREENSHOTS set, Page.Screenshot writes the
// screenshots of docs/dashboard.md to the module's docs/ directory.
package browsertest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/accessibility"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// ScreenshotsEnv names the environment variable that turns on
// Page.Screenshot.
const ScreenshotsEnv = "BATON_DASHBOARD_SCREENSHOTS"

// Page is one browser tab whose console errors and warnings and uncaught
// exceptions fail the test.
type Page struct {
	T   *testing.T
	Ctx context.Context
	mu  sync.Mutex
	bad []string
}

// Chromium returns the path of a Chromium to drive, or skips the test
// (fails it under CI=true) when there is none.
func Chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless_shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed (.ci/run installs it with apt-get); the dashboard tests need it under CI=true")
	}
	t.Skip("chromium is not installed; skipping the browser tests (set CI=true to make this a failure)")
	return ""
}

// Open starts a headless Chromium with a window of width×height and
// opens a tab; the test's cleanup reports the page's JavaScript errors
// and stops the browser.
func Open(t *testing.T, width, height int) *Page {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(Chromium(t)),
		chromedp.NoSandbox, chromedp.WindowSize(width, height))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelT := context.WithTimeout(ctx, 3*time.Minute)
	p := &Page{T: t, Ctx: ctx}
	err := chromedp.Listen(ctx, func(ev any) {
		p.mu.Lock()
		defer p.mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeWarning || ev.Type == runtime.ConsoleAPICalledTypeAssert {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value))
				}
				p.bad = append(p.bad, fmt.Sprintf("console.%s: %s", ev.Type, strings.Join(args, " ")))
			}
		case *runtime.EventExceptionThrown:
			p.bad = append(p.bad, (&chromedp.ExceptionError{ExceptionDetails: ev.ExceptionDetails}).Error())
		}
	})
	if err != nil {
		cancelT()
		cancel()
		cancelA()
		t.Fatalf("start chromium: %v", err)
	}
	t.Cleanup(func() {
		p.mu.Lock()
		for _, b := range p.bad {
			t.Errorf("JavaScript error in the page: %s", b)
		}
		p.mu.Unlock()
		cancelT()
		cancel()
		cancelA()
	})
	return p
}

// Do runs steps, each batch within 20 s (a click on a missing element
// waits for it).
func (p *Page) Do(steps ...chromedp.Action[chromedp.Void]) {
	p.T.Helper()
	ctx, cancel := context.WithTimeout(p.Ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		p.T.Fatalf("browser: %v", err)
	}
}

// Eval evaluates the JavaScript expression js in the page.
func Eval[T any](p *Page, js string) T {
	p.T.Helper()
	v, err := chromedp.Run(p.Ctx, chromedp.Evaluate[T](js))
	if err != nil {
		p.T.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// WaitFor polls the page until the JavaScript expression cond is true,
// for at most limit, and returns how long it took.
func (p *Page) WaitFor(what, cond string, limit time.Duration) time.Duration {
	p.T.Helper()
	start := time.Now()
	for time.Since(start) < limit {
		if Eval[bool](p, "!!("+cond+")") {
			return time.Since(start)
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.T.Fatalf("%s: not within %v", what, limit)
	return 0
}

// Renders returns how many times the page has drawn fresh data.
func (p *Page) Renders() int {
	return Eval[int](p, "+(document.body.dataset.renders||0)")
}

// Fresh waits until the page has drawn data fetched after now.
func (p *Page) Fresh() {
	p.T.Helper()
	n := p.Renders()
	p.WaitFor("a fresh render", fmt.Sprintf("+(document.body.dataset.renders||0) >= %d", n+2), 5*time.Second)
}

// Screenshot writes the page to docs/name in the module's directory,
// when ScreenshotsEnv is set.
func (p *Page) Screenshot(name string) {
	p.T.Helper()
	if os.Getenv(ScreenshotsEnv) == "" {
		return
	}
	buf, err := chromedp.Run(p.Ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.T.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(moduleDir(p.T), "docs", name)
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		p.T.Fatal(err)
	}
	p.T.Logf("wrote %s", path)
}

// moduleDir returns the directory of go.mod above the test's working
// directory (its package's directory).
func moduleDir(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			t.Fatalf("no go.mod above %s", dir)
		}
	}
}

// CheckAccessibleButtons reads the browser's accessibility tree: every
// button has a name, and the buttons named in want are there.
func CheckAccessibleButtons(t *testing.T, p *Page, want []string) {
	t.Helper()
	names := map[string]bool{}
	for _, n := range AccessibleNames(t, p, "button") {
		names[n] = true
	}
	for _, w := range want {
		if !names[w] {
			t.Errorf("no button named %q in the accessibility tree; buttons: %v", w, names)
		}
	}
}

// AccessibleNames returns the names of the page's elements of an ARIA
// role (button, textbox, searchbox, table, ...) from the browser's
// accessibility tree, and fails the test for each one without a name.
func AccessibleNames(t *testing.T, p *Page, role string) []string {
	t.Helper()
	tree, err := chromedp.Run(p.Ctx, chromedp.Action[accessibility.GetFullAXTreeResult](func(ctx context.Context, tg *chromedp.Target) (accessibility.GetFullAXTreeResult, error) {
		return cdp.Call(ctx, tg, accessibility.GetFullAXTree, accessibility.GetFullAXTreeParams{})
	}))
	if err != nil {
		t.Fatalf("accessibility tree: %v", err)
	}
	want, _ := json.Marshal(role)
	var names []string
	for _, n := range tree.Nodes {
		if n.Ignored || n.Role == nil || string(n.Role.Value) != string(want) {
			continue
		}
		var name string
		if n.Name != nil {
			json.Unmarshal(n.Name.Value, &name)
		}
		if strings.TrimSpace(name) == "" {
			t.Errorf("a %s without an accessible name (node %s)", role, n.NodeID)
		}
		names = append(names, name)
	}
	return names
}
