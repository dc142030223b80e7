// Package docs_test checks the links of the user-facing Markdown files:
// every relative link names a file or directory of the repository, and
// every #anchor one of the target's headings, slugged as GitHub does.
// External links are not fetched.
package docs_test

import (
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

const root = ".." // the repository, from this package's directory

// linkedFiles returns the checked files, relative to root, in slash form:
// README.md, CHANGELOG.md, and the Markdown under docs/, deploy/ and
// examples/, and the clients' READMEs.
func linkedFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "CHANGELOG.md"}
	for _, dir := range []string{"docs", "deploy", "examples", "clients"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(d.Name(), ".md") || (dir == "clients" && d.Name() != "README.md") {
				return nil
			}
			rel, err := filepath.Rel(root, p)
			files = append(files, filepath.ToSlash(rel))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return files
}

var (
	fence      = regexp.MustCompile("^ {0,3}(```|~~~)")
	atxHeading = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	setextLine = regexp.MustCompile(`^ {0,3}(=+|-+)[ \t]*$`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	codeSpan   = regexp.MustCompile("(`+)(.+?)`+")
	// [text](target "title") and ![alt](target), the target in <> or bare.
	inlineLink = regexp.MustCompile(`!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(?:<([^>]*)>|([^\s()]*(?:\([^\s()]*\)[^\s()]*)*))(?:\s+(?:"[^"]*"|'[^']*'))?\s*\)`)
	refDef     = regexp.MustCompile(`(?m)^ {0,3}\[[^\]]+\]:[ \t]*<?([^\s>]+)>?`)
	htmlLink   = regexp.MustCompile(`<(?:a|img)\s[^>]*?(?:href|src)="([^"]*)"`)
	scheme     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	lineAnchor = regexp.MustCompile(`^L[0-9]+(-L[0-9]+)?$`)
	mdLink     = regexp.MustCompile(`!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\([^)]*\)`)
	htmlTag    = regexp.MustCompile(`<[^>]+>`)
	emphasis   = regexp.MustCompile(`\*+|(^|[^\p{L}\p{N}])_+|_+([^\p{L}\p{N}]|$)`)
)

// link is one link of a file: its target as written and its line.
type link struct {
	target string
	line   int
}

// parse returns a Markdown file's links and its anchors (heading slugs
// and explicit <a name|id>). Fenced code blocks hold neither; code spans
// hold no links.
func parse(text string) (links []link, anchors map[string]bool) {
	anchors = map[string]bool{}
	seen := map[string]int{}
	addHeading := func(h string) {
		s := slug(h)
		// GitHub numbers repeated slugs: x, x-1, x-2.
		if n, ok := seen[s]; ok {
			seen[s] = n + 1
			s = fmt.Sprintf("%s-%d", s, n+1)
		} else {
			seen[s] = 0
		}
		anchors[s] = true
	}
	var inFence string
	prev := ""          // the previous line when it can be a setext heading's text
	var masked []string // the lines outside fenced code, for the links
	for _, line := range strings.Split(text, "\n") {
		if m := fence.FindStringSubmatch(line); m != nil {
			switch {
			case inFence == "":
				inFence = m[1]
			case inFence == m[1]:
				inFence = ""
			}
			prev = ""
			masked = append(masked, "")
			continue
		}
		if inFence != "" {
			masked = append(masked, "")
			continue
		}
		masked = append(masked, line)
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			anchors[m[1]] = true
		}
		if m := atxHeading.FindStringSubmatch(line); m != nil {
			addHeading(m[2])
			prev = ""
		} else if setextLine.MatchString(line) && prev != "" {
			addHeading(prev)
			prev = ""
		} else if strings.TrimSpace(line) == "" || strings.HasPrefix(strings.TrimSpace(line), "|") {
			prev = ""
		} else if prev == "" {
			prev = strings.TrimSpace(line)
		} else {
			prev += " " + strings.TrimSpace(line)
		}
	}
	// Links are found in the whole text, as a link's text may wrap; code
	// spans are blanked first (same length, so offsets give lines).
	code := codeSpan.ReplaceAllStringFunc(strings.Join(masked, "\n"), func(s string) string { return strings.Repeat(" ", len(s)) })
	lineAt := func(off int) int { return 1 + strings.Count(code[:off], "\n") }
	for _, m := range inlineLink.FindAllStringSubmatchIndex(code, -1) {
		target := code[max(m[2], 0):max(m[3], 0)] + code[max(m[4], 0):max(m[5], 0)]
		links = append(links, link{target, lineAt(m[0])})
	}
	for _, m := range htmlLink.FindAllStringSubmatchIndex(code, -1) {
		links = append(links, link{code[m[2]:m[3]], lineAt(m[0])})
	}
	for _, m := range refDef.FindAllStringSubmatchIndex(code, -1) {
		links = append(links, link{code[m[2]:m[3]], lineAt(m[0])})
	}
	return links, anchors
}

// slug is GitHub's anchor for a heading: the rendered text (no markup),
// lower-cased, with every character but letters, digits, marks, spaces,
// hyphens and underscores dropped, and each space a hyphen.
func slug(heading string) string {
	var codes []string
	text := codeSpan.ReplaceAllStringFunc(heading, func(s string) string {
		codes = append(codes, codeSpan.FindStringSubmatch(s)[2])
		return "\x00"
	})
	text = mdLink.ReplaceAllString(text, "$1")
	text = htmlTag.ReplaceAllString(text, "")
	text = emphasis.ReplaceAllString(text, "$1$2")
	for _, c := range codes {
		text = strings.Replace(text, "\x00", strings.TrimSpace(c), 1)
	}
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(text)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestSlug(t *testing.T) {
	for _, tc := range []struct{ heading, want string }{
		{"Quick start", "quick-start"},
		{"`baton run`: the distributed `flock(1)`", "baton-run-the-distributed-flock1"},
		{"Limits and hostile input", "limits-and-hostile-input"},
		{"Sessions (version 2) & claims", "sessions-version-2--claims"},
		{"**Bold** and _emphasis_ in BATON_LEASE", "bold-and-emphasis-in-baton_lease"},
		{"A [link](other.md#x) heading", "a-link-heading"},
		{"`max_waiters` and `-max-waiters`", "max_waiters-and--max-waiters"},
		{"Größe 1.2", "größe-12"},
	} {
		if got := slug(tc.heading); got != tc.want {
			t.Errorf("slug(%q) = %q, want %q", tc.heading, got, tc.want)
		}
	}
}

func TestParse(t *testing.T) {
	links, anchors := parse("# Title\n\n## Title\n\nSee [a\nwrapped](b.md#c), ![i](img.png \"t\"), `[no](code.md)`.\n\n" +
		"```sh\n# not a heading\n[no](fenced.md)\n```\n\nSetext\n---\n\n[ref]: <ref.md>\n<a href=\"html.md\">x</a> <a id=\"here\"></a>\n")
	var targets []string
	for _, l := range links {
		targets = append(targets, l.target)
	}
	if want := []string{"b.md#c", "img.png", "html.md", "ref.md"}; !slices.Equal(targets, want) {
		t.Errorf("links %q, want %q", targets, want)
	}
	for _, a := range []string{"title", "title-1", "setext", "here"} {
		if !anchors[a] {
			t.Errorf("no anchor %q in %v", a, anchors)
		}
	}
	if anchors["not-a-heading"] {
		t.Error("a comment in a code block is an anchor")
	}
}

// TestLinks: every relative link and anchor of the user-facing Markdown
// resolves.
func TestLinks(t *testing.T) {
	files := linkedFiles(t)
	anchorsOf := map[string]map[string]bool{}
	linksOf := map[string][]link{}
	read := func(name string) (map[string]bool, error) {
		if a, ok := anchorsOf[name]; ok {
			return a, nil
		}
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
		if err != nil {
			return nil, err
		}
		linksOf[name], anchorsOf[name] = parse(string(b))
		return anchorsOf[name], nil
	}
	checked := 0
	for _, file := range files {
		if _, err := read(file); err != nil {
			t.Error(err)
			continue
		}
		for _, l := range linksOf[file] {
			if err := checkLink(file, l.target, read); err != nil {
				t.Errorf("%s:%d: %s: %v", file, l.line, l.target, err)
			}
			checked++
		}
	}
	t.Logf("%d links in %d files", checked, len(files))
	if checked < 100 {
		t.Errorf("only %d links in %d files: is the parser broken?", checked, len(files))
	}
}

// checkLink checks one link of file; read returns a Markdown file's anchors.
func checkLink(file, target string, read func(string) (map[string]bool, error)) error {
	if target == "" {
		return fmt.Errorf("empty link")
	}
	if scheme.MatchString(target) || strings.HasPrefix(target, "//") {
		return nil // external: not fetched
	}
	p, frag, hasFrag := strings.Cut(target, "#")
	p, err := url.PathUnescape(p)
	if err != nil {
		return err
	}
	name := file
	if p != "" {
		if strings.HasPrefix(p, "/") {
			name = path.Clean(strings.TrimPrefix(p, "/")) // GitHub: from the repository's root
		} else {
			name = path.Join(path.Dir(file), p)
		}
		if name == ".." || strings.HasPrefix(name, "../") {
			return fmt.Errorf("outside the repository")
		}
		fi, err := os.Stat(filepath.Join(root, filepath.FromSlash(name)))
		if err != nil {
			return fmt.Errorf("no such file or directory")
		}
		if fi.IsDir() {
			if hasFrag {
				return fmt.Errorf("an anchor into a directory")
			}
			return nil
		}
	}
	if !hasFrag {
		return nil
	}
	if !strings.HasSuffix(name, ".md") {
		if lineAnchor.MatchString(frag) {
			return nil // GitHub's line anchors of a source file
		}
		return fmt.Errorf("anchor #%s into a file that is not Markdown", frag)
	}
	anchors, err := read(name)
	if err != nil {
		return err
	}
	if f, err := url.PathUnescape(frag); err != nil || !anchors[f] {
		return fmt.Errorf("%s has no heading with anchor #%s", name, frag)
	}
	return nil
}
