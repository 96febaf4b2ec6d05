package health

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/lifecycle"
)

// squidBinary finds Squid. On CI (env CI set) a missing Squid fails the test: .ci/run
// installs it, so its absence is a broken CI image, not a reason to pass.
func squidBinary(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"squid", "/usr/sbin/squid"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("squid not found and CI is set: install the Debian package squid")
	}
	t.Skip("squid not found (apt-get install squid); set CI to make this a failure")
	return ""
}

// startSquid runs a real Squid on a free loopback port that allows CONNECT only to
// allowPort, and returns its address; extra lines are added to its config. It stops when the
// test ends.
func startSquid(t *testing.T, allowPort string, extra ...string) string {
	t.Helper()
	bin := squidBinary(t)
	// Not t.TempDir: run as root, Squid drops to its own user, which must reach the dir.
	dir, err := os.MkdirTemp("", "health-squid-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	var lastErr error
	for range 3 { // the free port can be taken between our check and Squid's bind
		addr := closedAddr(t)
		_, port, _ := net.SplitHostPort(addr)
		conf := fmt.Sprintf(`http_port 127.0.0.1:%s
acl localnet src 127.0.0.0/8
acl probe_port port %s
acl CONNECT method CONNECT
http_access deny CONNECT !probe_port
http_access allow localnet
http_access deny all
cache deny all
access_log none
cache_store_log none
cache_log %s
pid_filename %s
coredump_dir %s
pinger_enable off
shutdown_lifetime 0 seconds
visible_hostname health-test
%s
`, port, allowPort, filepath.Join(dir, "cache.log"), filepath.Join(dir, "squid.pid"), dir, strings.Join(extra, "\n"))
		confPath := filepath.Join(dir, "squid.conf")
		if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		cmd := exec.Command(bin, "-N", "-f", confPath)
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		if lastErr = waitListening(addr, exited); lastErr == nil {
			t.Cleanup(func() {
				_ = cmd.Process.Signal(syscall.SIGTERM)
				select {
				case <-exited:
				case <-time.After(10 * time.Second):
					_ = cmd.Process.Kill()
					<-exited
				}
			})
			return addr
		}
		_ = cmd.Process.Kill()
		<-exited
		log, _ := os.ReadFile(filepath.Join(dir, "cache.log"))
		lastErr = fmt.Errorf("%w\noutput: %s\ncache.log: %s", lastErr, out.String(), log)
	}
	t.Fatalf("squid did not start: %v", lastErr)
	return ""
}

// waitListening waits until Squid answers an HTTP request, not merely accepts a connection:
// a Squid that has just bound its port may take seconds on a busy machine to answer the first
// CONNECT, longer than a probe's timeout. The request is a CONNECT to port 1, which every
// config here denies, so the answer (403) needs no upstream.
func waitListening(addr string, exited <-chan error) error {
	deadline := time.Now().Add(60 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("squid exited: %v", err)
		default:
		}
		if last = squidAnswers(addr, deadline); last == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("squid on %s did not answer a request within 60s: %v", addr, last)
}

func squidAnswers(addr string, deadline time.Time) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(deadline)
	if _, err := c.Write([]byte("CONNECT 127.0.0.1:1 HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "HTTP/1.") {
		return fmt.Errorf("answer %q is not HTTP", line)
	}
	return nil
}

func TestSchedulerThroughRealSquid(t *testing.T) {
	target := newTLSTarget(t)
	squid := startSquid(t, target.port())
	// A port that is not the target's: Squid's ACL denies the CONNECT.
	denied, _ := strconv.Atoi(target.port())
	strict := startSquid(t, strconv.Itoa(denied%60000+1))

	view := fleet.New(time.Now, 0)
	// 2 s probe timeouts (20 test units): a warm Squid answers in milliseconds, and the margin
	// keeps a busy 2-core machine from turning its 403 into a timeout.
	view.Upsert(proxyAt(t, "ns/squid", squid, target.url(), 20, 20, 2, 1))
	view.Upsert(proxyAt(t, "ns/strict", strict, target.url(), 20, 20, 2, 1))
	s := startScheduler(t, view, NewHTTPProber(trusting(target)), nil)

	waitHealth(t, s, "ns/squid", lifecycle.HealthHealthy)
	if h := waitHealth(t, s, "ns/strict", lifecycle.HealthUnhealthy); h.Reason != KindConnectDenied {
		t.Errorf("denied CONNECT reason: got %q, want %q", h.Reason, KindConnectDenied)
	}

	target.srv.Close()
	if h := waitHealth(t, s, "ns/squid", lifecycle.HealthUnhealthy); h.Reason != KindUpstream {
		t.Errorf("target gone reason: got %q, want %q", h.Reason, KindUpstream)
	}
}
