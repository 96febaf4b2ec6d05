package discovery

import (
	"net/http"
	"slices"
	"time"

	"github.com/proxy-operator/proxy-operator/client"
	"github.com/proxy-operator/proxy-operator/server/discovery/access"
	"github.com/proxy-operator/proxy-operator/server/httpx"
)

// UsageRow is what the gateway relayed for one team (token name) through one source (fleet,
// or a vendor Proxy's namespace/name) and pool (decision 0295).
type UsageRow struct {
	Team, Source      string
	Pool              string // the pool of the upstreams (empty: none)
	BytesIn, BytesOut int64
	Requests          int64
	// Cost is the bytes in and out times the vendor's pricePerGiB (0: our fleet, or no price).
	Cost float64
	// Budgets are the token's budgets that count this source, each with what it used in its
	// current period.
	Budgets []UsageBudget
}

// UsageBudget is one budget and its current period.
type UsageBudget struct {
	Source, Period string
	Bytes, Used    int64
	Resets         time.Time
}

// UsageView is the read-only usage of a gateway in the same process (nil: no gateway, and
// /v1/usage answers an empty list).
type UsageView interface {
	Usage() []UsageRow
}

// listUsage answers GET /v1/usage: the caller's own team's rows, or every team's for a
// caller of every namespace.
func (d *Discovery) listUsage(w http.ResponseWriter, r *http.Request) error {
	caller := access.FromContext(r.Context())
	out := client.UsageList{Usage: []client.Usage{}}
	if d.Usage != nil && caller != nil {
		all := slices.Contains(caller.Namespaces, access.AllNamespaces)
		for _, u := range d.Usage.Usage() {
			if !all && u.Team != caller.Name {
				continue
			}
			cu := client.Usage{Team: u.Team, Source: u.Source, Pool: u.Pool, BytesIn: u.BytesIn, BytesOut: u.BytesOut, Requests: u.Requests, Cost: u.Cost,
				Budgets: []client.UsageBudget{}}
			for _, b := range u.Budgets {
				cu.Budgets = append(cu.Budgets, client.UsageBudget{Source: b.Source, Period: b.Period, Bytes: b.Bytes, Used: b.Used, Resets: b.Resets.UTC()})
			}
			out.Usage = append(out.Usage, cu)
		}
	}
	out.Count = len(out.Usage)
	httpx.WriteJSON(w, http.StatusOK, out)
	return nil
}
