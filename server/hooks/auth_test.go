package hooks_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxy-operator/proxy-operator/server/hooks/hookauth"
)

// lockedLog is a log sink safe for the server's goroutines.
type lockedLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestTokenOverTLS serves the real hook server over TLS with a token, as the operator does,
// and calls it as Metacontroller does (the CA from ca.crt, "Authorization: Bearer <token>"):
// only the token's holder reaches the hooks; the kubelet's probes and /metrics need none; each
// refusal is logged without the token and counted; plain HTTP gets no hook answer.
func TestTokenOverTLS(t *testing.T) {
	const token = "s3cret-token-0123456789abcdef"
	caPEM, certPEM, keyPEM, err := hookauth.Generate([]string{"localhost"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	creds := &hookauth.Credentials{Cert: cert, CA: caPEM, Token: token}
	log := &lockedLog{}
	h := newHooks(t, newMock(t))
	reg := prometheus.NewRegistry()
	h.Registerer, h.Gatherer, h.Log = reg, reg, slog.New(slog.NewJSONHandler(log, nil))
	h.Token, h.TLS = creds.Token, creds.TLSConfig()
	srv := h.Server()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	})
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	base := "https://localhost:" + port
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
	t.Cleanup(client.CloseIdleConnections)

	call := func(method, path, auth string, body []byte) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	sync := fixtureBody(t, "sync/external-pending")
	for _, tc := range []struct {
		name, method, path, auth string
		want                     int
	}{
		{"sync without a token", "POST", "/sync", "", http.StatusUnauthorized},
		{"sync with another token", "POST", "/sync", "Bearer not-the-token-0123456789", http.StatusUnauthorized},
		{"the token as Basic", "POST", "/sync", "Basic " + token, http.StatusUnauthorized},
		{"a token that only starts the same", "POST", "/sync", "Bearer " + token + "x", http.StatusUnauthorized},
		{"finalize without a token", "POST", "/finalize", "", http.StatusUnauthorized},
		{"pools without a token", "POST", "/pools/sync", "", http.StatusUnauthorized},
		{"an unknown path without a token", "GET", "/nope", "", http.StatusUnauthorized},
		{"sync with the token", "POST", "/sync", "Bearer " + token, http.StatusOK},
		{"scheme in another case, as Metacontroller may send it", "POST", "/sync", "bearer " + token, http.StatusOK},
		{"healthz without a token", "GET", "/healthz", "", http.StatusOK},
		{"readyz without a token", "GET", "/readyz", "", http.StatusOK},
		{"metrics without a token", "GET", "/metrics", "", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body []byte
			if tc.method == "POST" {
				body = sync
			}
			if got, b := call(tc.method, tc.path, tc.auth, body); got != tc.want {
				t.Errorf("%s %s: %d %.200s, want %d", tc.method, tc.path, got, b, tc.want)
			}
		})
	}
	if got := gather(t, reg, "proxy_operator_hook_unauthorized_total", "missing_token"); got != 5 {
		t.Errorf("missing_token = %v, want 5 (a Basic header carries no bearer token)", got)
	}
	if got := gather(t, reg, "proxy_operator_hook_unauthorized_total", "invalid_token"); got != 2 {
		t.Errorf("invalid_token = %v, want 2", got)
	}
	logged := log.String()
	if strings.Contains(logged, token) || strings.Contains(logged, "not-the-token") {
		t.Errorf("a token reached the log:\n%s", logged)
	}
	// 7 refusals, logged sampled: the first 5 at once (decision 0257).
	if n := strings.Count(logged, `"msg":"hook call unauthorized"`); n != 5 || !strings.Contains(logged, `"path":"/finalize"`) || !strings.Contains(logged, `"remote":"127.0.0.1:`) {
		t.Errorf("%d unauthorized lines (want 5, with path and remote):\n%s", n, logged)
	}

	// Plain HTTP to the TLS port: no hook is reached.
	res, err := http.Post("http://127.0.0.1:"+port+"/sync", "application/json", bytes.NewReader(sync))
	if err == nil {
		res.Body.Close()
		if res.StatusCode == http.StatusOK {
			t.Error("plain HTTP reached the sync hook")
		}
	}
	// A client that does not trust the CA does not connect.
	if _, err := http.Get(base + "/healthz"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("GET without the CA: %v, want a certificate error", err)
	}
}

// gather reads one labelled counter from reg.
func gather(t *testing.T, reg *prometheus.Registry, name, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mt := range mf.GetMetric() {
			for _, lp := range mt.GetLabel() {
				if lp.GetName() == "reason" && lp.GetValue() == reason {
					return mt.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("%s{reason=%q} not gathered", name, reason)
	return 0
}
