package kubernetes_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/internal/squidtest"

	"github.com/proxy-operator/proxy-operator/health"
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/credentials"
	"github.com/proxy-operator/proxy-operator/providers/kubernetes"
)

type podContainer struct {
	Command []string `json:"command"`
	Env     []struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	} `json:"env"`
	VolumeMounts []struct {
		Name      string `json:"name"`
		MountPath string `json:"mountPath"`
		ReadOnly  bool   `json:"readOnly"`
	} `json:"volumeMounts"`
}

type podJSON struct {
	Spec struct {
		Containers []podContainer `json:"containers"`
		Volumes    []struct {
			Name   string `json:"name"`
			Secret struct {
				SecretName string `json:"secretName"`
				Items      []struct{ Key, Path string }
			} `json:"secret"`
		} `json:"volumes"`
	} `json:"spec"`
}

// writeHtpasswd writes the htpasswd key of a credentials Secret child where the Pod mounts
// it, as the kubelet does: a new file renamed into place, its mtime moved on so Squid's
// helper (which compares whole seconds) sees the change.
func writeHtpasswd(t *testing.T, dir string, child json.RawMessage, mtime time.Time) {
	t.Helper()
	var s struct{ Data map[string][]byte }
	if err := json.Unmarshal(child, &s); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, ".htpasswd.new")
	if err := os.WriteFile(tmp, s.Data[credentials.KeyHtpasswd], 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(tmp, mtime, mtime); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, credentials.KeyHtpasswd)); err != nil {
		t.Fatal(err)
	}
}

// TestPodSquidDemandsCredential runs the real Squid with the Pod's own command and config
// (only paths and the listen address moved into a temporary directory on loopback, and
// loopback lifted from the denied destinations so the test's targets are reachable), with the
// htpasswd of a generated credentials Secret: without the credential a request gets 407, with
// the lease-style proxy URL it goes through (plain HTTP and CONNECT), the prober reports a
// missing credential as proxy_auth, and a rotated Secret is honoured without a restart.
func TestPodSquidDemandsCredential(t *testing.T) {
	bin := squidtest.Binary(t)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(target.Close)
	tlsTarget := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(tlsTarget.Close)

	secret, err := credentials.ForManaged(parent, nil)
	if err != nil {
		t.Fatal(err)
	}
	creds := secret.Credentials
	b := newProvider(t, kubernetes.Config{}).Bind(parent, nil)
	if _, err := b.Create(context.Background(), providers.CreateRequest{Name: "proxy-x", OwnerUID: parent.UID, SpecHash: "h", Port: 3128, Credentials: &creds}); err != nil {
		t.Fatal(err)
	}
	var pod podJSON
	if err := json.Unmarshal(b.Children(false)[0], &pod); err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers[0]
	if len(pod.Spec.Volumes) != 1 || pod.Spec.Volumes[0].Secret.SecretName != credentials.SecretName(parent.UID) {
		t.Fatalf("volumes %+v: want the credentials Secret %s", pod.Spec.Volumes, credentials.SecretName(parent.UID))
	}
	if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != kubernetes.CredentialsDir || !c.VolumeMounts[0].ReadOnly {
		t.Fatalf("volume mounts %+v", c.VolumeMounts)
	}
	if len(c.Command) != 3 || len(c.Env) != 1 || c.Env[0].Name != "SQUID_CONF" {
		t.Fatalf("command %q env %v, want sh -c with SQUID_CONF", c.Command, c.Env)
	}
	if strings.Contains(c.Env[0].Value, creds.Password) || strings.Contains(string(b.Children(false)[0]), creds.Password) {
		t.Fatal("the Pod carries the password itself; it must read the Secret")
	}

	// Not t.TempDir: Squid drops to its own user, which must reach the files.
	dir, err := os.MkdirTemp("", "pod-squid-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	credDir, runDir := filepath.Join(dir, "creds"), filepath.Join(dir, "run")
	for _, d := range []string{dir, credDir, runDir} {
		if err := os.MkdirAll(d, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now().Add(-time.Hour)
	writeHtpasswd(t, credDir, secret.Child, start)

	addr := startPodSquid(t, bin, c, credDir, runDir, true)
	t.Cleanup(func() {
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(runDir, "cache.log"))
			t.Logf("cache.log:\n%s", log)
		}
	})
	noCreds := &url.URL{Scheme: "http", Host: addr}
	wrong := &url.URL{Scheme: "http", Host: addr, User: url.UserPassword(creds.Username, "wrong")}
	leased := creds.ProxyURL(addr)
	for _, u := range []string{target.URL, tlsTarget.URL} {
		for _, tc := range []struct {
			name  string
			proxy *url.URL
			want  int
		}{{"no credential", noCreds, http.StatusProxyAuthRequired}, {"wrong", wrong, http.StatusProxyAuthRequired}, {"proxyURL", leased, http.StatusNoContent}} {
			if got := fetch(t, tc.proxy, u); got != tc.want {
				t.Errorf("%s via %s: status %d, want %d", tc.name, u, got, tc.want)
			}
		}
	}

	prober := health.NewHTTPProber(tlsTarget.Client().Transport.(*http.Transport).TLSClientConfig)
	defer prober.Close()
	for _, tc := range []struct {
		name  string
		creds *providers.Credentials
		kind  string
	}{{"without", nil, health.KindProxyAuth}, {"with", &creds, ""}} {
		for _, u := range []string{target.URL, tlsTarget.URL} {
			r := prober.Probe(context.Background(), health.Target{Proxy: addr, URL: u, Timeout: 10 * time.Second, Expected: []int32{204}, Credentials: tc.creds})
			if r.Kind != tc.kind {
				t.Errorf("probe %s credential via %s: kind %q (%v), want %q", tc.name, u, r.Kind, r.Err, tc.kind)
			}
		}
	}

	// Rotation: a new Secret content reaches the running Squid without a restart.
	rotated, err := credentials.ForManaged(parent, nil)
	if err != nil {
		t.Fatal(err)
	}
	writeHtpasswd(t, credDir, rotated.Child, start.Add(time.Minute))
	if got := fetch(t, rotated.Credentials.ProxyURL(addr), target.URL); got != http.StatusNoContent {
		t.Errorf("rotated credential: status %d, want 204 without restarting Squid", got)
	}
}

func fetch(t *testing.T, proxy *url.URL, target string) int {
	t.Helper()
	tr := &http.Transport{Proxy: http.ProxyURL(proxy), DisableKeepAlives: true,
		TLSClientConfig: insecureTLS()}
	client := &http.Client{Transport: tr, Timeout: 20 * time.Second}
	res, err := client.Get(target)
	if err != nil {
		// A CONNECT answered 407 surfaces as an error carrying the status text.
		if strings.Contains(err.Error(), "Proxy Authentication Required") {
			return http.StatusProxyAuthRequired
		}
		t.Fatalf("GET %s via %s: %v", target, proxy.Redacted(), err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

// startPodSquid runs the container's own shell command with its own SQUID_CONF, paths moved
// under credDir and runDir and the port onto a free loopback port. With allowLoopback the
// loopback ranges leave the denied destinations, so a target on loopback is reachable.
func startPodSquid(t *testing.T, bin string, c podContainer, credDir, runDir string, allowLoopback bool) string {
	t.Helper()
	return squidtest.StartWith(t, squidtest.Launch{Dir: runDir, Command: func(port string) (*exec.Cmd, error) {
		conf, err := localSquidConf(c.Env[0].Value, port, credDir, runDir)
		if err != nil {
			return nil, err
		}
		if allowLoopback {
			lifted := strings.Replace(strings.Replace(conf, " 127.0.0.0/8 ", " ", 1), " ::1/128 ", " ", 1)
			if len(lifted) != len(conf)-len(" 127.0.0.0/8")-len(" ::1/128") {
				return nil, fmt.Errorf("loopback not found in the denied destinations:\n%s", conf)
			}
			conf = lifted
		}
		script := strings.ReplaceAll(c.Command[2], kubernetes.RunDir+"/", runDir+"/")
		script = strings.Replace(script, "exec squid ", "exec "+bin+" ", 1)
		cmd := exec.Command(c.Command[0], c.Command[1], script)
		cmd.Env = append(os.Environ(), "SQUID_CONF="+conf)
		return cmd, nil
	}})
}

// localSquidConf is the Pod's squid.conf with the port on loopback and the paths under
// credDir and runDir, nothing else changed.
func localSquidConf(conf, port, credDir, runDir string) (string, error) {
	conf = strings.Replace(conf, "http_port 3128\n", "http_port 127.0.0.1:"+port+"\n", 1)
	// Through placeholders: the temporary directories themselves live under /tmp.
	conf = strings.ReplaceAll(conf, kubernetes.CredentialsDir+"/", "\x00C/")
	conf = strings.ReplaceAll(conf, kubernetes.RunDir+"/", "\x00R/")
	conf = strings.ReplaceAll(conf, "coredump_dir "+kubernetes.RunDir+"\n", "coredump_dir \x00R\n")
	conf = strings.ReplaceAll(strings.ReplaceAll(conf, "\x00C", credDir), "\x00R", runDir)
	if strings.Contains(conf, kubernetes.CredentialsDir) || !strings.Contains(conf, "127.0.0.1:"+port) {
		return "", fmt.Errorf("config did not move as expected:\n%s", conf)
	}
	return conf, nil
}

func insecureTLS() *tls.Config { return &tls.Config{InsecureSkipVerify: true} } //nolint:gosec // the test's own server
