package hookauth_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/server/hooks/hookauth"
)

// TestGenerate: the certificate is ECDSA P-256, signed by the CA beside it, valid for the
// Service's names and for serving only; the CA signs nothing else (its key is not returned).
func TestGenerate(t *testing.T) {
	now := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	names := hookauth.DNSNames("proxy-operator-hooks", "proxy-operator")
	caPEM, certPEM, keyPEM, err := hookauth.Generate(names, now)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("ca.crt holds no certificate")
	}
	block, _ := pem.Decode(certPEM)
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"proxy-operator-hooks.proxy-operator.svc", "proxy-operator-hooks.proxy-operator.svc.cluster.local", "proxy-operator-hooks"} {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, CurrentTime: now.Add(24 * time.Hour), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("verify for %s: %v", name, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "evil.example", Roots: roots, CurrentTime: now}); err == nil {
		t.Error("the certificate verifies for a name it was not made for")
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: names[2], Roots: roots, CurrentTime: now.Add(11 * 365 * 24 * time.Hour)}); err == nil {
		t.Error("the certificate verifies after 11 years")
	}
	if pub, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
		t.Errorf("key %T, want ECDSA P-256", leaf.PublicKey)
	}
	if leaf.IsCA {
		t.Error("the serving certificate is a CA")
	}
	if strings.Contains(string(keyPEM), "CERTIFICATE") {
		t.Error("key PEM holds a certificate")
	}
}

// TestLoadFiles: the files make credentials; each unusable input is refused with the flag
// named.
func TestLoadFiles(t *testing.T) {
	dir := t.TempDir()
	caPEM, certPEM, keyPEM, err := hookauth.Generate([]string{"localhost"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	_, otherCert, _, err := hookauth.Generate([]string{"localhost"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cert, key, other := write("tls.crt", certPEM), write("tls.key", keyPEM), write("other.crt", otherCert)
	good := write("token", []byte("  0123456789abcdef-token\n"))
	write("ca.crt", caPEM)
	creds, err := hookauth.LoadFiles(cert, key, good)
	if err != nil {
		t.Fatal(err)
	}
	if creds.Token != "0123456789abcdef-token" {
		t.Errorf("token %q, want it trimmed", creds.Token)
	}
	for _, tc := range []struct {
		name             string
		cert, key, token string
		want             string
	}{
		{"short token", cert, key, write("short", []byte("abc\n")), "at least 16"},
		{"blank token", cert, key, write("blank", []byte(" \n")), "blank"},
		{"two words", cert, key, write("two", []byte("0123456789abcdef 0123456789abcdef")), "whitespace"},
		{"one character", cert, key, write("weak", []byte("aaaaaaaaaaaaaaaa\n")), "-hooks-token-file: a token must hold at least 6 different characters"},
		{"key of another certificate", other, key, good, "-hooks-tls-cert/-hooks-tls-key"},
		{"missing key", cert, filepath.Join(dir, "nope"), good, "-hooks-tls-key"},
		{"a directory as token", cert, key, dir, "not a regular file"},
		{"huge token file", cert, key, write("huge", make([]byte, 1<<20)), "larger than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := hookauth.LoadFiles(tc.cert, tc.key, tc.token)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("LoadFiles: %v, want an error containing %q", err, tc.want)
			}
			if tc.name == "short token" && !errors.Is(err, hookauth.ErrBadCredentials) {
				t.Errorf("%v is not ErrBadCredentials", err)
			}
		})
	}
}

// TestLoadFilesFollowsRenewal: a listener built from files serves the renewed certificate once
// the files change (as cert-manager renews a mounted Secret), without a restart; a pair caught
// half written keeps the last good one.
func TestLoadFilesFollowsRenewal(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, tokFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "token")
	when := time.Now()
	write := func(cert, key []byte) {
		t.Helper()
		when = when.Add(time.Minute) // a distinct modification time, as a new mount has
		for p, b := range map[string][]byte{certFile: cert, keyFile: key} {
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(p, when, when); err != nil {
				t.Fatal(err)
			}
		}
	}
	_, certA, keyA, err := hookauth.Generate([]string{"localhost"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	_, certB, keyB, err := hookauth.Generate([]string{"localhost"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	write(certA, keyA)
	if err := os.WriteFile(tokFile, []byte("0123456789abcdef-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	creds, err := hookauth.LoadFiles(certFile, keyFile, tokFile)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", creds.TLSConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _ = c.(*tls.Conn).Handshake(); _ = c.Close() }()
		}
	}()
	served := func() []byte {
		t.Helper()
		c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true}) // only which certificate is served is read
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].Raw
	}
	der := func(p []byte) []byte { b, _ := pem.Decode(p); return b.Bytes }
	if !bytes.Equal(served(), der(certA)) {
		t.Fatal("the first certificate is not served")
	}
	write(certB, keyB)
	if !bytes.Equal(served(), der(certB)) {
		t.Error("the renewed certificate is not served")
	}
	write(certA, keyB) // caught half written: the pair does not match
	if !bytes.Equal(served(), der(certB)) {
		t.Error("a pair that does not load replaced the last good certificate")
	}
}
