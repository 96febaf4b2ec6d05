package health

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxy-operator/proxy-operator/health/geoip"
	"github.com/proxy-operator/proxy-operator/health/geoip/geoiptest"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/providers/mock"
)

// The probe-scheduler benchmark runs the stub proxies and the TLS target in a child process
// (this test binary, re-run with stubEnv set), so that goroutines, RSS and CPU measured here
// are the scheduler's and the prober's alone.
const (
	stubEnv         = "HEALTH_BENCH_STUB"
	benchSecondsEnv = "PROBE_BENCH_SECONDS"
	stubProxies     = 4 // proxy addresses the fleet shares, so loopback ports do not run out
)

func TestMain(m *testing.M) {
	if os.Getenv(stubEnv) == "1" {
		if err := serveStub(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "stub:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type stubInfo struct {
	Proxies []string `json:"proxies"`
	Target  string   `json:"target"`
	Echo    string   `json:"echo"`
	CertDER []byte   `json:"certDER"`
}

// serveStub serves a loopback TLS target and stubProxies mock forward proxies, writes their
// addresses as one JSON line and serves until in closes.
func serveStub(in io.Reader, out io.Writer) error {
	cert, err := newCert()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
		// Handshakes cut short when the benchmark stops are expected; do not print them.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	info := stubInfo{Target: "https://" + ln.Addr().String() + "/generate_204", CertDER: cert.Certificate[0]}
	echoLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	echo := &http.Server{Handler: EchoHandler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = echo.Serve(echoLn) }()
	defer echo.Close()
	info.Echo = "http://" + echoLn.Addr().String() + "/ip"
	for range stubProxies {
		free, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		addr := free.Addr().String()
		free.Close()
		stop, err := mock.ServeForwardProxy(addr, nil)
		if err != nil {
			return err
		}
		defer stop()
		info.Proxies = append(info.Proxies, addr)
	}
	if err := json.NewEncoder(out).Encode(info); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, in)
	return srv.Close()
}

func startStubProcess(b *testing.B) stubInfo {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), stubEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		stdin.Close()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadBytes('\n')
	if err != nil {
		b.Fatalf("stub process: %v", err)
	}
	var info stubInfo
	if err := json.Unmarshal(line, &info); err != nil {
		b.Fatalf("stub process said %q: %v", line, err)
	}
	return info
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// peakRSSMB is the process's high-water resident set (VmHWM).
func peakRSSMB() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return math.NaN()
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	return math.NaN()
}

// BenchmarkProbeScheduler schedules 10,000 proxies at a 10 s interval against loopback stub
// proxies for PROBE_BENCH_SECONDS (make bench-probes: 60), twice in one run: without exit
// checks (the baseline) and with them (every proxy's exit asked of an echo through its proxy
// and looked up in country and ASN databases). Each reports probes done/due, exit checks
// made and how many proxies ended with the databases' country and ASN in their verdict, p99
// lateness against the slot, CPU per 1,000 probes (and its ratio to bare probes made in the
// same run without the scheduler), peak goroutines and peak RSS (the high-water mark is reset
// before each). It is skipped unless PROBE_BENCH_SECONDS is set, so `make bench` stays short.
func BenchmarkProbeScheduler(b *testing.B) {
	secs, _ := strconv.Atoi(os.Getenv(benchSecondsEnv))
	if secs <= 0 {
		b.Skipf("set %s (make bench-probes sets 60) to run the probe-scheduler benchmark", benchSecondsEnv)
	}
	window := time.Duration(secs) * time.Second
	info := startStubProcess(b)
	leaf, err := x509.ParseCertificate(info.CertDER)
	if err != nil {
		b.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	prober := NewHTTPProber(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	target := func(i int) Target {
		return Target{Proxy: info.Proxies[i%len(info.Proxies)], URL: info.Target, Timeout: 5 * time.Second, Expected: []int32{204}}
	}

	// Baseline for CPU: the same prober, the same pool size, probing back to back for 5 s with
	// no scheduler, no view and no metrics.
	var bareProbes, bareFails atomic.Int64
	cpu0 := cpuSeconds()
	stopAt := time.Now().Add(5 * time.Second)
	var wg sync.WaitGroup
	for w := range DefaultWorkers {
		wg.Go(func() {
			for i := w; time.Now().Before(stopAt); i += DefaultWorkers {
				if r := prober.Probe(context.Background(), target(i)); !r.OK {
					bareFails.Add(1)
				}
				bareProbes.Add(1)
			}
		})
	}
	wg.Wait()
	bareCPU := (cpuSeconds() - cpu0) / float64(bareProbes.Load()) * 1000
	b.Logf("bare probes: %.3f s CPU per 1k over %d probes, %d failed", bareCPU, bareProbes.Load(), bareFails.Load())

	for _, exits := range []bool{false, true} {
		b.Run(fmt.Sprintf("exit-checks=%t", exits), func(b *testing.B) {
			for range b.N {
				runtime.GC()
				debug.FreeOSMemory()
				time.Sleep(2 * time.Second) // let loopback TIME_WAITs from the last burst age a little
				resetPeakRSS(b)
				benchProbeSchedulerOnce(b, info, prober, window, bareCPU, exits)
			}
		})
	}
}

// resetPeakRSS resets the process's high-water resident set (VmHWM) to its current RSS
// (proc(5): /proc/pid/clear_refs, value 5), so each sub-benchmark reports its own peak.
func resetPeakRSS(b *testing.B) {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		b.Logf("peak RSS not reset (%v): it is the process's since it started", err)
	}
}

func benchProbeSchedulerOnce(b *testing.B, info stubInfo, prober Prober, window time.Duration, bareCPU float64, exitChecks bool) {
	const (
		fleetSize = 10_000
		interval  = 10 * time.Second
		workers   = DefaultWorkers
		country   = "US"
		asn       = 64500
	)
	view := fleet.New(time.Now, 0)
	for i := range fleetSize {
		host, port, _ := net.SplitHostPort(info.Proxies[i%len(info.Proxies)])
		p := proxyAt(b, fmt.Sprintf("bench/p%05d", i), net.JoinHostPort(host, port), info.Target, 10, 5, 3, 1)
		view.Upsert(p)
	}
	cfg := Config{View: view, Prober: prober, Workers: workers, Registerer: prometheus.NewRegistry(), Log: slog.New(slog.DiscardHandler)}
	if exitChecks {
		// Every proxy's exit is checked against the stub's echo on its first probe (the
		// default 5 min interval puts exactly one check per proxy in the window), and looked
		// up in country and ASN databases built for the run.
		dir := b.TempDir()
		geoiptest.WriteCountry(b, filepath.Join(dir, "c.mmdb"), geoiptest.Network{CIDR: "127.0.0.0/8", Country: country})
		geoiptest.WriteASN(b, filepath.Join(dir, "a.mmdb"), geoiptest.Network{CIDR: "127.0.0.0/8", ASN: asn})
		geo, err := geoip.Open(geoip.Config{CountryPath: filepath.Join(dir, "c.mmdb"), ASNPath: filepath.Join(dir, "a.mmdb")})
		if err != nil {
			b.Fatal(err)
		}
		cfg.ExitURL, cfg.Geo = info.Echo, geo
	}
	s, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	var (
		firsts     []time.Time     // each proxy's first slot
		lateness   []time.Duration // of probes whose slot fell in the window
		latency    []time.Duration
		done       int
		failed     int
		exits      int
		exitFailed int
		kinds      = map[string]int{}
		start      time.Time
	)
	jitter := s.jitter
	s.jitter = func(d time.Duration) time.Duration {
		j := jitter(d)
		// The loop adds j to its clock read just before this call.
		firsts = append(firsts, time.Now().Add(j))
		return j
	}
	s.onResult = func(_ string, due, started time.Time, r Result) {
		if due.Sub(start) >= window {
			return
		}
		done++
		switch {
		case r.Exit.IsValid():
			exits++
		case r.ExitErr != nil:
			exitFailed++
		}
		lateness = append(lateness, started.Sub(due))
		latency = append(latency, r.Latency)
		if !r.OK {
			failed++
			kinds[r.Kind]++
		}
	}
	baseGoroutines := runtime.NumGoroutine()
	var peakG atomic.Int64
	sampleCtx, stopSampling := context.WithCancel(context.Background())
	var sampler sync.WaitGroup
	sampler.Go(func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			if g := int64(runtime.NumGoroutine()); g > peakG.Load() {
				peakG.Store(g)
			}
			select {
			case <-sampleCtx.Done():
				return
			case <-t.C:
			}
		}
	})

	ctx, cancel := context.WithCancel(context.Background())
	start = time.Now()
	cpu0 := cpuSeconds()
	runErr := make(chan error, 1)
	b.ResetTimer()
	go func() { runErr <- s.Run(ctx) }()
	// The window, then one timeout more for the window's last probes to finish.
	time.Sleep(window + 5*time.Second)
	// What the exit checks left in the verdicts, read while the scheduler still publishes.
	withGeo := 0
	for i := range fleetSize {
		if e := s.Health(fmt.Sprintf("bench/p%05d", i)).Exit; e.IP != "" && e.Country == country && e.ASN == asn {
			withGeo++
		}
	}
	cancel()
	if err := <-runErr; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	cpu := cpuSeconds() - cpu0
	stopSampling()
	sampler.Wait()

	due := 0
	for _, f := range firsts {
		if o := f.Sub(start); o < window {
			due += int((window-o-1)/interval) + 1
		}
	}
	if len(lateness) == 0 {
		b.Fatalf("no probe finished in the %v window", window)
	}
	slices.Sort(lateness)
	slices.Sort(latency)
	p99 := lateness[min(len(lateness)-1, len(lateness)*99/100)]
	b.ReportMetric(float64(done)/float64(due), "done/due")
	b.ReportMetric(float64(exits), "exit-checks")
	b.ReportMetric(float64(withGeo), "exits-with-country-asn")
	b.ReportMetric(float64(p99.Microseconds())/1000, "p99-late-ms")
	b.ReportMetric(float64(latency[len(latency)*99/100].Microseconds())/1000, "p99-probe-ms")
	b.ReportMetric(cpu/float64(done)*1000, "cpu-s/1k-probes")
	b.ReportMetric(bareCPU, "bare-cpu-s/1k-probes")
	b.ReportMetric(cpu/float64(done)*1000/bareCPU, "cpu-vs-bare")
	b.ReportMetric(float64(peakG.Load()), "peak-goroutines")
	b.ReportMetric(peakRSSMB(), "peak-rss-MB")
	b.ReportMetric(0, "ns/op")
	b.Logf("window %v: %d proxies at %v, %d workers, exit checks %t: done %d / due %d; exit checks %d made, %d failed, %d proxies with country and ASN; failed %d %v; "+
		"p50 late %v, p99 late %v; p50 probe %v, p99 probe %v; cpu %.1fs (%.3f s/1k probes; bare %.3f); goroutines base %d peak %d; peak RSS %.0f MB",
		window, fleetSize, interval, workers, exitChecks, done, due, exits, exitFailed, withGeo, failed, kinds, lateness[len(lateness)/2], p99,
		latency[len(latency)/2], latency[len(latency)*99/100], cpu, cpu/float64(done)*1000, bareCPU, baseGoroutines, peakG.Load(), peakRSSMB())
}
