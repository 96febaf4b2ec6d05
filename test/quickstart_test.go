package test

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	quickstartBegin = "<!-- scripts/quickstart.sh: begin -->\n```sh\n"
	quickstartEnd   = "```\n<!-- scripts/quickstart.sh: end -->"
)

// TestQuickstartIsTheREADMEBlock: the README's quickstart block is scripts/quickstart.sh, byte
// for byte, so what TestQuickstartScript runs is what a user pastes.
func TestQuickstartIsTheREADMEBlock(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile(filepath.Join("..", "scripts", "quickstart.sh"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), quickstartBegin)
	block, _, ok2 := strings.Cut(rest, quickstartEnd)
	if !ok || !ok2 {
		t.Fatalf("README.md lacks the block between %q and %q", quickstartBegin, quickstartEnd)
	}
	if block != string(script) {
		t.Errorf("README's quickstart block differs from scripts/quickstart.sh: copy the script into it")
	}
}

// freeAddr returns a loopback address nobody listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestQuickstartScript runs scripts/quickstart.sh as a user would (bash, curl, jq, the go
// command): it builds the binary, starts it with a demo fleet, waits for it to be healthy, and
// leases a proxy, fetches through it, reports and releases it, then crawls the demo site through
// the gateway and wants every page 200. Only the ports and the binary's path are moved out of the way.
func TestQuickstartScript(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	for _, tool := range []string{"bash", "curl", "jq", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s not on PATH (CI must have it)", tool)
			}
			t.Skipf("%s not on PATH", tool)
		}
	}
	dir := t.TempDir()
	// A bound, not a timing assertion: a cold build on a loaded machine takes minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join("scripts", "quickstart.sh"))
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "HOOK_ADDR="+freeAddr(t), "DISCOVERY_ADDR="+freeAddr(t),
		"GATEWAY_ADDR="+freeAddr(t), "DEMO_SITE_ADDR="+freeAddr(t),
		"BIN="+filepath.Join(dir, "proxy-operator"), "TMPDIR="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "proxy-operator-quickstart.log"))
		t.Fatalf("quickstart: %v\n%s\noperator log:\n%s", err, out.String(), log)
	}
	for _, want := range []string{`"id":"demo/demo-1"`, `"healthy":true`, `"leaseID"`, "407 without its credential, 200 with the lease's proxyURL",
		`"result":"rate_limited"`, "release: HTTP 204", "status codes (count code): 30 200,", `"servedPerProxy":[`, `"pace":{"ratePerUpstream":`, "quickstart done", "operator stopped"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("quickstart output lacks %q:\n%s", want, out.String())
		}
	}
	// No credential on disk: the only file the quickstart leaves beside the binary is its log,
	// and the log holds no proxy password.
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if n := e.Name(); n != "proxy-operator" && n != "proxy-operator-quickstart.log" && !strings.HasPrefix(n, "go-build") {
			t.Errorf("quickstart left %s in its TMPDIR", n)
		}
	}
	log, _ := os.ReadFile(filepath.Join(dir, "proxy-operator-quickstart.log"))
	if bytes.Contains(log, []byte(`"password"`)) || bytes.Contains(log, []byte("password=")) {
		t.Errorf("the operator log holds a password")
	}
}

// TestMakeHelp: `make help` exits 0 and lists the targets a newcomer needs, one line each.
func TestMakeHelp(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make not on PATH")
	}
	cmd := exec.Command("make", "--no-print-directory", "help")
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make help: %v\n%s", err, out)
	}
	for _, target := range []string{"help", "build", "run", "demo", "test", "verify", "generate", "bench", "fuzz", "load", "docker-build"} {
		found := false
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == target {
				found = true
			}
		}
		if !found {
			t.Errorf("make help lists no %q with a description:\n%s", target, out)
		}
	}
}

// TestOneSetOfBuildFlags: make build (so make run) and the quickstart (so make demo) build the
// binary with the same flags and tags (decision 0282), so neither throws away what the other
// built, and the script pasted alone leaves out the same cloud clients as make does.
func TestOneSetOfBuildFlags(t *testing.T) {
	makefile, err := os.ReadFile(filepath.Join("..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile(filepath.Join("..", "scripts", "quickstart.sh"))
	if err != nil {
		t.Fatal(err)
	}
	const flags, tags = "CGO_ENABLED=0 $(GO) build -trimpath", "omit_aws,omit_gcp,omit_hetzner"
	if !strings.Contains(string(makefile), "GO_BUILD      = "+flags+" -tags '$(GO_TAGS)'\n") {
		t.Fatalf("Makefile has no GO_BUILD = %s -tags '$(GO_TAGS)'", flags)
	}
	if !strings.Contains(string(makefile), "GO_TAGS       ?= "+tags+"\n") {
		t.Errorf("Makefile has no GO_TAGS ?= %s", tags)
	}
	var builds []string
	for _, line := range strings.Split(string(makefile), "\n") {
		if strings.HasPrefix(line, "\t") && strings.Contains(line, "-o $(BIN)") {
			builds = append(builds, strings.TrimSpace(line))
		}
	}
	if len(builds) != 1 || builds[0] != "$(GO_BUILD) -o $(BIN) ." {
		t.Errorf("Makefile recipes building $(BIN): %q, want only \"$(GO_BUILD) -o $(BIN) .\"", builds)
	}
	want := strings.ReplaceAll(flags, "$(GO)", "go") + ` -tags "${GO_TAGS-` + tags + `}" -o "$BIN" .`
	if !strings.Contains(string(script), want) {
		t.Errorf("scripts/quickstart.sh does not build with %q", want)
	}
	if !strings.Contains(string(makefile), "demo:\n\tBIN=$(BIN) GO_TAGS=$(GO_TAGS) bash scripts/quickstart.sh") {
		t.Errorf("make demo does not hand $(BIN) and $(GO_TAGS) to the quickstart")
	}
}
