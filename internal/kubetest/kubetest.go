// Package kubetest owns what tests of client-go code need from a real API server: an admin
// rest.Config with the Proxy and ProxyPool CRDs installed, namespaces, Proxies and a kubeconfig file for
// kubectl or -kubeconfig. Only Start knows which harness runs the server
// (internal/apiservertest); everything else goes through client-go.
package kubetest

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/proxy-operator/proxy-operator/internal/apiservertest"
	"github.com/proxy-operator/proxy-operator/internal/kube"
)

const servedTimeout = 2 * time.Minute

// Start starts a real API server (skipping without KUBEBUILDER_ASSETS), installs the Proxy and
// ProxyPool CRDs from crds/ and returns an admin config once both are served.
func Start(t *testing.T) *rest.Config {
	t.Helper()
	crds := filepath.Join(moduleRoot(t), "crds")
	cfg := apiservertest.Start(t, filepath.Join(crds, "crawl.example.com_proxies.yaml"), filepath.Join(crds, "crawl.example.com_proxypools.yaml"))
	cfg.QPS, cfg.Burst, cfg.Timeout = 100, 200, 30*time.Second
	waitServed(t, cfg)
	return cfg
}

func waitServed(t *testing.T, cfg *rest.Config) {
	t.Helper()
	dyn := Dynamic(t, cfg)
	deadline := time.Now().Add(servedTimeout)
	for {
		_, err := dyn.Resource(kube.ProxyResource).List(context.Background(), metav1.ListOptions{Limit: 1})
		if err == nil {
			_, err = dyn.Resource(kube.PoolResource).List(context.Background(), metav1.ListOptions{Limit: 1})
		}
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("proxies and proxypools not served after %s: %v", servedTimeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Dynamic is a dynamic client for cfg.
func Dynamic(t *testing.T, cfg *rest.Config) dynamic.Interface {
	t.Helper()
	c, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Core is a typed client for cfg.
func Core(t *testing.T, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Namespace creates a namespace.
func Namespace(t *testing.T, cfg *rest.Config, name string) {
	t.Helper()
	_, err := Core(t, cfg).CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// CreateProxy creates a Proxy (apiVersion and kind are filled in) in namespace and returns it
// as the server stored it.
func CreateProxy(t *testing.T, cfg *rest.Config, namespace string, obj map[string]any) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{Object: obj}
	u.SetAPIVersion(kube.ProxyResource.GroupVersion().String())
	u.SetKind("Proxy")
	out, err := Dynamic(t, cfg).Resource(kube.ProxyResource).Namespace(namespace).Create(context.Background(), u, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Kubeconfig writes cfg as a kubeconfig file (for kubectl and -kubeconfig) and returns its path.
func Kubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData,
		CertificateAuthority: cfg.CAFile, InsecureSkipTLSVerify: cfg.Insecure}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken, TokenFile: cfg.BearerTokenFile,
		ClientCertificateData: cfg.CertData, ClientCertificate: cfg.CertFile, ClientKeyData: cfg.KeyData, ClientKey: cfg.KeyFile}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "admin"}
	kc.CurrentContext = "test"
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, p); err != nil {
		t.Fatal(err)
	}
	return p
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}
