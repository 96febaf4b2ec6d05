package server_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"

	"github.com/proxy-operator/proxy-operator/internal/apiservertest"
	"github.com/proxy-operator/proxy-operator/internal/kubetest"
	"github.com/proxy-operator/proxy-operator/server"
	"github.com/proxy-operator/proxy-operator/server/hooks/hookauth"
)

// TestHookSecretsWithAPIServer starts the operator with -hooks-secrets-namespace against a real
// kube-apiserver holding Metacontroller's CRDs, as the shipped install does: the two Secrets
// appear, the CompositeController is annotated, and the hooks answer over TLS, verified with the
// CA from the Secret under the Service's DNS name, only calls that carry the token. A second start
// reuses the Secrets, and two processes starting at once agree on one set.
func TestHookSecretsWithAPIServer(t *testing.T) {
	rc := apiservertest.Start(t, filepath.Join("..", "crds", "crawl.example.com_proxies.yaml"), filepath.Join("..", "testdata", "metacontroller"))
	const ns = "proxy-operator"
	kubetest.Namespace(t, rc, ns)
	core, dyn := kubetest.Core(t, rc), kubetest.Dynamic(t, rc)
	ctx := context.Background()
	cc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
		"metadata": map[string]any{"name": "proxy-operator"},
		"spec": map[string]any{
			"parentResource": map[string]any{"apiVersion": "crawl.example.com/v1alpha1", "resource": "proxies"},
			"hooks":          map[string]any{"sync": map[string]any{"webhook": map[string]any{"url": "https://proxy-operator-hooks.proxy-operator.svc:8080/sync"}}},
		},
	}}
	if _, err := dyn.Resource(hookauth.CompositeControllerResource).Create(ctx, cc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	first := startWithSecrets(t, rc, ns)
	tlsSec, err := core.CoreV1().Secrets(ns).Get(ctx, hookauth.TLSSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("TLS Secret after start: %v", err)
	}
	tokSec, err := core.CoreV1().Secrets(ns).Get(ctx, hookauth.TokenSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("token Secret after start: %v", err)
	}
	if tlsSec.Type != corev1.SecretTypeTLS || len(tlsSec.Data["ca.crt"]) == 0 {
		t.Errorf("TLS Secret type %q, keys %v", tlsSec.Type, keys(tlsSec.Data))
	}
	token := string(tokSec.Data[hookauth.TokenKey])
	if len(token) < 40 {
		t.Errorf("token of %d characters, want 32 random bytes' worth", len(token))
	}
	got, err := dyn.Resource(hookauth.CompositeControllerResource).Get(ctx, "proxy-operator", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := string(tlsSec.UID) + "/" + string(tokSec.UID); got.GetAnnotations()[hookauth.CredentialsAnnotation] != want {
		t.Errorf("CompositeController annotation %q, want %q", got.GetAnnotations()[hookauth.CredentialsAnnotation], want)
	}

	client := metacontrollerClient(t, first.HookAddr(), tlsSec.Data["ca.crt"])
	checkHooks(t, client, token)
	served := servedCert(t, first.HookAddr(), tlsSec.Data["ca.crt"])
	first.stop()

	second := startWithSecrets(t, rc, ns)
	again, err := core.CoreV1().Secrets(ns).Get(ctx, hookauth.TLSSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if again.UID != tlsSec.UID || again.ResourceVersion != tlsSec.ResourceVersion {
		t.Errorf("second start changed the TLS Secret (uid %s -> %s, rv %s -> %s)", tlsSec.UID, again.UID, tlsSec.ResourceVersion, again.ResourceVersion)
	}
	if !bytes.Equal(servedCert(t, second.HookAddr(), tlsSec.Data["ca.crt"]), served) {
		t.Error("the second start serves another certificate")
	}
	checkHooks(t, metacontrollerClient(t, second.HookAddr(), tlsSec.Data["ca.crt"]), token)
	second.stop()

	// Two replicas starting at once in a namespace without the Secrets: one creates each, the
	// other reads it, and both serve the same certificate and token.
	kubetest.Namespace(t, rc, "ha")
	var wg sync.WaitGroup
	creds := make([]*hookauth.Credentials, 2)
	errs := make([]error, 2)
	for i := range creds {
		wg.Go(func() {
			creds[i], errs[i] = hookauth.EnsureSecrets(ctx, hookauth.SecretsConfig{Dynamic: dyn, Namespace: "ha", Controllers: []string{}})
		})
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("EnsureSecrets at once: %v, %v", errs[0], errs[1])
	}
	if creds[0].Token != creds[1].Token || !bytes.Equal(creds[0].Cert.Certificate[0], creds[1].Cert.Certificate[0]) {
		t.Error("two replicas starting at once disagree on the hook credentials")
	}

	// A broken Secret is named, not overwritten.
	broken := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: hookauth.TokenSecret, Namespace: "broken"}, Data: map[string][]byte{hookauth.TokenKey: []byte("short")}}
	kubetest.Namespace(t, rc, "broken")
	if _, err := core.CoreV1().Secrets("broken").Create(ctx, broken, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := hookauth.EnsureSecrets(ctx, hookauth.SecretsConfig{Dynamic: dyn, Namespace: "broken", Controllers: []string{}}); err == nil ||
		!strings.Contains(err.Error(), "broken/"+hookauth.TokenSecret) || !strings.Contains(err.Error(), "delete it") {
		t.Errorf("EnsureSecrets with a short token in the Secret: %v, want an error naming it", err)
	}
}

type runningOperator struct {
	*server.Operator
	stop func()
}

// startWithSecrets runs the operator with its hook credentials in Secrets of ns.
func startWithSecrets(t *testing.T, rc *rest.Config, ns string) runningOperator {
	t.Helper()
	op, err := server.New(server.Config{
		Hooks:     server.HooksConfig{Addr: "127.0.0.1:0", SecretsNamespace: ns},
		Discovery: server.DiscoveryAPIConfig{Addr: "127.0.0.1:0", Insecure: true},
		Kube:      server.KubeConfig{Kubeconfig: kubetest.Kubeconfig(t, rc)},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- op.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return runningOperator{op, stop}
}

// metacontrollerClient calls addr as Metacontroller calls the install's URL: it trusts only the
// CA from the Secret and checks the certificate for the hook Service's name.
func metacontrollerClient(t *testing.T, addr string, caPEM []byte) *http.Client {
	t.Helper()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("ca.crt holds no certificate")
	}
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}
	c := &http.Client{Timeout: 30 * time.Second, Transport: tr}
	t.Cleanup(tr.CloseIdleConnections)
	return c
}

// checkHooks: without the token 401, with it the hook itself answers; /healthz needs none.
func checkHooks(t *testing.T, c *http.Client, token string) {
	t.Helper()
	const url = "https://proxy-operator-hooks.proxy-operator.svc:8080"
	for _, tc := range []struct {
		method, path, auth string
		want               int
	}{
		{"POST", "/sync", "", http.StatusUnauthorized},
		{"POST", "/finalize", "Bearer wrong-token-0123456789abcdef", http.StatusUnauthorized},
		{"POST", "/sync", "Bearer " + token, http.StatusBadRequest}, // the hook refuses the empty body
		{"GET", "/healthz", "", http.StatusOK},
	} {
		req, _ := http.NewRequest(tc.method, url+tc.path, strings.NewReader(`{}`))
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		res, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.method, tc.path, err)
		}
		res.Body.Close()
		if res.StatusCode != tc.want {
			t.Errorf("%s %s (auth %t): %d, want %d", tc.method, tc.path, tc.auth != "", res.StatusCode, tc.want)
		}
	}
}

// servedCert is the DER certificate the hook listener at addr presents.
func servedCert(t *testing.T, addr string, caPEM []byte) []byte {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 30 * time.Second}, "tcp", addr,
		&tls.Config{RootCAs: roots, ServerName: "proxy-operator-hooks.proxy-operator.svc"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].Raw
}

func keys(m map[string][]byte) []string {
	var k []string
	for key := range m {
		k = append(k, key)
	}
	return k
}
