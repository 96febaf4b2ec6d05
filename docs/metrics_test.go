package docs_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxy-operator/proxy-operator/server"
)

// recordingRegisterer registers on a real registry and remembers the descriptor of every
// metric registered, labelled or not: a labelled metric with no series yet is absent from a
// Gather, but it is registered and must be documented.
type recordingRegisterer struct {
	*prometheus.Registry
	descs []*prometheus.Desc
}

func (r *recordingRegisterer) Register(c prometheus.Collector) error {
	if err := r.Registry.Register(c); err != nil {
		return err
	}
	ch := make(chan *prometheus.Desc)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	for d := range ch {
		r.descs = append(r.descs, d)
	}
	return nil
}

func (r *recordingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// metricDoc is one row of a table in docs/metrics.md.
type metricDoc struct {
	Type   string
	Labels []string
}

var (
	// | `name` | type | `a`, `b` | meaning |
	metricRow = regexp.MustCompile("^\\| `([a-z_:][a-z0-9_:]*)` \\| ([a-z]+) \\|([^|]*)\\|")
	codeSpan  = regexp.MustCompile("`([^`]+)`")
	// Desc.String(): Desc{fqName: "x", help: "...", constLabels: {...}, variableLabels: {a,b}}
	descName   = regexp.MustCompile(`^Desc\{fqName: "([^"]+)"`)
	descLabels = regexp.MustCompile(`variableLabels: \{([^}]*)\}\}$`)
)

func documentedMetrics(t *testing.T) map[string]metricDoc {
	t.Helper()
	f, err := os.Open("metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]metricDoc{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := metricRow.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		if _, dup := out[m[1]]; dup {
			t.Errorf("docs/metrics.md lists %s twice", m[1])
		}
		labels := []string{}
		for _, l := range codeSpan.FindAllStringSubmatch(m[3], -1) {
			labels = append(labels, l[1])
		}
		slices.Sort(labels)
		out[m[1]] = metricDoc{Type: m[2], Labels: labels}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatal("docs/metrics.md: no metric rows found (| `name` | type | labels | meaning |)")
	}
	return out
}

// TestMetricsDocumented builds the real process, with every part that registers metrics
// switched on (the in-memory lease store, orphan GC, the pool hooks, the gateway), and compares what it
// registered with docs/metrics.md: names and label names; and, for the metrics that already
// have a series, the type /metrics serves.
func TestMetricsDocumented(t *testing.T) {
	t.Setenv("KUBECONFIG", "") // no Kubernetes client: nothing here needs one
	reg := &recordingRegisterer{Registry: prometheus.NewRegistry()}
	gateway := server.Defaults().Gateway
	gateway.Addr = "127.0.0.1:0" // the gateway beside discovery: its metrics join the process's
	op, err := server.New(server.Config{
		Hooks:      server.HooksConfig{Addr: "127.0.0.1:0"},
		Discovery:  server.DiscoveryAPIConfig{Addr: "127.0.0.1:0", Insecure: true},
		GC:         server.GCConfig{Interval: server.Defaults().GC.Interval},
		Gateway:    gateway,
		Registerer: reg,
		Gatherer:   reg.Registry,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- op.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	registered := map[string][]string{}
	for _, d := range reg.descs {
		s := d.String()
		n, l := descName.FindStringSubmatch(s), descLabels.FindStringSubmatch(s)
		if n == nil || l == nil {
			t.Fatalf("cannot read descriptor %s", s)
		}
		labels := []string{}
		for _, x := range strings.Split(l[1], ",") {
			if x = strings.TrimSpace(x); x != "" {
				labels = append(labels, x)
			}
		}
		slices.Sort(labels)
		registered[n[1]] = labels
	}
	if len(registered) < 10 {
		t.Fatalf("only %d metrics recorded: %v", len(registered), registered)
	}

	docs := documentedMetrics(t)
	for name, labels := range registered {
		d, ok := docs[name]
		if !ok {
			t.Errorf("%s (labels %v) is registered but not in docs/metrics.md", name, labels)
			continue
		}
		if diff := cmp.Diff(labels, d.Labels); diff != "" {
			t.Errorf("%s labels mismatch (-registered +docs/metrics.md):\n%s", name, diff)
		}
	}
	for name := range docs {
		if _, ok := registered[name]; !ok {
			t.Errorf("docs/metrics.md lists %s, which the process does not register", name)
		}
	}

	// What /metrics serves: every family with a series says its type there.
	served := scrapeTypes(t, "http://"+op.HookAddr()+"/metrics")
	checked := 0
	for name, typ := range served {
		d, ok := docs[name]
		if !ok {
			continue // reported above
		}
		checked++
		if typ != d.Type {
			t.Errorf("/metrics serves %s as a %s, docs/metrics.md says %s", name, typ, d.Type)
		}
	}
	if checked == 0 {
		t.Errorf("/metrics served none of the documented metrics: %v", served)
	}
}

// scrapeTypes reads the "# TYPE name type" lines of a Prometheus text page, retrying until the
// listener answers (Run starts serving asynchronously).
func scrapeTypes(t *testing.T, url string) map[string]string {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second}
	deadline := time.Now().Add(30 * time.Second)
	var res *http.Response
	for {
		var err error
		if res, err = client.Get(url); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v", url, err)
		}
		time.Sleep(20 * time.Millisecond) // polling for readiness, not a timed assertion
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, res.Status)
	}
	out := map[string]string{}
	sc := bufio.NewScanner(io.LimitReader(res.Body, 16<<20))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			out[f[2]] = f[3]
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
