package mock_test

import (
	"bufio"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/providers/mock"
)

// TestConnectAnswerIsAPlainStatusLine: the 200 to a CONNECT is a bare status line and a blank
// line, with no Transfer-Encoding (strict clients refuse a chunked CONNECT answer), and the
// tunnel then carries bytes both ways.
func TestConnectAnswerIsAPlainStatusLine(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { echo.Close() })
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	stop, err := mock.ServeForwardProxy(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)

	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	target := echo.Addr().String()
	if _, err := io.WriteString(conn, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// Read the head as bytes: http.ReadResponse would hide a Transfer-Encoding on a CONNECT 200.
	br := bufio.NewReader(conn)
	var head []string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the CONNECT answer: %v (so far %q)", err, head)
		}
		if line == "\r\n" {
			break
		}
		head = append(head, line)
	}
	// Exactly the status line, written on the hijacked connection: nothing the HTTP server
	// would add (Date, Content-Length, Transfer-Encoding: chunked) that a tunnel client may choke on.
	if want := []string{"HTTP/1.1 200 Connection established\r\n"}; !slices.Equal(head, want) {
		t.Errorf("CONNECT answer head %q, want %q", head, want)
	}
	if _, err := io.WriteString(conn, "ping"); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(br, got); err != nil || string(got) != "ping" {
		t.Errorf("through the tunnel: %q, %v; want the echo of ping", got, err)
	}
}
