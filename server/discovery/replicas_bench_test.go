package discovery

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// startReplica runs `proxy-operator discovery` (the built binary) on redisAddr and returns its
// base URL; it is killed when the benchmark ends.
func startReplica(b *testing.B, bin, redisAddr string) string {
	return startReplicaURL(b, bin, "redis://"+redisAddr)
}

// startReplicaURL is startReplica on any store URL.
func startReplicaURL(b *testing.B, bin, storeURL string) string {
	b.Helper()
	cmd := exec.Command(bin, "discovery", "-lease-store", storeURL, "-discovery-addr", "127.0.0.1:0", "-log-format", "json")
	cmd.Env = append(os.Environ(), "DISCOVERY_TOKEN="+benchToken)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var rec struct {
				Msg       string `json:"msg"`
				Discovery string `json:"discovery"`
			}
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "listening" && rec.Discovery != "" {
				addr <- rec.Discovery
			}
		}
	}()
	select {
	case a := <-addr:
		return "http://" + a
	case <-time.After(60 * time.Second):
		b.Fatal("discovery replica not listening after 60 s")
		return ""
	}
}

// BenchmarkDiscoveryRedisReplicas measures lease+release cycles per second with 64 clients
// spread over 2 `proxy-operator discovery` processes sharing one local redis-server, against
// the no-op handlers of an in-process server in the same run, for 1,000 and 10,000 proxies.
// Every process (the benchmark, both replicas, Redis) shares the machine's cores. Run it with
// -benchtime 3x; replicas/noop is the ratio of cycle rates.
func BenchmarkDiscoveryRedisReplicas(b *testing.B) {
	phase := 2 * time.Second
	if s := os.Getenv("DISCOVERY_BENCH_PHASE"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			b.Fatalf("DISCOVERY_BENCH_PHASE=%q: %v", s, err)
		}
		phase = d
	}
	bin := buildBinary(b)
	const clients = 64
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("proxies=%d", n), func(b *testing.B) {
			base, redisAddr, stop := benchServerAddr(b, n)
			defer stop()
			replicas := []string{startReplica(b, bin, redisAddr), startReplica(b, bin, redisAddr)}
			tr := &http.Transport{MaxIdleConns: 2 * clients, MaxIdleConnsPerHost: 2 * clients, IdleConnTimeout: time.Minute}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			both := func(d time.Duration) []time.Duration {
				var mu sync.Mutex
				var all []time.Duration
				var wg sync.WaitGroup
				for _, r := range replicas {
					wg.Go(func() {
						ds := cycles(b, client, r, "", clients/len(replicas), d)
						mu.Lock()
						all = append(all, ds...)
						mu.Unlock()
					})
				}
				wg.Wait()
				return all
			}
			both(phase / 4) // warm connections and the replicas' caches
			var noopD, repD []time.Duration
			var noopT, repT time.Duration
			for b.Loop() {
				noopD = append(noopD, cycles(b, client, base, "/noop", clients, phase)...)
				noopT += phase
				repD = append(repD, both(phase)...)
				repT += phase
			}
			noopRate := float64(len(noopD)) / noopT.Seconds()
			repRate := float64(len(repD)) / repT.Seconds()
			b.ReportMetric(repRate, "replicas-cycles/s")
			b.ReportMetric(noopRate, "noop-cycles/s")
			b.ReportMetric(repRate/noopRate, "replicas/noop")
			b.ReportMetric(quantile(repD, 0.99), "replicas-p99-ms")
			b.ReportMetric(quantile(noopD, 0.99), "noop-p99-ms")
		})
	}
}

// buildBinary builds proxy-operator into a temporary directory.
func buildBinary(b *testing.B) string {
	b.Helper()
	bin := filepath.Join(b.TempDir(), "proxy-operator")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}
