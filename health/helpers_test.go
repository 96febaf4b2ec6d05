package health

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
)

// stubProxy is a CONNECT-capable forward proxy for tests. When deny is set it answers
// CONNECT with 403, as a proxy whose ACL forbids the port would.
type stubProxy struct {
	srv     *httptest.Server
	deny    atomic.Bool
	connect atomic.Int64
}

func newStubProxy(t *testing.T) *stubProxy {
	t.Helper()
	p := &stubProxy{}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *stubProxy) addr() string { return p.srv.Listener.Addr().String() }

func (p *stubProxy) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodConnect {
		http.Error(w, "stub proxy: CONNECT only", http.StatusMethodNotAllowed)
		return
	}
	p.connect.Add(1)
	if p.deny.Load() {
		http.Error(w, "stub proxy: denied", http.StatusForbidden)
		return
	}
	up, err := net.DialTimeout("tcp", r.Host, 5*time.Second)
	if err != nil {
		http.Error(w, "stub proxy: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer up.Close()
	w.WriteHeader(http.StatusOK)
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	var wg sync.WaitGroup
	wg.Go(func() {
		_, _ = io.Copy(up, buf)
		_ = up.(*net.TCPConn).CloseWrite()
	})
	_, _ = io.Copy(conn, up)
	_ = conn.Close()
	wg.Wait()
}

// tlsTarget is a loopback HTTPS server answering every request with status.
type tlsTarget struct {
	srv    *httptest.Server
	status atomic.Int64
}

func newTLSTarget(t *testing.T) *tlsTarget {
	t.Helper()
	tt := &tlsTarget{}
	tt.status.Store(http.StatusNoContent)
	tt.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(int(tt.status.Load()))
	}))
	t.Cleanup(tt.srv.Close)
	return tt
}

func (tt *tlsTarget) url() string { return tt.srv.URL + "/generate_204" }

func (tt *tlsTarget) port() string {
	_, port, _ := net.SplitHostPort(tt.srv.Listener.Addr().String())
	return port
}

// newPlainTarget is a loopback HTTP server answering 204; it returns its URL.
func newPlainTarget(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/generate_204"
}

// selfSigned is a fresh ECDSA certificate for 127.0.0.1: cheaper to handshake than
// httptest's RSA one, and trusted by nothing that has not been handed it.
func selfSigned(tb testing.TB) tls.Certificate {
	tb.Helper()
	c, err := newCert()
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

func newCert() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// untrustedTarget is a loopback HTTPS server whose certificate no test config trusts.
func untrustedTarget(t *testing.T) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{selfSigned(t)}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL + "/"
}

// trusting returns a client TLS config that trusts the target's certificate.
func trusting(tt *tlsTarget) *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(tt.srv.Certificate())
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}

// blackHole accepts TCP connections and never answers on them.
func blackHole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// testUnit is the length of one health-check "second" in scheduler tests.
const testUnit = 100 * time.Millisecond

// proxyAt is a fleet record for a proxy at addr probing url. Interval and timeout are in
// testUnits.
func proxyAt(t testing.TB, key, addr, url string, interval, timeout, fail, succeed int32) fleet.Proxy {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return fleet.Proxy{
		Key: key, UID: "uid-" + key, IP: host, Port: int32(n),
		HealthCheck: v1.HealthCheckSpec{
			ProbeURL: url, IntervalSeconds: interval, TimeoutSeconds: timeout,
			FailureThreshold: fail, SuccessThreshold: succeed, ExpectedStatusCodes: []int32{200, 204},
		},
	}
}

// startScheduler runs a scheduler over view until the test ends.
// Options run on the scheduler before it starts.
func startScheduler(t *testing.T, view *fleet.View, prober Prober, reg prometheus.Registerer, opts ...func(*Scheduler)) *Scheduler {
	t.Helper()
	s, err := New(Config{View: view, Prober: prober, Workers: 4, Registerer: reg, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	s.unit = testUnit
	for _, o := range opts {
		o(s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return s
}

// waitHealth polls until the verdict on key is in state, and returns it.
func waitHealth(t *testing.T, s *Scheduler, key string, want verdict.State) verdict.Health {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	var got verdict.Health
	for time.Now().Before(deadline) {
		if got = s.Health(key); got.State == want {
			return got
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("health of %s: got %+v, want state %s", key, got, want)
	return got
}
