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

// listProxies answers one page of the proxies the caller may read that match, in id order:
// it starts after the query's continue value, and ends at its limit or at listPageBytes of
// JSON, whichever is first, with a continue value when more match.
func (d *Discovery) listProxies(w http.ResponseWriter, r *http.Request) error {
	q, err := parseListQuery(r)
	if err != nil {
		return err
	}
	if err := d.FleetErr(); err != nil {
		return err
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
	size := 0
	for _, p := range d.Fleet.List() {
		if p.Key <= q.after && q.after != "" {
			continue
		}
		if ns, _, _ := strings.Cut(p.Key, "/"); !caller.MayRead(ns) {
			continue
		}
		if !fleet.Matches(p.Attributes, q.sel) {
			continue
		}
		pj := ProxyOf(p, d.Health.Health(p.Key), active[p.Key])
		if q.healthy != nil && pj.Healthy != *q.healthy {
			continue
		}
		n := approxJSONSize(pj)
		if len(out.Proxies) == q.limit || len(out.Proxies) > 0 && size+n > listPageBytes {
			out.Continue = encodeContinue(out.Proxies[len(out.Proxies)-1].ID)
			break
		}
		out.Proxies = append(out.Proxies, pj)
		size += n
	}
	out.Count = len(out.Proxies)
	httpx.WriteJSON(w, http.StatusOK, out)
	return nil
}

// approxJSONSize is about the bytes p takes in a list (a little over: JSON escapes aside,
// the fixed fields take under 200 bytes).
func approxJSONSize(p client.Proxy) int {
	n := 200 + len(p.ID) + len(p.IP) + len(p.Phase)
	for k, v := range p.Attributes {
		n += len(k) + len(v) + 6
	}
	return n
}

func retryAfterSeconds(d time.Duration) string {
	return fmt.Sprint(max(1, int(math.Ceil(d.Seconds()))))
}
