package mark_test

import (
	"testing"
	"time"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/health/mark"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
)

type verdicts map[string]verdict.State

func (v verdicts) Health(key string) verdict.Health { return verdict.Health{State: v[key]} }

func TestFleetBehind(t *testing.T) {
	view := fleet.New(time.Now, 0)
	view.Upsert(fleet.Proxy{Key: "ns/a", UID: "a", Recorded: verdict.Health{State: verdict.Healthy}})
	view.Upsert(fleet.Proxy{Key: "ns/b", UID: "b", Recorded: verdict.Health{State: verdict.Healthy}})
	view.Upsert(fleet.Proxy{Key: "ns/c", UID: "c", Recorded: verdict.Health{State: verdict.Unknown}})
	view.Upsert(fleet.Proxy{Key: "ns/e", UID: "e", Recorded: verdict.Health{State: verdict.Unknown}, AwaitingVerdict: true})
	view.Upsert(fleet.Proxy{Key: "ns/d", UID: "d", Recorded: verdict.Health{State: verdict.Healthy}, Deleting: true})
	live := verdicts{"ns/a": verdict.Unhealthy, "ns/b": verdict.Healthy, "ns/c": verdict.Healthy, "ns/e": verdict.Healthy,
		"ns/d": verdict.Unhealthy, "ns/x": verdict.Unhealthy, "ns/u": verdict.Unknown}
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

type healthMap map[string]verdict.Health

func (m healthMap) Health(key string) verdict.Health { return m[key] }

// TestFleetBehindOnExitAndBand: an exit or a band the status does not show yet is behind too;
// one it already shows is not.
func TestFleetBehindOnExitAndBand(t *testing.T) {
	exit := verdict.Exit{IP: "203.0.113.9", Country: "US"}
	rec := verdict.Health{State: verdict.Healthy, Exit: exit, Band: v1.BandGood}
	view := fleet.New(time.Now, 0)
	for _, k := range []string{"ns/same", "ns/exit", "ns/band", "ns/noexit"} {
		view.Upsert(fleet.Proxy{Key: k, UID: k, Recorded: rec})
	}
	moved := exit
	moved.IP = "203.0.113.10"
	live := healthMap{
		"ns/same":   rec,
		"ns/exit":   {State: verdict.Healthy, Exit: moved, Band: v1.BandGood},
		"ns/band":   {State: verdict.Healthy, Exit: exit, Band: v1.BandPoor},
		"ns/noexit": {State: verdict.Healthy}, // a restarted prober knows nothing new
	}
	behind := mark.FleetBehind(view, live)
	for key, want := range map[string]string{"ns/same": "", "ns/exit": "Healthy,exit=203.0.113.10", "ns/band": "Healthy,band=Poor", "ns/noexit": ""} {
		v, b := behind(key)
		if b != (want != "") || v != want && b {
			t.Errorf("%s: (%q, %v), want %q", key, v, b, want)
		}
	}
}
