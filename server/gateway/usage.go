package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxy-operator/proxy-operator/server/discovery"
	"github.com/proxy-operator/proxy-operator/server/discovery/access"
)

// Usage and budgets (decision 0295): the gateway counts what each team (token) sends through
// each source, our fleet or a vendor Proxy, and refuses a team's vendor traffic past a
// budget of its token. With a UsageBook (the Redis store) the count is kept there, where a
// restart and every gateway replica see it; without one it lives in this process.

// UsageBook keeps usage for every gateway replica and across restarts (lease/redisstore's
// Store; nil: this process counts alone, from zero at each start).
type UsageBook interface {
	// AddUsage adds one request's or tunnel's bytes of team through source (an upstream of
	// pool, "" : none) at time at.
	AddUsage(ctx context.Context, team, source, pool string, in, out int64, at time.Time) error
	// SpentIn is team's bytes per source in the UTC day (month false) or month holding at.
	SpentIn(ctx context.Context, team string, month bool, at time.Time) (map[string]int64, error)
	// EachUsage calls f with every team's totals per source and pool.
	EachUsage(ctx context.Context, f func(team, source, pool string, in, out, requests int64)) error
}

// ReasonBudget is the refusal of vendor traffic past a budget of the caller's token.
const ReasonBudget = "budget"

// usage is the count per team and source.
type usage struct {
	mu   sync.Mutex
	rows map[usageKey]*usageRow

	bytes    *prometheus.CounterVec
	requests *prometheus.CounterVec
	used     *prometheus.GaugeVec
}

type usageKey struct{ team, source, pool string }

type usageRow struct {
	in, out, requests int64
	day, month        period
	price             float64 // per GiB, a vendor's (0: unknown or our fleet)
}

// period is the bytes of one UTC calendar day or month.
type period struct {
	start time.Time
	bytes int64
}

func (p *period) roll(start time.Time) {
	if !p.start.Equal(start) {
		*p = period{start: start}
	}
}

func dayStart(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
}

func monthStart(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}

func newUsage(reg prometheus.Registerer) *usage {
	u := &usage{
		rows: map[usageKey]*usageRow{},
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "proxy_operator_gateway_usage_bytes_total",
			Help: "Body and tunnel bytes relayed for each team (discovery token name), by source (fleet, or a vendor Proxy's namespace/name), pool of the upstream (empty: none) and direction (in: from the source, out: to it).",
		}, []string{"team", "source", "pool", "direction"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "proxy_operator_gateway_usage_requests_total",
			Help: "Requests and tunnels relayed for each team (discovery token name), by source (fleet, or a vendor Proxy's namespace/name) and pool of the upstream (empty: none).",
		}, []string{"team", "source", "pool"}),
		used: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "proxy_operator_gateway_budget_used_ratio",
			Help: "The part of each budget of a team's token used in its current period, by team, source (a vendor Proxy's namespace/name, or * for every vendor) and period (day, month); past 1 the team's vendor traffic through the source is refused.",
		}, []string{"team", "source", "period"}),
	}
	if reg != nil {
		reg.MustRegister(u.bytes, u.requests, u.used)
	}
	return u
}

// account counts one request's or tunnel's traffic through h for c.
func (g *Gateway) account(c *access.Caller, h *hold, in, out int64) {
	if c == nil {
		return
	}
	in, out = max(in, 0), max(out, 0)
	source := sourceOf(h)
	now := g.Now()
	u := g.usage
	u.mu.Lock()
	k := usageKey{c.Name, source, h.pool}
	r := u.rows[k]
	if r == nil {
		r = &usageRow{}
		u.rows[k] = r
	}
	r.in += in
	r.out += out
	r.requests++
	r.day.roll(dayStart(now))
	r.month.roll(monthStart(now))
	r.day.bytes += in + out
	r.month.bytes += in + out
	if v := h.l.Proxy.Vendor; v != nil {
		r.price, _ = strconv.ParseFloat(v.PricePerGiB, 64)
	}
	u.mu.Unlock()
	if g.UsageBook != nil {
		ctx, cancel := context.WithTimeout(context.Background(), bookTimeout)
		if err := g.UsageBook.AddUsage(ctx, c.Name, source, h.pool, in, out, now); err != nil {
			g.Log.Warn("gateway usage not kept in the shared store: this process's count only", "team", c.Name, "source", source, "err", err)
		}
		cancel()
	}
	u.bytes.WithLabelValues(c.Name, source, h.pool, "in").Add(float64(in))
	u.bytes.WithLabelValues(c.Name, source, h.pool, "out").Add(float64(out))
	u.requests.WithLabelValues(c.Name, source, h.pool).Inc()
	if source != SourceFleet {
		for _, b := range c.Budgets {
			if b.Source == source || b.Source == access.AnyVendor {
				used, _ := g.spent(c.Name, b, now)
				u.used.WithLabelValues(c.Name, b.Source, b.Period).Set(float64(used) / float64(b.Bytes))
			}
		}
	}
}

// spent is what team sent in b's current period through b's source, and when the period ends.
func (g *Gateway) spent(team string, b access.Budget, now time.Time) (int64, time.Time) {
	return spentIn(g.UsageBook, g.usage, g.Log, team, b, now)
}

// spentIn reads a budget's period from book, or from local (nil: none) when there is no book
// or it does not answer.
func spentIn(book UsageBook, local *usage, log *slog.Logger, team string, b access.Budget, now time.Time) (int64, time.Time) {
	start, end := dayStart(now), dayStart(now).AddDate(0, 0, 1)
	if b.Period == access.PeriodMonth {
		start, end = monthStart(now), monthStart(now).AddDate(0, 1, 0)
	}
	if book != nil {
		ctx, cancel := context.WithTimeout(context.Background(), bookTimeout)
		bySource, err := book.SpentIn(ctx, team, b.Period == access.PeriodMonth, now)
		cancel()
		if err == nil {
			var sum int64
			for src, n := range bySource {
				if src != SourceFleet && (b.Source == access.AnyVendor || src == b.Source) {
					sum += n
				}
			}
			return sum, end
		}
		log.Warn("budget read from this process's count: the shared usage store did not answer", "team", team, "err", err)
	}
	if local == nil {
		return 0, end
	}
	local.mu.Lock()
	defer local.mu.Unlock()
	var sum int64
	for k, r := range local.rows {
		if k.team != team || k.source == SourceFleet || (b.Source != access.AnyVendor && k.source != b.Source) {
			continue
		}
		p := r.day
		if b.Period == access.PeriodMonth {
			p = r.month
		}
		if p.start.Equal(start) {
			sum += p.bytes
		}
	}
	return sum, end
}

// checkBudget refuses c's traffic through the vendor source once a budget of c's token for
// it is spent: a request is let through while the period's count is below the cap, so the
// cap is passed by at most the requests in flight when it is reached.
func (g *Gateway) checkBudget(c *access.Caller, source string) error {
	if c == nil {
		return nil
	}
	now := g.Now()
	for _, b := range c.Budgets {
		if b.Source != source && b.Source != access.AnyVendor {
			continue
		}
		used, end := g.spent(c.Name, b, now)
		if used < b.Bytes {
			continue
		}
		g.usage.used.WithLabelValues(c.Name, b.Source, b.Period).Set(float64(used) / float64(b.Bytes))
		what := "vendor source " + source
		if b.Source == access.AnyVendor {
			what = "all vendor sources together"
		}
		return refuse(http.StatusTooManyRequests, ReasonBudget,
			fmt.Sprintf("token %s spent its %s budget of %d bytes for %s (%d bytes this %s); its vendor traffic is refused until %s, our own proxies still serve",
				c.Name, perAdjective(b.Period), b.Bytes, what, used, b.Period, end.Format(time.RFC3339)),
			now, end, 0, nil)
	}
	return nil
}

func perAdjective(period string) string {
	if period == access.PeriodMonth {
		return "monthly"
	}
	return "daily"
}

// Usage is the count for GET /v1/usage: per team and source, with each budget of the team's
// token (tokens from Tokens; Insecure has none).
func (g *Gateway) Usage() []discovery.UsageRow {
	g.once.Do(g.init)
	return usageRows(g.UsageBook, g.usage, g.Tokens, g.Log, g.Now())
}

// SharedUsage is the usage a UsageBook holds, for a process that runs no gateway (the
// discovery replicas): what every gateway replica counted, with each team's budgets; no
// cost (the prices are the gateways' to know).
type SharedUsage struct {
	Book   UsageBook
	Tokens *access.Tokens
	Log    *slog.Logger
}

// Usage implements discovery.UsageView.
func (s SharedUsage) Usage() []discovery.UsageRow {
	log := s.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return usageRows(s.Book, nil, s.Tokens, log, time.Now())
}

// usageRows are the rows of book, or of local (nil: none) when there is no book or it does
// not answer, with the costs local knows and the budgets of tokens.
func usageRows(book UsageBook, local *usage, tokens *access.Tokens, log *slog.Logger, now time.Time) []discovery.UsageRow {
	var out []discovery.UsageRow
	price := map[string]float64{}
	if local != nil {
		local.mu.Lock()
		for k, r := range local.rows {
			out = append(out, discovery.UsageRow{Team: k.team, Source: k.source, Pool: k.pool, BytesIn: r.in, BytesOut: r.out, Requests: r.requests})
			price[k.source] = max(price[k.source], r.price)
		}
		local.mu.Unlock()
	}
	if book != nil {
		var shared []discovery.UsageRow
		ctx, cancel := context.WithTimeout(context.Background(), bookTimeout)
		err := book.EachUsage(ctx, func(team, source, pool string, in, outBytes, requests int64) {
			shared = append(shared, discovery.UsageRow{Team: team, Source: source, Pool: pool, BytesIn: in, BytesOut: outBytes, Requests: requests})
		})
		cancel()
		if err == nil {
			out = shared
		} else {
			log.Warn("usage from this process's count: the shared usage store did not answer", "err", err)
		}
	}
	for i := range out {
		if p := price[out[i].Source]; p > 0 {
			out[i].Cost = math.Round(float64(out[i].BytesIn+out[i].BytesOut)/(1<<30)*p*1e4) / 1e4
		}
		c := tokens.ByName(out[i].Team)
		if c == nil || out[i].Source == SourceFleet {
			continue
		}
		for _, b := range c.Budgets {
			if b.Source == out[i].Source || b.Source == access.AnyVendor {
				used, end := spentIn(book, local, log, c.Name, b, now)
				out[i].Budgets = append(out[i].Budgets, discovery.UsageBudget{Source: b.Source, Period: b.Period, Bytes: b.Bytes, Used: used, Resets: end})
			}
		}
	}
	slices.SortFunc(out, func(a, b discovery.UsageRow) int {
		if c := strings.Compare(a.Team, b.Team); c != 0 {
			return c
		}
		if c := strings.Compare(a.Source, b.Source); c != 0 {
			return c
		}
		return strings.Compare(a.Pool, b.Pool)
	})
	return out
}
