package hooks_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/healthtest"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/metacontroller"
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/mock"
	"github.com/proxy-operator/proxy-operator/server/hooks"
	"github.com/proxy-operator/proxy-operator/server/replay"
)

// readyFixture is the steady Ready Managed proxy: the sync Metacontroller sends most often.
const readyFixture = "../../testdata/sync/managed-ready-steady"

// benchHandlers returns the real router for the Ready fixture and a no-op handler that
// decodes and encodes the same body, with the request body.
func benchHandlers(b *testing.B) (ready, noop http.Handler, body []byte) {
	b.Helper()
	c, err := replay.Load(readyFixture)
	if err != nil {
		b.Fatal(err)
	}
	// Steady state: the prober keeps saying what the status already records, and the
	// instance keeps running.
	res, err := replay.Run(c, nil)
	if err != nil || res.Code != http.StatusOK {
		b.Fatalf("fixture does not replay: %v %d", err, res.Code)
	}
	return readyHooks(b, c).Handler(), noopHandler(), c.Request
}

// readyHooks is the real hook server over the fixture's seeded mock and prober verdicts.
func readyHooks(b *testing.B, c replay.Case) *hooks.Hooks {
	b.Helper()
	now := c.State.Now
	clock := func() time.Time { return now }
	mp, err := mock.New(mock.Config{}, mock.WithClock(clock))
	if err != nil {
		b.Fatal(err)
	}
	mp.Seed(c.State.Instances...)
	hm := &healthtest.Map{}
	for k, v := range c.State.Health {
		hm.Set(k, verdict.Health{State: v.State, LatencyMillis: v.LatencyMillis, Since: v.Since, Reason: v.Reason})
	}
	return &hooks.Hooks{
		Providers: providers.NewSet(providers.Entry{Name: "mock", Type: "mock", Provider: mp}),
		Fleet:     fleet.New(clock, 0),
		Health:    hm,
		Now:       clock,
	}
}

// noopHandler decodes the hook body and the parent as the real one does, and answers the
// parent's status back: the floor any hook implementation pays for JSON and HTTP.
func noopHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var buf bytes.Buffer
		if _, err := buf.ReadFrom(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var req metacontroller.SyncRequest
		if err := json.Unmarshal(buf.Bytes(), &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var p v1.Proxy
		if err := json.Unmarshal(req.Parent, &p); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		out, _ := json.Marshal(metacontroller.SyncResponse{Status: p.Status, Children: []json.RawMessage{}, ResyncAfterSeconds: 30})
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(out)
	})
}

// serveOnce runs one POST through h in-process and returns its duration.
func serveOnce(b *testing.B, h http.Handler, body []byte) time.Duration {
	req := httptest.NewRequest(http.MethodPost, "/sync", bytes.NewReader(body))
	rec := httptest.NewRecorder()
	t0 := time.Now()
	h.ServeHTTP(rec, req)
	d := time.Since(t0)
	if rec.Code != http.StatusOK {
		b.Fatalf("HTTP %d: %s", rec.Code, rec.Body.String())
	}
	return d
}

func p50(ds []time.Duration) float64 {
	slices.Sort(ds)
	return float64(ds[len(ds)/2].Nanoseconds())
}

// BenchmarkHookSync measures a sync of a Ready mock proxy through the real router against
// the no-op handler, in the same run. The "interleaved" case alternates them call by call
// and reports the ratio of their medians, so machine noise hits both alike.
func BenchmarkHookSync(b *testing.B) {
	ready, noop, body := benchHandlers(b)
	for _, bc := range []struct {
		name string
		h    http.Handler
	}{{"noop", noop}, {"ready", ready}} {
		b.Run(bc.name, func(b *testing.B) {
			ds := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			for b.Loop() {
				ds = append(ds, serveOnce(b, bc.h, body))
			}
			b.ReportMetric(p50(ds), "p50-ns")
		})
	}
	b.Run("interleaved", func(b *testing.B) {
		var dr, dn []time.Duration
		for b.Loop() {
			dn = append(dn, serveOnce(b, noop, body))
			dr = append(dr, serveOnce(b, ready, body))
		}
		pr, pn := p50(dr), p50(dn)
		b.ReportMetric(pr, "ready-p50-ns")
		b.ReportMetric(pn, "noop-p50-ns")
		b.ReportMetric(pr/pn, "ready/noop")
	})
}
