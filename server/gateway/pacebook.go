package gateway

import (
	"context"
	"time"
)

// PaceBook shares the pace's bookings between gateway replicas; the Redis lease store is one
// (lease/redisstore: BookSend, HoldSend). With a book, the sends to a site through one
// upstream are spaced by its pace across every replica, a 429 holds that upstream off the
// site for all of them, and no replica paces the site faster than the last 429 allowed
// (decision 0268). Without one (the memory store: one process), the pacer alone decides.
type PaceBook interface {
	// BookSend books the next send through upstream to site at interval after the one before
	// (or the site's shared floor, if longer) and returns how long to wait before sending.
	BookSend(ctx context.Context, site, upstream string, interval time.Duration) (time.Duration, error)
	// HoldSend keeps upstream from sending to site for hold, and floors every replica's
	// interval for site at floor for a while.
	HoldSend(ctx context.Context, site, upstream string, hold, floor time.Duration) error
}

// bookTimeout bounds one call to the book: a slow store must not stall a request for long.
const bookTimeout = time.Second

// booked makes a local booking t through h's upstream a shared one: it waits until the book
// lets the send go, or fails with the pacer's refusal when that is after deadline. A book
// that does not answer leaves the local pace alone in charge (logged).
func (g *Gateway) booked(ctx context.Context, t paceTicket, deadline time.Time) (paceTicket, error) {
	if g.Book == nil || t.site == nil {
		return t, nil
	}
	bctx, cancel := context.WithTimeout(ctx, bookTimeout)
	wait, err := g.Book.BookSend(bctx, t.site.name, t.key, t.interval())
	cancel()
	if err != nil {
		g.Log.Debug("gateway shared pace unavailable: pacing by this replica alone", "target", t.site.name, "err", err)
		return t, nil
	}
	if wait <= 0 {
		return t, nil
	}
	at := g.Now().Add(wait)
	if at.After(deadline) {
		return paceTicket{}, g.paceError(errPaceWait, t.site)
	}
	tm := time.NewTimer(wait)
	defer tm.Stop()
	select {
	case <-tm.C:
	case <-ctx.Done():
		return paceTicket{}, ctx.Err()
	}
	t.at = at
	return t, nil
}

// holdShared tells the book of a 429 through t's upstream (see PaceBook.HoldSend).
func (g *Gateway) holdShared(ctx context.Context, t paceTicket, retryAfter time.Duration) {
	if g.Book == nil || t.site == nil {
		return
	}
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), bookTimeout)
	defer cancel()
	if err := g.Book.HoldSend(bctx, t.site.name, t.key, retryAfter, g.pace.floorOf(t.site)); err != nil {
		g.Log.Debug("gateway shared pace unavailable: the 429 holds this replica only", "target", t.site.name, "err", err)
	}
}
