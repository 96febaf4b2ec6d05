// Package apiservertest owns a throwaway Kubernetes control plane for tests: etcd and
// kube-apiserver from $KUBEBUILDER_ASSETS on free loopback ports, with certificates and a token
// minted per run, and a plain net/http client for it. It knows nothing of this project's objects.
// Tests that use it skip, saying why, when KUBEBUILDER_ASSETS is unset.
package apiservertest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Every wait of the harness is bounded: a shared 2-core machine can be slow, a hang must not be.
const (
	etcdReadyTimeout      = 60 * time.Second
	apiserverReadyTimeout = 120 * time.Second
	stopTimeout           = 10 * time.Second
	requestTimeout        = 30 * time.Second
	maxResponseBytes      = 8 << 20
)

// Server is a loopback etcd + kube-apiserver pair and an authenticated client for it.
type Server struct {
	base   string // https://127.0.0.1:port
	token  string
	caPEM  []byte
	dir    string
	client *http.Client
}

// Start starts etcd and kube-apiserver from $KUBEBUILDER_ASSETS on free loopback ports,
// with throwaway certificates, and stops both when the test ends. It skips when the variable is unset.
func Start(t *testing.T) *Server {
	t.Helper()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Skip("KUBEBUILDER_ASSETS is unset: set it to a folder holding kube-apiserver and etcd to check the CRD against a real API server (.ci/run does)")
	}
	etcdBin := filepath.Join(assets, "etcd")
	apiBin := filepath.Join(assets, "kube-apiserver")
	for _, b := range []string{etcdBin, apiBin} {
		if _, err := os.Stat(b); err != nil {
			t.Fatalf("KUBEBUILDER_ASSETS=%s: %v", assets, err)
		}
	}
	dir := t.TempDir()
	pki := writePKI(t, dir)

	etcdPort, peerPort, apiPort := freePort(t), freePort(t), freePort(t)
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	etcdExited := startProcess(t, dir, "etcd", etcdBin,
		"--name", "crdtest",
		"--data-dir", filepath.Join(dir, "etcd-data"),
		"--listen-client-urls", etcdURL,
		"--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL,
		"--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "crdtest="+peerURL,
		"--initial-cluster-state", "new",
		"--unsafe-no-fsync",
		"--log-level", "error",
	)
	plain := &http.Client{Timeout: 2 * time.Second}
	waitFor(t, dir, "etcd", etcdExited, etcdReadyTimeout, func() error {
		resp, err := plain.Get(etcdURL + "/health")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("health: %s", resp.Status)
		}
		return nil
	})

	apiExited := startProcess(t, dir, "kube-apiserver", apiBin,
		"--etcd-servers", etcdURL,
		"--bind-address", "127.0.0.1",
		"--advertise-address", "127.0.0.1",
		"--secure-port", strconv.Itoa(apiPort),
		"--cert-dir", dir,
		"--tls-cert-file", pki.serverCert,
		"--tls-private-key-file", pki.serverKey,
		"--token-auth-file", pki.tokens,
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", pki.saPub,
		"--service-account-signing-key-file", pki.saKey,
		"--service-cluster-ip-range", "10.0.0.0/24",
		"--endpoint-reconciler-type", "none",
		"--authorization-mode", "RBAC",
		"--profiling=false",
		"--v=0",
	)
	s := &Server{
		base:  "https://127.0.0.1:" + strconv.Itoa(apiPort),
		token: pki.token,
		caPEM: pki.caPEM,
		dir:   dir,
		client: &http.Client{
			Timeout:   requestTimeout,
			Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pki.roots, MinVersion: tls.VersionTLS12}},
		},
	}
	waitFor(t, dir, "kube-apiserver", apiExited, apiserverReadyTimeout, func() error {
		code, body, err := s.Do(http.MethodGet, "/readyz", nil, "")
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("readyz %d: %s", code, body)
		}
		return nil
	})
	return s
}

// Do sends one request; body is marshalled to JSON unless it is already []byte.
func (s *Server) Do(method, path string, body any, contentType string) (int, []byte, error) {
	return s.send(method, path, body, contentType, "application/json")
}

// DoAccept is a bodiless request with a chosen Accept header (server-side printing needs the Table type).
func (s *Server) DoAccept(method, path, accept string) (int, []byte, error) {
	return s.send(method, path, nil, "", accept)
}

func (s *Server) send(method, path string, body any, contentType, accept string) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, ok := body.([]byte)
		if !ok {
			var err error
			if b, err = json.Marshal(body); err != nil {
				return 0, nil, err
			}
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, s.base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Accept", accept)
	if body != nil {
		if contentType == "" {
			contentType = "application/json"
		}
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	return resp.StatusCode, b, err
}

// Must sends a request and fails the test unless the answer has the wanted status code.
func (s *Server) Must(t *testing.T, want int, method, path string, body any, contentType string) []byte {
	t.Helper()
	code, b, err := s.Do(method, path, body, contentType)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	if code != want {
		t.Fatalf("%s %s: status %d, want %d: %s", method, path, code, want, b)
	}
	return b
}

type pkiFiles struct {
	serverCert, serverKey, saKey, saPub, tokens string
	token                                       string
	caPEM                                       []byte
	roots                                       *x509.CertPool
}

// writePKI writes a CA, a serving certificate for 127.0.0.1, a service-account signing key and a
// token file granting one random token system:masters.
func writePKI(t *testing.T, dir string) pkiFiles {
	t.Helper()
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	writePEM := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keyDER := func(k *ecdsa.PrivateKey) []byte {
		b, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	now := time.Now()
	caKey := newKey()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "crd-test-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	srvKey := newKey()
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	tok := make([]byte, 24)
	if _, err := rand.Read(tok); err != nil {
		t.Fatal(err)
	}
	token := hex.EncodeToString(tok)
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(token+`,admin,admin,"system:masters"`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	saKey := newKey()
	saPub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	return pkiFiles{
		serverCert: writePEM("apiserver.crt", "CERTIFICATE", srvDER),
		serverKey:  writePEM("apiserver.key", "PRIVATE KEY", keyDER(srvKey)),
		saKey:      writePEM("sa.key", "PRIVATE KEY", keyDER(saKey)),
		saPub:      writePEM("sa.pub", "PUBLIC KEY", saPub),
		tokens:     tokens,
		token:      token,
		caPEM:      pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		roots:      roots,
	}
}

// freePort asks the kernel for a free loopback port. Another process could take it before the
// server binds it; the server then fails to start and the test says so.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startProcess runs bin in its own process group, logging to dir/name.log, and stops the group
// (SIGTERM, then SIGKILL after stopTimeout) when the test ends.
func startProcess(t *testing.T, dir, name, bin string, args ...string) <-chan struct{} {
	t.Helper()
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		defer logf.Close()
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(stopTimeout):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	t.Cleanup(func() {
		// Runs before the stop above (cleanups are LIFO): keep the log of a failed run.
		if t.Failed() {
			t.Logf("last lines of %s:\n%s", name, tail(filepath.Join(dir, name+".log"), 30))
		}
	})
	return done
}

// waitFor polls ready until it succeeds, the process exits or timeout passes.
func waitFor(t *testing.T, dir, name string, exited <-chan struct{}, timeout time.Duration, ready func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	start := time.Now()
	var last error
	for time.Now().Before(deadline) {
		if last = ready(); last == nil {
			t.Logf("%s ready after %s", name, time.Since(start).Round(10*time.Millisecond))
			return
		}
		select {
		case <-exited:
			t.Fatalf("%s exited before it was ready (%v)", name, last)
		default:
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("%s not ready after %s: %v\nlast lines of its log:\n%s", name, timeout, last, tail(filepath.Join(dir, name+".log"), 30))
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Status is the body of a failed API call.
type Status struct {
	Message string `json:"message"`
	Reason  string `json:"reason"`
}

// DecodeStatus reads the message of a failed API call.
func DecodeStatus(b []byte) (Status, error) {
	var s Status
	if err := json.Unmarshal(b, &s); err != nil {
		return s, err
	}
	if s.Message == "" {
		return s, errors.New("no message in error body")
	}
	return s, nil
}

// Kubeconfig writes a kubeconfig for this server (token auth, its CA) and returns its path, for
// tests that drive kubectl.
func (s *Server) Kubeconfig(t *testing.T) string {
	t.Helper()
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: admin
  user:
    token: %s
contexts:
- name: test
  context: {cluster: test, user: admin}
current-context: test
`, s.base, base64.StdEncoding.EncodeToString(s.caPEM), s.token)
	p := filepath.Join(s.dir, "kubeconfig")
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
