package discovery

import (
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/proxy-operator/proxy-operator/client"
	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/server/httpx"
)

func (d *Discovery) report(w http.ResponseWriter, r *http.Request) error {
	if err := mayLease(r); err != nil {
		return err
	}
	var req reportRequest
	if err := d.decode(w, r, &req, "report", false); err != nil {
		return err
	}
	if !req.Result.Valid() {
		return httpx.Errorf(http.StatusBadRequest, "report: result %q: want rate_limited, banned or ok", req.Result)
	}
	target, err := normalizeTarget(req.Target, true)
	if err != nil {
		return err
	}
	var retryAfter time.Duration
	if s := req.RetryAfterSeconds; s != nil {
		if *s < 0 || *s > int64(d.MaxRetryAfter/time.Second) {
			return httpx.Errorf(http.StatusBadRequest, "report: retryAfterSeconds %d out of range 0..%d", *s, int64(d.MaxRetryAfter/time.Second))
		}
		retryAfter = time.Duration(*s) * time.Second
	}
	c, err := d.Leases.Report(r.Context(), chi.URLParam(r, "id"), lease.Report{Result: req.Result, Target: target, RetryAfter: retryAfter})
	if err != nil {
		return err
	}
	d.reports.WithLabelValues(string(req.Result), ReportSourceAPI).Inc()
	out := client.Cooldown{ProxyID: c.Proxy, Target: c.Target, Result: client.Result(req.Result), Strikes: c.Strikes}
	if !c.Until.IsZero() {
		u := c.Until.UTC()
		out.Until = &u
	}
	httpx.WriteJSON(w, http.StatusOK, out)
	return nil
}
