package docs_test

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

const module = "github.com/proxy-operator/proxy-operator"

// section returns the lines of docs/architecture.md under the heading "## name", up to the
// next "## " heading.
func section(t *testing.T, name string) []string {
	t.Helper()
	b, err := os.ReadFile("architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	in := false
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "## ") {
			if in {
				break
			}
			in = l == "## "+name
			continue
		}
		if in {
			out = append(out, l)
		}
	}
	if !in && out == nil {
		t.Fatalf("docs/architecture.md has no section %q", "## "+name)
	}
	return out
}

// goPackages lists the module's packages with the first sentence of each package's doc
// comment, as `go list` reads it (empty for a folder holding only tests).
func goPackages(t *testing.T) map[string]string {
	t.Helper()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		goCmd = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goCmd, "list", "-e", "-f", "{{.ImportPath}}\t{{.Doc}}", "./...")
	cmd.Dir = ".."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	pkgs := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		path, doc, _ := strings.Cut(sc.Text(), "\t")
		rel := strings.TrimPrefix(strings.TrimPrefix(path, module), "/")
		if rel == "" {
			rel = "."
		}
		pkgs[rel] = doc
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found only %d packages:\n%s", len(pkgs), out)
	}
	return pkgs
}

// tableRow is `| cell | cell |`, split into trimmed cells.
func tableRow(l string) []string {
	l = strings.TrimSpace(l)
	if !strings.HasPrefix(l, "|") || !strings.HasSuffix(l, "|") || strings.HasPrefix(l, "|---") {
		return nil
	}
	cells := strings.Split(l[1:len(l)-1], "|")
	for i := range cells {
		cells[i] = strings.TrimSpace(cells[i])
	}
	return cells
}

var firstCode = regexp.MustCompile("^`([^`]+)`$")

// TestComponentsTableMatchesPackages checks the "Go packages" table of docs/architecture.md
// against the module: one row per package, no row for a package that does not exist, and
// each row's sentence is the package doc comment's first sentence word for word (a package
// with only tests has no doc comment; its row starts "Tests only"). Changing a package's doc
// comment therefore means changing its row, and a new package needs a row.
func TestComponentsTableMatchesPackages(t *testing.T) {
	pkgs := goPackages(t)
	rows := map[string]string{}
	for _, l := range section(t, "Components") {
		cells := tableRow(l)
		if len(cells) != 2 || cells[0] == "package" {
			continue
		}
		m := firstCode.FindStringSubmatch(cells[0])
		if m == nil {
			t.Errorf("components row %q: the first cell must be a package path in backticks", l)
			continue
		}
		if _, dup := rows[m[1]]; dup {
			t.Errorf("components table lists %s twice", m[1])
		}
		rows[m[1]] = cells[1]
	}
	var missing, extra []string
	for p, doc := range pkgs {
		row, ok := rows[p]
		if !ok {
			missing = append(missing, p)
			continue
		}
		switch {
		case doc == "" && !strings.HasPrefix(row, "Tests only"):
			t.Errorf("%s has no package doc comment (tests only?): its row must start with \"Tests only\", got %q", p, row)
		case doc != "" && row != doc:
			t.Errorf("%s: row and package doc comment differ\n row: %s\n doc: %s", p, row, doc)
		}
	}
	for p := range rows {
		if _, ok := pkgs[p]; !ok {
			extra = append(extra, p)
		}
	}
	slices.Sort(missing)
	slices.Sort(extra)
	if len(missing) > 0 {
		t.Errorf("packages missing from the components table of docs/architecture.md (add a row: the path in backticks, then the first sentence of its package doc comment): %v", missing)
	}
	if len(extra) > 0 {
		t.Errorf("components table rows for packages that do not exist: %v", extra)
	}
}

// whereRef is `path/file.go:Func`, `path/file.go:(*Type).Method` or `path/file.lua`.
var whereRef = regexp.MustCompile("`([A-Za-z0-9_./-]+\\.(?:go|lua|yaml|sh))(?::(?:\\(\\*?([A-Za-z0-9_]+)\\)\\.)?([A-Za-z0-9_]+))?`")

// TestWhereToLookResolves checks that every file the "Where to look" table of
// docs/architecture.md names exists and declares the function or method named beside it.
func TestWhereToLookResolves(t *testing.T) {
	refs := 0
	for _, l := range section(t, "Where to look") {
		cells := tableRow(l)
		if len(cells) != 2 {
			continue
		}
		for _, m := range whereRef.FindAllStringSubmatch(cells[1], -1) {
			refs++
			path, typ, fn := m[1], m[2], m[3]
			src, err := os.ReadFile(filepath.Join("..", filepath.FromSlash(path)))
			if err != nil {
				t.Errorf("where to look: %s: %v", m[0], err)
				continue
			}
			if fn == "" {
				continue
			}
			recv := ""
			if typ != "" {
				recv = `\(\w+ \*?` + regexp.QuoteMeta(typ) + `(\[[^\]]*\])?\) `
			}
			decl := regexp.MustCompile(`(?m)^func ` + recv + regexp.QuoteMeta(fn) + `[\[(]`)
			if !decl.Match(src) {
				t.Errorf("where to look: %s: %s declares no such function", m[0], path)
			}
		}
	}
	if refs < 10 {
		t.Errorf("the where-to-look table names only %d file:function references", refs)
	}
}
