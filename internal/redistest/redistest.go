// Package redistest owns real redis-server and redis-sentinel processes for tests: each on a
// free loopback port with its own temporary directory, stopped by PID; replicas, Sentinel sets,
// Clusters and TLS servers are built from them. It knows nothing of what the tests store.
package redistest

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is one redis-server (or redis-sentinel) process. Kill and Restart may be called to
// simulate an outage: the port and the directory (with its append-only file) are kept.
type Server struct {
	t    testing.TB
	Addr string
	Dir  string

	bin   string
	args  func(port string) []string
	tls   *tls.Config // how to reach a TLS-only server for the readiness check
	extra []string    // more redis-server arguments

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan error
	out    bytes.Buffer
}

// Binary returns the redis-server path, skipping the test when it is missing outside CI and
// failing it in CI (CI is set), where a skip would hide the whole Redis suite.
func Binary(t testing.TB) string { return lookPath(t, "redis-server") }

// SentinelBinary is Binary for redis-sentinel (Debian's package of that name).
func SentinelBinary(t testing.TB) string { return lookPath(t, "redis-sentinel") }

func lookPath(t testing.TB, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s not found on PATH and CI is set: the Redis lease store tests must run in CI (.ci/run installs the Debian package %s)", name, name)
		}
		t.Skipf("%s not found on PATH: skipping the tests against a real Redis (apt-get install %s; in CI they fail instead)", name, name)
	}
	return path
}

// Start runs a fresh redis-server with append-only persistence (appendfsync always, what the
// lease store needs to lose no acknowledged grant in a crash) and stops it at cleanup;
// extra are more redis-server arguments (e.g. "--requirepass", "pw").
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	s := &Server{t: t, Dir: t.TempDir(), bin: Binary(t), extra: extra}
	s.args = s.serverArgs
	s.launch()
	return s
}

// TLSFiles are the PEM files of a TLS server.
type TLSFiles struct {
	Cert, Key, CA string
	// AuthClients makes the server ask for a client certificate signed by CA.
	AuthClients bool
}

// StartTLS runs a redis-server that only speaks TLS (--port 0 --tls-port); client is how the
// readiness check reaches it (the test's CA, and a client certificate when AuthClients).
func StartTLS(t testing.TB, f TLSFiles, client *tls.Config) *Server {
	t.Helper()
	auth := "no"
	if f.AuthClients {
		auth = "yes"
	}
	s := &Server{t: t, Dir: t.TempDir(), bin: Binary(t), tls: client}
	s.args = func(port string) []string {
		return []string{"--bind", "127.0.0.1", "--port", "0", "--tls-port", port, "--dir", s.Dir,
			"--tls-cert-file", f.Cert, "--tls-key-file", f.Key, "--tls-ca-cert-file", f.CA, "--tls-auth-clients", auth,
			"--save", "", "--appendonly", "no", "--protected-mode", "no", "--daemonize", "no", "--loglevel", "warning"}
	}
	s.launch()
	return s
}

func (s *Server) serverArgs(port string) []string {
	fsync := "always"
	if v := os.Getenv("REDISTEST_APPENDFSYNC"); v != "" { // benchmarks: the cost of always
		fsync = v
	}
	return append([]string{
		"--bind", "127.0.0.1", "--port", port, "--dir", s.Dir,
		"--appendonly", "yes", "--appendfsync", fsync, "--save", "",
		"--protected-mode", "no", "--daemonize", "no", "--loglevel", "warning"}, s.extra...)
}

func (s *Server) launch() {
	s.t.Helper()
	var err error
	for range 5 { // a port picked free can be taken before the server binds it: try another
		s.Addr, err = freePort()
		if err != nil {
			s.t.Fatal(err)
		}
		if err = s.start(); err == nil {
			break
		}
	}
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(s.Kill)
}

func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("redistest: free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// Restart starts the server again on the same port and directory after Kill.
func (s *Server) Restart() {
	s.t.Helper()
	var err error
	for range 50 { // the old socket may linger in the kernel for a moment
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.t.Fatal(err)
}

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, port, _ := net.SplitHostPort(s.Addr)
	cmd := exec.Command(s.bin, s.args(port)...)
	s.out.Reset()
	cmd.Stdout, cmd.Stderr = &s.out, &s.out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redistest: start %s: %w", s.bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	c := redis.NewClient(&redis.Options{Addr: s.Addr, Password: s.password(), MaxRetries: -1, DialTimeout: time.Second, TLSConfig: s.tls})
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("redistest: %s exited before it was ready (%v): %s", s.bin, err, s.out.String())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			s.cmd, s.exited = cmd, exited
			return nil
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("redistest: %s on %s not ready: %w", s.bin, s.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill stops the server by PID with SIGKILL (no shutdown save: what an OOM kill does).
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited // reaped: the port is free for Restart
	s.cmd = nil
}

// Running reports whether the process is up (not killed).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// Output is what the process wrote since its last start.
func (s *Server) Output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.String()
}

// Client is a plain client of this one server, closed at cleanup.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, Password: s.password(), TLSConfig: s.tls, DialTimeout: time.Second})
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

func (s *Server) password() string {
	for i, a := range s.extra {
		if a == "--requirepass" && i+1 < len(s.extra) {
			return s.extra[i+1]
		}
	}
	return ""
}

// Until polls cond every 50 ms until it holds or timeout passes, then fails the test with
// what. Conditions read a server's state: no fixed sleeps in the tests that use it.
func Until(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("redistest: %s: not within %s", what, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
