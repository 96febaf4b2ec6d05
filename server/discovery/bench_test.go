package discovery

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/server/httpx"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/healthtest"
	"github.com/proxy-operator/proxy-operator/internal/redistest"
	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/lease/redisstore"
)

const benchToken = "bench-token-0123456789"

// benchServer starts the discovery server for n proxies on loopback, with the production
// server settings and auth on. Paths under /noop go to a router with the same auth middleware
// whose handlers only read the body and answer a fixed lease-shaped JSON: the floor that HTTP,
// routing, auth and JSON cost on this stack. Paths under /redis go to a second discovery
// handler on the Redis store (a real local redis-server, the same fleet published into it).
func benchServer(b *testing.B, n int) (base string, stop func()) {
	b.Helper()
	base, _, stop = benchServerAddr(b, n)
	return base, stop
}

// benchServerAddr is benchServer that also returns the address of its redis-server, whose
// default key prefix holds the published fleet.
func benchServerAddr(b *testing.B, n int) (base, redisAddr string, stop func()) {
	b.Helper()
	view, health := benchFleet(n)
	store := lease.NewMemory(lease.Config{Fleet: view, Health: health})
	d := &Discovery{Fleet: view, Health: health, Leases: store, Token: benchToken,
		Log: slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry()}
	leases := d.Handler()

	noop := chi.NewRouter()
	noop.Use(d.auth)
	noop.Post("/noop/v1/leases", d.serve(func(w http.ResponseWriter, r *http.Request) error {
		if _, err := httpx.ReadBody(w, r, d.MaxBodyBytes); err != nil {
			return err
		}
		httpx.WriteJSON(w, http.StatusOK, map[string]any{"leaseID": "0123456789abcdef0123456789abcdef", "expiresAt": time.Now().UTC()})
		return nil
	}))
	noop.Delete("/noop/v1/leases/{id}", d.serve(func(w http.ResponseWriter, _ *http.Request) error {
		w.WriteHeader(http.StatusNoContent)
		return nil
	}))

	rsrv := redistest.Start(b)
	rstore, reader := benchRedis(b, rsrv.Addr, view, health)
	rd := &Discovery{Fleet: reader, Health: reader, Leases: rstore, Token: benchToken,
		Log: slog.New(slog.DiscardHandler), Registerer: prometheus.NewRegistry()}
	redisLeases := http.StripPrefix("/redis", rd.Handler())

	srv := d.Server("")
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/noop/"):
			noop.ServeHTTP(w, r)
		case strings.HasPrefix(r.URL.Path, "/redis/"):
			redisLeases.ServeHTTP(w, r)
		default:
			leases.ServeHTTP(w, r)
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _ = store.Run(ctx) }()
	go func() { _ = rstore.Run(ctx) }()
	go func() { _ = reader.Run(ctx) }()
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), rsrv.Addr, func() {
		cancel()
		_ = srv.Close()
	}
}

// benchFleet is n healthy proxies in five geos and two purposes, 4 leases each.
func benchFleet(n int) (*fleet.View, *healthtest.Map) {
	view := fleet.New(time.Now, 0)
	health := &healthtest.Map{}
	geos := []string{"eu", "us", "asia", "sa", "af"}
	for i := range n {
		key := fmt.Sprintf("crawl/p%05d", i)
		view.Upsert(fleet.Proxy{Key: key, UID: key, IP: fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255), Port: 3128,
			Attributes: map[string]string{"geo": geos[i%len(geos)], "purpose": []string{"crawl", "scrape"}[i/len(geos)%2]},
			MaxLeases:  4, Phase: "Ready"})
		health.Set(key, verdict.Health{State: verdict.Healthy, LatencyMillis: int64(20 + i*7919%300)})
	}
	return view, health
}

// benchRedis publishes view and health into the Redis at addr (a fresh key prefix) and returns
// a store and a reader on it, as a discovery replica has them.
func benchRedis(b *testing.B, addr string, view *fleet.View, health lease.Health) (*redisstore.Store, *redisstore.Reader) {
	return benchRedisURL(b, "redis://"+addr, 0, view, health)
}

// benchRedisURL is benchRedis on any store URL, every change waiting for wait replicas.
func benchRedisURL(b *testing.B, url string, wait int, view *fleet.View, health lease.Health) (*redisstore.Store, *redisstore.Reader) {
	b.Helper()
	client, err := redisstore.NewClient(redisstore.ClientConfig{URL: url})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { client.Close() })
	store, err := redisstore.New(redisstore.Config{Client: client, WaitReplicas: wait})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := redisstore.NewPublisher(redisstore.PublisherConfig{Store: store, Fleet: view, Health: health}).Sync(ctx); err != nil {
		b.Fatal(err)
	}
	reader := redisstore.NewReader(redisstore.ReaderConfig{Store: store})
	if err := reader.Refresh(ctx); err != nil {
		b.Fatal(err)
	}
	return store, reader
}

// cycles runs clients concurrent lease+release cycles (two requests each) against prefix for
// d and returns the cycles completed and each cycle's duration.
func cycles(b *testing.B, client *http.Client, base, prefix string, clients int, d time.Duration) []time.Duration {
	b.Helper()
	bodies := []string{`{"selector":{"geo":"eu"},"ttlSeconds":60}`, `{"selector":{"geo":"us","purpose":"crawl"},"ttlSeconds":60}`,
		`{"ttlSeconds":60,"target":"example.com"}`, `{"selector":{"purpose":"scrape"},"ttlSeconds":60,"sessionKey":"s%d"}`}
	var mu sync.Mutex
	var all []time.Duration
	var wg sync.WaitGroup
	deadline := time.Now().Add(d)
	errs := make(chan error, clients)
	for c := range clients {
		wg.Go(func() {
			var mine []time.Duration
			for i := 0; time.Now().Before(deadline); i++ {
				body := bodies[(c+i)%len(bodies)]
				if strings.Contains(body, "%d") {
					body = fmt.Sprintf(body, c)
				}
				t0 := time.Now()
				id, err := benchDo(client, http.MethodPost, base+prefix+"/v1/leases", body, http.StatusOK)
				if err == nil {
					_, err = benchDo(client, http.MethodDelete, base+prefix+"/v1/leases/"+id, "", http.StatusNoContent)
				}
				if err != nil {
					errs <- err
					return
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return all
}

func benchDo(client *http.Client, method, url, body string, want int) (string, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+benchToken)
	res, err := client.Do(req)
	if err != nil {
		return "", err
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		return "", err
	}
	if res.StatusCode != want {
		return "", fmt.Errorf("%s %s: %d %s", method, url, res.StatusCode, b)
	}
	if method != http.MethodPost {
		return "", nil
	}
	var l struct {
		LeaseID string `json:"leaseID"`
	}
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(&l); err != nil {
		return "", err
	}
	return l.LeaseID, nil
}

func quantile(ds []time.Duration, q float64) float64 {
	slices.Sort(ds)
	return float64(ds[int(q*float64(len(ds)-1))].Microseconds()) / 1000
}

// BenchmarkDiscoveryLease measures lease+release cycles per second with 64 concurrent clients
// over real HTTP on loopback, for 1,000 and 10,000 proxies, against cycles of two requests to
// the no-op handlers on the same server in the same run. Each iteration is one round of a
// no-op phase, a lease phase on the in-memory store and one on the Redis store (a local
// redis-server sharing the machine's cores), DISCOVERY_BENCH_PHASE each (default 2s); run it
// with -benchtime 3x. lease/noop and redis/noop are the ratios of cycle rates.
func BenchmarkDiscoveryLease(b *testing.B) {
	phase := 2 * time.Second
	if s := os.Getenv("DISCOVERY_BENCH_PHASE"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			b.Fatalf("DISCOVERY_BENCH_PHASE=%q: %v", s, err)
		}
		phase = d
	}
	const clients = 64
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("proxies=%d", n), func(b *testing.B) {
			base, stop := benchServer(b, n)
			defer stop()
			tr := &http.Transport{MaxIdleConns: 2 * clients, MaxIdleConnsPerHost: 2 * clients, IdleConnTimeout: time.Minute}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			cycles(b, client, base, "", clients, phase/4) // warm connections and the index
			cycles(b, client, base, "/redis", clients, phase/4)
			var noopD, leaseD, redisD []time.Duration
			var noopT, leaseT, redisT time.Duration
			for b.Loop() {
				noopD = append(noopD, cycles(b, client, base, "/noop", clients, phase)...)
				noopT += phase
				leaseD = append(leaseD, cycles(b, client, base, "", clients, phase)...)
				leaseT += phase
				redisD = append(redisD, cycles(b, client, base, "/redis", clients, phase)...)
				redisT += phase
			}
			noopRate := float64(len(noopD)) / noopT.Seconds()
			leaseRate := float64(len(leaseD)) / leaseT.Seconds()
			redisRate := float64(len(redisD)) / redisT.Seconds()
			b.ReportMetric(leaseRate, "lease-cycles/s")
			b.ReportMetric(redisRate, "redis-cycles/s")
			b.ReportMetric(noopRate, "noop-cycles/s")
			b.ReportMetric(leaseRate/noopRate, "lease/noop")
			b.ReportMetric(redisRate/noopRate, "redis/noop")
			b.ReportMetric(quantile(leaseD, 0.99), "lease-p99-ms")
			b.ReportMetric(quantile(redisD, 0.99), "redis-p99-ms")
			b.ReportMetric(quantile(noopD, 0.99), "noop-p99-ms")
			b.ReportMetric(quantile(leaseD, 0.5), "lease-p50-ms")
		})
	}
}
