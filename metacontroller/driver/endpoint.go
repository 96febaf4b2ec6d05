package driver

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Endpoint is what Metacontroller resolves for a hook from the CompositeController's
// endpointConfigs (or the webhook's own fields) when it builds the controller
// (metacontroller/metacontroller@v4.17.2:pkg/hooks/endpoint_config.go, ResolvedEndpointConfig):
// the CA bundle the server's certificate is verified with and the Authorization header sent
// with every call. Client certificates (clientTLS) and basicAuth are not modelled.
type Endpoint struct {
	// CABundle is the PEM of the CA (a caBundle.secretRef's key); empty: the system's roots.
	CABundle []byte
	// AuthHeader is the Authorization header's value ("" sends none); see AuthHeader.
	AuthHeader string
	// ServerName, when set, is the name the certificate is verified for, in place of the URL's
	// host (a test serving on 127.0.0.1 a certificate made for the hook Service's DNS name).
	ServerName string

	once   sync.Once
	client *http.Client
	err    error
}

// AuthHeader is the header Metacontroller sends for an authorization field of that type
// (empty: Bearer) and Secret value: the type, a space and the trimmed value
// (metacontroller/metacontroller@v4.17.2:pkg/hooks/auth.go, ResolveAuthorization).
func AuthHeader(typ string, secretValue []byte) string {
	typ = strings.TrimSpace(typ)
	if typ == "" {
		typ = "Bearer"
	}
	return typ + " " + strings.TrimSpace(string(secretValue))
}

// httpClient is the client calls go through: Client when set, else one per Endpoint built as
// Metacontroller builds its transport (buildTLSTransport in pkg/hooks/webhook.go: the default
// transport cloned, TLS 1.2 at least, the CA bundle as the only roots).
func (e *Endpoint) httpClient(given *http.Client, timeout time.Duration) (*http.Client, error) {
	if given != nil {
		return given, nil
	}
	if e == nil {
		return &http.Client{Timeout: timeout}, nil
	}
	e.once.Do(func() {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: e.ServerName}
		if len(e.CABundle) > 0 {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(e.CABundle) {
				e.err = errors.New("caBundle: no valid PEM-encoded certificates found in the provided CA bundle")
				return
			}
			tr.TLSClientConfig.RootCAs = pool
		}
		e.client = &http.Client{Timeout: timeout, Transport: tr}
	})
	return e.client, e.err
}

// authorize sets the Authorization header, when there is one.
func (e *Endpoint) authorize(req *http.Request) {
	if e != nil && e.AuthHeader != "" {
		req.Header.Set("Authorization", e.AuthHeader)
	}
}
