package server

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/fleet"
	"github.com/proxy-operator/proxy-operator/lifecycle"
	"github.com/proxy-operator/proxy-operator/metacontroller"
	"github.com/proxy-operator/proxy-operator/providers"
)

// HealthSource is the prober's verdict on a proxy, by namespace/name.
type HealthSource interface {
	Health(key string) lifecycle.Health
}

// Exchange is one hook call as handled, for capture.
type Exchange struct {
	Hook     string
	Now      time.Time
	Request  []byte
	Code     int
	Response []byte
	// Provider is spec.provider of the parent; ProviderKnown whether it is configured;
	// Instance what it showed before any action.
	Provider      string
	ProviderKnown bool
	// ProviderType is the configured provider's type ("mock", "gcp", "kubernetes").
	ProviderType string
	Instance     *providers.Instance
	Health       lifecycle.Health
	// HealthResync is the steady-state resync the decision was given (0: lifecycle's default).
	HealthResync time.Duration
	// ObserveErr and ActionErr are the failed provider calls, so a capture can replay them
	// as injected faults; ActionOp is "create" or "delete".
	ObserveErr error
	ActionOp   string
	ActionErr  error
}

// Recorder receives every handled hook call (the capture feature).
type Recorder interface {
	Record(Exchange)
}

// Defaults for Hooks fields left zero.
const (
	DefaultMaxBodyBytes    = 4 << 20
	DefaultProviderTimeout = 8 * time.Second
	DefaultMaxInFlight     = 64
)

// Hooks serves Metacontroller's sync, finalize and customize calls.
type Hooks struct {
	Providers *providers.Set
	Fleet     *fleet.View
	Health    HealthSource
	Now       func() time.Time
	Log       *slog.Logger
	// Registry, when set, is served at /metrics and receives the hook metrics.
	Registry *prometheus.Registry
	// HealthResync says how soon a steady proxy is synced again (nil: lifecycle's default).
	HealthResync func(fleetSize int, hc v1.HealthCheckSpec) time.Duration
	Recorder     Recorder
	// Ready reports readiness for /readyz (nil: always ready).
	Ready func() error

	MaxBodyBytes    int64
	ProviderTimeout time.Duration
	// MaxInFlight bounds concurrent hook calls; beyond it the answer is 429 with Retry-After.
	MaxInFlight int

	inflight chan struct{}
	duration *prometheus.HistogramVec

	// retries remembers, per Proxy, until when a failed provider call keeps the provider
	// alone. It lives only in memory: after a restart a Proxy in backoff is tried once at
	// once, which the backoff then covers again.
	retryMu sync.Mutex
	retries map[types.UID]retryWait
}

// retryWait is a provider-error wait for one generation of a Proxy (and one side of its
// life: a sync-time error must not delay its finalize).
type retryWait struct {
	generation int64
	finalizing bool
	until      time.Time
}

// retryAt returns the end of the Proxy's current wait, or zero.
func (h *Hooks) retryAt(p *v1.Proxy, finalizing bool) time.Time {
	h.retryMu.Lock()
	defer h.retryMu.Unlock()
	w, ok := h.retries[p.UID]
	if !ok || w.generation != p.Generation || w.finalizing != finalizing {
		return time.Time{}
	}
	return w.until
}

// setRetry records or clears the Proxy's wait after a decision.
func (h *Hooks) setRetry(p *v1.Proxy, finalizing bool, d lifecycle.Decision) {
	h.retryMu.Lock()
	defer h.retryMu.Unlock()
	if d.RetryAt.IsZero() || d.Finalized {
		delete(h.retries, p.UID)
		return
	}
	if h.retries == nil {
		h.retries = map[types.UID]retryWait{}
	}
	h.retries[p.UID] = retryWait{generation: p.Generation, finalizing: finalizing, until: d.RetryAt}
}

func (h *Hooks) init() {
	if h.Now == nil {
		h.Now = time.Now
	}
	if h.Log == nil {
		h.Log = slog.New(slog.DiscardHandler)
	}
	if h.MaxBodyBytes <= 0 {
		h.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if h.ProviderTimeout <= 0 {
		h.ProviderTimeout = DefaultProviderTimeout
	}
	if h.MaxInFlight <= 0 {
		h.MaxInFlight = DefaultMaxInFlight
	}
	if h.Health == nil {
		h.Health = unknownHealth{}
	}
	h.inflight = make(chan struct{}, h.MaxInFlight)
	h.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "proxy_operator_hook_duration_seconds",
		Help:    "Time to answer a Metacontroller hook call.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
	}, []string{"hook"})
	if h.Registry != nil {
		h.Registry.MustRegister(h.duration, newPhaseCollector(h.Fleet))
	}
}

type unknownHealth struct{}

func (unknownHealth) Health(string) lifecycle.Health {
	return lifecycle.Health{State: lifecycle.HealthUnknown}
}

// Handler returns the hook router. Call it once.
func (h *Hooks) Handler() http.Handler {
	h.init()
	r := chi.NewRouter()
	r.Post("/sync", h.hook("sync", h.sync))
	r.Post("/finalize", h.hook("finalize", h.sync))
	r.Post("/customize", h.hook("customize", h.customize))
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Get("/readyz", serve(h.Log, func(w http.ResponseWriter, _ *http.Request) error {
		if h.Ready != nil {
			if err := h.Ready(); err != nil {
				return &Error{Code: http.StatusServiceUnavailable, Message: "not ready: " + err.Error()}
			}
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
		return nil
	}))
	if h.Registry != nil {
		r.Handle("/metrics", promhttp.HandlerFor(h.Registry, promhttp.HandlerOpts{}))
	}
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, Errorf(http.StatusNotFound, "no route %s %s", r.Method, r.URL.Path))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, Errorf(http.StatusMethodNotAllowed, "method %s not allowed on %s", r.Method, r.URL.Path))
	})
	return r
}

// hookFunc handles one decoded hook call and returns the response body.
type hookFunc func(ctx context.Context, hook string, body []byte, ex *Exchange) (any, error)

// hook wraps a hookFunc with load shedding, the body limit, timing and capture.
func (h *Hooks) hook(name string, fn hookFunc) http.HandlerFunc {
	return serve(h.Log, func(w http.ResponseWriter, r *http.Request) error {
		select {
		case h.inflight <- struct{}{}:
			defer func() { <-h.inflight }()
		default:
			return &Error{Code: http.StatusTooManyRequests, Message: "too many hook calls in flight", RetryAfter: 1}
		}
		start := time.Now()
		defer func() { h.duration.WithLabelValues(name).Observe(time.Since(start).Seconds()) }()
		ex := &Exchange{Hook: name, Now: h.Now()}
		body, err := readBody(w, r, h.MaxBodyBytes)
		if err != nil {
			return err
		}
		ex.Request = body
		resp, err := fn(r.Context(), name, body, ex)
		if err != nil {
			if h.Recorder != nil {
				var e *Error
				if errors.As(err, &e) {
					ex.Code = e.Code
					ex.Response, _ = json.Marshal(errorBody{Error: e.Message})
				}
				if ex.Code != 0 {
					h.Recorder.Record(*ex)
				}
			}
			return err
		}
		out, err := json.Marshal(resp)
		if err != nil {
			return err
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(out)
		if h.Recorder != nil {
			ex.Code, ex.Response = http.StatusOK, out
			h.Recorder.Record(*ex)
		}
		return nil
	})
}

// decodeParent reads and checks the parent Proxy of a hook body.
func decodeParent(raw json.RawMessage) (*v1.Proxy, error) {
	var p v1.Proxy
	if err := decodeJSON(raw, &p, "parent"); err != nil {
		return nil, err
	}
	switch {
	case p.Kind != "" && p.Kind != v1.Kind:
		return nil, Errorf(http.StatusBadRequest, "parent: kind %q, want %s", p.Kind, v1.Kind)
	case p.APIVersion != "" && p.APIVersion != v1.APIVersion:
		return nil, Errorf(http.StatusBadRequest, "parent: apiVersion %q, want %s", p.APIVersion, v1.APIVersion)
	case p.Name == "":
		return nil, Errorf(http.StatusBadRequest, "parent: metadata.name is required")
	case p.Namespace == "":
		return nil, Errorf(http.StatusBadRequest, "parent: metadata.namespace is required")
	case p.UID == "":
		return nil, Errorf(http.StatusBadRequest, "parent: metadata.uid is required")
	}
	return &p, nil
}

func (h *Hooks) sync(ctx context.Context, hook string, body []byte, ex *Exchange) (any, error) {
	var req metacontroller.SyncRequest
	if err := decodeJSON(body, &req, hook+" request"); err != nil {
		return nil, err
	}
	if err := req.Validate(); err != nil {
		return nil, Errorf(http.StatusBadRequest, "%s request: %s", hook, err.Error())
	}
	p, err := decodeParent(req.Parent)
	if err != nil {
		return nil, err
	}
	finalizing := req.Finalizing || hook == "finalize"
	in := lifecycle.Input{Proxy: p, Finalizing: finalizing, Now: ex.Now}
	in.SpecErr = p.Spec.Validate()
	p.Spec.Default()
	key := p.Key()
	in.Health = h.Health.Health(key)
	if in.Health.State == lifecycle.HealthUnknown && h.Fleet != nil {
		// First sync since a restart: the prober has not met this proxy yet. Keep what status
		// recorded rather than flap the fleet to Unknown.
		if _, seen := h.Fleet.Get(key); !seen {
			in.Health = lifecycle.RecordedHealth(p.Status)
		}
	}
	ex.Provider, ex.Health = p.Spec.Provider, in.Health
	log := h.Log.With("proxy", key, "hook", hook)

	var entry providers.Entry
	// A spec that turned invalid after its instance was made must still let the Proxy be
	// deleted: finalize looks the provider up whatever the spec says.
	if p.Spec.Mode == v1.ModeManaged && p.Spec.Provider != "" && (in.SpecErr == nil || finalizing) {
		entry, in.ProviderKnown = h.Providers.Lookup(p.Spec.Provider)
		if !finalizing {
			in.CloudInit, in.CloudInitErr = resolveCloudInit(p, req.Related)
		}
	}
	// A provider whose instances are Metacontroller children acts through this call's
	// children; every other provider is returned unchanged.
	var children providers.BoundProvider
	if in.ProviderKnown {
		parent := providers.Parent{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID)}
		entry.Provider, children, _ = providers.BindChildren(entry.Provider, parent, req.Children)
		in.RetryAt = h.retryAt(p, finalizing)
	}
	if in.ProviderKnown && !in.RetryAt.After(in.Now) {
		in.Instance, in.ObserveErr = h.observe(ctx, entry, p, finalizing)
		if in.ObserveErr != nil {
			log.Error("provider observe failed", "provider", entry.Name, "providerID", p.Status.ProviderID, "err", in.ObserveErr)
		}
		ex.Instance, ex.ObserveErr = in.Instance, in.ObserveErr
	}
	ex.ProviderKnown, ex.ProviderType = in.ProviderKnown, entry.Type
	if fs := h.Fleet; fs != nil && h.HealthResync != nil {
		in.HealthResync = h.HealthResync(fs.Len(), *p.Spec.HealthCheck)
	}
	ex.HealthResync = in.HealthResync
	d := lifecycle.Decide(in)
	if d.Action != nil {
		in.Outcome = h.run(ctx, log, entry, *d.Action)
		ex.ActionOp, ex.ActionErr = strings.ToLower(string(d.Action.Kind)), in.Outcome.Err
		d = lifecycle.Decide(in)
	}
	if in.ProviderKnown {
		h.setRetry(p, finalizing, d)
	}
	h.record(log, p, d)
	resp := metacontroller.SyncResponse{
		Status:             d.Status,
		Children:           providers.DesiredChildren(children, req.Children, finalizing),
		ResyncAfterSeconds: d.ResyncAfter.Seconds(),
		Finalized:          d.Finalized,
	}
	return resp, nil
}

// observe asks the provider what exists for this Proxy.
func (h *Hooks) observe(ctx context.Context, e providers.Entry, p *v1.Proxy, finalizing bool) (*providers.Instance, error) {
	ctx, cancel := context.WithTimeout(ctx, h.ProviderTimeout)
	defer cancel()
	if id := p.Status.ProviderID; id != "" {
		inst, err := e.Provider.Get(ctx, id)
		if errors.Is(err, providers.ErrNotFound) {
			return nil, nil
		}
		return inst, err
	}
	if !finalizing && p.Status.Phase != v1.PhaseFailed {
		// Create is idempotent by name: a lost status write is repaired by creating again.
		return nil, nil
	}
	// Finalizing, or Failed, with no recorded ID: a crash between Create and the status write
	// may have left an instance only its tags can find. A Failed Proxy calls Create no more
	// (a permanent error waits for a spec change), so creating again would never find it.
	all, err := e.Provider.ListByTag(ctx)
	if err != nil {
		return nil, err
	}
	for i := range all {
		if all[i].OwnerUID == string(p.UID) {
			return &all[i], nil
		}
	}
	return nil, nil
}

// run performs one action against the provider and reports its outcome.
func (h *Hooks) run(ctx context.Context, log *slog.Logger, e providers.Entry, a lifecycle.Action) *lifecycle.Outcome {
	ctx, cancel := context.WithTimeout(ctx, h.ProviderTimeout)
	defer cancel()
	o := &lifecycle.Outcome{Action: a}
	switch a.Kind {
	case lifecycle.ActionCreate:
		o.ProviderID, o.Err = e.Provider.Create(ctx, a.Create)
		if o.Err == nil {
			log.Info("instance create started", "provider", e.Name, "providerID", o.ProviderID, "name", a.Create.Name, "specHash", a.Create.SpecHash)
		}
	case lifecycle.ActionDelete:
		o.Err = e.Provider.Delete(ctx, a.ProviderID)
		if o.Err == nil {
			log.Info("instance delete started", "provider", e.Name, "providerID", a.ProviderID)
		}
	}
	if o.Err != nil {
		log.Error("provider call failed", "provider", e.Name, "op", string(a.Kind), "providerID", a.ProviderID, "err", o.Err)
	}
	return o
}

// record updates the fleet view and logs phase transitions.
func (h *Hooks) record(log *slog.Logger, p *v1.Proxy, d lifecycle.Decision) {
	if p.Status.Phase != d.Status.Phase {
		log.Info("phase changed", "from", string(p.Status.Phase), "to", string(d.Status.Phase), "providerID", d.Status.ProviderID)
	}
	if h.Fleet == nil {
		return
	}
	if d.Finalized {
		h.Fleet.Remove(p.Key())
		return
	}
	h.Fleet.Upsert(fleet.Proxy{
		Key:         p.Key(),
		UID:         string(p.UID),
		Generation:  p.Generation,
		Mode:        p.Spec.Mode,
		Provider:    p.Spec.Provider,
		ProviderID:  d.Status.ProviderID,
		IP:          d.Status.IP,
		Port:        p.Spec.ListenPort(),
		Attributes:  p.Spec.Attributes,
		MaxLeases:   *p.Spec.MaxLeases,
		HealthCheck: *p.Spec.HealthCheck,
		Phase:       d.Status.Phase,
		Recorded:    lifecycle.RecordedHealth(d.Status),
		Deleting:    p.DeletionTimestamp != nil || d.Status.Phase == v1.PhaseDeleting,
	})
}
