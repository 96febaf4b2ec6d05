package server_test

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/server"
	"github.com/proxy-operator/proxy-operator/server/hooks/hookauth"
)

// TestHookCredentialFlags: the command line never serves the hooks without TLS and a token
// unless -hooks-insecure says so, and contradictory sources are refused with what to do.
func TestHookCredentialFlags(t *testing.T) {
	base := []string{"-discovery-insecure"}
	for _, tc := range []struct {
		name string
		args []string
		want []string // "" : no error
	}{
		{"nothing", nil, []string{"-hooks-secrets-namespace", "-hooks-tls-cert", "-hooks-insecure"}},
		{"insecure", []string{"-hooks-insecure"}, nil},
		{"secrets", []string{"-hooks-secrets-namespace", "proxy-operator"}, nil},
		{"files", []string{"-hooks-tls-cert", "c", "-hooks-tls-key", "k", "-hooks-token-file", "t"}, nil},
		{"cert without token", []string{"-hooks-tls-cert", "c", "-hooks-tls-key", "k"}, []string{"give all three"}},
		{"insecure and secrets", []string{"-hooks-insecure", "-hooks-secrets-namespace", "x"}, []string{"exclude each other"}},
		{"secrets and files", []string{"-hooks-secrets-namespace", "x", "-hooks-tls-cert", "c", "-hooks-tls-key", "k", "-hooks-token-file", "t"}, []string{"give one source"}},
		{"insecure turned off again", []string{"-hooks-insecure", "-hooks-insecure=false"}, []string{"-hooks-insecure"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := server.OperatorFlags(append(base, tc.args...), nil, io.Discard, io.Discard)
			if tc.want == nil {
				if err != nil {
					t.Errorf("OperatorFlags: %v", err)
				}
				return
			}
			for _, w := range tc.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("OperatorFlags: %v, want an error containing %q", err, w)
				}
			}
		})
	}
}

// TestHooksFromFiles boots the operator as the command line does with -hooks-tls-cert,
// -hooks-tls-key and -hooks-token-file: the hooks answer over TLS only, and only the token.
func TestHooksFromFiles(t *testing.T) {
	dir := t.TempDir()
	caPEM, certPEM, keyPEM, err := hookauth.Generate([]string{"localhost"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	const token = "files-token-0123456789abcdef"
	for name, b := range map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM, "token": []byte(token + "\n")} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	addr, _, _ := boot(t, "-hook-addr", "127.0.0.1:0", "-discovery-addr", "127.0.0.1:0", "-discovery-insecure",
		"-hooks-tls-cert", filepath.Join(dir, "tls.crt"), "-hooks-tls-key", filepath.Join(dir, "tls.key"), "-hooks-token-file", filepath.Join(dir, "token"))
	_, port, _ := net.SplitHostPort(addr)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	t.Cleanup(client.CloseIdleConnections)
	do := func(path, auth string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "https://localhost:"+port+path, strings.NewReader(`{}`))
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if got := do("/sync", ""); got != http.StatusUnauthorized {
		t.Errorf("sync without the token: %d, want 401", got)
	}
	// With the token the call reaches the hook, which refuses the empty body itself.
	if got := do("/sync", "Bearer "+token); got != http.StatusBadRequest {
		t.Errorf("sync with the token and a bad body: %d, want 400 from the hook", got)
	}
	res, err := client.Get("https://localhost:" + port + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("/healthz over TLS without a token: %d", res.StatusCode)
	}
}
