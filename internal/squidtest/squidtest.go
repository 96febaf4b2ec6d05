// Package squidtest runs a real Squid (the Debian package) on a free loopback port for tests:
// finding the binary, a directory Squid's own user can reach, a minimal config, the retry when
// the free port is taken before Squid binds it, and the wait until Squid answers a request. It
// knows nothing of the operator.
package squidtest

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// NCSAAuth is where Debian's squid package installs the htpasswd-file basic auth helper.
const NCSAAuth = "/usr/lib/squid/basic_ncsa_auth"

// readyTimeout bounds the wait for a started Squid to answer; a busy 2-core machine can take
// tens of seconds for the first answer.
const readyTimeout = 60 * time.Second

// Binary finds Squid. With CI set a missing Squid fails the test (.ci/run installs it, so its
// absence is a broken CI image, not a reason to pass); otherwise the test skips.
func Binary(t testing.TB) string {
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

// Dir is a directory Squid can use, removed when the test ends. Not t.TempDir: run as root,
// Squid drops to its own user, which must reach the directory.
func Dir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "squidtest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Options shape the config Config writes.
type Options struct {
	// ConnectPorts are the only ports CONNECT may reach (none: CONNECT to any port is denied,
	// plain requests are allowed).
	ConnectPorts []string
	// Htpasswd, when set, is an htpasswd file (bcrypt, MD5 or crypt, as basic_ncsa_auth reads):
	// every request must carry one of its credentials (407 otherwise).
	Htpasswd string
	// Extra are lines appended to the config (e.g. tcp_outgoing_address, to make Squid's
	// traffic leave from another address than it listens on).
	Extra []string
}

// Config is a minimal squid.conf listening on 127.0.0.1:port, allowing loopback clients, with
// its log and pid files under dir.
func Config(dir, port string, o Options) string {
	var b strings.Builder
	fmt.Fprintf(&b, "http_port 127.0.0.1:%s\n", port)
	if o.Htpasswd != "" {
		fmt.Fprintf(&b, "auth_param basic program %s %s\nauth_param basic children 5 startup=1 idle=1\nauth_param basic realm squidtest\nacl authed proxy_auth REQUIRED\n", NCSAAuth, o.Htpasswd)
	}
	b.WriteString("acl localnet src 127.0.0.0/8\nacl CONNECT method CONNECT\n")
	if len(o.ConnectPorts) > 0 {
		fmt.Fprintf(&b, "acl connect_ports port %s\nhttp_access deny CONNECT !connect_ports\n", strings.Join(o.ConnectPorts, " "))
	} else {
		b.WriteString("http_access deny CONNECT\n")
	}
	if o.Htpasswd != "" {
		b.WriteString("http_access deny !authed\n")
	}
	fmt.Fprintf(&b, `http_access allow localnet
http_access deny all
cache deny all
access_log none
cache_store_log none
cache_log %s
pid_filename %s
coredump_dir %s
pinger_enable off
shutdown_lifetime 0 seconds
visible_hostname squidtest
`, filepath.Join(dir, "cache.log"), filepath.Join(dir, "squid.pid"), dir)
	for _, l := range o.Extra {
		b.WriteString(l + "\n")
	}
	return b.String()
}

// Start runs Squid with Config(dir, port, o) on a free loopback port and returns its address
// once it answers. It stops when the test ends.
func Start(t testing.TB, o Options) string {
	t.Helper()
	bin, dir := Binary(t), Dir(t)
	return StartWith(t, Launch{Dir: dir, Command: func(port string) (*exec.Cmd, error) {
		conf := filepath.Join(dir, "squid.conf")
		if err := os.WriteFile(conf, []byte(Config(dir, port, o)), 0o644); err != nil {
			return nil, err
		}
		return exec.Command(bin, "-N", "-f", conf), nil
	}})
}

// Launch says how to start one Squid process for a port.
type Launch struct {
	// Dir holds cache.log, shown when Squid fails to start.
	Dir string
	// Command returns the process to start, listening on 127.0.0.1:port. It runs in a
	// process group of its own, so a wrapping shell and its Squid stop together.
	Command func(port string) (*exec.Cmd, error)
}

// StartWith starts l.Command on a free loopback port (three tries: the port can be taken
// between the check and Squid's bind) and returns the address once Squid answers a request.
// The process group stops when the test ends.
func StartWith(t testing.TB, l Launch) string {
	t.Helper()
	var lastErr error
	for range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		_, port, _ := net.SplitHostPort(addr)
		cmd, err := l.Command(port)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		if lastErr = WaitAnswering(addr, exited); lastErr == nil {
			t.Cleanup(func() {
				_ = cmd.Process.Signal(syscall.SIGTERM)
				select {
				case <-exited:
				case <-time.After(15 * time.Second):
					_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
					<-exited
				}
			})
			return addr
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		log, _ := os.ReadFile(filepath.Join(l.Dir, "cache.log"))
		lastErr = fmt.Errorf("%w\noutput: %s\ncache.log: %s", lastErr, out.String(), log)
	}
	t.Fatalf("squid did not start: %v", lastErr)
	return ""
}

// WaitAnswering waits until the Squid on addr answers an HTTP request, not merely accepts a
// connection: a Squid that has just bound its port may take seconds on a busy machine to
// answer the first CONNECT, longer than a probe's timeout. The request is a CONNECT to port
// 1, which no config here allows, so the answer (403 or 407) needs no upstream.
func WaitAnswering(addr string, exited <-chan error) error {
	deadline := time.Now().Add(readyTimeout)
	var last error
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("squid exited: %v", err)
		default:
		}
		if last = answers(addr, deadline); last == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("squid on %s did not answer a request within %s: %v", addr, readyTimeout, last)
}

func answers(addr string, deadline time.Time) error {
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
