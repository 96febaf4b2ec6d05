package main

import (
	"go/parser"
	"go/token"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/proxy-operator/proxy-operator"

// domainRE matches the domain packages (module-relative): the decision core, the stores, the
// prober, the providers and the API types, and the pool decision package once it exists. They
// must not know HTTP routing or the servers.
var domainRE = regexp.MustCompile(`^/(lifecycle|lease|fleet|health|providers|api|pools?)(/|$)`)

// forbiddenDep says why a domain package may not depend on dep ("" when it may).
func forbiddenDep(dep string) string {
	switch {
	case strings.HasPrefix(dep, "github.com/go-chi/chi"):
		return "the HTTP router"
	case dep == module+"/server" || strings.HasPrefix(dep, module+"/server/"):
		return "a server package"
	case dep == module+"/operator" || strings.HasPrefix(dep, module+"/operator/"):
		return "the wiring"
	case dep == module:
		return "the command"
	}
	return ""
}

// TestLayering checks with `go list -deps` that no domain package depends, even indirectly,
// on chi, server/..., the operator wiring or the command.
func TestLayering(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go command not on PATH")
	}
	// The classifier must be able to fail.
	if forbiddenDep("github.com/go-chi/chi/v5") == "" || forbiddenDep(module+"/server/hooks") == "" || forbiddenDep(module+"/fleet") != "" {
		t.Fatal("forbiddenDep misclassifies")
	}
	if !domainRE.MatchString("/providers/gcp") || !domainRE.MatchString("/pool") || domainRE.MatchString("/server/hooks") {
		t.Fatal("domainRE misclassifies")
	}
	pkgs, err := exec.Command("go", "list", "./...").Output()
	if err != nil {
		t.Fatalf("go list ./...: %v", err)
	}
	checked := 0
	for _, pkg := range strings.Fields(string(pkgs)) {
		rel := strings.TrimPrefix(pkg, module)
		if !domainRE.MatchString(rel) {
			continue
		}
		checked++
		deps, err := exec.Command("go", "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		for _, dep := range strings.Fields(string(deps)) {
			if why := forbiddenDep(dep); why != "" {
				t.Errorf("domain package %s depends on %s (%s)", rel, dep, why)
			}
		}
	}
	if checked < 5 {
		t.Errorf("checked %d domain packages, want at least lifecycle, lease, fleet, health, providers", checked)
	}
}

// TestMainIsFlagsAndDispatch: main.go imports nothing that serves, decides or stores; it turns
// flags into operator.Config and dispatches subcommands.
func TestMainIsFlagsAndDispatch(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		rel := strings.TrimPrefix(path, module)
		switch {
		case path == "net" || strings.HasPrefix(path, "net/"):
			t.Errorf("main.go imports %s: listeners and servers belong to package operator", path)
		case strings.HasPrefix(path, "github.com/prometheus/"), strings.HasPrefix(path, "github.com/go-chi/"):
			t.Errorf("main.go imports %s: metrics and routing belong to package operator and server/", path)
		case rel != path && (domainRE.MatchString(rel) || strings.HasPrefix(rel, "/server")):
			t.Errorf("main.go imports %s: wiring belongs to package operator", path)
		}
	}
}
