package gc

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/fleet"
)

// FleetSource trusts the in-process fleet view once it is complete: --fleet-warmup after
// start, by when Metacontroller's resyncPeriodSeconds has synced every Proxy at least once.
// It is for running outside a cluster (the mock fleet on a laptop); in a cluster, APISource is
// the authority, because a view that only waited can be incomplete if Metacontroller was
// down the whole time.
type FleetSource struct {
	View *fleet.View
}

// Name implements LiveSource.
func (FleetSource) Name() string { return "fleet" }

// LiveUIDs implements LiveSource. An incomplete or empty view is an error: empty after the
// warmup more likely means nothing was synced than that no Proxy exists.
func (s FleetSource) LiveUIDs(context.Context) (map[string]bool, error) {
	if s.View == nil {
		return nil, errors.New("no fleet view")
	}
	if !s.View.Complete() {
		return nil, fmt.Errorf("fleet view not complete before %s", s.View.CompleteAt().UTC().Format(time.RFC3339))
	}
	all := s.View.List()
	if len(all) == 0 {
		return nil, errors.New("fleet view is empty")
	}
	out := make(map[string]bool, len(all))
	for _, p := range all {
		out[p.UID] = true
	}
	return out, nil
}

// In-cluster service account files.
const (
	ServiceAccountTokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	ServiceAccountCAFile    = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
)

// Defaults for APISource fields left zero.
const (
	DefaultPageSize     = 500
	DefaultMaxPageBytes = 32 << 20
	DefaultAPITimeout   = 30 * time.Second
)

// APISource lists Proxies from the Kubernetes API server with the pod's service account: a
// paginated GET of /apis/crawl.example.com/v1alpha1/proxies across all namespaces (the
// ClusterRole grants list). Only a list read to its last page counts; any error, a non-200,
// an expired continue token or an item without a UID fails the whole answer.
type APISource struct {
	// BaseURL is the API server, e.g. https://10.96.0.1:443.
	BaseURL string
	// TokenFile is read on every list: projected tokens rotate.
	TokenFile string
	// Client carries the cluster CA and a timeout.
	Client       *http.Client
	PageSize     int
	MaxPageBytes int64
}

// ErrNotInCluster: the process has no in-cluster service account to list Proxies with.
var ErrNotInCluster = errors.New("not running in a Kubernetes cluster")

// InCluster builds the APISource of the pod's service account, or ErrNotInCluster.
func InCluster() (*APISource, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, ErrNotInCluster
	}
	ca, err := os.ReadFile(ServiceAccountCAFile)
	if err != nil {
		// In a cluster but without a service account: an error, never a quiet fallback.
		return nil, fmt.Errorf("service account CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("service account CA %s: no certificate", ServiceAccountCAFile)
	}
	tr := &http.Transport{
		TLSClientConfig:       &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: DefaultAPITimeout,
		MaxIdleConns:          2,
		IdleConnTimeout:       time.Minute,
	}
	return &APISource{
		BaseURL:   "https://" + net.JoinHostPort(host, port),
		TokenFile: ServiceAccountTokenFile,
		Client:    &http.Client{Transport: tr, Timeout: DefaultAPITimeout},
	}, nil
}

// Name implements LiveSource.
func (*APISource) Name() string { return "api" }

type proxyList struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Continue string `json:"continue"`
	} `json:"metadata"`
	Items []struct {
		Metadata struct {
			Namespace string `json:"namespace"`
			Name      string `json:"name"`
			UID       string `json:"uid"`
		} `json:"metadata"`
	} `json:"items"`
}

// LiveUIDs implements LiveSource.
func (s *APISource) LiveUIDs(ctx context.Context) (map[string]bool, error) {
	tok, err := os.ReadFile(s.TokenFile)
	if err != nil {
		return nil, fmt.Errorf("service account token: %w", err)
	}
	token := strings.TrimSpace(string(tok))
	if token == "" {
		return nil, fmt.Errorf("service account token %s is empty", s.TokenFile)
	}
	pageSize, maxBytes := s.PageSize, s.MaxPageBytes
	if pageSize <= 0 {
		pageSize = DefaultPageSize
	}
	if maxBytes <= 0 {
		maxBytes = DefaultMaxPageBytes
	}
	out := map[string]bool{}
	cont := ""
	for page := 1; ; page++ {
		q := url.Values{"limit": {fmt.Sprint(pageSize)}}
		if cont != "" {
			q.Set("continue", cont)
		}
		l, err := s.page(ctx, token, q, maxBytes)
		if err != nil {
			return nil, fmt.Errorf("list proxies page %d: %w", page, err)
		}
		for _, it := range l.Items {
			if it.Metadata.UID == "" {
				return nil, fmt.Errorf("list proxies page %d: %s/%s has no uid", page, it.Metadata.Namespace, it.Metadata.Name)
			}
			out[it.Metadata.UID] = true
		}
		if l.Metadata.Continue == "" {
			return out, nil
		}
		cont = l.Metadata.Continue
	}
}

func (s *APISource) page(ctx context.Context, token string, q url.Values, maxBytes int64) (*proxyList, error) {
	u := strings.TrimRight(s.BaseURL, "/") + "/apis/" + v1.APIVersion + "/proxies?" + q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/json")
	resp, err := s.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBytes+1))
	if err != nil {
		return nil, err
	}
	if int64(len(body)) > maxBytes {
		return nil, fmt.Errorf("answer larger than %d bytes", maxBytes)
	}
	if resp.StatusCode != http.StatusOK {
		// 410 Gone is an expired continue token: the next sweep starts over.
		return nil, fmt.Errorf("status %d: %s", resp.StatusCode, strings.TrimSpace(string(body[:min(len(body), 256)])))
	}
	var l proxyList
	if err := json.Unmarshal(body, &l); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	if l.Kind != v1.Kind+"List" {
		return nil, fmt.Errorf("answer kind %q, want %sList", l.Kind, v1.Kind)
	}
	return &l, nil
}

// DefaultSources picks the live-UID authority for where the process runs: the API server's
// list in a cluster, else the fleet view (once complete). A cluster whose service account
// cannot be read is an error, so GC stays off rather than trusting the view there.
func DefaultSources(view *fleet.View) ([]LiveSource, error) {
	api, err := InCluster()
	switch {
	case err == nil:
		return []LiveSource{api}, nil
	case errors.Is(err, ErrNotInCluster):
		return []LiveSource{FleetSource{View: view}}, nil
	default:
		return nil, err
	}
}
