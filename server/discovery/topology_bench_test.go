package discovery

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxy-operator/proxy-operator/internal/redistest"
	"github.com/proxy-operator/proxy-operator/server/httpx"
)

func benchPhase(b *testing.B) time.Duration {
	b.Helper()
	phase := 2 * time.Second
	if s := os.Getenv("DISCOVERY_BENCH_PHASE"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			b.Fatalf("DISCOVERY_BENCH_PHASE=%q: %v", s, err)
		}
		phase = d
	}
	return phase
}

// BenchmarkDiscoveryRedisTopologies measures lease+release cycles per second with 64 clients
// over loopback HTTP for 1,000 proxies on one in-process server whose routes reach: the no-op
// handlers (/noop), a single Redis (/single), a Sentinel set of a primary, 2 replicas and 3
// sentinels (/sentinel), the same set with every change waiting for one replica
// (/sentinel-wait, -lease-store-wait-replicas 1), and a Cluster of 3 primaries (/cluster).
// Each iteration runs one phase of each (DISCOVERY_BENCH_PHASE, default 2s); run it with
// -benchtime 3x. X/noop are ratios of cycle rates in the same run.
func BenchmarkDiscoveryRedisTopologies(b *testing.B) {
	phase := benchPhase(b)
	const clients = 64
	view, health := benchFleet(1000)
	single := redistest.Start(b)
	set := redistest.StartSentinelSet(b, 2, 3)
	nodes := redistest.StartCluster(b, 3)
	routes := []struct {
		name, url string
		wait      int
	}{
		{"single", "redis://" + single.Addr, 0},
		{"sentinel", set.URL(), 0},
		{"sentinel-wait", set.URL(), 1},
		{"cluster", redistest.ClusterURL(nodes), 0},
	}
	// Rejections (a 503 and its cause) go to stderr: a refused cycle fails the benchmark.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	mux := http.NewServeMux()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var d *Discovery
	for _, r := range routes {
		store, reader := benchRedisURL(b, r.url, r.wait, view, health)
		rd := &Discovery{Fleet: reader, Health: reader, Leases: store, Token: benchToken, Log: log, Registerer: prometheus.NewRegistry()}
		mux.Handle("/"+r.name+"/", http.StripPrefix("/"+r.name, rd.Handler()))
		go func() { _ = store.Run(ctx) }()
		go func() { _ = reader.Run(ctx) }()
		d = rd
	}
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
	mux.Handle("/noop/", noop)
	srv := d.Server("")
	srv.Handler = mux
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	base := "http://" + ln.Addr().String()
	tr := &http.Transport{MaxIdleConns: 2 * clients, MaxIdleConnsPerHost: 2 * clients, IdleConnTimeout: time.Minute}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	names := []string{"noop"}
	for _, r := range routes {
		names = append(names, r.name)
		cycles(b, client, base, "/"+r.name, clients, phase/4) // warm connections and caches
	}
	ds := map[string][]time.Duration{}
	var total time.Duration
	for b.Loop() {
		for _, n := range names {
			ds[n] = append(ds[n], cycles(b, client, base, "/"+n, clients, phase)...)
		}
		total += phase
	}
	noopRate := float64(len(ds["noop"])) / total.Seconds()
	b.ReportMetric(noopRate, "noop-cycles/s")
	for _, n := range names[1:] {
		rate := float64(len(ds[n])) / total.Seconds()
		b.ReportMetric(rate, n+"-cycles/s")
		b.ReportMetric(rate/noopRate, n+"/noop")
		b.ReportMetric(quantile(ds[n], 0.99), n+"-p99-ms")
	}
}

// BenchmarkDiscoveryClusterReplicas measures lease+release cycles per second with 64 clients
// on 1 and then spread over 3 `proxy-operator discovery` processes sharing one Cluster of 3
// primaries (1,000 proxies), against the no-op handlers in the same run. Every process shares
// the machine's cores. Run it with -benchtime 3x; 3/1 is the scaling.
func BenchmarkDiscoveryClusterReplicas(b *testing.B) {
	phase := benchPhase(b)
	const clients = 64
	bin := buildBinary(b)
	nodes := redistest.StartCluster(b, 3)
	url := redistest.ClusterURL(nodes)
	view, health := benchFleet(1000)
	benchRedisURL(b, url, 0, view, health) // publish the fleet under the default prefix
	noopBase, _, stop := benchServerAddr(b, 10)
	defer stop()
	var replicas []string
	for range 3 {
		replicas = append(replicas, startReplicaURL(b, bin, url))
	}
	tr := &http.Transport{MaxIdleConns: 4 * clients, MaxIdleConnsPerHost: 2 * clients, IdleConnTimeout: time.Minute}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	over := func(rs []string, d time.Duration) []time.Duration {
		var mu sync.Mutex
		var all []time.Duration
		var wg sync.WaitGroup
		for i, r := range rs {
			n := clients / len(rs)
			if i < clients%len(rs) {
				n++
			}
			wg.Go(func() {
				got := cycles(b, client, r, "", n, d)
				mu.Lock()
				all = append(all, got...)
				mu.Unlock()
			})
		}
		wg.Wait()
		return all
	}
	over(replicas, phase/4)
	var noopD, oneD, threeD []time.Duration
	var total time.Duration
	for b.Loop() {
		noopD = append(noopD, cycles(b, client, noopBase, "/noop", clients, phase)...)
		oneD = append(oneD, over(replicas[:1], phase)...)
		threeD = append(threeD, over(replicas, phase)...)
		total += phase
	}
	rate := func(ds []time.Duration) float64 { return float64(len(ds)) / total.Seconds() }
	b.ReportMetric(rate(noopD), "noop-cycles/s")
	b.ReportMetric(rate(oneD), "1-replica-cycles/s")
	b.ReportMetric(rate(threeD), "3-replicas-cycles/s")
	b.ReportMetric(rate(oneD)/rate(noopD), "1/noop")
	b.ReportMetric(rate(threeD)/rate(noopD), "3/noop")
	b.ReportMetric(rate(threeD)/rate(oneD), "3/1")
	b.ReportMetric(quantile(threeD, 0.99), "3-replicas-p99-ms")
}
