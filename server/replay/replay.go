package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/google/go-cmp/cmp"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/credentials"
	"github.com/proxy-operator/proxy-operator/providers/kubernetes"
	"github.com/proxy-operator/proxy-operator/providers/mock"
	"github.com/proxy-operator/proxy-operator/server/hooks"
	"github.com/proxy-operator/proxy-operator/server/hooks/poolhook"
)

// Result is what the real router answered and which provider calls it made.
type Result struct {
	Code  int
	Body  json.RawMessage
	Calls []mock.Call
}

// healthMap is the fake prober of a fixture.
type healthMap map[string]Health

func (m healthMap) Health(key string) verdict.Health {
	if h, ok := m[key]; ok {
		return h.lifecycle()
	}
	return verdict.Health{State: verdict.Unknown}
}

// Run replays c through a fresh hooks.Hooks router whose mock provider is seeded from
// c.State. log may be nil.
func Run(c Case, log *slog.Logger) (Result, error) {
	st := c.State
	now := st.Now
	clock := func() time.Time { return now }
	mp, err := mock.New(mock.Config{ProvisioningDelay: st.ProvisioningDelay}, mock.WithClock(clock))
	if err != nil {
		return Result{}, err
	}
	mp.Seed(st.Instances...)
	if err := mp.Inject(st.Faults...); err != nil {
		return Result{}, fmt.Errorf("fixture %s: %s: %w", c.Dir, StateFile, err)
	}
	name := st.Provider
	if name == "" {
		name = DefaultProvider
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	entry := providers.Entry{Name: name, Type: "mock", Provider: mp}
	switch st.ProviderType {
	case "", "mock":
	case "kubernetes":
		kp, err := kubernetes.New(kubernetes.Config{})
		if err != nil {
			return Result{}, err
		}
		entry = providers.Entry{Name: name, Type: "kubernetes", Provider: kp}
	default:
		return Result{}, fmt.Errorf("fixture %s: %s: providerType %q: want mock or kubernetes", c.Dir, StateFile, st.ProviderType)
	}
	h := &hooks.Hooks{
		Providers:    providers.NewSet(entry),
		Fleet:        fleet.New(clock, 0),
		Health:       healthMap(st.Health),
		Now:          clock,
		Log:          log,
		MaxBodyBytes: st.MaxBodyBytes,
	}
	if hr := time.Duration(st.HealthResync); hr > 0 {
		h.HealthResync = func(int, v1.HealthCheckSpec) time.Duration { return hr }
	}
	h.Pools = &poolhook.Hooks{Load: poolLoad{st}, Now: clock, Log: log}
	req := httptest.NewRequest(http.MethodPost, hookPath(c.Hook), bytes.NewReader(c.Request))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.Handler().ServeHTTP(rec, req)
	calls := mp.Calls()
	if calls == nil {
		calls = []mock.Call{}
	}
	// Credentials are generated at random and never kept in a fixture: the body is compared,
	// and written as a golden, with every credential redacted as a capture redacts it.
	return Result{Code: rec.Code, Body: jsonBody(credentials.Redact(rec.Body.Bytes())), Calls: calls}, nil
}

// hookPath is the route of a hook: the pool hooks live under /pools/.
func hookPath(hook string) string {
	if rest, ok := strings.CutPrefix(hook, "pools-"); ok {
		return "/pools/" + rest
	}
	return "/" + hook
}

// poolLoad is the lease store a fixture describes.
type poolLoad struct{ st State }

// PoolLoad answers the fixture's counts (Denied is keyed by the pool's name: a fixture holds
// one namespace).
func (l poolLoad) PoolLoad(_ context.Context, q lease.PoolQuery) (lease.PoolView, error) {
	return lease.PoolView{Active: l.st.Leases, Cooling: l.st.Cooling, Denied: l.st.Denied[q.Pool]}, nil
}

// jsonBody keeps a JSON body compact, and wraps anything else as a JSON string so a golden
// file can always hold it.
func jsonBody(b []byte) json.RawMessage {
	var out bytes.Buffer
	if err := json.Compact(&out, b); err == nil {
		return out.Bytes()
	}
	s, _ := json.Marshal(string(b))
	return s
}

// Diff compares a result with the fixture's goldens and returns "" when they match, else a
// report in cmp.Diff's "(-want +got)" form. Calls are compared only when the fixture has them.
func Diff(c Case, got Result) string {
	if c.Want == nil {
		return fmt.Sprintf("fixture %s has no %s (run with -update to write it)", c.Dir, ResponseFile)
	}
	var b strings.Builder
	if c.Want.Code != got.Code {
		fmt.Fprintf(&b, "code: want %d, got %d\n", c.Want.Code, got.Code)
	}
	if d := cmp.Diff(decode(c.Want.Body), decode(got.Body)); d != "" {
		fmt.Fprintf(&b, "body mismatch (-want +got):\n%s", d)
	}
	if c.WantCalls != nil {
		if d := cmp.Diff(c.WantCalls, got.Calls); d != "" {
			fmt.Fprintf(&b, "calls mismatch (-want +got):\n%s", d)
		}
	}
	return b.String()
}

func decode(b json.RawMessage) any {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return string(b)
	}
	return v
}
