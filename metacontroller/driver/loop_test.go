package driver_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/metacontroller/driver"
)

// stubHook answers the hooks with scripted answers and records when each call arrived, on the
// driver's virtual clock. It is the driver's own stand-in for a hook server: these tests check
// the loop, not what the operator decides (that is test/sim).
type stubHook struct {
	clock *driver.Clock
	// answer writes the n-th call's answer (n from 0) to path.
	answer func(n int, path string, w http.ResponseWriter)

	mu    sync.Mutex
	calls []stubCall
}

type stubCall struct {
	Path string
	At   time.Duration // since stubT0
}

var stubT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func (s *stubHook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	n := len(s.calls)
	s.calls = append(s.calls, stubCall{Path: r.URL.Path, At: s.clock.Now().Sub(stubT0)})
	s.mu.Unlock()
	s.answer(n, r.URL.Path, w)
}

func (s *stubHook) Calls() []stubCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]stubCall(nil), s.calls...)
}

// ok answers 200 with an empty status and no children.
func ok(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"status":{},"children":[]}`))
}

// throttledOnce answers the first call 429 with Retry-After: 7, every other call 200.
func throttledOnce(n int, _ string, w http.ResponseWriter) {
	if n == 0 {
		w.Header().Set("Retry-After", "7")
		http.Error(w, "slow down", http.StatusTooManyRequests)
		return
	}
	ok(w)
}

func newStub(t *testing.T, answer func(int, string, http.ResponseWriter)) (*stubHook, *httptest.Server) {
	t.Helper()
	s := &stubHook{clock: driver.NewClock(stubT0), answer: answer}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, srv
}

func stubProxy(name string) *v1.Proxy {
	return &v1.Proxy{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "crawl"}}
}

func stubPool(name string) *v1.ProxyPool {
	return &v1.ProxyPool{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "crawl"}}
}

// TestThrottledHookWaitsRetryAfter: at either level, a 429 with Retry-After requeues the parent
// that many seconds later, without backoff, and records a Throttled event, as Metacontroller's
// composite controller does.
func TestThrottledHookWaitsRetryAfter(t *testing.T) {
	for _, level := range []string{"proxy", "pool"} {
		t.Run(level, func(t *testing.T) {
			stub, srv := newStub(t, throttledOnce)
			d := &driver.Driver{URL: srv.URL, Clock: stub.clock}
			ps := &driver.Pools{Proxies: d, URL: srv.URL + "/pools"}
			var events func() []driver.Event
			if level == "proxy" {
				if err := d.Apply(stubProxy("p")); err != nil {
					t.Fatal(err)
				}
				events = d.Events
			} else {
				if err := ps.ApplyPool(stubPool("web")); err != nil {
					t.Fatal(err)
				}
				events = ps.PoolEvents
			}
			if err := ps.RunFor(30 * time.Second); err != nil {
				t.Fatal(err)
			}
			calls := stub.Calls()
			if len(calls) < 2 {
				t.Fatalf("calls = %v, want a throttled call and a retry", calls)
			}
			if got, want := calls[1].At-calls[0].At, 7*time.Second; got != want {
				t.Errorf("retry %s after the 429, want %s (Retry-After)", got, want)
			}
			ev := events()
			if len(ev) != 1 || ev[0].Reason != "Throttled" {
				t.Errorf("events = %+v, want one Throttled", ev)
			}
		})
	}
}

// TestHookAnswerCap: an answer larger than 16 MiB is not decoded, at either level (the cap
// Metacontroller's webhook client reads).
func TestHookAnswerCap(t *testing.T) {
	big := func(n int, _ string, w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":{},"children":[],"x":"` + strings.Repeat("a", 17<<20) + `"}`))
	}
	for _, level := range []string{"proxy", "pool"} {
		t.Run(level, func(t *testing.T) {
			stub, srv := newStub(t, big)
			d := &driver.Driver{URL: srv.URL, Clock: stub.clock}
			ps := &driver.Pools{Proxies: d, URL: srv.URL + "/pools"}
			events := d.Events
			if level == "proxy" {
				_ = d.Apply(stubProxy("p"))
			} else {
				_ = ps.ApplyPool(stubPool("web"))
				events = ps.PoolEvents
			}
			if _, err := ps.Step(); err != nil {
				t.Fatal(err)
			}
			ev := events()
			if len(ev) != 1 || ev[0].Reason != "SyncError" || !strings.Contains(ev[0].Message, "16 MiB") {
				t.Errorf("events = %+v, want one SyncError saying the answer passed 16 MiB", ev)
			}
		})
	}
}

// TestHookTimeout: a hook slower than HookTimeout fails the sync at either level, and the
// parent is retried with backoff.
func TestHookTimeout(t *testing.T) {
	release := make(chan struct{})
	slow := func(n int, _ string, w http.ResponseWriter) {
		if n == 0 {
			<-release
		}
		ok(w)
	}
	for _, level := range []string{"proxy", "pool"} {
		t.Run(level, func(t *testing.T) {
			stub, srv := newStub(t, slow)
			defer func() { release <- struct{}{} }()
			d := &driver.Driver{URL: srv.URL, Clock: stub.clock, HookTimeout: 50 * time.Millisecond}
			ps := &driver.Pools{Proxies: d, URL: srv.URL + "/pools"}
			events := d.Events
			if level == "proxy" {
				_ = d.Apply(stubProxy("p"))
			} else {
				_ = ps.ApplyPool(stubPool("web"))
				events = ps.PoolEvents
			}
			start := time.Now()
			if _, err := ps.Step(); err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took > 10*time.Second {
				t.Errorf("the call took %s, want about the 50ms hook timeout", took)
			}
			ev := events()
			if len(ev) != 1 || ev[0].Reason != "SyncError" {
				t.Errorf("events = %+v, want one SyncError", ev)
			}
		})
	}
}

// TestBackoffDoubles: failed syncs are retried 5 ms after the first failure, doubling, at
// either level (client-go's per-item rate limiter).
func TestBackoffDoubles(t *testing.T) {
	failing := func(n int, _ string, w http.ResponseWriter) {
		if n < 4 {
			http.Error(w, "broken", http.StatusInternalServerError)
			return
		}
		ok(w)
	}
	for _, level := range []string{"proxy", "pool"} {
		t.Run(level, func(t *testing.T) {
			stub, srv := newStub(t, failing)
			d := &driver.Driver{URL: srv.URL, Clock: stub.clock}
			ps := &driver.Pools{Proxies: d, URL: srv.URL + "/pools"}
			if level == "proxy" {
				_ = d.Apply(stubProxy("p"))
			} else {
				_ = ps.ApplyPool(stubPool("web"))
			}
			if err := ps.RunFor(time.Second); err != nil {
				t.Fatal(err)
			}
			var got []time.Duration
			for _, c := range stub.Calls()[:5] {
				got = append(got, c.At)
			}
			ms := time.Millisecond
			want := []time.Duration{0, 5 * ms, 15 * ms, 35 * ms, 75 * ms}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("call times mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
