package mark_test

import (
	"testing"
	"time"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
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

type healthMap map[string]lifecycle.Health

func (m healthMap) Health(key string) lifecycle.Health { return m[key] }

// TestFleetBehindOnExitAndBand: an exit or a band the status does not show yet is behind too;
// one it already shows is not.
func TestFleetBehindOnExitAndBand(t *testing.T) {
	exit := lifecycle.Exit{IP: "203.0.113.9", Country: "US"}
	rec := lifecycle.Health{State: lifecycle.HealthHealthy, Exit: exit, Band: v1.BandGood}
	view := fleet.New(time.Now, 0)
	for _, k := range []string{"ns/same", "ns/exit", "ns/band", "ns/noexit"} {
		view.Upsert(fleet.Proxy{Key: k, UID: k, Recorded: rec})
	}
	moved := exit
	moved.IP = "203.0.113.10"
	live := healthMap{
		"ns/same":   rec,
		"ns/exit":   {State: lifecycle.HealthHealthy, Exit: moved, Band: v1.BandGood},
		"ns/band":   {State: lifecycle.HealthHealthy, Exit: exit, Band: v1.BandPoor},
		"ns/noexit": {State: lifecycle.HealthHealthy}, // a restarted prober knows nothing new
	}
	behind := mark.FleetBehind(view, live)
	for key, want := range map[string]string{"ns/same": "", "ns/exit": "Healthy,exit=203.0.113.10", "ns/band": "Healthy,band=Poor", "ns/noexit": ""} {
		v, b := behind(key)
		if b != (want != "") || v != want && b {
			t.Errorf("%s: (%q, %v), want %q", key, v, b, want)
		}
	}
}
