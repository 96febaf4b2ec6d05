package crawl

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/proxy-operator/proxy-operator/fleet"
	"github.com/proxy-operator/proxy-operator/lifecycle"
	"github.com/proxy-operator/proxy-operator/operator"
	"github.com/proxy-operator/proxy-operator/providers/factory"
	"github.com/proxy-operator/proxy-operator/providers/mock"
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
	cancel       context.CancelFunc
	done         chan error
}

// Close stops the operator (servers, loops) and its mock proxies.
func (o *Operator) Close() {
	o.cancel()
	<-o.done
}

// StartOperator runs the real operator in-process (operator.New and Run, as main does, with
// the mock provider serving real forward proxies and the discovery API behind a token), then
// plays Metacontroller: it syncs cfg.Proxies Managed mock Proxies until each is Ready and
// probed healthy through itself.
func StartOperator(ctx context.Context, cfg OperatorConfig) (*Operator, error) {
	pcfg := factory.Config{Providers: []factory.Entry{{Name: "mock", Type: "mock",
		Mock: &mock.Config{ProvisioningDelay: mock.Duration(200 * time.Millisecond), ServeProxies: true}}}}
	op, err := operator.New(operator.Config{
		HookAddr: "127.0.0.1:0", DiscoveryAddr: "127.0.0.1:0", Providers: &pcfg,
		DiscoveryToken: cfg.Token, ShutdownGrace: 5 * time.Second,
		LeaseCooldown: cfg.RateLimitedCooldown, LeaseBanCooldown: cfg.BannedCooldown, LeaseMaxCooldown: cfg.MaxCooldown,
	})
	if err != nil {
		return nil, err
	}
	// The probe target: what every proxy fetches through itself to prove it works.
	probe := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }),
		ReadHeaderTimeout: 5 * time.Second}
	probeLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() { _ = probe.Serve(probeLn) }()
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		err := op.Run(runCtx)
		_ = probe.Close()
		done <- err
	}()
	o := &Operator{DiscoveryURL: "http://" + op.DiscoveryAddr(), Token: cfg.Token, View: op.Fleet(), cancel: cancel, done: done}
	if err := playMetacontroller(ctx, "http://"+op.HookAddr(), "http://"+probeLn.Addr().String()+"/generate_204", cfg, op.Health()); err != nil {
		o.Close()
		return nil, err
	}
	return o, nil
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
