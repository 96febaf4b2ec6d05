//go:build !omit_gcp

package gcp

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/userdata"
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
	m := regexp.MustCompile(`printf '%s\\n' '(proxy-abc:[^']+)' > ` + regexp.QuoteMeta(userdata.HtpasswdPath)).FindStringSubmatch(script)
	if m == nil {
		t.Fatalf("no htpasswd line in the startup script:\n%s", script)
	}
	_, hash, _ := strings.Cut(m[1], ":")
	if err := bcrypt.CompareHashAndPassword([]byte(hash), []byte(req.Credentials.Password)); err != nil {
		t.Errorf("htpasswd line does not verify the password: %v", err)
	}
	if !strings.Contains(script, userdata.AuthConfig(userdata.HtpasswdPath)) {
		t.Errorf("startup script lacks the auth fragment:\n%s", script)
	}
	// The script is valid POSIX shell.
	if out, err := exec.Command("/bin/sh", "-n", "-c", script).CombinedOutput(); err != nil {
		t.Errorf("sh -n: %v: %s", err, out)
	}
}
