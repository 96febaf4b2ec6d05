package crawl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxy-operator/proxy-operator/fleet"
	"github.com/proxy-operator/proxy-operator/health"
	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/lifecycle"
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/mock"
	"github.com/proxy-operator/proxy-operator/server"
)

// OperatorConfig is what the benchmark sets of the operator; the rest is main.go's default.
type OperatorConfig struct {
	// Proxies is the fleet size: Managed Proxies on the mock provider, each a real forward
	// proxy on its own 127.x address.
	Proxies int
	// MaxLeases per Proxy.
	MaxLeases int
	// Token is the discovery API's bearer token.
	Token string
	// Cooldowns as -lease-cooldown, -lease-ban-cooldown, -lease-max-cooldown (zero: defaults).
	RateLimitedCooldown, BannedCooldown, MaxCooldown time.Duration
}

// Operator is a running operator with its fleet Ready and healthy.
type Operator struct {
	DiscoveryURL string
	Token        string
	View         *fleet.View
	stop         func()
}

// Close stops the operator and its mock proxies.
func (o *Operator) Close() { o.stop() }

// StartOperator assembles the operator the way main.go's run does (one provider set, the
// fleet view, the prober, the lease store, hook and discovery servers on loopback listeners,
// the background loops), then plays Metacontroller: it syncs cfg.Proxies Managed mock Proxies
// until each is Ready and probed healthy through itself.
func StartOperator(ctx context.Context, cfg OperatorConfig) (*Operator, error) {
	log := slog.New(slog.DiscardHandler)
	reg := prometheus.NewRegistry()
	// What factory.Build makes of a mock entry, kept by hand so the proxies can be stopped.
	mp, err := mock.New(mock.Config{ProvisioningDelay: mock.Duration(200 * time.Millisecond), ServeProxies: true})
	if err != nil {
		return nil, err
	}
	set := providers.NewSet(providers.Entry{Name: "mock", Type: "mock", Provider: providers.NewMetrics(reg).Instrument("mock", mp)})
	view := fleet.New(time.Now, 0)
	prober := health.NewHTTPProber(nil)
	sched, err := health.New(health.Config{View: view, Prober: prober, Registerer: reg, Log: log})
	if err != nil {
		prober.Close()
		return nil, err
	}
	hooks := &server.Hooks{Providers: set, Fleet: view, Health: sched,
		HealthResync: health.ResyncPolicy{QPS: health.DefaultResyncQPS}.After, Log: log, Registry: reg}
	store := lease.NewMemory(lease.Config{Fleet: view, Health: sched, Now: time.Now,
		RateLimitedCooldown: cfg.RateLimitedCooldown, BannedCooldown: cfg.BannedCooldown, MaxCooldown: cfg.MaxCooldown})
	disc := &server.Discovery{Fleet: view, Health: sched, Leases: store, Token: cfg.Token, Log: log, Registerer: reg}

	// The probe target: what every proxy fetches through itself to prove it works.
	probeMux := http.NewServeMux()
	probeMux.HandleFunc("/generate_204", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	var servers []*http.Server
	var lns []net.Listener
	listen := func(h http.Handler, s *http.Server) (string, error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		if s == nil {
			s = &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second,
				WriteTimeout: 2*server.DefaultProviderTimeout + 10*time.Second, IdleTimeout: 120 * time.Second, MaxHeaderBytes: 64 << 10}
		}
		servers, lns = append(servers, s), append(lns, ln)
		return "http://" + ln.Addr().String(), nil
	}
	runCtx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	stop := func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		for _, s := range servers {
			_ = s.Shutdown(sctx)
		}
		cancel()
		wg.Wait()
		prober.Close()
		mp.Close()
	}
	hookURL, err1 := listen(hooks.Handler(), nil)
	discURL, err2 := listen(nil, disc.Server(""))
	probeURL, err3 := listen(probeMux, nil)
	if err := errors.Join(err1, err2, err3); err != nil {
		for _, ln := range lns {
			ln.Close()
		}
		stop()
		return nil, err
	}
	for i, s := range servers {
		wg.Add(1)
		go func() { defer wg.Done(); _ = s.Serve(lns[i]) }()
	}
	for _, loop := range []func(context.Context) error{sched.Run, store.Run} {
		wg.Add(1)
		go func() { defer wg.Done(); _ = loop(runCtx) }()
	}
	op := &Operator{DiscoveryURL: discURL, Token: cfg.Token, View: view, stop: stop}
	if err := playMetacontroller(ctx, hookURL, probeURL+"/generate_204", cfg, sched); err != nil {
		op.Close()
		return nil, err
	}
	return op, nil
}

// playMetacontroller syncs every Proxy, feeding each answer's status back as Metacontroller
// would, until all are Ready and healthy.
func playMetacontroller(ctx context.Context, hookURL, probeURL string, cfg OperatorConfig, h interface {
	Health(string) lifecycle.Health
}) error {
	hc := &http.Client{Timeout: 30 * time.Second}
	status := make([]json.RawMessage, cfg.Proxies)
	spec := func(i int) string {
		return fmt.Sprintf(`{"mode":"Managed","provider":"mock","attributes":{"pool":"crawl"},"maxLeases":%d,`+
			`"healthCheck":{"probeURL":%q,"intervalSeconds":2,"timeoutSeconds":2,"failureThreshold":3,"successThreshold":1}}`, cfg.MaxLeases, probeURL)
	}
	sync1 := func(i int) error {
		st := status[i]
		if st == nil {
			st = json.RawMessage(`{}`)
		}
		body := fmt.Sprintf(`{"controller":{},"parent":{"apiVersion":"crawl.example.com/v1alpha1","kind":"Proxy",`+
			`"metadata":{"name":"px-%02d","namespace":"crawl","uid":"uid-px-%02d","generation":1},"spec":%s,"status":%s},"children":{},"related":{},"finalizing":false}`,
			i, i, spec(i), st)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, hookURL+"/sync", bytes.NewReader([]byte(body)))
		if err != nil {
			return err
		}
		res, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		b, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
		if err != nil {
			return err
		}
		if res.StatusCode != http.StatusOK {
			return fmt.Errorf("sync px-%02d: %d %s", i, res.StatusCode, b)
		}
		var out struct {
			Status json.RawMessage `json:"status"`
		}
		if err := json.Unmarshal(b, &out); err != nil {
			return fmt.Errorf("sync px-%02d: %w", i, err)
		}
		status[i] = out.Status
		return nil
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ready := 0
		for i := range cfg.Proxies {
			if err := sync1(i); err != nil {
				return err
			}
			if h.Health(fmt.Sprintf("crawl/px-%02d", i)).State == lifecycle.HealthHealthy {
				ready++
			}
		}
		if ready == cfg.Proxies {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d proxies healthy after 2 minutes", ready, cfg.Proxies)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
