package discovery

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/proxy-operator/proxy-operator/client"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/server/httpx"
)

// The answers' wire types are the public client's (client.Proxy, client.ProxyList,
// client.Lease, client.Cooldown, client.ErrorBody): declared once, so the contract a crawler
// decodes is the one served (decision 0100). Requests are decoded into the types below: they
// tell an absent field from a zero one and refuse unknown fields, which the client's
// encoders need not.

// ProxyOf is one proxy as crawlers see it.
func ProxyOf(p fleet.Proxy, h verdict.Health, active int) client.Proxy {
	attrs := p.Attributes
	if attrs == nil {
		attrs = map[string]string{}
	}
	return client.Proxy{
		ID: p.Key, IP: p.IP, Port: int(p.Port), Attributes: attrs, Phase: string(p.Phase),
		Healthy: lease.Leasable(p, h), Draining: p.Draining, LatencyMillis: h.LatencyMillis, ActiveLeases: active, MaxLeases: int(p.MaxLeases),
	}
}

type acquireRequest struct {
	Selector   map[string]string `json:"selector"`
	TTLSeconds *int64            `json:"ttlSeconds"`
	Target     string            `json:"target"`
	SessionKey string            `json:"sessionKey"`
}

type renewRequest struct {
	TTLSeconds *int64 `json:"ttlSeconds"`
}

type reportRequest struct {
	Result            lease.Result `json:"result"`
	Target            string       `json:"target"`
	RetryAfterSeconds *int64       `json:"retryAfterSeconds"`
}

// decode reads a bounded body and decodes it strictly: unknown fields are a 400, so a typo
// ("ttl" for "ttlSeconds") is not silently ignored. emptyOK lets an empty body mean {}.
func (d *Discovery) decode(w http.ResponseWriter, r *http.Request, v any, what string, emptyOK bool) error {
	b, err := httpx.ReadBody(w, r, d.MaxBodyBytes)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(b)) == 0 && emptyOK {
		return nil
	}
	if err := httpx.DecodeJSON(b, v, what); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return httpx.Errorf(http.StatusBadRequest, "%s: %s", what, strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
}
