package client

import (
	"context"
	"errors"
	"sync"
	"time"
)

// minRenewGap keeps a keep-alive from renewing in a tight loop on a very short TTL.
const minRenewGap = 200 * time.Millisecond

// KeepAlive renews one lease until it is released, its context ends, or the lease is lost.
type KeepAlive struct {
	c      *Client
	cancel context.CancelFunc
	done   chan struct{}

	mu    sync.Mutex
	lease Lease
	err   error
}

// KeepAlive starts renewing l in the background, each time a third of its TTL before it
// would expire, so two failed renewals in a row still leave time for a third. It stops when
// ctx ends, when Release is called, or when the server says the lease is gone (Done is
// closed and Err says why). A renewal that fails for any other reason is retried at the next
// tick; the lease is lost only if it expires meanwhile.
func (c *Client) KeepAlive(ctx context.Context, l Lease) *KeepAlive {
	ctx, cancel := context.WithCancel(ctx)
	k := &KeepAlive{c: c, cancel: cancel, done: make(chan struct{}), lease: l}
	go k.run(ctx)
	return k
}

func (k *KeepAlive) run(ctx context.Context) {
	defer close(k.done)
	for {
		l := k.Lease()
		gap := max(l.TTL()/3, minRenewGap)
		if err := sleepCtx(ctx, gap); err != nil {
			return
		}
		nl, err := k.c.Renew(ctx, l.ID, 0)
		switch {
		case err == nil:
			k.mu.Lock()
			// Keep the credentials of the grant: a renew answer may omit them.
			nl.ProxyURL, nl.Username, nl.Password = firstNonEmpty(nl.ProxyURL, l.ProxyURL), firstNonEmpty(nl.Username, l.Username), firstNonEmpty(nl.Password, l.Password)
			k.lease = *nl
			k.mu.Unlock()
		case errors.Is(err, ErrNotFound):
			k.fail(err)
			return
		case ctx.Err() != nil:
			return
		case time.Now().After(l.ExpiresAt):
			k.fail(err)
			return
		}
	}
}

func (k *KeepAlive) fail(err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.err = err
}

// Lease is the lease as last granted or renewed.
func (k *KeepAlive) Lease() Lease {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lease
}

// Done is closed when renewing stops.
func (k *KeepAlive) Done() <-chan struct{} { return k.done }

// Err says why renewing stopped on its own: the lease was lost (ErrNotFound) or expired
// while renewals failed. Nil while running and after Release or the context's end.
func (k *KeepAlive) Err() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.err
}

// Release stops renewing and releases the lease. It is safe to call more than once.
func (k *KeepAlive) Release(ctx context.Context) error {
	k.cancel()
	<-k.done
	return k.c.Release(ctx, k.Lease().ID)
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
