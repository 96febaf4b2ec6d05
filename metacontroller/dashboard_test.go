package metacontroller_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// documentedMetrics are the series the operator exports (seed section 9, the hook and GC
// metrics, the prober's lateness) with their labels; histograms also expose le.
var documentedMetrics = map[string]struct {
	labels    []string
	histogram bool
}{
	"proxy_operator_proxies":                            {labels: []string{"phase"}},
	"proxy_operator_healthcheck_duration_seconds":       {labels: []string{"proxy"}, histogram: true},
	"proxy_operator_healthcheck_failures_total":         {labels: []string{"proxy"}},
	"proxy_operator_healthcheck_lateness_seconds":       {histogram: true},
	"proxy_operator_leases_active":                      {},
	"proxy_operator_lease_requests_total":               {labels: []string{"outcome"}},
	"proxy_operator_provider_requests_total":            {labels: []string{"provider", "op", "result"}},
	"proxy_operator_hook_duration_seconds":              {labels: []string{"hook"}, histogram: true},
	"proxy_operator_gc_deletions_total":                 {labels: []string{"provider"}},
	"proxy_operator_pool_members":                       {labels: []string{"pool", "state"}},
	"proxy_operator_pool_desired_members":               {labels: []string{"pool"}},
	"proxy_operator_pool_lease_utilization_ratio":       {labels: []string{"pool"}},
	"proxy_operator_pool_rotations_total":               {labels: []string{"pool", "reason"}},
	"proxy_operator_pool_scale_events_total":            {labels: []string{"pool", "direction"}},
	"proxy_operator_discovery_requests_total":           {labels: []string{"route", "method", "code"}},
	"proxy_operator_discovery_request_duration_seconds": {labels: []string{"route", "method"}, histogram: true},
	"proxy_operator_lease_refused_total":                {labels: []string{"reason"}},
	"proxy_operator_lease_reports_total":                {labels: []string{"result", "source"}},
	"proxy_operator_lease_cooldowns":                    {},
	"proxy_operator_gateway_requests_total":             {labels: []string{"kind", "outcome"}},
	"proxy_operator_gateway_bans_total":                 {labels: []string{"rule", "result"}},
}

type dashboardPanel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	GridPos struct{ H, W, X, Y int } `json:"gridPos"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []dashboardPanel `json:"panels"`
}

var (
	metricRE  = regexp.MustCompile(`\bproxy_operator_[a-z0-9_]+`)
	byRE      = regexp.MustCompile(`\bby\s*\(([^)]*)\)`)
	matcherRE = regexp.MustCompile(`\{([^}]*)\}`)
	labelRE   = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)`)
)

// metricName maps a series name to its documented metric (histogram suffixes stripped).
func metricName(series string) (string, bool) {
	if _, ok := documentedMetrics[series]; ok {
		return series, true
	}
	for _, suffix := range []string{"_bucket", "_count", "_sum"} {
		if base, ok := strings.CutSuffix(series, suffix); ok {
			if m, ok := documentedMetrics[base]; ok && m.histogram {
				return base, true
			}
		}
	}
	return "", false
}

func balanced(expr string) bool {
	var stack []rune
	pairs := map[rune]rune{')': '(', ']': '[', '}': '{'}
	inString := false
	for _, r := range expr {
		switch {
		case r == '"':
			inString = !inString
		case inString:
		case r == '(' || r == '[' || r == '{':
			stack = append(stack, r)
		case pairs[r] != 0:
			if len(stack) == 0 || stack[len(stack)-1] != pairs[r] {
				return false
			}
			stack = stack[:len(stack)-1]
		}
	}
	return len(stack) == 0 && !inString
}

// TestGrafanaDashboard checks docs/grafana-dashboard.json parses, queries only documented metrics
// with their real labels, and covers every one of them.
func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile("../docs/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title      string           `json:"title"`
		UID        string           `json:"uid"`
		Panels     []dashboardPanel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query string `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	if dash.Title == "" || dash.UID == "" {
		t.Errorf("dashboard lacks title or uid")
	}
	hasDS := false
	for _, v := range dash.Templating.List {
		hasDS = hasDS || (v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus")
	}
	if !hasDS {
		t.Errorf("no prometheus datasource variable named datasource")
	}

	var all []dashboardPanel
	for _, p := range dash.Panels {
		all = append(all, p)
		all = append(all, p.Panels...)
	}
	used := map[string]bool{}
	ids := map[int]string{}
	for _, p := range all {
		if prev, dup := ids[p.ID]; dup {
			t.Errorf("panel id %d used by %q and %q", p.ID, prev, p.Title)
		}
		ids[p.ID] = p.Title
		if p.GridPos.X < 0 || p.GridPos.W <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q does not use the datasource variable", p.Title)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if refs[tg.RefID] {
				t.Errorf("panel %q: refId %q twice", p.Title, tg.RefID)
			}
			refs[tg.RefID] = true
			if !balanced(tg.Expr) {
				t.Errorf("panel %q: unbalanced brackets in %q", p.Title, tg.Expr)
			}
			// Labels this query may name: those of the metrics it reads, plus le.
			allowed := map[string]bool{"le": true}
			series := metricRE.FindAllString(tg.Expr, -1)
			if len(series) == 0 {
				t.Errorf("panel %q: query %q reads no proxy_operator metric", p.Title, tg.Expr)
			}
			for _, s := range series {
				name, ok := metricName(s)
				if !ok {
					t.Errorf("panel %q: %s is not a metric the operator exports", p.Title, s)
					continue
				}
				used[name] = true
				for _, l := range documentedMetrics[name].labels {
					allowed[l] = true
				}
			}
			var named []string
			for _, m := range byRE.FindAllStringSubmatch(tg.Expr, -1) {
				for _, l := range strings.Split(m[1], ",") {
					named = append(named, strings.TrimSpace(l))
				}
			}
			for _, m := range matcherRE.FindAllStringSubmatch(tg.Expr, -1) {
				for _, l := range labelRE.FindAllStringSubmatch(m[1], -1) {
					named = append(named, l[1])
				}
			}
			for _, l := range named {
				if !allowed[l] {
					t.Errorf("panel %q: label %q is not a label of the metrics in %q", p.Title, l, tg.Expr)
				}
			}
		}
	}
	var want, got []string
	for name := range documentedMetrics {
		want = append(want, name)
		if used[name] {
			got = append(got, name)
		}
	}
	slices.Sort(want)
	slices.Sort(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("metrics shown on the dashboard (-want +got):\n%s", diff)
	}
}
