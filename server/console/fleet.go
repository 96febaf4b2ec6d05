package console

import (
	"cmp"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/server/discovery"
	"github.com/proxy-operator/proxy-operator/server/discovery/access"
	"github.com/proxy-operator/proxy-operator/server/httpx"
)

// Bounds of the Fleet page.
const (
	DefaultPageSize = 50
	MaxPageSize     = 500
	maxQueryLen     = 256
)

// proxyRow is one Proxy on the Fleet page.
type proxyRow struct {
	Key, Namespace, Name, Pool string
	Phase, State, Band         string
	ExitIP, Country, ASN       string
	Healthy, Draining          bool
	Active, Max                int
	Latency                    int64
	Attrs                      string // k=v, sorted: filled for the rows of the page only
	attrs                      map[string]string
}

// fleetColumns are the sortable columns, in the table's order.
var fleetColumns = []struct{ key, label string }{
	{"name", "Proxy"}, {"namespace", "Namespace"}, {"phase", "Phase"}, {"health", "Health"},
	{"band", "Band"}, {"exit", "Exit IP"}, {"country", "Country"}, {"asn", "ASN"},
	{"leases", "Leases"}, {"latency", "Latency ms"}, {"draining", "Draining"},
}

func (a proxyRow) compare(b proxyRow, col string) int {
	switch col {
	case "namespace":
		return cmp.Compare(a.Namespace, b.Namespace)
	case "phase":
		return cmp.Compare(a.Phase, b.Phase)
	case "health":
		return cmp.Compare(a.State, b.State)
	case "band":
		return cmp.Compare(v1.BandRank(v1.QualityBand(a.Band)), v1.BandRank(v1.QualityBand(b.Band)))
	case "exit":
		return cmp.Compare(a.ExitIP, b.ExitIP)
	case "country":
		return cmp.Compare(a.Country, b.Country)
	case "asn":
		an, _ := strconv.Atoi(a.ASN)
		bn, _ := strconv.Atoi(b.ASN)
		return cmp.Compare(an, bn)
	case "leases":
		return cmp.Compare(a.Active, b.Active)
	case "latency":
		return cmp.Compare(a.Latency, b.Latency)
	case "draining":
		return cmp.Compare(boolInt(a.Draining), boolInt(b.Draining))
	}
	return 0
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// fleetQuery is the Fleet page's query string: filters, sort and page.
type fleetQuery struct {
	Namespace, Pool, Health, Text string
	Sort, Dir                     string
	Page, Per                     int
}

func parseFleetQuery(q url.Values) (fleetQuery, error) {
	f := fleetQuery{Namespace: q.Get("ns"), Pool: q.Get("pool"), Health: q.Get("health"), Text: q.Get("q"),
		Sort: q.Get("sort"), Dir: q.Get("dir"), Page: 1, Per: DefaultPageSize}
	for _, v := range []string{f.Namespace, f.Pool, f.Text} {
		if len(v) > maxQueryLen {
			return f, httpx.Errorf(http.StatusBadRequest, "a filter longer than %d characters", maxQueryLen)
		}
	}
	switch f.Health {
	case "", "healthy", "unhealthy", "draining":
	default:
		return f, httpx.Errorf(http.StatusBadRequest, "health %.20q: want healthy, unhealthy or draining", f.Health)
	}
	if f.Sort == "" {
		f.Sort = "name"
	}
	if !slices.ContainsFunc(fleetColumns, func(c struct{ key, label string }) bool { return c.key == f.Sort }) {
		return f, httpx.Errorf(http.StatusBadRequest, "sort %.20q: not a column", f.Sort)
	}
	if f.Dir != "desc" {
		f.Dir = "asc"
	}
	for _, p := range []struct {
		name string
		dst  *int
		max  int
	}{{"page", &f.Page, 1 << 20}, {"per", &f.Per, MaxPageSize}} {
		if v := q.Get(p.name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > p.max {
				return f, httpx.Errorf(http.StatusBadRequest, "%s %.20q: want 1..%d", p.name, v, p.max)
			}
			*p.dst = n
		}
	}
	return f, nil
}

// values is f as a query string, with changes applied.
func (f fleetQuery) url(change func(*fleetQuery)) string {
	g := f
	if change != nil {
		change(&g)
	}
	v := url.Values{}
	for k, s := range map[string]string{"ns": g.Namespace, "pool": g.Pool, "health": g.Health, "q": g.Text} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if g.Sort != "name" {
		v.Set("sort", g.Sort)
	}
	if g.Dir == "desc" {
		v.Set("dir", "desc")
	}
	if g.Page > 1 {
		v.Set("page", strconv.Itoa(g.Page))
	}
	if g.Per != DefaultPageSize {
		v.Set("per", strconv.Itoa(g.Per))
	}
	if len(v) == 0 {
		return "/ui/fleet"
	}
	return "/ui/fleet?" + v.Encode()
}

// rowOf is the Fleet page's view of p: discovery's answer for a crawler (phase, healthy,
// draining, leases, latency) and the prober's exit and band.
func rowOf(p fleet.Proxy, h discovery.HealthSource, active map[string]int) proxyRow {
	v := h.Health(p.Key)
	px := discovery.ProxyOf(p, v, active[p.Key])
	ns, name, _ := strings.Cut(p.Key, "/")
	r := proxyRow{Key: p.Key, Namespace: ns, Name: name, Pool: p.Attributes[v1.PoolAttribute], Phase: px.Phase,
		State: string(v.State), Band: string(v.Band), ExitIP: v.Exit.IP, Country: v.Exit.Country,
		Healthy: px.Healthy, Draining: px.Draining, Active: px.ActiveLeases, Max: px.MaxLeases, Latency: px.LatencyMillis}
	if v.Exit.ASN != 0 {
		r.ASN = strconv.FormatUint(uint64(v.Exit.ASN), 10)
	}
	r.attrs = p.Attributes
	return r
}

// attrsText is attrs as k=v pairs in key order.
func attrsText(attrs map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(attrs)) {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(k + "=" + attrs[k])
	}
	return b.String()
}

func (f fleetQuery) keeps(r proxyRow) bool {
	switch {
	case f.Namespace != "" && r.Namespace != f.Namespace,
		f.Pool != "" && r.Pool != f.Pool,
		f.Health == "healthy" && !r.Healthy,
		f.Health == "unhealthy" && r.Healthy,
		f.Health == "draining" && !r.Draining:
		return false
	case f.Text == "":
		return true
	}
	t := strings.ToLower(f.Text)
	for _, s := range []string{r.Key, r.ExitIP, r.Country, r.ASN} {
		if strings.Contains(strings.ToLower(s), t) {
			return true
		}
	}
	for k, v := range r.attrs {
		if strings.Contains(strings.ToLower(k+"="+v), t) {
			return true
		}
	}
	return false
}

type column struct {
	Label, URL string
	Sorted     string // "", "asc" or "desc"
}

type fleetView struct {
	page
	Query      fleetQuery
	Rows       []proxyRow
	Columns    []column
	Total      int // matching the filters
	Seen       int // the caller may read
	Namespaces []string
	From, To   int
	Prev, Next string
	Complete   bool
	Past       bool // the page asked for is past Last
	Last       int
}

// fleetRows is the page of rows q asks for among the Proxies caller may read, with the
// count of those that match and of those readable, and the namespaces readable.
func (c *Console) fleetRows(caller *access.Caller, active map[string]int, q fleetQuery) (rows []proxyRow, total, seen int, nss []string) {
	d := c.Discovery
	list := d.Fleet.List()
	all := make([]proxyRow, 0, len(list))
	nsSet := map[string]bool{}
	for _, p := range list {
		ns, _, _ := strings.Cut(p.Key, "/")
		if !caller.MayRead(ns) {
			continue
		}
		seen++
		nsSet[ns] = true
		r := rowOf(p, d.Health, active)
		if q.keeps(r) {
			all = append(all, r)
		}
	}
	slices.SortFunc(all, func(a, b proxyRow) int {
		c := a.compare(b, q.Sort)
		if c == 0 {
			c = cmp.Compare(a.Key, b.Key)
		}
		if q.Dir == "desc" {
			c = -c
		}
		return c
	})
	from := min((q.Page-1)*q.Per, len(all))
	to := min(from+q.Per, len(all))
	rows = all[from:to]
	for i := range rows {
		rows[i].Attrs = attrsText(rows[i].attrs)
	}
	return rows, len(all), seen, slices.Sorted(maps.Keys(nsSet))
}

func (c *Console) fleetPage(w http.ResponseWriter, r *http.Request) error {
	q, err := parseFleetQuery(r.URL.Query())
	if err != nil {
		return err
	}
	if err := c.Discovery.FleetErr(); err != nil {
		return err
	}
	active, err := c.Discovery.Leases.Active(r.Context())
	if err != nil {
		return err
	}
	caller := access.FromContext(r.Context())
	rows, total, seen, nss := c.fleetRows(caller, active, q)
	v := fleetView{page: c.pageOf(r, "fleet"), Query: q, Rows: rows, Total: total, Seen: seen, Namespaces: nss,
		Complete: c.Discovery.Fleet.Complete()}
	if len(rows) > 0 {
		v.From, v.To = (q.Page-1)*q.Per+1, (q.Page-1)*q.Per+len(rows)
	}
	if last := max(1, (total+q.Per-1)/q.Per); q.Page > last {
		// A link kept from a larger fleet, or a page number typed: say so, and link the last.
		v.Past, v.Last = true, last
		v.Prev = q.url(func(g *fleetQuery) { g.Page = last })
	} else if q.Page > 1 {
		v.Prev = q.url(func(g *fleetQuery) { g.Page-- })
	}
	if v.To < total {
		v.Next = q.url(func(g *fleetQuery) { g.Page++ })
	}
	for _, col := range fleetColumns {
		cl := column{Label: col.label}
		dir := "asc"
		if q.Sort == col.key {
			cl.Sorted = q.Dir
			if q.Dir == "asc" {
				dir = "desc"
			}
		}
		cl.URL = q.url(func(g *fleetQuery) { g.Sort, g.Dir, g.Page = col.key, dir, 1 })
		v.Columns = append(v.Columns, cl)
	}
	return c.render(w, r, "fleet", http.StatusOK, v)
}

// URLSelf is the page's own address, where an action returns to.
func (f fleetQuery) URLSelf() string { return f.url(nil) }
