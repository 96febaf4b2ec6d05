package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/server/httpx"
)

type upstreamKey struct{}

// upstreamOf is the transport's Proxy function: the upstream a try was given.
func upstreamOf(r *http.Request) (*url.URL, error) {
	u, _ := r.Context().Value(upstreamKey{}).(*url.URL)
	if u == nil {
		return nil, errors.New("gateway: request without an upstream")
	}
	return u, nil
}

// hopHeaders are never relayed (RFC 9110 7.6.1), with Proxy-Authorization, which carries the
// caller's token, and Proxy-Authenticate.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func removeHop(h http.Header) {
	for _, f := range h.Values("Connection") {
		for name := range strings.SplitSeq(f, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
}

func idempotent(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

// forward relays an absolute-form request through leased upstreams: a rule that matches the
// answer reports the upstream for the target and, when the request can be sent again
// (idempotent, body kept), the next try goes through another upstream.
func (g *Gateway) forward(w http.ResponseWriter, r *http.Request, p pick) error {
	target, err := targetOf(r.URL.Host, "80")
	if err != nil {
		return err
	}
	rc := http.NewResponseController(w)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	// One watchdog for the whole exchange: any progress, either way, pushes it back.
	dog := time.AfterFunc(g.IdleTimeout, cancel)
	defer dog.Stop()
	touch := func() { dog.Reset(g.IdleTimeout) }

	body := g.newRetryBody(r, p.caller.Name, rc, touch) // read at the first try, after a lease (budget.go)
	defer body.release()
	out := r.Clone(ctx)
	out.RequestURI = ""
	removeHop(out.Header)
	if _, ok := out.Header["User-Agent"]; !ok {
		out.Header.Set("User-Agent", "") // the transport would add Go's
	}

	var (
		held    []*hold
		suspect *suspect403
		resp    *http.Response
		final   *hold
		lastErr error
		tries   int
		again   *hold  // a session's upstream that answered 429: the next try waits for its pace
		moved   string // why a session leaves its upstream (HeaderSessionMoved)
	)
	defer func() {
		for _, h := range held {
			g.done(h)
		}
	}()
	for tries < g.MaxTries && (tries == 0 || body.retryable()) {
		var (
			h   *hold
			tk  paceTicket
			err error
		)
		switch {
		case again != nil:
			h = again
			tk, err = g.waitPace(ctx, target, h.l.Proxy.Key, g.Now().Add(g.QueueWait))
		default:
			h, tk, err = g.takeTry(ctx, p, target, held, true)
		}
		if err != nil {
			if tries == 0 {
				return g.leaseError(err)
			}
			break // answer with what the last try got
		}
		if again == nil {
			held = append(held, h)
		}
		again = nil
		tries++
		try := out.Clone(g.upstreamContext(ctx, h))
		if try.Body, err = body.next(); err != nil {
			return err
		}
		start := g.Now()
		got, err := g.transport.RoundTrip(try)
		touch()
		if err != nil {
			lastErr = err
			g.Log.Debug("gateway upstream failed", "proxy", h.l.Proxy.Key, "target", target, "err", err)
			if hung(err) && ctx.Err() == nil {
				// A hung site hangs on every upstream: once is enough (issue 30 part 6).
				g.m.tries.WithLabelValues(kindRequest).Observe(float64(tries))
				w.Header().Set(HeaderTries, strconv.Itoa(tries))
				return &httpx.Error{Code: http.StatusGatewayTimeout, Err: err,
					Message: target + " sent no answer within the gateway's response header timeout; not retried on another upstream"}
			}
			continue
		}
		g.m.upstream.WithLabelValues(kindRequest).Observe(g.Now().Sub(start).Seconds())
		if got.StatusCode == http.StatusProxyAuthRequired {
			// The upstream refused the gateway's credential for it: never the client's concern.
			got.Body.Close()
			lastErr = errors.New("upstream refused its credential (407)")
			g.Log.Warn("gateway upstream refused its credential", "proxy", h.l.Proxy.Key)
			continue
		}
		if resp != nil {
			resp.Body.Close()
		}
		resp, final = got, h
		if upstreamError(resp.Header) {
			// The upstream's own refusal or failure page: not the site's word, never a ban.
			g.Log.Info("gateway upstream answered for itself", "proxy", h.l.Proxy.Key, "target", target, "status", resp.StatusCode)
			break
		}
		rule, err := g.detect(target, resp)
		if err != nil {
			lastErr = err
			resp.Body.Close()
			resp = nil
			continue
		}
		if rule == nil {
			if resp.StatusCode < 400 {
				g.pace.ok(tk)
				if suspect != nil {
					// Another upstream was let in: the first one's 403 was a ban of it.
					g.report(ctx, suspect.h, target, suspect.rule, suspect.hdr)
					if suspect.h.slot != nil {
						moved = "banned"
					}
					suspect = nil
				}
			}
			break
		}
		if rule.generic() {
			if suspect != nil {
				// A second upstream agrees: the site refuses the request, not an address.
				g.Log.Info("gateway 403 from two upstreams: the site refuses the request, no ban", "target", target,
					"proxies", []string{suspect.h.l.Proxy.Key, h.l.Proxy.Key})
				suspect = nil
				if g.Waterfall && !h.l.Proxy.IsVendor() && body.retryable() && tries < g.MaxTries {
					// Or it refuses our fleet's addresses, as sites that block datacenter
					// ranges do: the waterfall asks a vendor (decision 0294).
					g.toVendor(target, waterRefused)
					continue
				}
				break
			}
			// A bare 403 bans nobody yet: another upstream is asked first (kept held, so the
			// report can still be made through its lease).
			suspect = &suspect403{h: h, rule: rule, hdr: resp.Header.Clone()}
			if h.l.Proxy.IsVendor() {
				// The second opinion must come from another exit: a vendor session's next
				// try asks the vendor for a new one (decision 0294).
				g.vendorBanned(h)
			}
			continue
		}
		if rule.Result == lease.ResultRateLimited {
			// A retry waits for the next upstream whose pace allows it (take), never at once.
			ra := retryAfter(resp.Header, g.Now(), g.MaxRetryAfter)
			g.pace.limited(tk, ra)
			g.holdShared(ctx, tk, ra)
			if h.slot != nil {
				// A session keeps its upstream through a 429: the pace just learned (floored
				// by Retry-After) holds its next send back; no cooldown moves it (decision 0269).
				g.m.bans.WithLabelValues(rule.Name, string(rule.Result)).Inc()
				g.Log.Info("gateway rate limiting detected; the session keeps its upstream", "proxy", h.l.Proxy.Key, "target", target, "rule", rule.Name)
				if body.retryable() && tries < g.MaxTries {
					again = h
				}
				continue
			}
		}
		if h.slot != nil {
			moved = "banned"
		}
		g.report(ctx, h, target, rule, resp.Header)
		if body.retryable() && tries < g.MaxTries {
			// The upstream is done with: it waits for its pace or cooldown, and holding it
			// through the retry would keep it from the site's other requests for nothing.
			// Its answer is kept for the client in case the retry finds no upstream.
			held = held[:len(held)-1]
			g.done(h)
		}
	}
	if suspect != nil {
		// No second opinion came (no retry, or no other upstream): the 403 counts as a ban.
		g.report(ctx, suspect.h, target, suspect.rule, suspect.hdr)
		if suspect.h.slot != nil {
			moved = "banned"
		}
	}
	g.m.tries.WithLabelValues(kindRequest).Observe(float64(tries))
	if resp == nil {
		g.Log.Warn("gateway request failed on every upstream tried", "target", target, "tries", tries, "err", lastErr)
		w.Header().Set(HeaderTries, strconv.Itoa(tries))
		return &httpx.Error{Code: http.StatusBadGateway, Err: lastErr,
			Message: "no upstream proxy answered for " + target + " after " + strconv.Itoa(tries) + " tries"}
	}
	if upstreamError(resp.Header) {
		// The upstream's own page names the upstream (Squid's host name, the mock's dial error
		// from its address): the client gets the gateway's words instead, with the upstream's
		// status and marker, naming it by its Proxy id (issue 30).
		resp.Body.Close()
		hdr := w.Header()
		for _, k := range upstreamErrorHeaders {
			if v := resp.Header.Get(k); v != "" {
				hdr.Set(k, markerValue(v))
			}
		}
		hdr.Set(HeaderProxy, final.l.Proxy.Key)
		hdr.Set(HeaderTries, strconv.Itoa(tries))
		return &httpx.Error{Code: resp.StatusCode, Err: errors.New("upstream " + final.l.Proxy.Key + " answered " + resp.Status + " for itself"),
			Message: "upstream proxy " + final.l.Proxy.Key + " answered " + strconv.Itoa(resp.StatusCode) + " for itself, not for " + target +
				" (it refused or could not reach the site)"}
	}
	defer resp.Body.Close()
	// Earlier tries free their upstreams now rather than when the body is through.
	keep := slices.Contains(held, final) // else already done: a rule matched its answer
	for _, h := range held {
		if h != final {
			g.done(h)
		}
	}
	held = nil
	if keep {
		held = []*hold{final}
	}

	hdr := w.Header()
	for k, vs := range resp.Header {
		hdr[k] = vs
	}
	removeHop(hdr)
	hdr.Set(HeaderProxy, final.l.Proxy.Key)
	hdr.Set(HeaderTries, strconv.Itoa(tries))
	if moved != "" {
		hdr.Set(HeaderSessionMoved, moved)
	}
	w.WriteHeader(resp.StatusCode)
	g.m.outcome(kindRequest, "ok")
	g.m.bytes(final, "out", r.ContentLength)
	n, err := copyIdle(w, resp.Body, rc, g.IdleTimeout, touch)
	g.m.bytes(final, "in", n)
	g.account(p.caller, final, n, r.ContentLength)
	if err != nil {
		g.Log.Debug("gateway body relay ended early", "proxy", final.l.Proxy.Key, "target", target, "err", err)
	}
	return nil
}

// suspect403 is an upstream a generic 403 named, waiting for a second upstream's answer: a
// success elsewhere makes it a ban, a second 403 makes it the site's refusal of the request
// (issue 30 part 6: refused targets must not ban the fleet).
type suspect403 struct {
	h    *hold
	rule *Rule
	hdr  http.Header
}

// detect matches the rules against an answer, reading at most Rules.BodyBytes of its body
// when a body rule could apply; the body stays whole for the client.
func (g *Gateway) detect(target string, resp *http.Response) (*Rule, error) {
	var prefix []byte
	if g.Rules.needsBody(target, resp.StatusCode) {
		var err error
		prefix, err = io.ReadAll(io.LimitReader(resp.Body, int64(g.Rules.BodyBytes)))
		if err != nil {
			return nil, err
		}
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(prefix), resp.Body), resp.Body}
	}
	return g.Rules.Match(target, resp.StatusCode, resp.Header, prefix), nil
}
