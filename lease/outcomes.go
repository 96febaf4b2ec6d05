package lease

import "context"

// WithOutcomes returns s telling onReport of every report s accepted (the proxy's key and the
// result), after s recorded it: the quality score learns through it what crawlers, and the
// gateway when it reports through the store, see. onReport runs on the caller's goroutine and
// must not block. The result keeps s's CooldownCount (the discovery API's gauge reads it);
// for other optional interfaces (PoolLoad), ask s.
func WithOutcomes(s Store, onReport func(proxy string, r Result)) Store {
	o := &outcomes{Store: s, on: onReport}
	if cc, ok := s.(interface{ CooldownCount() int }); ok {
		return &countingOutcomes{outcomes: o, count: cc.CooldownCount}
	}
	return o
}

// countingOutcomes is outcomes around a store that counts its cooldowns.
type countingOutcomes struct {
	*outcomes
	count func() int
}

// CooldownCount is the inner store's.
func (c *countingOutcomes) CooldownCount() int { return c.count() }

type outcomes struct {
	Store
	on func(proxy string, r Result)
}

func (o *outcomes) Report(ctx context.Context, id string, r Report) (Cooldown, error) {
	c, err := o.Store.Report(ctx, id, r)
	if err == nil && c.Proxy != "" {
		o.on(c.Proxy, r.Result)
	}
	return c, err
}
