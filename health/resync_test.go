package health

import (
	"testing"
	"time"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
)

func TestResyncPolicy(t *testing.T) {
	tests := []struct {
		name     string
		qps      float64
		fleet    int
		interval int32
		want     time.Duration
	}{
		{"small fleet: one probe interval", 0, 10, 30, 30 * time.Second},
		{"75 proxies at 30 s fit 2.5/s exactly", 0, 75, 30, 30 * time.Second},
		{"100 proxies at 30 s exceed the budget", 0, 100, 30, 40 * time.Second},
		{"1,000 proxies: 400 s keeps reads at 2.5/s", 0, 1000, 30, 400 * time.Second},
		{"a raised budget buys back the interval", 50, 1000, 30, 30 * time.Second},
		{"fractions round up to whole seconds", 3, 100, 10, 34 * time.Second},
		{"empty fleet: the interval", 0, 0, 10, 10 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := ResyncPolicy{QPS: tc.qps}.After(tc.fleet, v1.HealthCheckSpec{IntervalSeconds: tc.interval})
			if got != tc.want {
				t.Errorf("After(%d, %ds) = %v, want %v", tc.fleet, tc.interval, got, tc.want)
			}
		})
	}
}
