package sim_test

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/health/mark"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
)

type readyResult struct {
	half, all       time.Duration
	writesPerProxy  float64
	maxWrites       int
	calls, patches  int
	writesHistogram map[int]int
	// counts is every API call by kind (driver.Budget.Counts), per proxy.
	counts map[string]float64
}

// runReady applies n Managed mock proxies at once and runs until all are Ready. The prober is
// modelled as the health scheduler behaves: a proxy's first probe comes a jittered offset
// within one interval (30 s) after the fleet view first has its IP, and one success makes
// it Healthy.
// readyOpts are the parts of a bring-up that are not Metacontroller's settings.
type readyOpts struct {
	// applyOver spreads the applies evenly over this long (0: all at once), as kubectl
	// creating thousands of objects one after another does.
	applyOver time.Duration
	// legacyMark marks first verdicts too (the health mark before decision 0172).
	legacyMark bool
}

func runReady(t *testing.T, n int, ms metaSettings, markerQPS float64, ro readyOpts) readyResult {
	t.Helper()
	e := newSimEnv(t, ms, markerQPS, verdict.Unknown, ro.legacyMark)
	var mu sync.Mutex
	var events []event
	probed := map[string]bool{}
	e.afterSync = func(key string) {
		p, ok := e.view.Get(key)
		mu.Lock()
		defer mu.Unlock()
		if !ok || p.IP == "" || probed[key] {
			return
		}
		probed[key] = true
		offset := time.Duration(keyHash(key) % uint64(30*time.Second))
		pushEvent(&events, event{at: e.clock.Now().Add(offset), do: func() {
			e.health.set(key, verdict.Healthy, e.clock.Now())
			if e.marker != nil {
				e.marker.Notify(key)
			}
		}})
	}
	readyAt := map[string]time.Time{}
	writes := map[string]int{}
	e.d.OnStatusWrite = func(key string, at time.Time, st v1.ProxyStatus) {
		if _, done := readyAt[key]; done {
			return
		}
		writes[key]++
		if st.Phase == v1.PhaseReady {
			readyAt[key] = at
		}
	}
	for i := range n {
		p := managed(fmt.Sprintf("edge-%05d", i), zones[i%len(zones)])
		apply := func() {
			if err := e.d.Apply(p); err != nil {
				t.Fatal(err)
			}
		}
		if ro.applyOver <= 0 {
			apply()
			continue
		}
		mu.Lock()
		pushEvent(&events, event{at: start.Add(ro.applyOver * time.Duration(i) / time.Duration(n)), do: apply})
		mu.Unlock()
	}
	e.run(t, &events, start.Add(48*time.Hour), func() bool { return len(readyAt) >= n })
	if len(readyAt) < n {
		t.Fatalf("%d of %d Ready after two virtual days", len(readyAt), n)
	}
	var times []time.Duration
	r := readyResult{writesHistogram: map[int]int{}}
	total := 0
	for k, at := range readyAt {
		times = append(times, at.Sub(start))
		total += writes[k]
		r.maxWrites = max(r.maxWrites, writes[k])
		r.writesHistogram[writes[k]]++
	}
	slices.Sort(times)
	r.half, r.all = times[n/2-1], times[n-1]
	r.writesPerProxy = float64(total) / float64(n)
	r.calls, r.patches = e.d.Budget.Calls(), e.d.MetadataWrites()
	r.counts = map[string]float64{}
	for k, v := range e.d.Budget.Counts() {
		r.counts[k] = float64(v) / float64(n)
	}
	return r
}

// TestTimeToReady: apply-to-all-Ready of a fleet of Managed proxies under Metacontroller's
// default budget and under the recommended one. It asserts the status writes per proxy on
// the way (the number the budget is spent on) and that the recommended settings are faster;
// the times are figures to report, not assertions.
func TestTimeToReady(t *testing.T) {
	sizes := []int{100}
	if os.Getenv("SCALE_PROXIES") != "" {
		sizes = scaleSizes(t)
	}
	for _, n := range sizes {
		var times [2]time.Duration
		for i, ms := range []metaSettings{defaults(), fromEnv(recommended(n))} {
			t.Run(strconv.Itoa(n)+"/"+[]string{"defaults", "recommended"}[i], func(t *testing.T) {
				r := runReady(t, n, ms, mark.DefaultQPS, readyOpts{})
				times[i] = r.all
				t.Logf("%d Managed proxies applied at once (%s): half Ready after %s, all after %s; %.2f status writes per proxy to Ready (histogram %v); %d Metacontroller API calls, %d annotation patches; calls per proxy %v",
					n, ms, r.half.Round(time.Second), r.all.Round(time.Second), r.writesPerProxy, r.writesHistogram, r.calls, r.patches, r.counts)
				if r.maxWrites > maxWritesToReady {
					t.Errorf("a proxy took %d status writes to Ready, want at most %d", r.maxWrites, maxWritesToReady)
				}
			})
		}
		if times[0] > 0 && times[1] > 0 && times[1] >= times[0] { // both ran (not filtered by -run)
			t.Errorf("recommended settings took %s to all Ready, defaults %s: want faster", times[1], times[0])
		}
	}
}

// maxWritesToReady is the most status writes a Managed proxy makes from apply to Ready:
// Pending while its credentials Secret is stored (no machine is created before), Provisioning
// (create started), then Ready with its IP once the first probe succeeded (a running instance
// awaiting its first verdict writes nothing: lifecycle.Decision.ProbeIP).
const maxWritesToReady = 3
