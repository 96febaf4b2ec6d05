package reliability

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fromAddr dials from another loopback address: the attacker's failed logins are throttled
// per source address (decision 0257), the legitimate callers on 127.0.0.1 must not be.
func fromAddr(ip string) *net.Dialer {
	return &net.Dialer{Timeout: 30 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
}

// attackPasswordGuess: 16 guessers try tokens on discovery and the hooks as fast as they can
// (issue 30: 367,231 guesses in 30 s, none throttled, every 401 logged). Each answer is 401 or
// 429, the address is throttled, the log stays sampled, and legitimate calls go on.
func attackPasswordGuess(t *testing.T, c *child, good proxyDesc, dur time.Duration) {
	c.resetPeak()
	logBefore := strings.Count(c.log.String(), "unauthorized")
	d := fromAddr("127.0.0.2")
	disc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 16}}
	hook := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, TLSClientConfig: c.hookTLS, MaxIdleConnsPerHost: 16}}
	l := c.startLegit(good)
	var cs codes
	var sent atomic.Int64
	deadline := time.Now().Add(dur)
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(deadline); i++ {
				guess := fmt.Sprintf("guess-%02d-%08d-abcdef", w, i)
				var code int
				var err error
				if i%2 == 0 {
					code, _, err = getVia(disc, c.discURL+"/v1/proxies", guess)
				} else {
					code, _, err = postVia(hook, c.hookURL+"/sync", guess, []byte(`{}`))
				}
				if err != nil {
					if isConnClosed(err) {
						continue
					}
					t.Errorf("guess: %v", err)
					return
				}
				sent.Add(1)
				cs.add(code)
			}
		}()
	}
	wg.Wait()
	lines := strings.Count(c.log.String(), "unauthorized") - logBefore
	t.Logf("ATTACK %-22s %d guesses in %v; %d log lines", "password guesses", sent.Load(), dur, lines)
	cs.check(t, "password guesses", http.StatusUnauthorized, http.StatusTooManyRequests)
	cs.mu.Lock()
	throttled, failed := cs.m[http.StatusTooManyRequests], cs.m[http.StatusUnauthorized]
	cs.mu.Unlock()
	// Per listener: 10 free failures, then each wait that ends lets at most the 16 guessers
	// in flight fail once more; the waits double, so about 10 end in an hour.
	if maxFailed := 2 * (10 + 16*10); throttled == 0 || failed > maxFailed {
		t.Errorf("password guesses: %d answered 401 and %d 429; want at most %d as 401, the rest 429", failed, throttled, maxFailed)
	}
	// Per listener: 5 at once, then one a second.
	if want := 2 * (5 + int(dur/time.Second) + 2); lines > want {
		t.Errorf("password guesses: %d log lines, want at most %d (sampled)", lines, want)
	}
	l.finish(t, "password guesses", c)
}

// attackUnauthTrickle: 64 connections without a token send a POST head declaring 100 KB and
// trickle its body, on the hooks (TLS) and discovery (issue 30: 401 only after 30 s / 10 s, and
// legitimate calls locked out). Each is answered as soon as its head is read.
func attackUnauthTrickle(t *testing.T, c *child, good proxyDesc, dur time.Duration) {
	c.resetPeak()
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	d := fromAddr("127.0.0.3")
	l := c.startLegit(good)
	var cs codes
	var slowest atomic.Int64
	var wg sync.WaitGroup
	for w := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				var conn net.Conn
				var err error
				path := "/v1/leases"
				if w%2 == 0 {
					path = "/sync"
					conn, err = tls.DialWithDialer(d, "tcp", fmt.Sprintf("127.0.0.1:%d", c.hookPort), c.hookTLS)
				} else {
					conn, err = d.Dial("tcp", strings.TrimPrefix(c.discURL, "http://"))
				}
				if err != nil {
					if ctx.Err() == nil && !isConnClosed(err) {
						t.Errorf("dial: %v", err)
					}
					return
				}
				_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
				start := time.Now()
				fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{", path)
				done := make(chan struct{})
				go func() { // the trickle, until the answer comes
					for {
						select {
						case <-done:
							return
						case <-time.After(100 * time.Millisecond):
						}
						if _, err := conn.Write([]byte(" ")); err != nil {
							return
						}
					}
				}()
				res, err := http.ReadResponse(bufio.NewReader(conn), nil)
				close(done)
				if err == nil {
					res.Body.Close()
					cs.add(res.StatusCode)
					if took := time.Since(start); took > time.Duration(slowest.Load()) {
						slowest.Store(int64(took))
					}
				} else if !isConnClosed(err) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) && ctx.Err() == nil {
					// An EOF is the refusal's Connection: close overtaking its answer (the
					// server closes with the trickled body still arriving, and the reset can
					// drop the answer): the attacker's loss, not a failure of the bound.
					t.Errorf("trickled %s: %v", path, err)
				}
				conn.Close()
			}
		}()
	}
	<-ctx.Done()
	wg.Wait()
	took := time.Duration(slowest.Load())
	t.Logf("ATTACK %-22s slowest refusal %v", "unauth trickled bodies", took.Round(time.Millisecond))
	cs.check(t, "unauth trickled bodies", http.StatusUnauthorized, http.StatusTooManyRequests)
	// Correctness, not latency: before, the answer waited for the whole body (10 s, 30 s).
	if took > 5*time.Second {
		t.Errorf("unauth trickled bodies: a refusal took %v, want it at once after the head", took)
	}
	l.finish(t, "unauth trickled bodies", c)
}
