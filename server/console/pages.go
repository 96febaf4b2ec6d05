package console

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/client"
	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/server/discovery"
	"github.com/proxy-operator/proxy-operator/server/discovery/access"
	"github.com/proxy-operator/proxy-operator/server/httpx"
)

// poolRow is one pool: what its hook answered last (when this process runs the pool hooks)
// and what the fleet view shows of its members.
type poolRow struct {
	Key, Namespace, Name                   string
	Desired, Ready, StatusHealthy, Updated int32
	Progress, LastScale                    string
	LastScaleAt, At                        time.Time
	Answered                               bool
	Members, Healthy, Draining             int
	Active, Capacity                       int
}

type poolsView struct {
	page
	Pools []poolRow
	Hooks bool
}

func (c *Console) poolsPage(w http.ResponseWriter, r *http.Request) error {
	caller := access.FromContext(r.Context())
	active, err := c.Discovery.Leases.Active(r.Context())
	if err != nil {
		return err
	}
	rows := map[string]*poolRow{}
	row := func(key string) *poolRow {
		if rows[key] == nil {
			ns, name, _ := strings.Cut(key, "/")
			rows[key] = &poolRow{Key: key, Namespace: ns, Name: name}
		}
		return rows[key]
	}
	for _, p := range c.Discovery.Fleet.List() {
		ns, _, _ := strings.Cut(p.Key, "/")
		name := p.Attributes[v1.PoolAttribute]
		if name == "" || !caller.MayRead(ns) {
			continue
		}
		pr := rowOf(p, c.Discovery.Health, active)
		x := row(ns + "/" + name)
		x.Members++
		x.Active += pr.Active
		x.Capacity += pr.Max
		if pr.Healthy {
			x.Healthy++
		}
		if pr.Draining {
			x.Draining++
		}
	}
	if c.Pools != nil {
		for _, s := range c.Pools.List() {
			ns, _, _ := strings.Cut(s.Key, "/")
			if !caller.MayRead(ns) {
				continue
			}
			x := row(s.Key)
			st := s.Status
			x.Answered, x.At = true, s.At
			x.Desired, x.Ready, x.StatusHealthy, x.Updated = st.DesiredReplicas, st.ReadyReplicas, st.HealthyReplicas, st.UpdatedReplicas
			x.LastScale, x.LastScaleAt = s.LastScale, s.LastScaleAt
			for _, cond := range st.Conditions {
				if cond.Type == "Progressing" {
					x.Progress = cond.Reason
					if cond.Message != "" {
						x.Progress += ": " + cond.Message
					}
				}
			}
		}
	}
	v := poolsView{page: c.pageOf(r, "pools"), Hooks: c.Pools != nil}
	for _, k := range slices.Sorted(maps.Keys(rows)) {
		v.Pools = append(v.Pools, *rows[k])
	}
	return c.render(w, r, "pools", http.StatusOK, v)
}

type sitesView struct {
	page
	Sites    client.SiteList
	Limit    int
	CanClear bool
}

func (c *Console) sitesPage(w http.ResponseWriter, r *http.Request) error {
	limit := discovery.DefaultSitesLimit
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > discovery.MaxSitesLimit {
			return httpx.Errorf(http.StatusBadRequest, "limit %.20q: want 1..%d", s, discovery.MaxSitesLimit)
		}
		limit = n
	}
	sites, err := c.Discovery.SiteList(r.Context(), access.FromContext(r.Context()), limit)
	if err != nil {
		return err
	}
	_, canClear := c.Leases.(lease.CooldownClearer)
	return c.render(w, r, "sites", http.StatusOK, sitesView{page: c.pageOf(r, "sites"), Sites: sites, Limit: limit, CanClear: canClear})
}

// holdingRow is one lease on the Leases page. Handle stands for the lease ID, which is a
// capability and never rendered.
type holdingRow struct {
	Handle, Proxy, Namespace, Holder, Target, Session string
	ExpiresAt                                         time.Time
}

// handleOf is the digest that names a lease on the page: enough to pick it among the live
// ones, useless as the lease ID.
func handleOf(id string) string {
	h := sha256.Sum256([]byte("console-lease\x00" + id))
	return hex.EncodeToString(h[:12])
}

type holderCount struct {
	Holder, Namespace string
	Leases            int
}

type leasesView struct {
	page
	Listed     bool // the store lists its leases
	Leases     []holdingRow
	ByHolder   []holderCount
	Total      int
	Namespace  string
	Namespaces []string
}

// holdings is the live leases the caller may read (nil, false: the store cannot list them).
func (c *Console) holdings(r *http.Request) ([]lease.Holding, int, bool, error) {
	hl, ok := c.Leases.(lease.HoldingsLister)
	if !ok {
		return nil, 0, false, nil
	}
	caller := access.FromContext(r.Context())
	if caller == nil {
		return nil, 0, true, nil
	}
	hs, total, err := hl.Holdings(r.Context(), caller.LeaseNamespaces(), lease.MaxHoldingsList)
	return hs, total, true, err
}

func (c *Console) leasesPage(w http.ResponseWriter, r *http.Request) error {
	hs, total, listed, err := c.holdings(r)
	if err != nil {
		return err
	}
	ns := r.URL.Query().Get("ns")
	if len(ns) > maxQueryLen {
		return httpx.Errorf(http.StatusBadRequest, "a filter longer than %d characters", maxQueryLen)
	}
	v := leasesView{page: c.pageOf(r, "leases"), Listed: listed, Total: total, Namespace: ns}
	counts := map[holderCount]int{}
	nsSet := map[string]bool{}
	for _, h := range hs {
		hns, _, _ := strings.Cut(h.Proxy, "/")
		nsSet[hns] = true
		if ns != "" && hns != ns {
			continue
		}
		holder := h.Holder
		if holder == "" {
			holder = "(the only token)"
		}
		counts[holderCount{Holder: holder, Namespace: hns}]++
		v.Leases = append(v.Leases, holdingRow{Handle: handleOf(h.ID), Proxy: h.Proxy, Namespace: hns, Holder: holder,
			Target: h.Target, Session: h.Session, ExpiresAt: h.ExpiresAt})
	}
	for k, n := range counts {
		k.Leases = n
		v.ByHolder = append(v.ByHolder, k)
	}
	slices.SortFunc(v.ByHolder, func(a, b holderCount) int {
		return cmp.Or(cmp.Compare(b.Leases, a.Leases), cmp.Compare(a.Holder, b.Holder), cmp.Compare(a.Namespace, b.Namespace))
	})
	v.Namespaces = slices.Sorted(maps.Keys(nsSet))
	return c.render(w, r, "leases", http.StatusOK, v)
}

type trafficView struct {
	page
	Charts  []chart
	Every   time.Duration
	Sampled bool
	// Scoped is set for a token of some namespaces only: the counters are the whole
	// process's, so it sees none of them.
	Scoped bool
}

func (c *Console) trafficPage(w http.ResponseWriter, r *http.Request) error {
	v := trafficView{page: c.pageOf(r, "traffic"), Sampled: c.Traffic != nil}
	if caller := access.FromContext(r.Context()); caller.LeaseNamespaces() != nil {
		v.Scoped = true
	} else if c.Traffic != nil {
		v.Charts, v.Every = c.Traffic.charts(), c.Traffic.every()
	}
	return c.render(w, r, "traffic", http.StatusOK, v)
}
