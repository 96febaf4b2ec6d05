package discovery

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/lifecycle"
	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/server/httpx"
)

// proxyJSON is one proxy as crawlers see it.
type proxyJSON struct {
	ID            string            `json:"id"`
	IP            string            `json:"ip"`
	Port          int32             `json:"port"`
	Attributes    map[string]string `json:"attributes"`
	Phase         string            `json:"phase"`
	Healthy       bool              `json:"healthy"`
	Draining      bool              `json:"draining,omitempty"`
	LatencyMillis int64             `json:"latencyMillis"`
	ActiveLeases  int               `json:"activeLeases"`
	MaxLeases     int32             `json:"maxLeases"`
}

func toProxyJSON(p fleet.Proxy, h lifecycle.Health, active int) proxyJSON {
	attrs := p.Attributes
	if attrs == nil {
		attrs = map[string]string{}
	}
	return proxyJSON{
		ID: p.Key, IP: p.IP, Port: p.Port, Attributes: attrs, Phase: string(p.Phase),
		Healthy: lease.Leasable(p, h), Draining: p.Draining, LatencyMillis: h.LatencyMillis, ActiveLeases: active, MaxLeases: p.MaxLeases,
	}
}

type listJSON struct {
	// Complete is false right after a restart, until every Proxy has been synced again:
	// an absent proxy may then simply not be known yet.
	Complete   bool        `json:"complete"`
	CompleteAt *time.Time  `json:"completeAt,omitempty"`
	Count      int         `json:"count"`
	Proxies    []proxyJSON `json:"proxies"`
}

type noMatchJSON struct {
	Error            string `json:"error"`
	Matching         int    `json:"matching"`
	Unhealthy        int    `json:"unhealthy"`
	AtCapacity       int    `json:"atCapacity"`
	CoolingForTarget int    `json:"coolingForTarget"`
	LeasedForTarget  int    `json:"leasedForTarget"`
	Target           string `json:"target,omitempty"`
	// AvailableAt is lease.NoMatchError.FreeAt: the earliest a matching proxy frees up by
	// itself (absent when no time is known). RetryAfterSeconds repeats the Retry-After header.
	AvailableAt       *time.Time `json:"availableAt,omitempty"`
	RetryAfterSeconds int64      `json:"retryAfterSeconds"`
}

type acquireRequest struct {
	Selector   map[string]string `json:"selector"`
	TTLSeconds *int64            `json:"ttlSeconds"`
	Target     string            `json:"target"`
	SessionKey string            `json:"sessionKey"`
}

type leaseJSON struct {
	LeaseID    string    `json:"leaseID"`
	Proxy      proxyJSON `json:"proxy"`
	ExpiresAt  time.Time `json:"expiresAt"`
	TTLSeconds int64     `json:"ttlSeconds"`
	Target     string    `json:"target,omitempty"`
	SessionKey string    `json:"sessionKey,omitempty"`
	// ProxyURL is ready for HTTP_PROXY: the credential in it, percent-encoded. It, Username
	// and Password are the only place a credential leaves the process.
	ProxyURL string `json:"proxyURL"`
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
}

type renewRequest struct {
	TTLSeconds *int64 `json:"ttlSeconds"`
}

type reportRequest struct {
	Result            lease.Result `json:"result"`
	Target            string       `json:"target"`
	RetryAfterSeconds *int64       `json:"retryAfterSeconds"`
}

type reportJSON struct {
	ProxyID       string     `json:"proxyID"`
	Target        string     `json:"target"`
	Result        string     `json:"result"`
	CooldownUntil *time.Time `json:"cooldownUntil,omitempty"`
	Strikes       int        `json:"strikes,omitempty"`
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
