package mark_test

import (
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/health/mark"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/lifecycle"
)

type verdicts map[string]lifecycle.HealthState

func (v verdicts) Health(key string) lifecycle.Health { return lifecycle.Health{State: v[key]} }

func TestFleetBehind(t *testing.T) {
	view := fleet.New(time.Now, 0)
	view.Upsert(fleet.Proxy{Key: "ns/a", UID: "a", Recorded: lifecycle.Health{State: lifecycle.HealthHealthy}})
	view.Upsert(fleet.Proxy{Key: "ns/b", UID: "b", Recorded: lifecycle.Health{State: lifecycle.HealthHealthy}})
	view.Upsert(fleet.Proxy{Key: "ns/c", UID: "c", Recorded: lifecycle.Health{State: lifecycle.HealthUnknown}})
	view.Upsert(fleet.Proxy{Key: "ns/e", UID: "e", Recorded: lifecycle.Health{State: lifecycle.HealthUnknown}, AwaitingVerdict: true})
	view.Upsert(fleet.Proxy{Key: "ns/d", UID: "d", Recorded: lifecycle.Health{State: lifecycle.HealthHealthy}, Deleting: true})
	live := verdicts{"ns/a": lifecycle.HealthUnhealthy, "ns/b": lifecycle.HealthHealthy, "ns/c": lifecycle.HealthHealthy, "ns/e": lifecycle.HealthHealthy,
		"ns/d": lifecycle.HealthUnhealthy, "ns/x": lifecycle.HealthUnhealthy, "ns/u": lifecycle.HealthUnknown}
	behind := mark.FleetBehind(view, live)
	for _, tc := range []struct {
		key     string
		verdict string
		behind  bool
	}{
		{"ns/a", "Unhealthy", true}, // status says Healthy
		{"ns/b", "Healthy", false},  // status agrees
		{"ns/c", "Healthy", true},   // first verdict of a new External proxy
		{"ns/e", "", false},         // first verdict of a new instance: its poll carries it
		{"ns/d", "", false},         // being deleted
		{"ns/x", "", false},         // not in the view
		{"ns/u", "", false},         // no verdict
	} {
		v, b := behind(tc.key)
		if b != tc.behind || (b && v != tc.verdict) {
			t.Errorf("%s: (%q, %v), want (%q, %v)", tc.key, v, b, tc.verdict, tc.behind)
		}
	}
}
