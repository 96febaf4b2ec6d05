package discovery

import (
	"math"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/client"
	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/server/discovery/access"
	"github.com/proxy-operator/proxy-operator/server/httpx"
)

func (d *Discovery) acquire(w http.ResponseWriter, r *http.Request) error {
	if err := mayLease(r); err != nil {
		return err
	}
	var req acquireRequest
	if err := d.decode(w, r, &req, "lease request", true); err != nil {
		return err
	}
	ttl, err := d.ttl(req.TTLSeconds)
	if err != nil {
		return err
	}
	if len(req.Selector) > maxSelectorPairs {
		return httpx.Errorf(http.StatusBadRequest, "selector has %d pairs, at most %d", len(req.Selector), maxSelectorPairs)
	}
	for k, v := range req.Selector {
		if err := checkSelectorPair(k, v); err != nil {
			return httpx.Wrap(http.StatusBadRequest, err, "selector")
		}
	}
	if _, ok := req.Selector[v1.SourceAttribute]; ok {
		// A lease answer carries the proxy's credential: a vendor account's never leaves the
		// operator (decision 0293).
		return httpx.Errorf(http.StatusBadRequest, "selector %s: vendor sources are served through the gateway only, never leased (their credential is the vendor account's)", v1.SourceAttribute)
	}
	target, err := normalizeTarget(req.Target, false)
	if err != nil {
		return err
	}
	if len(req.SessionKey) > maxSessionKeyLen {
		return httpx.Errorf(http.StatusBadRequest, "sessionKey longer than %d characters", maxSessionKeyLen)
	}
	if !d.Fleet.Complete() {
		// After a restart the view is filled by syncs as they come: a lease now could pile
		// every crawler onto the few proxies synced first, and a 409 would be a lie.
		d.denied.WithLabelValues("warming_up").Inc()
		return &httpx.Error{Code: http.StatusServiceUnavailable, RetryAfter: max(1, int(math.Ceil(d.Fleet.CompleteAt().Sub(d.Now()).Seconds()))),
			Message: "fleet view still warming up after a restart; retry after the Retry-After seconds"}
	}
	// A token leases only in its namespaces: the others' proxies are not even counted. With
	// more than one token, each is a holder with its share per namespace (decisions 0201, 0259).
	caller := access.FromContext(r.Context())
	holder := ""
	var shares map[string]int
	if d.tokens != nil && d.tokens.Len() > 1 {
		holder, shares = caller.Name, d.sharesFor(caller, d.tokens)
	}
	l, err := d.Leases.Acquire(r.Context(), lease.Request{Selector: req.Selector, TTL: ttl, Target: target, SessionKey: req.SessionKey,
		Namespaces: caller.LeaseNamespaces(), Holder: holder, HolderShares: shares})
	if err != nil {
		return err
	}
	d.requests.WithLabelValues("granted").Inc()
	httpx.WriteJSON(w, http.StatusOK, d.leaseJSON(l, ttl))
	return nil
}

func (d *Discovery) leaseJSON(l lease.Lease, ttl time.Duration) client.Lease {
	out := client.Lease{
		ID: l.ID, Proxy: ProxyOf(l.Proxy, l.Health, l.Active), ExpiresAt: l.ExpiresAt.UTC(),
		TTLSeconds: int64(ttl / time.Second), Target: l.Target, SessionKey: l.SessionKey,
		ProxyURL: l.Proxy.Credentials.ProxyURL(net.JoinHostPort(l.Proxy.IP, strconv.Itoa(int(l.Proxy.Port)))).String(),
	}
	if c := l.Proxy.Credentials; c != nil {
		out.Username, out.Password = c.Username, c.Password
	}
	return out
}

func (d *Discovery) release(w http.ResponseWriter, r *http.Request) error {
	if err := mayLease(r); err != nil {
		return err
	}
	if err := d.Leases.Release(r.Context(), chi.URLParam(r, "id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (d *Discovery) renew(w http.ResponseWriter, r *http.Request) error {
	if err := mayLease(r); err != nil {
		return err
	}
	var req renewRequest
	if err := d.decode(w, r, &req, "renew request", true); err != nil {
		return err
	}
	var ttl time.Duration // 0: the lease's own TTL
	if req.TTLSeconds != nil {
		var err error
		if ttl, err = d.ttl(req.TTLSeconds); err != nil {
			return err
		}
	}
	l, err := d.Leases.Renew(r.Context(), chi.URLParam(r, "id"), ttl)
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, d.leaseJSON(l, l.ExpiresAt.Sub(d.Now()).Round(time.Second)))
	return nil
}

// ttl turns ttlSeconds into a duration: absent is the default, anything outside
// [MinLeaseTTL, MaxTTL] a 400.
func (d *Discovery) ttl(s *int64) (time.Duration, error) {
	if s == nil {
		return d.DefaultTTL, nil
	}
	lo, hi := int64(MinLeaseTTL/time.Second), int64(d.MaxTTL/time.Second)
	if *s < lo || *s > hi {
		return 0, httpx.Errorf(http.StatusBadRequest, "ttlSeconds %d out of range %d..%d", *s, lo, hi)
	}
	return time.Duration(*s) * time.Second, nil
}
