package apiservertest

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// RestConfig is a client-go config for this server (its CA, the admin token), for tests of
// code that takes a client-go client.
func (s *Server) RestConfig() *rest.Config {
	return &rest.Config{
		Host:            s.base,
		BearerToken:     s.token,
		TLSClientConfig: rest.TLSClientConfig{CAData: s.caPEM},
		Timeout:         requestTimeout,
		QPS:             100,
		Burst:           200,
	}
}

// InstallProxyCRD creates the project's Proxy CRD (crds/crawl.example.com_proxies.yaml, found
// from the module root) and waits until proxies are served.
func (s *Server) InstallProxyCRD(t *testing.T) {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "crds", "crawl.example.com_proxies.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	s.Must(t, http.StatusCreated, http.MethodPost, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", j, "")
	deadline := time.Now().Add(apiserverReadyTimeout)
	for {
		code, _, err := s.Do(http.MethodGet, "/apis/crawl.example.com/v1alpha1/proxies", nil, "")
		if err == nil && code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("proxies not served after %s: %d %v", apiserverReadyTimeout, code, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// CreateNamespace creates a namespace.
func (s *Server) CreateNamespace(t *testing.T, name string) {
	t.Helper()
	s.Must(t, http.StatusCreated, http.MethodPost, "/api/v1/namespaces", map[string]any{
		"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": name},
	}, "")
}

// CreateProxy posts a Proxy (a JSON-able object) into its namespace and returns the created object.
func (s *Server) CreateProxy(t *testing.T, namespace string, obj any) map[string]any {
	t.Helper()
	b := s.Must(t, http.StatusCreated, http.MethodPost, "/apis/crawl.example.com/v1alpha1/namespaces/"+namespace+"/proxies", obj, "")
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", os.ErrNotExist
		}
		dir = parent
	}
}
