package gateway

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/server/discovery"
	"github.com/proxy-operator/proxy-operator/server/httpx"
)

// Vendors (decisions 0293, 0294): a vendor Proxy is one upstream of many exits. Each request
// through it asks the vendor for an exit of its own (a fresh vendor session), each gateway
// session for one sticky exit (a vendor session derived from the gateway session), by the
// username rendered from the Proxy's template when the gateway dials it. The per-site
// waterfall sends a site's requests to a vendor only while our own fleet cannot get it.

// SourceFleet names our own proxies in usage and metrics; a vendor is named by its Proxy key.
const SourceFleet = "fleet"

// DefaultWaterfallCooldown is how long a site stays with the vendor before our own fleet is
// tried again.
const DefaultWaterfallCooldown = 5 * time.Minute

// Waterfall reasons: why a site went to the vendor.
const (
	waterRefused = "refused" // two of our upstreams got the same refusal (403)
	waterCooling = "cooling" // every upstream of ours that fits is cooling or banned for the site
)

// ReasonNoVendor is the refusal of a request the waterfall would send to a vendor when no
// vendor source fits (none declared, none healthy, none offering the country asked for).
const ReasonNoVendor = "no_vendor"

// targeting are the username keys that a vendor takes in its own username instead of as a
// selector on the Proxy's attributes: geo and country -> {country}, city, asn.
var targeting = map[string]bool{"geo": true, "country": true, "city": true, "asn": true}

// waterfall is the per-site state: the sites sent to a vendor, until when, and why; and the
// epoch of each gateway session's vendor session (raised when its exit was banned, so the
// session's next request asks the vendor for another exit).
type waterfall struct {
	mu     sync.Mutex
	sites  map[string]waterSite
	epochs map[string]uint32
	banned map[string]time.Time // the last ban this gateway reported for an upstream of ours, by site
	// trusted are the vendor sessions whose exit passed its check, until their lifetime ends
	// (vendorexit.go), by vendor Proxy key and session.
	trusted map[string]time.Time
}

type waterSite struct {
	since, until time.Time
	reason       string
}

// Bounds of the waterfall's memory: beyond, the oldest knowledge is dropped (the sites then
// start from our own fleet again, which is the cheap side to err on).
const (
	maxWaterSites  = 10000
	maxWaterEpochs = 100000
)

func newWaterfall() *waterfall {
	return &waterfall{sites: map[string]waterSite{}, epochs: map[string]uint32{}, banned: map[string]time.Time{}, trusted: map[string]time.Time{}}
}

// viaVendor reports whether target's requests go to a vendor now. A site whose time with the
// vendor is over is forgotten: its next request tries our own fleet again.
func (g *Gateway) viaVendor(target string) bool {
	if !g.Waterfall {
		return false
	}
	if g.Rules.vendorSite(target) {
		return true // counted as each try's "vendor" decision
	}
	w := g.water
	w.mu.Lock()
	defer w.mu.Unlock()
	s, ok := w.sites[target]
	if !ok {
		return false
	}
	if g.Now().Before(s.until) {
		return true
	}
	delete(w.sites, target)
	g.m.waterfall.WithLabelValues("back_to_fleet", s.reason).Inc()
	return false
}

// toVendor sends target's requests to a vendor for WaterfallCooldown.
func (g *Gateway) toVendor(target, reason string) {
	w := g.water
	now := g.Now()
	w.mu.Lock()
	if len(w.sites) >= maxWaterSites {
		clear(w.sites)
	}
	s, ok := w.sites[target]
	if !ok || !now.Before(s.until) {
		s = waterSite{since: now}
	}
	s.until, s.reason = now.Add(g.WaterfallCooldown), reason
	w.sites[target] = s
	w.mu.Unlock()
	g.m.waterfall.WithLabelValues("to_vendor", reason).Inc()
	g.Log.Info("gateway sends a site to the vendor source", "target", target, "reason", reason, "until", s.until)
}

// takeTry is take with the waterfall: a site with the vendor takes a vendor source, and a
// site our fleet cannot take (every upstream that fits cooling or banned for it) goes to the
// vendor. Tunnels come through here too: a site the plain-HTTP answers or the crawlers'
// reports sent to the vendor has its tunnels opened there.
func (g *Gateway) takeTry(ctx context.Context, p pick, target string, own []*hold, paced bool) (*hold, paceTicket, error) {
	if g.viaVendor(target) {
		h, err := g.takeVendor(ctx, p)
		return h, paceTicket{}, err
	}
	h, tk, err := g.take(ctx, p, target, own, paced)
	// A request goes on only after a ban: a site that merely rate-limits our fleet into
	// cooldowns is paced, not bought. A tunnel sees no answers: the crawlers' reports decide.
	if err != nil && g.Waterfall && fleetRefused(err) && (!paced || g.bannedLately(target)) {
		g.toVendor(target, waterCooling)
		h, err = g.takeVendor(ctx, p)
		return h, paceTicket{}, err
	}
	return h, tk, err
}

// noteBan remembers that this gateway reported a ban of one of our upstreams for target.
func (g *Gateway) noteBan(target string) {
	w := g.water
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.banned) >= maxWaterSites {
		clear(w.banned)
	}
	w.banned[target] = g.Now()
}

// bannedLately reports whether this gateway reported a ban for target within the waterfall's
// cooldown.
func (g *Gateway) bannedLately(target string) bool {
	w := g.water
	w.mu.Lock()
	defer w.mu.Unlock()
	at, ok := w.banned[target]
	return ok && g.Now().Sub(at) < g.WaterfallCooldown
}

// fleetRefused reports whether a lease error of our fleet is one the waterfall answers:
// every upstream that fits is cooling or banned for the site.
func fleetRefused(err error) bool {
	var nm *lease.NoMatchError
	return errors.As(err, &nm) && nm.Cooling > 0 && nm.Cooling+nm.Unhealthy >= nm.Matching
}

// vendorSession is the vendor session id of one dial: a gateway session's is derived from
// its key and epoch (the same exit for every request while the vendor keeps it), a request's
// own is random (a fresh exit).
func (g *Gateway) vendorSession(sessionKey string) string {
	if sessionKey == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		return hex.EncodeToString(b[:])
	}
	w := g.water
	w.mu.Lock()
	epoch := w.epochs[sessionKey]
	w.mu.Unlock()
	sum := sha256.Sum256([]byte(sessionKey + "|" + strconv.FormatUint(uint64(epoch), 10)))
	return hex.EncodeToString(sum[:8])
}

// vendorBanned moves a gateway session to another exit of the vendor: its exit, not the
// vendor Proxy, was refused (a vendor's cooldown in the store would stop every session).
func (g *Gateway) vendorBanned(h *hold) {
	if h.sessionKey == "" {
		return
	}
	w := g.water
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.epochs) >= maxWaterEpochs {
		clear(w.epochs)
	}
	w.epochs[h.sessionKey]++
}

// takeVendor leases a vendor source for one try of p on target and renders its username for
// the try's vendor session: not paced (each try leaves from an exit of its own) and held for
// no target (a vendor serves any number of sessions per site at once).
func (g *Gateway) takeVendor(ctx context.Context, p pick) (*hold, error) {
	req := g.request(p, "")
	sel := map[string]string{v1.SourceAttribute: v1.SourceVendor}
	values := v1.UsernameValues{}
	for k, v := range p.sel.Selector {
		switch k {
		case "geo", "country":
			values.Country = strings.ToUpper(v)
		case "city":
			values.City = v
		case "asn":
			values.ASN = v
		default:
			sel[k] = v
		}
	}
	req.Selector = sel
	sessionKey := req.SessionKey
	if sessionKey != "" {
		req.SessionKey = sessionKey + "|vendor"
	}
	l, err := g.acquire(ctx, req, 0)
	if err != nil {
		var nm *lease.NoMatchError
		if errors.As(err, &nm) {
			return nil, refuse(http.StatusServiceUnavailable, ReasonNoVendor,
				"our own proxies cannot get this site and no vendor source can be leased: "+nm.Reason(), g.Now(), nm.FreeAt, 10*time.Second, err)
		}
		return nil, err
	}
	if err := g.checkBudget(p.caller, l.Proxy.Key); err != nil {
		g.releaseLease(l, false)
		return nil, err
	}
	v := l.Proxy.Vendor
	if v == nil || !v.Offers(values.Country) {
		g.releaseLease(l, false)
		return nil, refuse(http.StatusServiceUnavailable, ReasonNoVendor,
			"the vendor source "+l.Proxy.Key+" does not offer country "+values.Country, g.Now(), time.Time{}, time.Minute, nil)
	}
	var h *hold
	for try := 1; ; try++ {
		values.Session = g.vendorSession(sessionKey)
		creds, err := l.Proxy.UpstreamCredentials(values)
		if err != nil {
			if h != nil {
				g.done(h)
			} else {
				g.releaseLease(l, false)
			}
			if errors.Is(err, v1.ErrTemplateValue) {
				// The message names the placeholder and the caller's own value, never {user}.
				return nil, refuse(http.StatusBadRequest, ReasonNoVendor, "the username's targeting cannot go to a vendor: "+err.Error(), g.Now(), time.Time{}, 0, err)
			}
			return nil, err
		}
		if h == nil {
			h = g.newHold(l, nil)
			h.sessionKey = sessionKey
		}
		h.upstream = creds.ProxyURL(net.JoinHostPort(l.Proxy.IP, strconv.Itoa(int(l.Proxy.Port))))
		err = g.checkVendorExit(ctx, h, values.Session)
		if err == nil {
			break
		}
		g.vendorBanned(h) // the next try asks the vendor for another session
		if try >= maxExitTries {
			g.done(h)
			return nil, &httpx.Error{Code: http.StatusBadGateway, Err: err,
				Message: "no exit of the vendor source " + l.Proxy.Key + " passed its exit check after " + strconv.Itoa(try) + " sessions"}
		}
	}
	g.m.waterfall.WithLabelValues("vendor", "").Inc()
	return h, nil
}

// sourceOf names the source of h in usage and metrics: SourceFleet or the vendor Proxy's key.
func sourceOf(h *hold) string {
	if h.l.Proxy.IsVendor() {
		return h.l.Proxy.Key
	}
	return SourceFleet
}

// waterfallSites adds the waterfall's state to the sites view.
func (g *Gateway) waterfallSites(out []discovery.SitePace) []discovery.SitePace {
	w := g.water
	now := g.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	// Only sites the pacer shows: their traffic says which tenants may see them.
	for i := range out {
		if s, ok := w.sites[out[i].Site]; ok && now.Before(s.until) {
			out[i].Vendor = &discovery.SiteVendor{Since: s.since, Until: s.until, Reason: s.reason}
		}
	}
	return out
}
