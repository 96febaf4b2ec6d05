package kubernetes_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/internal/squidtest"
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/credentials"
	"github.com/proxy-operator/proxy-operator/providers/kubernetes"
)

// podSquidConf is the SQUID_CONF of the Pod a provider built from cfg creates.
func podSquidConf(t *testing.T, cfg kubernetes.Config, creds *providers.Credentials) podContainer {
	t.Helper()
	b := newProvider(t, cfg).Bind(parent, nil)
	if _, err := b.Create(context.Background(), providers.CreateRequest{Name: "proxy-x", OwnerUID: parent.UID, SpecHash: "h", Port: 3128, Credentials: creds}); err != nil {
		t.Fatal(err)
	}
	var pod podJSON
	if err := json.Unmarshal(b.Children(false)[0], &pod); err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers[0]
	if len(c.Env) != 1 || c.Env[0].Name != "SQUID_CONF" {
		t.Fatalf("env %v, want SQUID_CONF", c.Env)
	}
	return c
}

// TestSquidConfigDeniesInsideDestinations (issue 30): the Pod's squid.conf refuses, by
// destination address and before any allow, loopback, private, CGNAT, link-local and metadata
// addresses and the configured cluster ranges, for every method (CONNECT included: no method
// narrows the deny lines), and leaves public addresses to the credential rule. The real Squid
// parses it without dropping a range.
func TestSquidConfigDeniesInsideDestinations(t *testing.T) {
	conf := podSquidConf(t, kubernetes.Config{DeniedCIDRs: []string{"10.96.0.0/12", "203.0.113.0/24", "2001:db8:42::/48"}}, nil).Env[0].Value
	acls := map[string][]netip.Prefix{}
	var denied []netip.Prefix
	firstAllow, lastDeny := -1, -1
	for i, line := range strings.Split(conf, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 3 && f[0] == "acl" && f[2] == "dst":
			for _, s := range f[3:] {
				pr, err := netip.ParsePrefix(s)
				if err != nil {
					t.Fatalf("acl %s: %q: %v", f[1], s, err)
				}
				acls[f[1]] = append(acls[f[1]], pr)
			}
		case len(f) > 1 && f[0] == "http_access" && f[1] == "allow" && firstAllow < 0:
			firstAllow = i
		case len(f) == 3 && f[0] == "http_access" && f[1] == "deny" && acls[f[2]] != nil:
			denied = append(denied, acls[f[2]]...)
			lastDeny = i
		}
	}
	if lastDeny < 0 || firstAllow < 0 || lastDeny > firstAllow {
		t.Fatalf("the dst denies (last at line %d) must come before the first allow (line %d):\n%s", lastDeny, firstAllow, conf)
	}
	isDenied := func(a netip.Addr) bool {
		for _, pr := range denied {
			if pr.Contains(a) {
				return true
			}
		}
		return false
	}
	for _, s := range []string{"127.0.0.1", "127.255.0.9", "::1", "10.1.2.3", "172.16.0.1", "172.31.255.254", "192.168.1.1",
		"fd00:ec2::254", "fd20:ce::254", "169.254.169.254", "fe80::1", "100.64.0.1", "100.100.100.200", "0.0.0.0", "::",
		"168.63.129.16", "192.0.0.192", "10.96.0.10", "203.0.113.7", "2001:db8:42::1"} {
		if !isDenied(netip.MustParseAddr(s)) {
			t.Errorf("%s is not denied:\n%s", s, conf)
		}
	}
	for _, s := range []string{"8.8.8.8", "1.1.1.1", "172.32.0.1", "100.128.0.1", "192.169.0.1", "2001:4860:4860::8888", "2001:db8:43::1"} {
		if isDenied(netip.MustParseAddr(s)) {
			t.Errorf("public %s is denied", s)
		}
	}

	bin := squidtest.Binary(t)
	dir := squidtest.Dir(t)
	local, err := localSquidConf(conf, "3128", dir, dir)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "squid.conf")
	if err := os.WriteFile(file, []byte(local), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "-k", "parse", "-f", file).CombinedOutput()
	if err != nil || strings.Contains(string(out), "is ignored") || strings.Contains(string(out), "FATAL") {
		t.Errorf("squid -k parse: %v\n%s", err, out)
	}
}

// TestPodSquidRefusesInsideDestinations (issue 30) runs the real Squid with the Pod's own
// config: an authenticated client asking for a live loopback target, by address, by name, as
// an IPv4-mapped address or by CONNECT, gets Squid's own 403 (ERR_ACCESS_DENIED) and the target
// sees nothing; the same requests through a Squid whose config has only loopback lifted from
// the denied ranges reach it, so the refusal is the destination rule and nothing else.
func TestPodSquidRefusesInsideDestinations(t *testing.T) {
	bin := squidtest.Binary(t)
	var hits atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(target.Close)
	_, port, _ := net.SplitHostPort(target.Listener.Addr().String())

	secret, err := credentials.ForManaged(parent, nil)
	if err != nil {
		t.Fatal(err)
	}
	creds := secret.Credentials
	c := podSquidConf(t, kubernetes.Config{}, &creds)
	for _, lifted := range []bool{false, true} {
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
		writeHtpasswd(t, credDir, secret.Child, time.Now().Add(-time.Hour))
		addr := startPodSquid(t, bin, c, credDir, runDir, lifted)
		auth := "Basic " + basicAuth(creds.Username, creds.Password)
		before := hits.Load()
		for _, req := range []string{
			"GET http://127.0.0.1:" + port + "/ HTTP/1.1\r\nHost: 127.0.0.1:" + port,
			"GET http://localhost:" + port + "/ HTTP/1.1\r\nHost: localhost:" + port,
			"GET http://[::ffff:127.0.0.1]:" + port + "/ HTTP/1.1\r\nHost: [::ffff:127.0.0.1]:" + port,
			"POST http://127.0.0.1:" + port + "/ HTTP/1.1\r\nHost: 127.0.0.1:" + port + "\r\nContent-Length: 0",
			"CONNECT 127.0.0.1:" + port + " HTTP/1.1\r\nHost: 127.0.0.1:" + port,
		} {
			code, squidErr := rawThrough(t, addr, req, auth)
			switch {
			case !lifted && (code != http.StatusForbidden || !strings.HasPrefix(squidErr, "ERR_ACCESS_DENIED")):
				t.Errorf("%q: %d (X-Squid-Error %q), want Squid's 403 ERR_ACCESS_DENIED", req, code, squidErr)
			case lifted && code != http.StatusNoContent && code != http.StatusOK:
				t.Errorf("loopback lifted: %q: %d (X-Squid-Error %q), want the target reached", req, code, squidErr)
			}
		}
		if got := hits.Load() - before; !lifted && got != 0 {
			t.Errorf("the target saw %d requests through the Pod's Squid, want none", got)
		}
		if code, _ := rawThrough(t, addr, "GET http://127.0.0.1:"+port+"/ HTTP/1.1\r\nHost: 127.0.0.1:"+port, ""); code != http.StatusProxyAuthRequired {
			t.Errorf("lifted=%v: without the credential: %d, want 407 before any destination rule", lifted, code)
		}
	}
}

// rawThrough sends one request head (without its final blank line) to the proxy at addr with
// auth as Proxy-Authorization (none when empty) and returns the status and X-Squid-Error.
func rawThrough(t *testing.T, addr, head, auth string) (int, string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if auth != "" {
		head += "\r\nProxy-Authorization: " + auth
	}
	if _, err := fmt.Fprintf(conn, "%s\r\n\r\n", head); err != nil {
		t.Fatal(err)
	}
	method := http.MethodGet
	if strings.HasPrefix(head, "CONNECT ") {
		method = http.MethodConnect
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%q: %v", head, err)
	}
	res.Body.Close()
	return res.StatusCode, res.Header.Get("X-Squid-Error")
}

func basicAuth(user, pass string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
}
