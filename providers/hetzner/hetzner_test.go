//go:build !omit_hetzner

package hetzner

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/hetzner/hcloudtest"
)

const (
	testUID  = "0b6f3c2e-8a41-4f1e-9d3a-5c7e2b1f0a99"
	testHash = "3f2a9c0d1e4b5a67"
)

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func createRequest() providers.CreateRequest {
	return providers.CreateRequest{
		Name: providers.InstanceName(testUID, testHash), OwnerUID: testUID, SpecHash: testHash,
		Namespace: "crawl", ProxyName: "eu-1", MachineType: "cx22", Image: "ubuntu-24.04",
		Port: 3128, CloudInit: "#cloud-config\npackages: [squid]\n",
	}
}

// TestCreateRequest: through the real client, the create carries the name, type, image, the
// provider's location when the Proxy names none, the GC labels, IPv4, the firewalls and the
// user-data with the cloud-init and the credential script (never the password).
func TestCreateRequest(t *testing.T) {
	p, api, _ := standIn(t, Config{Location: "hel1", FirewallIDs: []int64{31337}})
	req := createRequest()
	req.Credentials = &providers.Credentials{Username: "proxy-abc", Password: "Z7QK2M4XN5P6R7S8T9V2W3Y4A5"}
	req.CredentialsVersion = "0f2b7c4e-1d2a-4b5c-9e8f-7a6b5c4d3e2f"
	id, err := p.Create(testCtx(t), req)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	calls := api.Calls()
	if len(calls) != 1 || calls[0].Method != http.MethodPost || calls[0].Path != "/servers" {
		t.Fatalf("calls %+v, want one POST /servers", calls)
	}
	body := calls[0].Body
	ud, _ := body["user_data"].(string)
	delete(body, "user_data")
	want := map[string]any{
		"name": req.Name, "server_type": "cx22", "image": "ubuntu-24.04", "location": "hel1", "start_after_create": true,
		"labels": map[string]any{providers.TagOwnerUID: testUID, providers.TagManaged: "true", providers.TagSpecHash: testHash,
			providers.TagCredentials: req.CredentialsVersion},
		"public_net": map[string]any{"enable_ipv4": true, "enable_ipv6": false},
		"firewalls":  []any{map[string]any{"firewall": float64(31337)}},
	}
	if diff := cmp.Diff(want, body); diff != "" {
		t.Errorf("create body mismatch (-want +got):\n%s", diff)
	}
	if strings.Contains(ud, req.Credentials.Password) {
		t.Fatal("the password is in the user-data")
	}
	for _, part := range []string{"Content-Type: multipart/mixed", req.CloudInit, "Content-Type: text/x-shellscript", "'proxy-abc:$2a$"} {
		if !strings.Contains(ud, part) {
			t.Errorf("user-data lacks %q:\n%s", part, ud)
		}
	}
	if servers := api.Servers(); len(servers) != 1 || FormatID(servers[0].ID) != id {
		t.Errorf("stand-in holds %+v, want one server with ID %s", servers, id)
	}
}

// TestCreateTakenName: a taken name is this Proxy's server when its owner label says so, and
// a Permanent error naming the clash when it does not.
func TestCreateTakenName(t *testing.T) {
	p, api, clock := standIn(t, Config{Location: "fsn1"})
	req := createRequest()
	api.Put(hcloudtest.Server{ID: 7, Name: req.Name, ServerType: "cx22", Image: "ubuntu-24.04", Created: clock.Now(),
		Labels: map[string]string{providers.TagOwnerUID: testUID, providers.TagManaged: "true"}})
	if id, err := p.Create(testCtx(t), req); err != nil || id != FormatID(7) {
		t.Errorf("Create with the name taken by our server = %q, %v; want %s", id, err, FormatID(7))
	}
	api.Put(hcloudtest.Server{ID: 7, Name: req.Name, ServerType: "cx22", Image: "ubuntu-24.04", Created: clock.Now(),
		Labels: map[string]string{"team": "ci"}})
	_, err := p.Create(testCtx(t), req)
	if !errors.Is(err, providers.ErrPermanent) || !strings.Contains(err.Error(), "taken by a server this Proxy does not own") {
		t.Errorf("Create with the name taken by another server: %v, want Permanent naming the clash", err)
	}
	if n := len(api.Servers()); n != 1 {
		t.Errorf("%d servers, want 1", n)
	}
}

func TestErrorCodes(t *testing.T) {
	tests := []struct {
		code   string
		status int
		want   error
	}{
		{"resource_limit_exceeded", 403, providers.ErrQuotaExceeded},
		{"resource_unavailable", 412, providers.ErrQuotaExceeded},
		{"placement_error", 412, providers.ErrQuotaExceeded},
		{"rate_limit_exceeded", 429, providers.ErrTransient},
		{"server_error", 500, providers.ErrTransient},
		{"timeout", 504, providers.ErrTransient},
		{"conflict", 409, providers.ErrTransient},
		{"something_new", 503, providers.ErrTransient},
		{"invalid_input", 400, providers.ErrPermanent},
		{"unauthorized", 401, providers.ErrPermanent},
		{"forbidden", 403, providers.ErrPermanent},
		{"something_else_new", 422, providers.ErrPermanent},
	}
	for _, tc := range tests {
		t.Run(tc.code, func(t *testing.T) {
			p, api, _ := standIn(t, Config{Location: "fsn1"})
			api.Fail("create", tc.code, tc.status, 1)
			_, err := p.Create(testCtx(t), createRequest())
			if providers.Class(err) != tc.want || !strings.Contains(err.Error(), tc.code) {
				t.Errorf("Create after %s: %v (class %s), want class %v naming the code", tc.code, err, providers.ClassName(err), tc.want)
			}
		})
	}
}

func TestBadTokenIsPermanent(t *testing.T) {
	p, _, _ := standIn(t, Config{Location: "fsn1", TokenFile: tokenFile(t, "revoked-token")})
	_, err := p.ListByTag(testCtx(t))
	if !errors.Is(err, providers.ErrPermanent) || !strings.Contains(err.Error(), "unauthorized") {
		t.Errorf("ListByTag with a token the API refuses: %v, want Permanent (unauthorized)", err)
	}
}

func TestRefusedWithoutCall(t *testing.T) {
	tests := map[string]struct {
		edit func(*providers.CreateRequest)
		want string
	}{
		"no image":  {func(r *providers.CreateRequest) { r.Image = "" }, "placement.image is required"},
		"no type":   {func(r *providers.CreateRequest) { r.MachineType = "" }, "placement.machineType is required"},
		"bad zone":  {func(r *providers.CreateRequest) { r.Zone = "Falkenstein" }, `placement.zone "Falkenstein" is not a Hetzner location`},
		"bad label": {func(r *providers.CreateRequest) { r.OwnerUID = "uid with spaces" }, "is not a Hetzner label value"},
		"too large": {func(r *providers.CreateRequest) { r.CloudInit = "#cloud-config\n#" + strings.Repeat("x", 33<<10) }, "user-data is"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p, api, _ := standIn(t, Config{Location: "fsn1"})
			req := createRequest()
			tc.edit(&req)
			if _, err := p.Create(testCtx(t), req); !errors.Is(err, providers.ErrPermanent) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Create: %v, want Permanent saying %q", err, tc.want)
			}
			if n := len(api.Calls()); n != 0 {
				t.Errorf("%d calls, want none", n)
			}
		})
	}
	p, _, _ := standIn(t, Config{})
	if err := p.CheckCreate(createRequest()); err == nil || !strings.Contains(err.Error(), "placement.zone is required for a Managed hetzner proxy when the provider has no location") {
		t.Errorf("CheckCreate without any location: %v", err)
	}
}

func TestReadToken(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	tests := map[string]struct {
		path, want, wantErr string
	}{
		"with newline": {write("ok", "abc123\n"), "abc123", ""},
		"empty":        {write("empty", "\n"), "", "is empty"},
		"two words":    {write("two", "abc def\n"), "", "holds more than one word"},
		"huge":         {write("huge", strings.Repeat("a", 5000)), "", "larger than 4096 bytes"},
		"missing":      {filepath.Join(dir, "nope"), "", "no such file or directory"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ReadToken(tc.path)
			if got != tc.want || (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("ReadToken = %q, %v; want %q, error with %q", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestParseID(t *testing.T) {
	for _, id := range []string{"hetzner://", "hetzner://0", "hetzner://-4", "hetzner://12a", "aws://eu-central-1/i-0123456789abcdef0"} {
		if _, err := ParseID(id); err == nil {
			t.Errorf("ParseID(%q) accepted", id)
		}
	}
	if id, err := ParseID(FormatID(4711)); err != nil || id != 4711 {
		t.Errorf("round trip: %d, %v", id, err)
	}
}
