package mark_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxy-operator/proxy-operator/health/mark"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

var errGone = errors.New("gone")

type recorder struct {
	mu      sync.Mutex
	patches []string
	fail    map[string]error
}

func (r *recorder) Patch(_ context.Context, key, value string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.fail[key]; err != nil {
		return err
	}
	r.patches = append(r.patches, key+"="+value)
	return nil
}

func (r *recorder) Gone(err error) bool { return errors.Is(err, errGone) }

func newMarker(t *testing.T, r *recorder, behind map[string]string, qps float64, burst int) *mark.Marker {
	t.Helper()
	m, err := mark.New(mark.Config{Patcher: r, QPS: qps, Burst: burst, Now: func() time.Time { return time.Unix(0, 0) },
		Behind: func(key string) (string, bool) { v, ok := behind[key]; return v, ok }})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestCoalescesAndSkipsSettled(t *testing.T) {
	r := &recorder{}
	behind := map[string]string{"ns/a": "Unhealthy", "ns/c": "Healthy"}
	m := newMarker(t, r, behind, 10, 10)
	// a flaps three times before anything is sent; b flapped and came back (status already
	// says its verdict); c changed once.
	for _, k := range []string{"ns/a", "ns/b", "ns/a", "ns/c", "ns/a"} {
		m.Notify(k)
	}
	if m.Len() != 3 {
		t.Errorf("queue holds %d, want 3 (one per Proxy)", m.Len())
	}
	if wait := m.Step(context.Background(), t0); wait != 0 {
		t.Errorf("Step waits %s with budget left", wait)
	}
	want := []string{"ns/a=Unhealthy@1", "ns/c=Healthy@2"}
	if diff := cmp.Diff(want, r.patches); diff != "" {
		t.Errorf("patches (-want +got):\n%s", diff)
	}
}

// TestSequenceSurvivesRestart: a new Marker (a restarted process) never sends a value an
// earlier one sent, so its first patch is always a change.
func TestSequenceSurvivesRestart(t *testing.T) {
	var values []string
	for _, at := range []time.Time{t0, t0.Add(time.Second)} {
		r := &recorder{}
		m, err := mark.New(mark.Config{Patcher: r, Now: func() time.Time { return at },
			Behind: func(string) (string, bool) { return "Healthy", true }})
		if err != nil {
			t.Fatal(err)
		}
		m.Notify("ns/a")
		m.Step(context.Background(), at)
		values = append(values, r.patches...)
	}
	if len(values) != 2 || values[0] == values[1] {
		t.Errorf("patches across a restart %v, want two different values", values)
	}
}

func TestBudget(t *testing.T) {
	r := &recorder{}
	behind := map[string]string{}
	m := newMarker(t, r, behind, 2, 3)
	for i := range 10 {
		k := fmt.Sprintf("ns/p%d", i)
		behind[k] = "Unhealthy"
		m.Notify(k)
	}
	now := t0
	wait := m.Step(context.Background(), now)
	if len(r.patches) != 3 || wait != 500*time.Millisecond {
		t.Fatalf("burst: %d patches, wait %s; want 3 and 500ms", len(r.patches), wait)
	}
	for m.Len() > 0 {
		now = now.Add(wait)
		wait = m.Step(context.Background(), now)
	}
	if got := now.Sub(t0); got != 3500*time.Millisecond {
		t.Errorf("10 patches at 2/s with burst 3 took %s, want 3.5s", got)
	}
	if len(r.patches) != 10 || m.Sent() != 10 {
		t.Errorf("%d patches (%d sent), want 10", len(r.patches), m.Sent())
	}
}

func TestFailuresRetryGoneDrops(t *testing.T) {
	r := &recorder{fail: map[string]error{"ns/a": errors.New("503"), "ns/b": errGone}}
	behind := map[string]string{"ns/a": "Healthy", "ns/b": "Healthy"}
	m := newMarker(t, r, behind, 1, 1)
	m.Notify("ns/a")
	m.Notify("ns/b")
	now := t0
	for range 3 {
		now = now.Add(m.Step(context.Background(), now))
	}
	if m.Len() != 1 {
		t.Fatalf("queue %d, want only the failing Proxy kept", m.Len())
	}
	delete(r.fail, "ns/a")
	for m.Len() > 0 {
		now = now.Add(m.Step(context.Background(), now))
	}
	if len(r.patches) != 1 || r.patches[0][:5] != "ns/a=" {
		t.Errorf("patches %v, want one for ns/a after recovery", r.patches)
	}
}

// TestRun: the production loop sends what Notify queues, paced by the limiter.
func TestRun(t *testing.T) {
	r := &recorder{}
	var mu sync.Mutex
	behind := map[string]string{}
	m, err := mark.New(mark.Config{Patcher: r, QPS: 1000, Burst: 1,
		Behind: func(key string) (string, bool) { mu.Lock(); defer mu.Unlock(); v, ok := behind[key]; return v, ok }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- m.Run(ctx) }()
	for i := range 5 {
		k := fmt.Sprintf("ns/p%d", i)
		mu.Lock()
		behind[k] = "Healthy"
		mu.Unlock()
		m.Notify(k)
	}
	for m.Sent() < 5 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
