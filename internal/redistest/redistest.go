// Package redistest owns real redis-server processes for tests: each on a free loopback port
// with its own temporary directory, stopped by PID. It knows nothing of what the tests store.
package redistest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is one redis-server process. Kill and Start may be called again to simulate an
// outage: the port and the directory (with its append-only file) are kept.
type Server struct {
	t    testing.TB
	Addr string
	Dir  string

	extra []string // more redis-server arguments

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan error
	out    bytes.Buffer
}

// Binary returns the redis-server path, skipping the test when it is missing outside CI and
// failing it in CI (CI is set), where a skip would hide the whole Redis suite.
func Binary(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("redis-server not found on PATH and CI is set: the Redis lease store tests must run in CI (.ci/run installs the Debian package redis-server)")
		}
		t.Skip("redis-server not found on PATH: skipping the tests against a real Redis (apt-get install redis-server; in CI they fail instead)")
	}
	return path
}

// Start runs a fresh redis-server with append-only persistence (appendfsync always, what the
// lease store needs to lose no acknowledged grant in a crash) and stops it at cleanup;
// extra are more redis-server arguments (e.g. "--requirepass", "pw").
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	bin := Binary(t)
	s := &Server{t: t, Dir: t.TempDir(), extra: extra}
	var err error
	for range 5 { // a port picked free can be taken before redis binds it: try another
		s.Addr, err = freePort()
		if err != nil {
			t.Fatal(err)
		}
		if err = s.start(bin); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Kill)
	return s
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
	bin := Binary(s.t)
	var err error
	for range 50 { // the old socket may linger in the kernel for a moment
		if err = s.start(bin); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.t.Fatal(err)
}

func (s *Server) start(bin string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, port, _ := net.SplitHostPort(s.Addr)
	fsync := "always"
	if v := os.Getenv("REDISTEST_APPENDFSYNC"); v != "" { // benchmarks: the cost of always
		fsync = v
	}
	args := append([]string{
		"--bind", "127.0.0.1", "--port", port, "--dir", s.Dir,
		"--appendonly", "yes", "--appendfsync", fsync, "--save", "",
		"--protected-mode", "no", "--daemonize", "no", "--loglevel", "warning"}, s.extra...)
	cmd := exec.Command(bin, args...)
	s.out.Reset()
	cmd.Stdout, cmd.Stderr = &s.out, &s.out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redistest: start redis-server: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	c := redis.NewClient(&redis.Options{Addr: s.Addr, Password: s.password(), MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("redistest: redis-server exited before it was ready (%v): %s", err, s.out.String())
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
			return fmt.Errorf("redistest: redis-server on %s not ready: %w", s.Addr, err)
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

func (s *Server) password() string {
	for i, a := range s.extra {
		if a == "--requirepass" && i+1 < len(s.extra) {
			return s.extra[i+1]
		}
	}
	return ""
}
