package lease

import "context"

// WithOutcomes returns s telling onReport of every report s accepted (the proxy's key and the
// result), after s recorded it: the quality score learns through it what crawlers, and the
// gateway when it reports through the store, see. onReport runs on the caller's goroutine and
// must not block. The result does not satisfy the optional interfaces s may (PoolLoad): ask s.
func WithOutcomes(s Store, onReport func(proxy string, r Result)) Store {
	return &outcomes{Store: s, on: onReport}
}

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
