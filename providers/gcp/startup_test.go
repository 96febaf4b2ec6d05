package gcp

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/internal/squidtest"

	"golang.org/x/crypto/bcrypt"

	"github.com/proxy-operator/proxy-operator/providers"
)

// TestCreateSendsCredentialInStartupScript: through the real client library against the
// local Compute stand-in, the insert carries the cloud-init unchanged and a startup script that
// installs the credential as a bcrypt line verifying the password, never the password itself.
func TestCreateSendsCredentialInStartupScript(t *testing.T) {
	api := newComputeAPI(t)
	api.on("POST", instancesPath(testZone), reply{200, operation("insert", "RUNNING")})
	p := api.provider(t, Config{})
	req := createRequest()
	req.Credentials = &providers.Credentials{Username: "proxy-abc", Password: "Z7QK2M4XN5P6R7S8T9V2W3Y4A5"}
	req.CredentialsVersion = "0f2b7c4e-1d2a-4b5c-9e8f-7a6b5c4d3e2f"
	if _, err := p.Create(testCtx(t), req); err != nil {
		t.Fatalf("Create: %v", err)
	}
	calls := api.recorded()
	if len(calls) != 1 {
		t.Fatalf("calls %+v", calls)
	}
	if got := calls[0].Body["labels"].(map[string]any)[providers.TagCredentials]; got != req.CredentialsVersion {
		t.Errorf("label %s = %v, want the credentials version (rotation replaces the VM)", providers.TagCredentials, got)
	}
	items := calls[0].Body["metadata"].(map[string]any)["items"].([]any)
	got := map[string]string{}
	for _, it := range items {
		m := it.(map[string]any)
		got[m["key"].(string)] = m["value"].(string)
	}
	if got["user-data"] != req.CloudInit {
		t.Errorf("user-data %q, want the cloud-init unchanged", got["user-data"])
	}
	script := got[startupScriptKey]
	if strings.Contains(script, req.Credentials.Password) {
		t.Fatal("the password is in instance metadata")
	}
	m := regexp.MustCompile(`printf '%s\\n' '(proxy-abc:[^']+)' > ` + regexp.QuoteMeta(vmHtpasswd)).FindStringSubmatch(script)
	if m == nil {
		t.Fatalf("no htpasswd line in the startup script:\n%s", script)
	}
	_, hash, _ := strings.Cut(m[1], ":")
	if err := bcrypt.CompareHashAndPassword([]byte(hash), []byte(req.Credentials.Password)); err != nil {
		t.Errorf("htpasswd line does not verify the password: %v", err)
	}
	if !strings.Contains(script, AuthConfig(vmHtpasswd)) {
		t.Errorf("startup script lacks the auth fragment:\n%s", script)
	}
	// The script is valid POSIX shell.
	if out, err := exec.Command("/bin/sh", "-n", "-c", script).CombinedOutput(); err != nil {
		t.Errorf("sh -n: %v: %s", err, out)
	}
}

// TestAuthConfigParses: the fragment the VM installs is accepted by the real Squid.
func TestAuthConfigParses(t *testing.T) {
	squid := squidtest.Binary(t)
	dir := t.TempDir()
	htpasswd := filepath.Join(dir, "htpasswd")
	if err := os.WriteFile(htpasswd, []byte("u:$2a$10$abcdefghijklmnopqrstuv\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "squid.conf")
	body := "http_port 127.0.0.1:3128\n" + AuthConfig(htpasswd) + "http_access allow all\npid_filename none\n"
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, squid, "-k", "parse", "-f", conf).CombinedOutput(); err != nil {
		t.Errorf("squid -k parse: %v: %s", err, out)
	}
}
