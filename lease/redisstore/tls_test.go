package redisstore

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/internal/redistest"
	"github.com/proxy-operator/proxy-operator/lease"
)

// testCA is a certificate authority made for one test, and the files of what it signed.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	dir  string
	File string // the CA certificate, PEM
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &testCA{cert: cert, key: key, dir: t.TempDir()}
	ca.File = ca.write(t, name+"-ca.pem", "CERTIFICATE", der)
	return ca
}

func (ca *testCA) write(t *testing.T, name, typ string, der []byte) string {
	t.Helper()
	p := filepath.Join(ca.dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// issue signs a certificate for 127.0.0.1 (server or client use) and returns its files.
func (ca *testCA) issue(t *testing.T, name string, usage x509.ExtKeyUsage) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return ca.write(t, name+".pem", "CERTIFICATE", der), ca.write(t, name+"-key.pem", "PRIVATE KEY", kder)
}

func (ca *testCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// TestTLS: the store works over rediss:// against a redis-server that speaks only TLS, with
// certificates made here, without and with a client certificate; a server signed by another
// CA, and a missing client certificate, are refused with errors that say so.
func TestTLS(t *testing.T) {
	ca := newTestCA(t, "redis")
	srvCert, srvKey := ca.issue(t, "server", x509.ExtKeyUsageServerAuth)
	cliCert, cliKey := ca.issue(t, "client", x509.ExtKeyUsageClientAuth)
	other := newTestCA(t, "other")
	pair, err := tls.LoadX509KeyPair(cliCert, cliKey)
	if err != nil {
		t.Fatal(err)
	}
	ready := &tls.Config{RootCAs: ca.pool(), Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}

	tests := []struct {
		name        string
		authClients bool
		cfg         func(url string) ClientConfig
		wantErr     string // "": the store works
	}{
		{name: "server certificate only", cfg: func(u string) ClientConfig { return ClientConfig{URL: u, CAFile: ca.File} }},
		{name: "client certificate", authClients: true,
			cfg: func(u string) ClientConfig {
				return ClientConfig{URL: u, CAFile: ca.File, CertFile: cliCert, KeyFile: cliKey}
			}},
		{name: "wrong CA", cfg: func(u string) ClientConfig { return ClientConfig{URL: u, CAFile: other.File} },
			wantErr: "certificate signed by unknown authority"},
		{name: "client certificate missing", authClients: true,
			cfg: func(u string) ClientConfig { return ClientConfig{URL: u, CAFile: ca.File} }, wantErr: "certificate required"},
		{name: "plain redis:// against TLS", cfg: func(u string) ClientConfig { return ClientConfig{URL: strings.Replace(u, "rediss://", "redis://", 1)} },
			wantErr: "lease store unavailable"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.StartTLS(t, redistest.TLSFiles{Cert: srvCert, Key: srvKey, CA: ca.File, AuthClients: tc.authClients}, ready)
			client, err := NewClient(tc.cfg("rediss://" + srv.Addr))
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			s, err := New(Config{Client: client, Prefix: freshPrefix(), Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			_, err = s.Acquire(ctx, lease.Request{TTL: time.Minute})
			if tc.wantErr != "" {
				if !errors.Is(err, lease.ErrUnavailable) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("acquire: %v, want ErrUnavailable saying %q", err, tc.wantErr)
				}
				t.Logf("refused as wanted: %v", err)
				return
			}
			// An empty store answers no match: the script ran on the TLS server.
			var nm *lease.NoMatchError
			if !errors.As(err, &nm) {
				t.Fatalf("acquire over TLS: %v, want no match from an empty store", err)
			}
			if n, err := s.Count(ctx); err != nil || n != 0 {
				t.Fatalf("count over TLS: %d %v", n, err)
			}
		})
	}
}
