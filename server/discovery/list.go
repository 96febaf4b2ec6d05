package discovery

import (
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/proxy-operator/proxy-operator/client"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/server/discovery/access"
	"github.com/proxy-operator/proxy-operator/server/httpx"
)

func (d *Discovery) listProxies(w http.ResponseWriter, r *http.Request) error {
	sel, healthy, err := parseListQuery(r)
	if err != nil {
		return err
	}
	if st, ok := d.Fleet.(staleness); ok {
		if err := st.Err(); err != nil {
			return err
		}
	}
	active, err := d.Leases.Active(r.Context())
	if err != nil {
		return err
	}
	out := client.ProxyList{Complete: d.Fleet.Complete(), Proxies: []client.Proxy{}}
	if !out.Complete {
		at := d.Fleet.CompleteAt().UTC()
		out.CompleteAt = &at
		w.Header().Set("Retry-After", retryAfterSeconds(at.Sub(d.Now())))
	}
	caller := access.FromContext(r.Context())
	for _, p := range d.Fleet.List() {
		if ns, _, _ := strings.Cut(p.Key, "/"); !caller.MayRead(ns) {
			continue
		}
		if !fleet.Matches(p.Attributes, sel) {
			continue
		}
		pj := toProxyJSON(p, d.Health.Health(p.Key), active[p.Key])
		if healthy != nil && pj.Healthy != *healthy {
			continue
		}
		out.Proxies = append(out.Proxies, pj)
	}
	out.Count = len(out.Proxies)
	httpx.WriteJSON(w, http.StatusOK, out)
	return nil
}

func retryAfterSeconds(d time.Duration) string {
	return fmt.Sprint(max(1, int(math.Ceil(d.Seconds()))))
}
