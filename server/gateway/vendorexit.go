package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/health"
)

// The exit check of a vendor session (decision 0293): before a gateway session's vendor
// session carries the client's traffic, the gateway fetches the vendor Proxy's
// spec.verify.exitURL through it and checks the address the far side saw against
// spec.verify.expectedExit. A session whose exit fails is given another vendor session (at
// most maxExitTries in all); one that passes is trusted for the vendor's session lifetime.
// Requests without a session are not checked: each leaves from an exit of its own, and a
// check would double the vendor's traffic.

// maxExitTries bounds the vendor sessions one gateway session tries to find an exit that
// passes.
const maxExitTries = 3

// maxTrusted bounds the sessions remembered as checked.
const maxTrusted = 100000

// errExitCheck marks a vendor session whose exit did not pass.
var errExitCheck = errors.New("vendor exit check failed")

// checkVendorExit checks the exit of h's vendor session unless there is nothing to check (no
// gateway session, no exit URL) or it passed within the session's lifetime: nil when it
// passes.
func (g *Gateway) checkVendorExit(ctx context.Context, h *hold, session string) error {
	v := h.l.Proxy.Verify
	if h.sessionKey == "" || v == nil || v.ExitURL == "" {
		return nil
	}
	key := h.l.Proxy.Key + "|" + session
	now := g.Now()
	w := g.water
	w.mu.Lock()
	until, ok := w.trusted[key]
	w.mu.Unlock()
	if ok && now.Before(until) {
		return nil
	}
	addr, err := g.exitOf(ctx, h, v.ExitURL)
	if err == nil {
		err = expectExit(v, addr)
	}
	if err != nil {
		g.m.waterfall.WithLabelValues("exit_check_failed", "").Inc()
		g.Log.Info("gateway vendor session exit check failed; another session is asked for", "proxy", h.l.Proxy.Key, "err", err)
		return fmt.Errorf("%w: %w", errExitCheck, err)
	}
	w.mu.Lock()
	if len(w.trusted) >= maxTrusted {
		clear(w.trusted)
	}
	w.trusted[key] = now.Add(h.l.Proxy.Vendor.SessionLifetime())
	w.mu.Unlock()
	return nil
}

// exitOf fetches exitURL through h and reads the address the far side saw.
func (g *Gateway) exitOf(ctx context.Context, h *hold, exitURL string) (netip.Addr, error) {
	ctx, cancel := context.WithTimeout(ctx, g.ResponseHeaderTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(g.upstreamContext(ctx, h), http.MethodGet, exitURL, nil)
	if err != nil {
		return netip.Addr{}, err
	}
	req.Header.Set("User-Agent", "proxy-operator-gateway")
	resp, err := g.transport.RoundTrip(req)
	if err != nil {
		return netip.Addr{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return netip.Addr{}, fmt.Errorf("exit URL answered %s", resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if err != nil {
		return netip.Addr{}, err
	}
	return health.ParseEcho(body)
}

// expectExit checks addr against spec.verify.expectedExit (nothing to check: nil).
func expectExit(v *v1.VerifySpec, addr netip.Addr) error {
	if len(v.ExpectedExit) == 0 {
		return nil
	}
	for _, s := range v.ExpectedExit {
		if p, err := v1.ParsePrefix(s); err == nil && p.Contains(addr) {
			return nil
		}
	}
	return fmt.Errorf("exit %s is outside expectedExit", addr)
}
