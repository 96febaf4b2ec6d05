package health

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
)

func TestVerdictThresholds(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ok := func(ms int) Result {
		return Result{OK: true, Latency: time.Duration(ms) * time.Millisecond, Status: 204}
	}
	fail := func(kind string) Result { return Result{Kind: kind} }
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * 10 * time.Second) }

	tests := []struct {
		name           string
		recorded       verdict.Health
		fail, succeed  int32
		results        []Result
		want           verdict.Health
		wantTransition []int // indexes of results that changed the state
	}{
		{
			name: "new proxy starts unknown", fail: 3, succeed: 1,
			want: verdict.Health{State: verdict.Unknown},
		},
		{
			name: "one success makes a new proxy healthy at threshold 1", fail: 3, succeed: 1,
			results:        []Result{ok(40)},
			want:           verdict.Health{State: verdict.Healthy, LatencyMillis: 40, Since: at(0)},
			wantTransition: []int{0},
		},
		{
			name: "a new proxy needs the failure threshold to go unhealthy", fail: 3, succeed: 1,
			results:        []Result{fail(KindTimeout), fail(KindTimeout), fail(KindRefused)},
			want:           verdict.Health{State: verdict.Unhealthy, Since: at(2), Reason: KindRefused},
			wantTransition: []int{2},
		},
		{
			name: "failures below the threshold keep a healthy proxy healthy", fail: 3, succeed: 1,
			results:        []Result{ok(10), fail(KindTimeout), fail(KindTimeout), ok(10), fail(KindTimeout), fail(KindTimeout)},
			want:           verdict.Health{State: verdict.Healthy, LatencyMillis: 10, Since: at(0)},
			wantTransition: []int{0},
		},
		{
			name: "the reason is the transition's and stays", fail: 2, succeed: 1,
			results:        []Result{ok(10), fail(KindTimeout), fail(KindRefused), fail("status_503")},
			want:           verdict.Health{State: verdict.Unhealthy, LatencyMillis: 10, Since: at(2), Reason: KindRefused},
			wantTransition: []int{0, 2},
		},
		{
			name: "success threshold counts consecutive successes", fail: 1, succeed: 3,
			results:        []Result{fail(KindReset), ok(10), ok(10), fail(KindReset), ok(10), ok(10), ok(10)},
			want:           verdict.Health{State: verdict.Healthy, LatencyMillis: 10, Since: at(6)},
			wantTransition: []int{0, 6},
		},
		{
			name: "latency is an EWMA of successes, weight 0.3", fail: 3, succeed: 1,
			results:        []Result{ok(100), ok(200), fail(KindTimeout), ok(100)},
			want:           verdict.Health{State: verdict.Healthy, LatencyMillis: 121, Since: at(0)}, // 100 -> 130 -> 121
			wantTransition: []int{0},
		},
		{
			name: "restart from recorded healthy: no transition on the next success", fail: 3, succeed: 2,
			recorded:       verdict.Health{State: verdict.Healthy, LatencyMillis: 50, Since: t0.Add(-time.Hour)},
			results:        []Result{ok(50)},
			want:           verdict.Health{State: verdict.Healthy, LatencyMillis: 50, Since: t0.Add(-time.Hour)},
			wantTransition: nil,
		},
		{
			name: "restart from recorded unhealthy keeps it until the success threshold", fail: 3, succeed: 2,
			recorded:       verdict.Health{State: verdict.Unhealthy, Since: t0.Add(-time.Hour), Reason: "timeout"},
			results:        []Result{ok(30), fail(KindTimeout), ok(30), ok(30)},
			want:           verdict.Health{State: verdict.Healthy, LatencyMillis: 30, Since: at(3)},
			wantTransition: []int{3},
		},
		{
			name: "recorded unknown is a new proxy", fail: 1, succeed: 1,
			recorded:       verdict.Health{State: verdict.Unknown, Since: t0.Add(-time.Hour)},
			results:        []Result{fail(KindTimeout)},
			want:           verdict.Health{State: verdict.Unhealthy, Since: at(0), Reason: KindTimeout},
			wantTransition: []int{0},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := newVerdict(tc.recorded)
			var transitions []int
			for i, r := range tc.results {
				if v.observe(r, at(i), tc.fail, tc.succeed) {
					transitions = append(transitions, i)
				}
			}
			if diff := cmp.Diff(tc.want, v.health); diff != "" {
				t.Errorf("health mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantTransition, transitions); diff != "" {
				t.Errorf("transitions mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
