package sim_test

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/health"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/metacontroller/driver"
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/mock"
	"github.com/proxy-operator/proxy-operator/server/hooks"
)

// jitterHealth is a steady prober on a busy machine: every proxy Healthy since start, its
// latency a fresh draw between 4 and 40 ms on every read (10x), as loopback probes on a loaded
// 2-core machine report them. Every proxy also has an exit checked, with its country and ASN,
// and a quality band (issue 23): most Good and verified, every seventh Fair with an exit that
// fails verification, every eleventh Poor.
type jitterHealth struct {
	mu    sync.Mutex
	rng   *rand.Rand
	reads int
}

func (j *jitterHealth) Health(key string) verdict.Health {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.reads++
	return verdict.Health{State: verdict.Healthy, Since: start, LatencyMillis: 4 + j.rng.Int64N(37),
		Exit: steadyExit(key), Band: steadyBand(key)}
}

// steadyExit and steadyBand are a proxy's exit and band in the steady fleet: fixed per key.
func steadyExit(key string) verdict.Exit {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	n := h.Sum32()
	e := verdict.Exit{IP: fmt.Sprintf("198.51.%d.%d", n>>8&0xff, n&0xff), Country: "DE", ASN: 64500 + n%7}
	if n%7 == 0 {
		e.Mismatch = "country=FR but exit " + e.IP + " is in DE"
	}
	return e
}

func steadyBand(key string) v1.QualityBand {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	switch n := h.Sum32(); {
	case n%11 == 0:
		return v1.BandPoor
	case n%7 == 0:
		return v1.BandFair
	}
	return v1.BandGood
}

// handlerTransport serves the driver's hook calls in process: the same handler and bodies as
// over a socket, without the socket, so 10,000 proxies resync quickly under -race.
type handlerTransport struct{ h http.Handler }

func (ht handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	ht.h.ServeHTTP(rec, r)
	return rec.Result(), nil
}

// TestSteadyFleetJitteringLatency (issue 26, decision 0170): a steady fleet whose probe
// latencies jitter by 10x costs no status write over a simulated hour of resyncs, at 100 and
// at 10,000 proxies. A tenth of the fleet is Managed (mock provider), the rest External; the
// hour starts once every proxy is Ready and the bring-up's echoes have passed. 100 proxies
// resync as shipped (resyncPeriodSeconds 120, and the hook's own 30 s); at 10,000 the hook
// asks for none within the hour (fleetSize / -health-resync-qps is 4,000 s) and
// Metacontroller's period is 20 minutes here, 3 passes of the fleet instead of 30, to keep
// make test's time modest: each pass is one more sync of every proxy with a fresh latency,
// and a status write would show on the first.
func TestSteadyFleetJitteringLatency(t *testing.T) {
	for _, tc := range []struct {
		n      int
		period time.Duration
	}{{100, 120 * time.Second}, {10000, 20 * time.Minute}} {
		n, period := tc.n, tc.period
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			if n > 100 && (testing.Short() || raceOn && !wantScale(n)) {
				t.Skip("10,000 proxies run without -race (make test-go's second pass) or with SCALE_PROXIES=10000")
			}
			clock := driver.NewClock(start)
			cloud, err := mock.New(mock.Config{}, mock.WithClock(clock.Now))
			if err != nil {
				t.Fatal(err)
			}
			hs := &jitterHealth{rng: rand.New(rand.NewPCG(26, uint64(n)))}
			h := &hooks.Hooks{
				Providers:    providers.NewSet(providers.Entry{Name: "mock", Type: "mock", Provider: cloud}),
				Fleet:        fleet.New(clock.Now, time.Minute),
				Health:       hs,
				Now:          clock.Now,
				HealthResync: health.ResyncPolicy{}.After,
			}
			d := &driver.Driver{URL: "http://hooks.invalid", Clock: clock, ResyncPeriod: period,
				Client: &http.Client{Transport: handlerTransport{h.Handler()}}}
			keys := make([]string, n)
			for i := range n {
				p := external(fmt.Sprintf("ext-%05d", i))
				if i%10 == 0 {
					p = managed(fmt.Sprintf("edge-%05d", i), zones[i%len(zones)])
				}
				keys[i] = p.Key()
				if err := d.Apply(p); err != nil {
					t.Fatal(err)
				}
			}
			// Bring-up, then a minute more so every echo has passed.
			if err := d.RunFor(time.Minute); err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				st, _ := d.Status(k)
				if st.Phase != v1.PhaseReady {
					t.Fatalf("%s is %s after bring-up, want Ready", k, st.Phase)
				}
				// The zero below covers exit and band in status: each is recorded.
				e := steadyExit(k)
				if st.Exit == nil || st.Exit.IP != e.IP || st.Exit.Country != e.Country || st.Exit.ASN != int64(e.ASN) || st.QualityBand != steadyBand(k) {
					t.Fatalf("%s after bring-up: exit %+v band %q, want exit %+v band %q", k, st.Exit, st.QualityBand, e, steadyBand(k))
				}
				wantVerified := metav1.ConditionTrue
				if e.Mismatch != "" {
					wantVerified = metav1.ConditionFalse
				}
				if c := meta.FindStatusCondition(st.Conditions, v1.ConditionExitVerified); c == nil || c.Status != wantVerified {
					t.Fatalf("%s after bring-up: ExitVerified %+v, want %s", k, c, wantVerified)
				}
			}
			if err := d.RunFor(time.Minute); err != nil {
				t.Fatal(err)
			}
			writes, syncs, reads := d.Writes(), d.Syncs(), hs.reads
			if err := d.RunFor(time.Hour); err != nil {
				t.Fatal(err)
			}
			gotWrites, gotSyncs := d.Writes()-writes, d.Syncs()-syncs
			t.Logf("%d proxies, latency 4-40 ms on every read, exit (country, ASN) and band in status: %d syncs and %d status writes in a simulated hour", n, gotSyncs, gotWrites)
			if gotWrites != 0 {
				t.Errorf("%d status writes in a steady hour, want 0", gotWrites)
			}
			// The zero means something only if every proxy was synced, with a fresh latency,
			// all hour long.
			if want := n * int(time.Hour/period); gotSyncs < want || hs.reads-reads < want {
				t.Errorf("%d syncs (%d health reads) in the hour, want at least %d", gotSyncs, hs.reads-reads, want)
			}
		})
	}
}
