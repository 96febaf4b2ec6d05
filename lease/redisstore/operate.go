package redisstore

import (
	"context"

	"github.com/proxy-operator/proxy-operator/lease"
)

var (
	_ lease.HoldingsLister  = (*Store)(nil)
	_ lease.CooldownClearer = (*Store)(nil)
)

// Holdings implements lease.HoldingsLister with one script (holdings.lua) that walks the live
// leases; a lease granted by a replica of an older version has no holder name.
func (s *Store) Holdings(ctx context.Context, namespaces []string, limit int) ([]lease.Holding, int, error) {
	if namespaces != nil && len(namespaces) == 0 {
		return nil, 0, nil
	}
	if limit <= 0 || limit > lease.MaxHoldingsList {
		limit = lease.MaxHoldingsList
	}
	ctx, cancel := s.op(ctx)
	defer cancel()
	args := append(s.head(1+len(namespaces)), limit)
	for _, ns := range namespaces {
		args = append(args, ns)
	}
	res, err := s.sc.holdings.Run(ctx, s.cfg.Client, s.keys(), args...).Slice()
	if err != nil {
		return nil, 0, unavailable("holdings", err)
	}
	var out []lease.Holding
	for i := 1; i+5 < len(res); i += 6 {
		out = append(out, lease.Holding{ID: str(res, i), Proxy: str(res, i+1), Holder: str(res, i+2),
			Target: str(res, i+3), Session: str(res, i+4), ExpiresAt: msTime(str(res, i+5))})
	}
	lease.SortHoldings(out)
	return out, num(res, 0), nil
}

// ClearCooldown implements lease.CooldownClearer (clear.lua).
func (s *Store) ClearCooldown(ctx context.Context, proxy, target string) (bool, error) {
	ctx, cancel := s.op(ctx)
	defer cancel()
	n, err := s.write(ctx, s.sc.clear, append(s.head(2), proxy, target)...).Int()
	if err != nil {
		return false, unavailable("clear cooldown", err)
	}
	return n == 1, nil
}
