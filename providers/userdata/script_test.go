package userdata

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/internal/squidtest"
)

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
