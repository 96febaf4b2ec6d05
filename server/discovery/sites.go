package discovery

import (
	"cmp"
	"context"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/proxy-operator/proxy-operator/client"
	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/server/discovery/access"
	"github.com/proxy-operator/proxy-operator/server/httpx"
)

// Bounds of GET /v1/sites (decision 0264).
const (
	DefaultSitesLimit = 100
	MaxSitesLimit     = 1000
)

// SitePace is what a gateway's pacer knows of one site.
type SitePace struct {
	Site string
	// Rate is the learned pace, requests per second through each upstream; Ceiling the
	// site's limit as last measured (the rate of the last 429, or the highest rate proven
	// below it; 0: none yet); Queue the requests waiting for the site's pace.
	Rate, Ceiling float64
	Queue         int
	// Traffic is the recent sends to the site per namespace of the upstream (decayed over
	// five minutes).
	Traffic map[string]float64
	// Vendor, when set, says the site's requests go to a vendor source (the waterfall).
	Vendor *SiteVendor
}

// SiteVendor is a site's time with a vendor source: since when, until when our own proxies
// are tried again, and why it went (refused: our proxies got the same 403; cooling: every
// one that fits is cooling or banned for it).
type SiteVendor struct {
	Since, Until time.Time
	Reason       string
}

// SitesView is the read-only view of a gateway in the same process (nil: no gateway, and
// /v1/sites shows cooldowns only).
type SitesView interface {
	Sites() []SitePace
}

// listSites answers GET /v1/sites: the top sites by recent gateway traffic in the caller's
// namespaces (?limit=, default 100, at most 1000) and every site cooling on an upstream there
// (the 1000 cooldowns that end last), by recent traffic then host.
func (d *Discovery) listSites(w http.ResponseWriter, r *http.Request) error {
	limit := DefaultSitesLimit
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxSitesLimit {
			return httpx.Errorf(http.StatusBadRequest, "limit %.20q: want 1..%d", v, MaxSitesLimit)
		}
		limit = n
	}
	out, err := d.SiteList(r.Context(), access.FromContext(r.Context()), limit)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, out)
	return nil
}

// SiteList is the sites view of GET /v1/sites for caller (nil: nothing to see) with at most
// limit sites by traffic besides the cooling ones: the one source of the API's answer and of
// the web console's Sites page.
func (d *Discovery) SiteList(ctx context.Context, caller *access.Caller, limit int) (client.SiteList, error) {
	var nss []string // nil: every namespace
	if caller == nil {
		nss = []string{}
	} else if !slices.Contains(caller.Namespaces, access.AllNamespaces) {
		nss = slices.Clone(caller.Namespaces)
	}
	cooling, err := d.Leases.Cooling(ctx, lease.CoolingQuery{Namespaces: nss, Limit: lease.MaxCoolingList})
	if err != nil {
		return client.SiteList{}, err
	}
	var paces []client.Site
	byHost := map[string]*client.Site{}
	if d.Sites != nil {
		for _, p := range d.Sites.Sites() {
			var tr float64
			for ns, v := range p.Traffic {
				if caller.MayRead(ns) {
					tr += v
				}
			}
			if tr <= 0 {
				continue // no traffic of the caller's: not the caller's to see
			}
			pj := &client.SitePace{RatePerUpstream: round3(p.Rate), Queue: p.Queue}
			if p.Ceiling > 0 {
				c := round3(p.Ceiling)
				pj.CeilingPerUpstream = &c
			}
			s := client.Site{Host: p.Site, RecentRequests: round3(tr), Pace: pj, Cooldowns: []client.SiteCooldown{}}
			if v := p.Vendor; v != nil {
				s.Vendor = &client.SiteVendor{Since: v.Since.UTC(), Until: v.Until.UTC(), Reason: v.Reason}
			}
			paces = append(paces, s)
		}
	}
	slices.SortFunc(paces, bySiteOrder)
	// Every paced site is remembered for its pace (cooling or not); the top limit by traffic
	// are shown, and every cooling one.
	all := map[string]client.Site{}
	for _, s := range paces {
		all[s.Host] = s
	}
	for i := range min(limit, len(paces)) {
		s := paces[i]
		byHost[s.Host] = &s
	}
	for _, c := range cooling.Cooldowns {
		s := byHost[c.Target]
		if s == nil {
			sj, ok := all[c.Target]
			if !ok {
				sj = client.Site{Host: c.Target, Cooldowns: []client.SiteCooldown{}}
			}
			s = &sj
			byHost[c.Target] = s
		}
		s.Cooldowns = append(s.Cooldowns, client.SiteCooldown{ProxyID: c.Proxy, Until: c.Until.UTC(), Reason: client.Result(c.Reason), Strikes: c.Strikes})
	}
	out := client.SiteList{Sites: make([]client.Site, 0, len(byHost)), CoolingTotal: cooling.Total, CoolingListed: len(cooling.Cooldowns)}
	for _, s := range byHost {
		out.Sites = append(out.Sites, *s)
	}
	slices.SortFunc(out.Sites, bySiteOrder)
	out.Count = len(out.Sites)
	return out, nil
}

// bySiteOrder is the answer's order: recent traffic, most first, then host.
func bySiteOrder(a, b client.Site) int {
	if c := cmp.Compare(b.RecentRequests, a.RecentRequests); c != 0 {
		return c
	}
	return cmp.Compare(a.Host, b.Host)
}

func round3(v float64) float64 { return float64(int64(v*1000+0.5)) / 1000 }
