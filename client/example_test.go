package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"time"

	"github.com/proxy-operator/proxy-operator/client"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/server/discovery"
)

// Example leases a proxy for a site, keeps the lease alive while crawling through it, reports
// a 429 with the site's Retry-After, and releases. The discovery API, the forward proxy and the
// site are real servers on loopback, set up by exampleWorld.
func Example() {
	apiURL, siteURL, stop := exampleWorld()
	defer stop()
	ctx := context.Background()

	c, err := client.New(apiURL, client.WithToken("crawler-token-0123456789"))
	if err != nil {
		fmt.Println(err)
		return
	}
	site, _ := url.Parse(siteURL)
	l, err := c.Lease(ctx, client.LeaseRequest{Selector: map[string]string{"geo": "eu"}, TTL: 5 * time.Minute, Target: site.Host})
	if err != nil {
		fmt.Println(err)
		return
	}
	k := c.KeepAlive(ctx, *l) // renews until Release
	defer k.Release(ctx)
	tr, err := l.Transport()
	if err != nil {
		fmt.Println(err)
		return
	}
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	for _, page := range []string{"/a", "/b"} {
		res, err := hc.Get(siteURL + page)
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		fmt.Printf("%s via %s: %d %s\n", page, l.Proxy.ID, res.StatusCode, bytes.TrimSpace(body))
		if res.StatusCode == http.StatusTooManyRequests || res.StatusCode == http.StatusForbidden {
			result := client.ResultRateLimited
			if res.StatusCode == http.StatusForbidden {
				result = client.ResultBanned
			}
			cd, err := c.Report(ctx, l.ID, client.Report{Result: result, Target: site.Host,
				RetryAfter: client.ParseRetryAfter(res.Header.Get("Retry-After"), time.Now())})
			if err != nil {
				fmt.Println(err)
				return
			}
			fmt.Printf("reported %s: strike %d\n", cd.Result, cd.Strikes)
		}
	}
	k.Release(ctx)
	// The only proxy now cools for this site for the 30 s the site asked. A lease waits for a
	// free proxy up to WithLeaseWait (default a minute); with 10 s, the 409 comes back at
	// once, saying why nothing fits and when the proxy frees up.
	impatient, _ := client.New(apiURL, client.WithToken("crawler-token-0123456789"), client.WithLeaseWait(10*time.Second))
	_, err = impatient.Lease(ctx, client.LeaseRequest{Selector: map[string]string{"geo": "eu"}, Target: site.Host})
	var nm *client.NoMatchError
	if errors.As(err, &nm) {
		fmt.Printf("no match: %d matching, %d cooling for the site, free in about %s\n", nm.Matching, nm.CoolingForTarget,
			time.Until(nm.AvailableAt).Round(10*time.Second))
	}
	// Output:
	// /a via crawl/eu-1: 200 page /a
	// /b via crawl/eu-1: 429 slow down
	// reported rate_limited: strike 0
	// no match: 1 matching, 1 cooling for the site, free in about 30s
}

// exampleWorld starts the discovery API (the real server.Discovery handler over the lease
// store) with one healthy proxy, that proxy (a loopback forward proxy), and a site that
// answers its second request 429.
func exampleWorld() (apiURL, siteURL string, stop func()) {
	hits := 0
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits++; hits > 1 {
			w.Header().Set("Retry-After", "30")
			http.Error(w, "slow down", http.StatusTooManyRequests)
			return
		}
		fmt.Fprint(w, "page ", r.URL.Path)
	}))
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		out := r.Clone(r.Context())
		out.RequestURI = ""
		res, err := http.DefaultTransport.RoundTrip(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer res.Body.Close()
		for k, v := range res.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(res.StatusCode)
		_, _ = io.Copy(w, res.Body)
	}))
	pu, _ := url.Parse(proxy.URL)
	port, _ := strconv.Atoi(pu.Port())

	view := fleet.New(time.Now, 0)
	view.Upsert(fleet.Proxy{Key: "crawl/eu-1", IP: pu.Hostname(), Port: int32(port), Attributes: map[string]string{"geo": "eu"}, MaxLeases: 4, Phase: "Ready"})
	health := healthy{}
	store := lease.NewMemory(lease.Config{Fleet: view, Health: health})
	d := &discovery.Discovery{Fleet: view, Health: health, Leases: store, Token: "crawler-token-0123456789", Log: slog.New(slog.DiscardHandler)}
	api := httptest.NewServer(d.Handler())
	return api.URL, site.URL, func() { api.Close(); proxy.Close(); site.Close() }
}

// healthy is a prober verdict of Healthy for every proxy (the operator: health.Scheduler).
type healthy struct{}

func (healthy) Health(string) verdict.Health {
	return verdict.Health{State: verdict.Healthy, LatencyMillis: 3}
}
