package test

import (
	"encoding/json"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/proxy-operator/proxy-operator"

// maxMainLines is the most lines main.go may have (docs/decisions/0093).
const maxMainLines = 150

// maxRootFolders is the most root folders that may hold Go code (docs/decisions: the layout).
const maxRootFolders = 12

// domainRE matches the domain packages (module-relative): the decision core, the stores, the
// prober, the providers and the API types. They must not know HTTP routing or the servers.
var domainRE = regexp.MustCompile(`^/(internal/(lifecycle|fleet|pool|netpolicy)|lease|health|providers|api)(/|$)`)

// forbiddenDep says why a domain package may not depend on dep ("" when it may).
func forbiddenDep(dep string) string {
	switch {
	case strings.HasPrefix(dep, "github.com/go-chi/chi"):
		return "the HTTP router"
	case dep == module+"/server" || strings.HasPrefix(dep, module+"/server/"):
		return "the servers and the wiring"
	case dep == module:
		return "the command"
	}
	return ""
}

// pkgInfo is what `go list -json` says of one package that the layout checks use.
type pkgInfo struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

func listPackages(t *testing.T) []pkgInfo {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go command not on PATH")
	}
	cmd := exec.Command("go", "list", "-json", "./...")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v", err)
	}
	var pkgs []pkgInfo
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p pkgInfo
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// rootFolder is the first path element of a module-relative package ("" for the command).
func rootFolder(importPath string) string {
	rel := strings.TrimPrefix(strings.TrimPrefix(importPath, module), "/")
	root, _, _ := strings.Cut(rel, "/")
	return root
}

// TestLayering checks that no domain package depends, even indirectly, on chi, server/... or
// the command.
func TestLayering(t *testing.T) {
	// The classifiers must be able to fail.
	if forbiddenDep("github.com/go-chi/chi/v5") == "" || forbiddenDep(module+"/server/hooks") == "" || forbiddenDep(module+"/internal/fleet") != "" {
		t.Fatal("forbiddenDep misclassifies")
	}
	if !domainRE.MatchString("/providers/gcp") || !domainRE.MatchString("/internal/pool") || domainRE.MatchString("/server/hooks") || domainRE.MatchString("/internal/kubetest") {
		t.Fatal("domainRE misclassifies")
	}
	checked := 0
	for _, p := range listPackages(t) {
		rel := strings.TrimPrefix(p.ImportPath, module)
		if !domainRE.MatchString(rel) {
			continue
		}
		checked++
		for _, dep := range p.Deps {
			if why := forbiddenDep(dep); why != "" {
				t.Errorf("domain package %s depends on %s (%s)", rel, dep, why)
			}
		}
	}
	if checked < 5 {
		t.Errorf("checked %d domain packages, want at least lifecycle, lease, fleet, health, providers", checked)
	}
}

// TestRootLayout checks the shape of the house: few root folders hold Go code, no two of them
// import each other (non-test imports), and api/ imports nothing of ours.
func TestRootLayout(t *testing.T) {
	pkgs := listPackages(t)
	roots := map[string]bool{}
	arrows := map[[2]string]bool{}
	for _, p := range pkgs {
		from := rootFolder(p.ImportPath)
		if from != "" {
			roots[from] = true
		}
		for _, imp := range p.Imports {
			if imp != module && !strings.HasPrefix(imp, module+"/") {
				continue
			}
			to := rootFolder(imp)
			if from == "api" {
				t.Errorf("%s imports %s: api/ must import nothing of ours", p.ImportPath, imp)
			}
			if to != from && from != "" && to != "" {
				arrows[[2]string{from, to}] = true
			}
		}
	}
	var names []string
	for r := range roots {
		names = append(names, r)
	}
	sort.Strings(names)
	if len(names) > maxRootFolders {
		t.Errorf("%d root folders hold Go code, want at most %d: %v", len(names), maxRootFolders, names)
	}
	for a := range arrows {
		if arrows[[2]string{a[1], a[0]}] && a[0] < a[1] {
			t.Errorf("root folders %s and %s import each other", a[0], a[1])
		}
	}
	t.Logf("%d root folders with Go code %v, %d arrows between them", len(names), names, len(arrows))
}

// mainMayImport are the packages of ours main.go may import besides server: the subcommands'.
var mainMayImport = map[string]bool{"/server/replay": true}

// TestMainIsFlagsAndDispatch: main.go imports nothing that serves, decides or stores; it turns
// flags into server.Config and dispatches subcommands.
func TestMainIsFlagsAndDispatch(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(src), "\n"); n > maxMainLines {
		t.Errorf("main.go is %d lines, want at most %d: flag bindings go in server/flags.go, subcommands beside what they run", n, maxMainLines)
	}
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join("..", "main.go"), src, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		rel := strings.TrimPrefix(path, module)
		switch {
		case path == "net" || strings.HasPrefix(path, "net/"):
			t.Errorf("main.go imports %s: listeners and servers belong to package server", path)
		case strings.HasPrefix(path, "github.com/prometheus/"), strings.HasPrefix(path, "github.com/go-chi/"):
			t.Errorf("main.go imports %s: metrics and routing belong to package server", path)
		case rel != path && mainMayImport[rel]:
		case rel != path && (domainRE.MatchString(rel) || strings.HasPrefix(rel, "/server/") || strings.HasPrefix(rel, "/health/")):
			t.Errorf("main.go imports %s: wiring belongs to package server", path)
		}
	}
}

// TestBinaryCarriesNoTypedClientset: the operator reaches the API server through the dynamic
// client alone (decision 0284). client-go's typed clientset, informers, listers and apply
// configurations register every API group of Kubernetes and were a quarter of a cold build;
// one import of any of them (a typed client, client-go's scheme, dynamicinformer) brings them
// all back, and this says which package did.
func TestBinaryCarriesNoTypedClientset(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go command not on PATH")
	}
	cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", ".")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps .: %v", err)
	}
	heavy := []string{"k8s.io/client-go/kubernetes", "k8s.io/client-go/informers", "k8s.io/client-go/listers", "k8s.io/client-go/applyconfigurations"}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 100 {
		t.Fatalf("go list -deps . listed %d packages, want the binary's hundreds", len(lines))
	}
	for _, line := range lines {
		pkg, imports, _ := strings.Cut(line, " ")
		if slices.ContainsFunc(heavy, func(h string) bool { return strings.HasPrefix(pkg, h) }) {
			continue // reported at its importer
		}
		for _, imp := range strings.Fields(imports) {
			for _, h := range heavy {
				if imp == h || strings.HasPrefix(imp, h+"/") {
					t.Errorf("%s imports %s: the binary then carries client-go's typed clients of every API group", pkg, imp)
				}
			}
		}
	}
}
