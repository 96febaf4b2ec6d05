package fleet_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func proxy(key string) fleet.Proxy {
	return fleet.Proxy{Key: key, UID: "u-" + key, Generation: 1, Mode: v1.ModeManaged, Provider: "mock", IP: "127.1.1.1", Port: 3128,
		Attributes: map[string]string{"country": "de"}, MaxLeases: 5, Phase: v1.PhaseReady,
		HealthCheck: v1.HealthCheckSpec{ProbeURL: "https://example.com/", ExpectedStatusCodes: []int32{204}}}
}

func TestUpsertReportsChangesOnly(t *testing.T) {
	v := fleet.New(func() time.Time { return t0 }, 0)
	p := proxy("crawl/a")
	tests := []struct {
		name   string
		mutate func(p *fleet.Proxy)
		want   bool
	}{
		{"new", func(*fleet.Proxy) {}, true},
		{"same again", func(*fleet.Proxy) {}, false},
		{"phase", func(p *fleet.Proxy) { p.Phase = v1.PhaseUnhealthy }, true},
		{"attribute value", func(p *fleet.Proxy) { p.Attributes = map[string]string{"country": "fr"} }, true},
		{"status codes", func(p *fleet.Proxy) { p.HealthCheck.ExpectedStatusCodes = []int32{200} }, true},
		{"equal copies", func(p *fleet.Proxy) {
			p.Attributes = map[string]string{"country": "fr"}
			p.HealthCheck.ExpectedStatusCodes = []int32{200}
		}, false},
		{"credentials added", func(p *fleet.Proxy) { p.Credentials = &fleet.Credentials{Username: "u", Password: "a"} }, true},
		{"credentials equal copy", func(p *fleet.Proxy) { p.Credentials = &fleet.Credentials{Username: "u", Password: "a"} }, false},
		{"credentials rotated", func(p *fleet.Proxy) { p.Credentials = &fleet.Credentials{Username: "u", Password: "b"} }, true},
		{"credentials removed", func(p *fleet.Proxy) { p.Credentials = nil }, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := v.Version()
			changed := v.Changed()
			tc.mutate(&p)
			if got := v.Upsert(p); got != tc.want {
				t.Fatalf("Upsert = %v, want %v", got, tc.want)
			}
			select {
			case <-changed:
				if !tc.want {
					t.Error("Changed closed on a no-op upsert")
				}
			default:
				if tc.want {
					t.Error("Changed not closed on a change")
				}
			}
			if bumped := v.Version() != before; bumped != tc.want {
				t.Errorf("version bumped = %v, want %v", bumped, tc.want)
			}
		})
	}
}

// TestViewOwnsItsCopies: a caller mutating what it upserted does not reach the view.
func TestViewOwnsItsCopies(t *testing.T) {
	v := fleet.New(func() time.Time { return t0 }, 0)
	p := proxy("crawl/a")
	v.Upsert(p)
	p.Attributes["country"] = "xx"
	p.HealthCheck.ExpectedStatusCodes[0] = 500
	got, ok := v.Get("crawl/a")
	if !ok {
		t.Fatal("missing")
	}
	if d := cmp.Diff(proxy("crawl/a"), got); d != "" {
		t.Errorf("view changed through the caller's maps (-want +got):\n%s", d)
	}
}

func TestListRemoveLen(t *testing.T) {
	v := fleet.New(func() time.Time { return t0 }, 0)
	for _, k := range []string{"b/x", "a/y", "a/x"} {
		v.Upsert(proxy(k))
	}
	var keys []string
	for _, p := range v.List() {
		keys = append(keys, p.Key)
	}
	if d := cmp.Diff([]string{"a/x", "a/y", "b/x"}, keys); d != "" {
		t.Errorf("List order (-want +got):\n%s", d)
	}
	ver := v.Version()
	v.Remove("a/y")
	v.Remove("a/y")
	if v.Len() != 2 || v.Version() != ver+1 {
		t.Errorf("after removing twice: len %d version +%d, want 2 and +1", v.Len(), v.Version()-ver)
	}
}

func TestComplete(t *testing.T) {
	now := t0
	v := fleet.New(func() time.Time { return now }, 3*time.Minute)
	if v.Complete() {
		t.Error("complete at start")
	}
	now = t0.Add(3*time.Minute - time.Nanosecond)
	if v.Complete() {
		t.Error("complete before warmup")
	}
	now = t0.Add(3 * time.Minute)
	if !v.Complete() || !v.CompleteAt().Equal(now) {
		t.Errorf("Complete %v at %s, want true at %s", v.Complete(), v.CompleteAt(), now)
	}
}

func TestConcurrentUse(t *testing.T) {
	v := fleet.New(func() time.Time { return t0 }, 0)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				p := proxy(fmt.Sprint("ns/", (g+i)%10))
				p.Generation = int64(i % 3)
				v.Upsert(p)
				_ = v.List()
				_, _ = v.Get(p.Key)
				_ = v.Changed()
				if i%17 == 0 {
					v.Remove(p.Key)
				}
			}
		})
	}
	wg.Wait()
	if v.Len() > 10 {
		t.Errorf("%d proxies, want at most 10", v.Len())
	}
}

func TestVendorSourceMatching(t *testing.T) {
	vendor := fleet.WithSource(map[string]string{"geo": "us"}, true)
	own := fleet.WithSource(map[string]string{"geo": "us", v1.SourceAttribute: v1.SourceVendor}, false)
	tests := []struct {
		name  string
		attrs map[string]string
		sel   map[string]string
		want  bool
	}{
		{"vendor, empty selector", vendor, nil, false},
		{"vendor, another attribute", vendor, map[string]string{"geo": "us"}, false},
		{"vendor, asked for", vendor, map[string]string{v1.SourceAttribute: v1.SourceVendor}, true},
		{"own proxy claiming the source", own, nil, true},
		{"own proxy, vendor asked for", own, map[string]string{v1.SourceAttribute: v1.SourceVendor}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := fleet.Matches(tc.attrs, tc.sel); got != tc.want {
				t.Errorf("Matches(%v, %v) = %v, want %v", tc.attrs, tc.sel, got, tc.want)
			}
		})
	}
}
