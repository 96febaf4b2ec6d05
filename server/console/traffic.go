package console

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Defaults of a Traffic's zero fields: a point every 10 s, 15 minutes of them.
const (
	DefaultTrafficEvery  = 10 * time.Second
	DefaultTrafficPoints = 90
	// maxSeries bounds the series kept (the pools of the bytes counter beyond it are left out).
	maxSeries = 32
)

// Traffic keeps the recent history of counters the process already has (decision 0297): on
// every tick it gathers the registry and keeps, per series, how much each counter grew since
// the last tick, in a ring of Points values. It adds no counter of its own.
type Traffic struct {
	Gatherer prometheus.Gatherer
	Every    time.Duration
	Points   int

	mu     sync.Mutex
	series map[string]*ring
	last   map[string]float64
	primed bool
}

type ring struct {
	title, unit string
	vals        []float64 // oldest first, at most Points
}

// series are the counters drawn: the metric, the label that splits it into series (""
// none), the label values it keeps (nil: all), and the chart's title and unit.
var trafficSources = []struct {
	metric, split string
	keep          map[string]string
	title, unit   string
}{
	{"proxy_operator_lease_requests_total", "", map[string]string{"outcome": "granted"}, "Leases granted", "per interval"},
	{"proxy_operator_lease_requests_total", "", map[string]string{"outcome": "no_match"}, "Leases refused (409)", "per interval"},
	{"proxy_operator_gateway_requests_total", "", nil, "Gateway requests and tunnels", "per interval"},
	{"proxy_operator_lease_reports_total", "", map[string]string{"result": "rate_limited"}, "Reports: rate limited", "per interval"},
	{"proxy_operator_lease_reports_total", "", map[string]string{"result": "banned"}, "Reports: banned", "per interval"},
	{"proxy_operator_gateway_bytes_total", "pool", nil, "Gateway bytes, pool", "bytes per interval"},
}

func (t *Traffic) every() time.Duration {
	if t.Every <= 0 {
		return DefaultTrafficEvery
	}
	return t.Every
}

func (t *Traffic) points() int {
	if t.Points <= 0 {
		return DefaultTrafficPoints
	}
	return t.Points
}

// Run samples every Every until ctx ends.
func (t *Traffic) Run(ctx context.Context) error {
	tick := time.NewTicker(t.every())
	defer tick.Stop()
	t.Sample()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			t.Sample()
		}
	}
}

// Sample takes one point of every series now. The first call only primes the counters.
func (t *Traffic) Sample() {
	fams, err := t.Gatherer.Gather()
	if err != nil && len(fams) == 0 {
		return
	}
	now := map[string]float64{}
	titles := map[string][2]string{}
	byName := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		byName[f.GetName()] = f
	}
	for _, src := range trafficSources {
		f := byName[src.metric]
		if f == nil {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range src.keep {
				if labels[k] != v {
					continue metrics
				}
			}
			key, title := src.title, src.title
			if src.split != "" {
				v := labels[src.split]
				if v == "" {
					v = "(none)"
				}
				key, title = src.title+" "+v, src.title+" "+v
			}
			now[key] += m.GetCounter().GetValue()
			titles[key] = [2]string{title, src.unit}
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.series == nil {
		t.series, t.last = map[string]*ring{}, map[string]float64{}
	}
	for key, v := range now {
		d := v - t.last[key]
		if d < 0 { // a counter that restarted
			d = v
		}
		t.last[key] = v
		if !t.primed {
			continue
		}
		r := t.series[key]
		if r == nil {
			if len(t.series) >= maxSeries {
				continue
			}
			r = &ring{title: titles[key][0], unit: titles[key][1]}
			t.series[key] = r
		}
		r.vals = append(r.vals, d)
		if n := t.points(); len(r.vals) > n {
			r.vals = slices.Delete(r.vals, 0, len(r.vals)-n)
		}
	}
	t.primed = true
}

// chart is one small line chart, drawn on the server as SVG.
type chart struct {
	Title, Unit   string
	Points        string // the polyline's points
	Width, Height int
	Max, Last     string
	Total         string
	N             int
}

const chartW, chartH = 320, 64

// charts draws every series, in title order.
func (t *Traffic) charts() []chart {
	t.mu.Lock()
	defer t.mu.Unlock()
	keys := make([]string, 0, len(t.series))
	for k := range t.series {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]chart, 0, len(keys))
	for _, k := range keys {
		out = append(out, draw(t.series[k], t.points()))
	}
	return out
}

// draw lays r's values out on a fixed width of n points, newest at the right edge.
func draw(r *ring, n int) chart {
	c := chart{Title: r.title, Unit: r.unit, Width: chartW, Height: chartH, N: len(r.vals)}
	var top, total float64
	for _, v := range r.vals {
		top = max(top, v)
		total += v
	}
	var b strings.Builder
	step := float64(chartW) / float64(max(n-1, 1))
	off := n - len(r.vals)
	for i, v := range r.vals {
		y := float64(chartH - 2)
		if top > 0 {
			y = 2 + (1-v/top)*float64(chartH-4)
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%.1f,%.1f", float64(off+i)*step, y)
	}
	c.Points = b.String()
	c.Max, c.Total = human(top), human(total)
	if len(r.vals) > 0 {
		c.Last = human(r.vals[len(r.vals)-1])
	}
	return c
}

func human(v float64) string {
	switch {
	case v >= 1e9:
		return strconv.FormatFloat(v/1e9, 'f', 1, 64) + "G"
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', 1, 64) + "M"
	case v >= 1e4:
		return strconv.FormatFloat(v/1e3, 'f', 1, 64) + "k"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}
