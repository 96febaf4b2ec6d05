package gateway

import (
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// idleReader reads a client's request body with a read deadline pushed back before each read:
// a client that stops sending loses its slot after idle, however long the body.
type idleReader struct {
	r     io.Reader
	rc    *http.ResponseController
	idle  time.Duration
	touch func()
}

func (r *idleReader) Read(p []byte) (int, error) {
	_ = r.rc.SetReadDeadline(time.Now().Add(r.idle))
	n, err := r.r.Read(p)
	if n > 0 {
		r.touch()
	}
	return n, err
}

// copyIdle copies an upstream answer's body to the client, flushing as it goes, with a write
// deadline pushed back before each write; touch resets the exchange's watchdog, which cancels
// an upstream that stops sending.
func copyIdle(w http.ResponseWriter, src io.Reader, rc *http.ResponseController, idle time.Duration, touch func()) (int64, error) {
	buf := make([]byte, 32<<10)
	var total int64
	for {
		n, err := src.Read(buf)
		if n > 0 {
			touch()
			_ = rc.SetWriteDeadline(time.Now().Add(idle))
			m, werr := w.Write(buf[:n])
			total += int64(m)
			if werr != nil {
				return total, werr
			}
			if err == nil && n < len(buf) {
				_ = rc.Flush() // a slow trickle (server-sent events) reaches the client as it comes
			}
		}
		if errors.Is(err, io.EOF) {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// pipeIdle relays a tunnel both ways until both sides have closed or neither has sent for
// idle. clientR and upR hold bytes already read past the CONNECT exchange. It returns the
// bytes received from the upstream (in) and sent to it (out).
func pipeIdle(client net.Conn, clientR io.Reader, up net.Conn, upR io.Reader, idle time.Duration) (in, out int64) {
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	var wg sync.WaitGroup
	var once sync.Once
	closeBoth := func() {
		once.Do(func() {
			client.Close()
			up.Close()
		})
	}
	relay := func(dst, srcConn net.Conn, src io.Reader, count *int64) {
		defer wg.Done()
		buf := make([]byte, 32<<10)
		for {
			_ = srcConn.SetReadDeadline(time.Now().Add(idle))
			n, err := src.Read(buf)
			if n > 0 {
				last.Store(time.Now().UnixNano())
				_ = dst.SetWriteDeadline(time.Now().Add(idle))
				if _, werr := dst.Write(buf[:n]); werr != nil {
					closeBoth()
					return
				}
				*count += int64(n)
			}
			if err == nil {
				continue
			}
			if errors.Is(err, os.ErrDeadlineExceeded) && time.Since(time.Unix(0, last.Load())) < idle {
				continue // this side is quiet, the other is busy: the tunnel is not idle
			}
			if errors.Is(err, io.EOF) {
				if tcp, ok := dst.(interface{ CloseWrite() error }); ok {
					_ = tcp.CloseWrite()
					return
				}
			}
			closeBoth()
			return
		}
	}
	wg.Add(2)
	go relay(up, client, clientR, &out)
	go relay(client, up, upR, &in)
	wg.Wait()
	closeBoth()
	return in, out
}

func basic(user, pass string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
}
