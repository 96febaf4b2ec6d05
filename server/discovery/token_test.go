package discovery_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proxy-operator/proxy-operator/server/discovery"
)

func TestDiscoveryTokens(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	secret := write("token", "from-file-0123456789\n")
	empty := write("empty", " \n")
	tests := []struct {
		name, env, file string
		insecure        bool
		wantTokens      int
		wantErr         string
	}{
		{name: "env only", env: "from-env-0123456789", wantTokens: 1},
		{name: "neither: refused", wantErr: "-discovery-insecure"},
		{name: "short env token refused", env: "only-15-chars-x", wantErr: "at least 16 characters"},
		{name: "neither, insecure: no tokens", insecure: true},
		{name: "file wins over env", env: "from-env-0123456789", file: secret, wantTokens: 1},
		{name: "blank file is an error", env: "from-env-0123456789", file: empty, wantErr: "no token"},
		{name: "blank file is an error even insecure", file: empty, insecure: true, wantErr: "no token"},
		{name: "missing file is an error", file: filepath.Join(dir, "nope"), wantErr: "no such file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := discovery.Tokens(tc.env, tc.file, tc.insecure)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one saying %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "from-env-0123456789") {
					t.Errorf("error %q carries the token", err)
				}
				return
			}
			n := 0
			if got != nil {
				n = got.Len()
			}
			if err != nil || n != tc.wantTokens {
				t.Errorf("Tokens = %d tokens, %v; want %d", n, err, tc.wantTokens)
			}
		})
	}
}

func TestDiscoveryServerTimeouts(t *testing.T) {
	f := newDiscFixture(t, discOpts{token: discToken})
	d := &discovery.Discovery{Fleet: f.view, Leases: f.store}
	s := d.Server(":0")
	if s.ReadHeaderTimeout <= 0 || s.ReadTimeout <= 0 || s.WriteTimeout <= 0 || s.IdleTimeout <= 0 || s.MaxHeaderBytes <= 0 {
		t.Errorf("a timeout or limit is unset: %+v", s)
	}
}
