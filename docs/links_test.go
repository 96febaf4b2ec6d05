package docs_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	// mdLink is a Markdown link or image: its target, then its anchor.
	mdLink = regexp.MustCompile(`\]\(([^)\s#]*)(#[^)\s]*)?\)`)
	// pathSpan is inline code naming a file of the repository by its path.
	pathSpan = regexp.MustCompile("`((?:[A-Za-z0-9_.-]+/)+[A-Za-z0-9_.-]+\\.(?:go|md|yaml|yml|py|sh|lua|json))`")
	// docRef is a reference to a file under docs/ from code, scripts or the Makefile.
	docRef = regexp.MustCompile(`\bdocs/[A-Za-z0-9_./-]+\.(?:md|json|yaml)`)
	// inlineCode is a code span within a line, where a link is an example, not a link.
	inlineCode = regexp.MustCompile("`[^`\n]+`")
	// heading is a Markdown heading; anchor turns its text into GitHub's anchor.
	heading    = regexp.MustCompile(`(?m)^#+ (.+)$`)
	notInSlug  = regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)
	fenceBlock = regexp.MustCompile("(?ms)^ *```.*?^ *```")
)

func anchor(h string) string {
	return strings.ReplaceAll(notInSlug.ReplaceAllString(strings.ToLower(strings.TrimSpace(h)), ""), " ", "-")
}

// markdown lists the repository's Markdown files (path from the root), but for vendored and
// generated folders.
func markdown(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir("..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && p != ".." || d.Name() == "node_modules" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDocsLinksResolve: every relative link of every Markdown file reaches a file, and its
// anchor a heading of that file; every file path a live document names in code font exists
// (decision records are exempt from that one: a record describes the tree of its day, and
// says where a file it names went, as 0035 does); every docs/ file the code, scripts and
// Makefile name exists. Issue 35 found four dead references that no test had caught.
func TestDocsLinksResolve(t *testing.T) {
	anchors := map[string]map[string]bool{}
	anchorsOf := func(p string) map[string]bool {
		if a, ok := anchors[p]; ok {
			return a
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		a := map[string]bool{}
		for _, m := range heading.FindAllStringSubmatch(fenceBlock.ReplaceAllString(string(b), ""), -1) {
			a[anchor(m[1])] = true
		}
		anchors[p] = a
		return a
	}
	files := markdown(t)
	if len(files) < 100 {
		t.Fatalf("found %d Markdown files; the walk is wrong", len(files))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := fenceBlock.ReplaceAllString(string(b), "")
		for _, m := range mdLink.FindAllStringSubmatch(inlineCode.ReplaceAllString(text, ""), -1) {
			target, frag := m[1], m[2]
			if strings.Contains(target, ":") {
				continue // http:, https:, mailto:
			}
			p := f
			if target != "" {
				p = filepath.Join(filepath.Dir(f), target)
			}
			if _, err := os.Stat(p); err != nil {
				t.Errorf("%s: link %q: no such file", f, target+frag)
				continue
			}
			if frag != "" && strings.HasSuffix(p, ".md") && !anchorsOf(p)[frag[1:]] {
				t.Errorf("%s: link %q: %s has no heading with that anchor", f, target+frag, p)
			}
		}
		if strings.Contains(filepath.ToSlash(f), "docs/decisions/") {
			continue
		}
		for _, m := range pathSpan.FindAllStringSubmatch(text, -1) {
			if _, err := os.Stat(filepath.Join("..", m[1])); err != nil {
				if _, err := os.Stat(filepath.Join(filepath.Dir(f), m[1])); err != nil {
					t.Errorf("%s: names %s, which does not exist", f, m[1])
				}
			}
		}
	}
	err := filepath.WalkDir("..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && p != ".." {
			return filepath.SkipDir
		}
		name := d.Name()
		if d.IsDir() || !(strings.HasSuffix(name, ".go") || strings.HasSuffix(name, ".sh") || strings.HasSuffix(name, ".py") || name == "Makefile") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, ref := range docRef.FindAllString(string(b), -1) {
			if _, err := os.Stat(filepath.Join("..", ref)); err != nil {
				t.Errorf("%s names %s, which does not exist", p, ref)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
