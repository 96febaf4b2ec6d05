package client_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxy-operator/proxy-operator/client"
	"github.com/proxy-operator/proxy-operator/internal/clocktest"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/healthtest"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/server/discovery"
)

// api is the real discovery server (server.Discovery over lease.Memory and a fleet view)
// served over loopback HTTP, on a clock the test moves.
type api struct {
	url    string
	clock  *clocktest.Clock
	view   *fleet.View
	health *healthtest.Map
}

func startAPI(t *testing.T, token string, warmup time.Duration) *api {
	t.Helper()
	clock := clocktest.New(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	view := fleet.New(clock.Now, warmup)
	h := &healthtest.Map{}
	store := lease.NewMemory(lease.Config{Fleet: view, Health: h, Now: clock.Now,
		RateLimitedCooldown: time.Minute, BannedCooldown: time.Hour, MaxCooldown: 24 * time.Hour})
	d := &discovery.Discovery{Fleet: view, Health: h, Leases: store, Token: token, Insecure: token == "", Now: clock.Now, Log: slog.New(slog.DiscardHandler)}
	srv := httptest.NewServer(d.Handler())
	t.Cleanup(srv.Close)
	return &api{url: srv.URL, clock: clock, view: view, health: h}
}

func (a *api) addProxy(name, ip, geo string, state verdict.State, latency int64) {
	key := "crawl/" + name
	a.view.Upsert(fleet.Proxy{Key: key, UID: "uid-" + name, IP: ip, Port: 3128, Attributes: map[string]string{"geo": geo},
		MaxLeases: 2, Phase: "Ready"})
	a.health.Set(key, verdict.Health{State: state, LatencyMillis: latency})
}

// newClient returns a client whose waits move the API's clock instead of sleeping, and
// records them.
func newClient(t *testing.T, a *api, opts ...client.Option) (*client.Client, *[]time.Duration) {
	t.Helper()
	c, err := client.New(a.url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	var waits []time.Duration
	client.SetNow(c, a.clock.Now)
	client.SetSleep(c, func(ctx context.Context, d time.Duration) error {
		waits = append(waits, d)
		a.clock.Advance(d)
		return ctx.Err()
	})
	return c, &waits
}

func TestListLeaseRenewReportRelease(t *testing.T) {
	a := startAPI(t, "s3cret-0123456789abcdef", 0)
	a.addProxy("eu-1", "127.0.0.11", "eu", verdict.Healthy, 5)
	a.addProxy("eu-2", "127.0.0.12", "eu", verdict.Unhealthy, 5)
	a.addProxy("us-1", "127.0.0.13", "us", verdict.Healthy, 5)
	c, _ := newClient(t, a, client.WithToken("s3cret-0123456789abcdef"))
	ctx := context.Background()

	yes := true
	l, err := c.List(ctx, client.ListOptions{Selector: map[string]string{"geo": "eu"}, Healthy: &yes})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, p := range l.Proxies {
		ids = append(ids, p.ID)
	}
	if diff := cmp.Diff([]string{"crawl/eu-1"}, ids); diff != "" || !l.Complete || l.Count != 1 {
		t.Fatalf("list (-want +got):\n%s complete=%v count=%d", diff, l.Complete, l.Count)
	}

	got, err := c.Lease(ctx, client.LeaseRequest{Selector: map[string]string{"geo": "eu"}, TTL: 90 * time.Second, Target: "Shop.Example", SessionKey: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	if got.Proxy.ID != "crawl/eu-1" || got.TTL() != 90*time.Second || got.Target != "shop.example" || got.SessionKey != "s1" ||
		!got.ExpiresAt.Equal(a.clock.Now().Add(90*time.Second)) || got.Proxy.ActiveLeases != 1 {
		t.Fatalf("lease = %+v", got)
	}
	u, err := got.URL()
	if err != nil || u.String() != "http://127.0.0.11:3128" {
		t.Fatalf("URL = %v, %v", u, err)
	}

	a.clock.Advance(30 * time.Second)
	renewed, err := c.Renew(ctx, got.ID, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !renewed.ExpiresAt.Equal(a.clock.Now().Add(2 * time.Minute)) {
		t.Fatalf("renewed expiry %v, want %v", renewed.ExpiresAt, a.clock.Now().Add(2*time.Minute))
	}

	// The site's Retry-After (rounded up to whole seconds) is the cooldown; a rate limit is no strike (decision 0261).
	cd, err := c.Report(ctx, got.ID, client.Report{Result: client.ResultRateLimited, Target: "shop.example", RetryAfter: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if cd.ProxyID != "crawl/eu-1" || cd.Strikes != 0 || cd.Until == nil || !cd.Until.Equal(a.clock.Now().Add(2*time.Second)) {
		t.Fatalf("report = %+v", cd)
	}
	ok, err := c.Report(ctx, got.ID, client.Report{Result: client.ResultOK, Target: "shop.example"})
	if err != nil || ok.Until != nil {
		t.Fatalf("ok report = %+v, %v", ok, err)
	}

	if err := c.Release(ctx, got.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.Release(ctx, got.ID); err != nil {
		t.Fatalf("second release: %v", err)
	}
	_, err = c.Renew(ctx, got.ID, 0)
	var api *client.APIError
	if !errors.Is(err, client.ErrNotFound) || !errors.As(err, &api) || api.StatusCode != http.StatusNotFound {
		t.Fatalf("renew after release: %v, want ErrNotFound", err)
	}
	if _, err := c.Report(ctx, got.ID, client.Report{Result: client.ResultBanned, Target: "shop.example"}); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("report after release: %v, want ErrNotFound", err)
	}
}

func TestNoMatchCountsAfterRetries(t *testing.T) {
	a := startAPI(t, "", 0)
	a.addProxy("eu-1", "127.0.0.11", "eu", verdict.Healthy, 5)
	a.addProxy("eu-2", "127.0.0.12", "eu", verdict.Unhealthy, 5)
	a.addProxy("eu-3", "127.0.0.13", "eu", verdict.Healthy, 50)
	a.view.Upsert(fleet.Proxy{Key: "crawl/eu-4", UID: "uid-eu-4", IP: "127.0.0.14", Port: 3128, Attributes: map[string]string{"geo": "eu"}, MaxLeases: 4, Phase: "Ready"})
	a.health.Set("crawl/eu-4", verdict.Health{State: verdict.Healthy, LatencyMillis: 60})
	c, waits := newClient(t, a, client.WithRetry(1, time.Second))
	ctx := context.Background()
	sel := map[string]string{"geo": "eu"}
	// Fewest leases first, then lowest latency: eu-1, eu-3, eu-4, eu-1. Then eu-1 is full,
	// eu-3 is reported banned for shop.example and eu-4 is leased for it.
	var grants []string
	var l3 *client.Lease
	for range 4 {
		l, err := c.Lease(ctx, client.LeaseRequest{Selector: sel})
		if err != nil {
			t.Fatal(err)
		}
		grants = append(grants, l.Proxy.ID)
		if l.Proxy.ID == "crawl/eu-3" {
			l3 = l
		}
	}
	if diff := cmp.Diff([]string{"crawl/eu-1", "crawl/eu-3", "crawl/eu-4", "crawl/eu-1"}, grants); diff != "" {
		t.Fatalf("grants (-want +got):\n%s", diff)
	}
	if _, err := c.Report(ctx, l3.ID, client.Report{Result: client.ResultBanned, Target: "shop.example"}); err != nil {
		t.Fatal(err)
	}
	if l, err := c.Lease(ctx, client.LeaseRequest{Selector: sel, Target: "shop.example"}); err != nil || l.Proxy.ID != "crawl/eu-4" {
		t.Fatalf("lease for shop.example: %+v, %v; want crawl/eu-4", l, err)
	}

	// eu-1 is full, so a release could free it any moment: the server says 2 s. Within 5 s
	// the client asks three times (0, 2, 4 s) and gives up rather than ask past its wait.
	retrying, rwaits := newClient(t, a, client.WithLeaseWait(5*time.Second))
	_, err := retrying.Lease(ctx, client.LeaseRequest{Selector: sel, Target: "shop.example"})
	var nm *client.NoMatchError
	if !errors.As(err, &nm) || !errors.Is(err, client.ErrNoMatch) {
		t.Fatalf("lease: %v, want *NoMatchError", err)
	}
	// eu-3's ban cooldown (an hour) and the leases (300 s) are later than the first lease's
	// expiry, which was granted 4 s before the first 409.
	want := client.NoMatchError{Matching: 4, Unhealthy: 1, AtCapacity: 1, CoolingForTarget: 1, LeasedForTarget: 1, Target: "shop.example",
		AvailableAt: a.clock.Now().Add(-4*time.Second + 300*time.Second)}
	if diff := cmp.Diff(want, *nm, cmp.FilterPath(func(p cmp.Path) bool { return p.String() == "APIError" }, cmp.Ignore())); diff != "" {
		t.Fatalf("no-match counts (-want +got):\n%s", diff)
	}
	if nm.StatusCode != http.StatusConflict || nm.Message == "" {
		t.Fatalf("no-match error %+v", nm.APIError)
	}
	if diff := cmp.Diff([]time.Duration{2 * time.Second, 2 * time.Second}, *rwaits); diff != "" || len(*waits) != 0 {
		t.Fatalf("waits of the retrying client (-want +got):\n%s\none-attempt client %v (want none)", diff, *waits)
	}
	if nm.RetryAfter != 2*time.Second {
		t.Fatalf("no-match Retry-After %v, want 2s", nm.RetryAfter)
	}
	// A different target is not cooling: eu-3 is leased.
	if l, err := retrying.Lease(ctx, client.LeaseRequest{Selector: sel, Target: "else.example"}); err != nil || l.Proxy.ID != "crawl/eu-3" {
		t.Fatalf("lease for another target: %+v, %v", l, err)
	}
}

// TestLeaseWaitsForTheCooldown: the only proxy cools down for the target for a minute; a
// lease within the default wait (a minute) sleeps exactly until the cooldown ends and gets
// it; one with a shorter wait gets the 409 at once, saying when the proxy frees up.
func TestLeaseWaitsForTheCooldown(t *testing.T) {
	a := startAPI(t, "", 0)
	a.addProxy("eu-1", "127.0.0.11", "eu", verdict.Healthy, 5)
	ctx := context.Background()
	setup, _ := newClient(t, a)
	l, err := setup.Lease(ctx, client.LeaseRequest{Target: "shop.example"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := setup.Report(ctx, l.ID, client.Report{Result: client.ResultRateLimited, Target: "shop.example"}); err != nil {
		t.Fatal(err)
	}
	if err := setup.Release(ctx, l.ID); err != nil {
		t.Fatal(err)
	}
	free := a.clock.Now().Add(time.Minute)

	impatient, iwaits := newClient(t, a, client.WithLeaseWait(30*time.Second))
	_, err = impatient.Lease(ctx, client.LeaseRequest{Target: "shop.example"})
	var nm *client.NoMatchError
	if !errors.As(err, &nm) || !nm.AvailableAt.Equal(free) || nm.RetryAfter != time.Minute || len(*iwaits) != 0 {
		t.Fatalf("lease with a 30 s wait: %v (available %v, Retry-After %v), waits %v; want the 409 at once, free at %v", err, nm.AvailableAt, nm.RetryAfter, *iwaits, free)
	}

	patient, waits := newClient(t, a)
	got, err := patient.Lease(ctx, client.LeaseRequest{Target: "shop.example"})
	if err != nil {
		t.Fatalf("lease with the default wait: %v", err)
	}
	if diff := cmp.Diff([]time.Duration{time.Minute}, *waits); diff != "" || got.Proxy.ID != "crawl/eu-1" {
		t.Fatalf("waits (-want +got):\n%s lease %+v", diff, got)
	}

	never, nwaits := newClient(t, a, client.WithLeaseWait(0))
	if _, err := never.Lease(ctx, client.LeaseRequest{Target: "shop.example"}); !errors.Is(err, client.ErrNoMatch) || len(*nwaits) != 0 {
		t.Fatalf("lease without waiting: %v, waits %v; want client.ErrNoMatch at once", err, *nwaits)
	}
}

func TestRetryAfterOn503(t *testing.T) {
	a := startAPI(t, "", 5*time.Second) // the fleet view warms up: leasing answers 503 + Retry-After
	a.addProxy("eu-1", "127.0.0.11", "eu", verdict.Healthy, 5)
	ctx := context.Background()

	short, swaits := newClient(t, a, client.WithRetry(4, 2*time.Second))
	_, err := short.Lease(ctx, client.LeaseRequest{})
	var api *client.APIError
	if !errors.Is(err, client.ErrUnavailable) || !errors.As(err, &api) || api.RetryAfter != 5*time.Second {
		t.Fatalf("lease with max wait 2s: %v, want 503 with Retry-After 5s returned unwaited", err)
	}
	if len(*swaits) != 0 {
		t.Fatalf("waited %v for a Retry-After beyond the bound", *swaits)
	}

	c, waits := newClient(t, a, client.WithRetry(4, 10*time.Second))
	l, err := c.Lease(ctx, client.LeaseRequest{})
	if err != nil {
		t.Fatalf("lease: %v", err)
	}
	if diff := cmp.Diff([]time.Duration{5 * time.Second}, *waits); diff != "" || l.Proxy.ID != "crawl/eu-1" {
		t.Fatalf("waits (-want +got):\n%s lease %+v", diff, l)
	}
}

func TestUnauthorized(t *testing.T) {
	a := startAPI(t, "right-0123456789abcdef", 0)
	for _, tok := range []string{"", "wrong"} {
		c, _ := newClient(t, a, client.WithToken(tok))
		_, err := c.List(context.Background(), client.ListOptions{})
		var api *client.APIError
		if !errors.Is(err, client.ErrUnauthorized) || !errors.As(err, &api) || api.StatusCode != http.StatusUnauthorized {
			t.Errorf("token %q: %v, want 401", tok, err)
		}
	}
}

func TestInvalidRequest(t *testing.T) {
	a := startAPI(t, "", 0)
	c, _ := newClient(t, a)
	_, err := c.Lease(context.Background(), client.LeaseRequest{Target: "http://shop.example/x"})
	if !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("lease with a URL as target: %v, want ErrInvalid", err)
	}
}

func TestNewRejectsBadBaseURL(t *testing.T) {
	for _, u := range []string{"", "localhost:8090", "ftp://x", "http://"} {
		if _, err := client.New(u); err == nil {
			t.Errorf("New(%q) accepted", u)
		}
	}
}

func TestLeaseURLAndTransport(t *testing.T) {
	tests := []struct {
		name string
		l    client.Lease
		want string
	}{
		{"plain", client.Lease{Proxy: client.Proxy{IP: "127.1.2.3", Port: 3128}}, "http://127.1.2.3:3128"},
		{"parts", client.Lease{Proxy: client.Proxy{IP: "127.1.2.3", Port: 3128}, Username: "u", Password: "p@ss"}, "http://u:p%40ss@127.1.2.3:3128"},
		{"proxyURL wins", client.Lease{Proxy: client.Proxy{IP: "127.1.2.3", Port: 3128}, ProxyURL: "http://a:b@127.9.9.9:8080", Username: "u"}, "http://a:b@127.9.9.9:8080"},
		{"ipv6", client.Lease{Proxy: client.Proxy{IP: "::1", Port: 3128}}, "http://[::1]:3128"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, err := tt.l.Transport()
			if err != nil {
				t.Fatal(err)
			}
			req := httptest.NewRequest(http.MethodGet, "http://site.example/", nil)
			got, err := tr.Proxy(req)
			if err != nil || got.String() != tt.want {
				t.Fatalf("proxy = %v, %v; want %s", got, err, tt.want)
			}
		})
	}
	if _, err := (client.Lease{ID: "x", ProxyURL: "http://u:secret@[::1"}).URL(); err == nil || strings.Contains(err.Error(), "secret") {
		t.Fatalf("bad proxyURL: %v (must fail without echoing credentials)", err)
	}
	if _, err := (client.Lease{ID: "x"}).URL(); err == nil {
		t.Fatal("lease without an address gave a URL")
	}
}

// TestTransportThroughProxy sends a real request through a lease's transport to a loopback
// forward proxy and checks the credentials reach it as Proxy-Authorization.
func TestTransportThroughProxy(t *testing.T) {
	var gotAuth, gotURL string
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth, gotURL = r.Header.Get("Proxy-Authorization"), r.URL.String()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer proxy.Close()
	pu, _ := url.Parse(proxy.URL)
	l := client.Lease{ID: "x", ProxyURL: "http://crawler:pw@" + pu.Host}
	tr, err := l.Transport()
	if err != nil {
		t.Fatal(err)
	}
	defer tr.CloseIdleConnections()
	res, err := (&http.Client{Transport: tr}).Get("http://site.example/page")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNoContent || gotURL != "http://site.example/page" || gotAuth != "Basic Y3Jhd2xlcjpwdw==" {
		t.Fatalf("status %d, proxy saw %q with auth %q", res.StatusCode, gotURL, gotAuth)
	}
}

func TestKeepAliveRenewsUntilReleased(t *testing.T) {
	a := startAPI(t, "", 0)
	a.addProxy("eu-1", "127.0.0.11", "eu", verdict.Healthy, 5)
	c, err := client.New(a.url)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l, err := c.Lease(ctx, client.LeaseRequest{TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	k := c.KeepAlive(ctx, *l)
	// Move the server's clock by half a TTL at a time, each time once a renewal has caught up
	// with it: after 4 moves the lease has outlived its TTL twice over, only by renewals.
	for range 4 {
		a.clock.Advance(500 * time.Millisecond)
		want := a.clock.Now().Add(time.Second)
		waitFor(t, func() bool { return !k.Lease().ExpiresAt.Before(want) })
	}
	if _, err := c.Renew(ctx, l.ID, 0); err != nil {
		t.Fatalf("lease lost while kept alive: %v", err)
	}
	if err := k.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Renew(ctx, l.ID, 0); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("renew after KeepAlive.Release: %v, want ErrNotFound", err)
	}
	if k.Err() != nil {
		t.Fatalf("Err after Release = %v, want nil", k.Err())
	}
	if err := k.Release(ctx); err != nil {
		t.Fatalf("second Release: %v", err)
	}
}

func TestKeepAliveStopsWhenLeaseLost(t *testing.T) {
	a := startAPI(t, "", 0)
	a.addProxy("eu-1", "127.0.0.11", "eu", verdict.Healthy, 5)
	c, err := client.New(a.url)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l, err := c.Lease(ctx, client.LeaseRequest{TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	k := c.KeepAlive(ctx, *l)
	defer k.Release(ctx)
	a.view.Remove("crawl/eu-1") // the proxy leaves the fleet: its leases are dropped
	<-k.Done()
	if !errors.Is(k.Err(), client.ErrNotFound) {
		t.Fatalf("Err = %v, want ErrNotFound", k.Err())
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	tests := map[string]time.Duration{
		"": 0, "0": 0, "-3": 0, "junk": 0, " 7 ": 7 * time.Second,
		"99999999999":                   7 * 24 * time.Hour,
		"Tue, 01 Dec 2026 12:00:30 GMT": 30 * time.Second,
		"Tue, 01 Dec 2026 11:00:00 GMT": 0,
	}
	for in, want := range tests {
		if got := client.ParseRetryAfter(in, now); got != want {
			t.Errorf("ParseRetryAfter(%q) = %v, want %v", in, got, want)
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 30 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestTransportErrorsRetriedOnlyWhenIdempotent: a connection cut before the answer is retried
// for a list, never for a lease (it may have been granted) or a report (a second strike).
func TestTransportErrorsRetriedOnlyWhenIdempotent(t *testing.T) {
	a := startAPI(t, "", 0)
	a.addProxy("eu-1", "127.0.0.11", "eu", verdict.Healthy, 5)
	d := &discovery.Discovery{Fleet: a.view, Health: a.health, Leases: lease.NewMemory(lease.Config{Fleet: a.view, Health: a.health, Now: a.clock.Now}),
		Insecure: true, Now: a.clock.Now, Log: slog.New(slog.DiscardHandler)}
	h := d.Handler()
	var mu sync.Mutex
	cut := map[string]bool{} // paths whose next request is cut
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		c := cut[r.URL.Path]
		cut[r.URL.Path] = false
		mu.Unlock()
		if c {
			h.ServeHTTP(httptest.NewRecorder(), r) // the server acts, the answer is lost
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	a.url = srv.URL
	c, waits := newClient(t, a)
	ctx := context.Background()
	arm := func(path string) { mu.Lock(); cut[path] = true; mu.Unlock() }

	arm("/v1/proxies")
	if l, err := c.List(ctx, client.ListOptions{}); err != nil || l.Count != 1 || len(*waits) != 1 {
		t.Fatalf("list after a cut connection: %+v, %v, waits %v; want it retried once", l, err, *waits)
	}
	arm("/v1/leases")
	if _, err := c.Lease(ctx, client.LeaseRequest{}); err == nil || len(*waits) != 1 {
		t.Fatalf("lease after a cut connection: %v, waits %v; want the error, not a retry", err, *waits)
	}
	l, err := c.Lease(ctx, client.LeaseRequest{})
	if err != nil || l.Proxy.ActiveLeases != 2 {
		t.Fatalf("next lease: %+v, %v; want the proxy's second lease (the cut one was granted)", l, err)
	}
	arm("/v1/leases/" + l.ID + "/report")
	if _, err := c.Report(ctx, l.ID, client.Report{Result: client.ResultBanned, Target: "x.example"}); err == nil || len(*waits) != 1 {
		t.Fatalf("report after a cut connection: %v, waits %v; want the error, not a retry", err, *waits)
	}
	if cd, err := c.Report(ctx, l.ID, client.Report{Result: client.ResultBanned, Target: "x.example"}); err != nil || cd.Strikes != 2 {
		t.Fatalf("second report: %+v, %v; want strike 2 (the cut one counted once)", cd, err)
	}
}

// TestListFollowsPages: List without a Limit returns every proxy across the server's pages
// (500 each); with a Limit, one page and its Continue.
func TestListFollowsPages(t *testing.T) {
	a := startAPI(t, "", 0)
	for i := range 1100 {
		a.addProxy(fmt.Sprintf("p%04d", i), fmt.Sprintf("10.2.%d.%d", i/256, i%256), "eu", verdict.Healthy, 1)
	}
	c, _ := newClient(t, a)
	ctx := context.Background()
	all, err := c.List(ctx, client.ListOptions{})
	if err != nil || all.Count != 1100 || len(all.Proxies) != 1100 || all.Continue != "" || !all.Complete {
		t.Fatalf("List = count %d, %d proxies, continue %q, %v", all.Count, len(all.Proxies), all.Continue, err)
	}
	page, err := c.List(ctx, client.ListOptions{Limit: 10})
	if err != nil || page.Count != 10 || page.Continue == "" {
		t.Fatalf("List(Limit 10) = %+v, %v", page, err)
	}
	next, err := c.List(ctx, client.ListOptions{Limit: 10, Continue: page.Continue})
	if err != nil || next.Count != 10 || next.Proxies[0].ID != "crawl/p0010" {
		t.Fatalf("second page = %+v, %v", next, err)
	}
}

// TestSites: Sites reads GET /v1/sites of the real server: a banned report shows as a cooling
// site with its upstream, end, reason and strikes, without a pace (no gateway here).
func TestSites(t *testing.T) {
	a := startAPI(t, "s3cret-0123456789abcdef", 0)
	a.addProxy("eu-1", "127.0.0.11", "eu", verdict.Healthy, 5)
	c, _ := newClient(t, a, client.WithToken("s3cret-0123456789abcdef"))
	ctx := context.Background()
	l, err := c.Lease(ctx, client.LeaseRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Report(ctx, l.ID, client.Report{Result: client.ResultBanned, Target: "shop.example"}); err != nil {
		t.Fatal(err)
	}
	got, err := c.Sites(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := &client.SiteList{Count: 1, CoolingTotal: 1, CoolingListed: 1, Sites: []client.Site{{Host: "shop.example",
		Cooldowns: []client.SiteCooldown{{ProxyID: "crawl/eu-1", Until: a.clock.Now().Add(time.Hour), Reason: client.ResultBanned, Strikes: 1}}}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Sites mismatch (-want +got):\n%s", diff)
	}
}
