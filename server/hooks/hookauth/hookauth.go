// Package hookauth owns the hook listener's credentials: its TLS serving certificate and the
// bearer token Metacontroller must send, read from files (cert-manager, or any other mounted
// Secret) or kept in two Secrets of the operator's namespace that it creates at start when
// they are absent (secrets.go). It knows nothing of how the hooks use them.
package hookauth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/proxy-operator/proxy-operator/server/discovery/access"
)

// maxFileBytes bounds every credential file and Secret value read.
const maxFileBytes = 64 << 10

// ErrBadCredentials marks a certificate, key or token that cannot be used.
var ErrBadCredentials = errors.New("hookauth: bad hook credentials")

// Credentials are what the hook listener serves with.
type Credentials struct {
	// Cert is the serving certificate (its chain) and private key.
	Cert tls.Certificate
	// CA is the PEM the callers verify Cert with (ca.crt); empty when read from files without
	// one.
	CA []byte
	// Token is the bearer token every hook call must carry.
	Token string

	// files, when set, serves the certificate files' current content in place of Cert.
	files *fileCert
}

// TLSConfig is the listener's TLS config: TLS 1.2 or later (as Metacontroller's client asks,
// metacontroller/metacontroller@v4.17.2:pkg/hooks/webhook.go buildTLSTransport). With
// credentials from files, each handshake serves the files' current certificate.
func (c *Credentials) TLSConfig() *tls.Config {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.files != nil {
		cfg.GetCertificate = c.files.get
	} else {
		cfg.Certificates = []tls.Certificate{c.Cert}
	}
	return cfg
}

// fileCert re-reads a certificate and key when either file changed (size or modification
// time; a mounted Secret is replaced by a symlink swap, which changes both), so a certificate
// cert-manager renews is served without a restart. A pair that does not load (caught half
// written) leaves the last good one in place until the next change.
type fileCert struct {
	certFile, keyFile string
	mu                sync.Mutex
	stamp             string
	cert              *tls.Certificate
}

func (f *fileCert) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	stamp := fileStamp(f.certFile) + "|" + fileStamp(f.keyFile)
	f.mu.Lock()
	defer f.mu.Unlock()
	if stamp != f.stamp {
		f.stamp = stamp
		certPEM, err1 := readFile(f.certFile)
		keyPEM, err2 := readFile(f.keyFile)
		if err1 == nil && err2 == nil {
			if cert, err := tls.X509KeyPair(certPEM, keyPEM); err == nil {
				f.cert = &cert
			}
		}
	}
	return f.cert, nil
}

// fileStamp is what says a file changed: its size and modification time ("" when missing).
func fileStamp(path string) string {
	st, err := os.Stat(path)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%d/%d", st.Size(), st.ModTime().UnixNano())
}

// LoadFiles reads a PEM certificate (chain), its key and a token file (one line; surrounding
// white space is ignored, as Metacontroller trims the Secret value it sends). The certificate
// and key are read again when they change (a renewal); the token is read once.
func LoadFiles(certFile, keyFile, tokenFile string) (*Credentials, error) {
	certPEM, err := readFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("-hooks-tls-cert: %w", err)
	}
	keyPEM, err := readFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("-hooks-tls-key: %w", err)
	}
	tok, err := readFile(tokenFile)
	if err != nil {
		return nil, fmt.Errorf("-hooks-token-file: %w", err)
	}
	creds, err := parse(certPEM, keyPEM, nil, tok, "-hooks-tls-cert/-hooks-tls-key", "-hooks-token-file")
	if err != nil {
		return nil, err
	}
	creds.files = &fileCert{certFile: certFile, keyFile: keyFile, cert: &creds.Cert,
		stamp: fileStamp(certFile) + "|" + fileStamp(keyFile)}
	return creds, nil
}

// parse checks and assembles credentials; certWhat and tokenWhat name the sources in errors.
func parse(certPEM, keyPEM, caPEM, token []byte, certWhat, tokenWhat string) (*Credentials, error) {
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadCredentials, certWhat, err)
	}
	if len(caPEM) > 0 && !x509.NewCertPool().AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%w: %s: ca.crt holds no PEM certificate", ErrBadCredentials, certWhat)
	}
	tok := strings.TrimSpace(string(token))
	if err := access.CheckToken(tok); err != nil {
		// The same rule as for discovery tokens (decision 0258).
		return nil, fmt.Errorf("%w: %s: %w", ErrBadCredentials, tokenWhat, err)
	}
	return &Credentials{Cert: cert, CA: caPEM, Token: tok}, nil
}

// readFile reads a regular file of at most maxFileBytes.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil {
		return nil, err
	} else if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrBadCredentials, path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxFileBytes {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrBadCredentials, path, maxFileBytes)
	}
	return b, nil
}
