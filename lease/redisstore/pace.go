package redisstore

import (
	"context"
	"fmt"
	"time"
)

// PaceFloorTTL is how long a site's shared floor (the slowest pace a 429 allowed) binds every
// replica after the 429.
const PaceFloorTTL = 10 * time.Minute

// maxPaceHold bounds how long one 429 holds an upstream off a site in the shared book; longer
// Retry-Afters are the store's cooldowns (lease reports), not the pace's.
const maxPaceHold = time.Hour

// BookSend books the next send through upstream to site for every gateway replica sharing the
// store: it returns how long the caller waits before sending (the upstream's next free slot,
// which then moves on by interval, or by the site's shared floor when that is longer).
func (s *Store) BookSend(ctx context.Context, site, upstream string, interval time.Duration) (time.Duration, error) {
	ctx, cancel := s.op(ctx)
	defer cancel()
	args := append(s.head(6), site, upstream, max(ms(interval), 1), 0, 0, 0)
	res, err := s.write(ctx, s.sc.pace, args...).Slice()
	if err != nil {
		return 0, unavailable("pace", err)
	}
	if len(res) != 2 {
		return 0, fmt.Errorf("pace: unexpected script answer %v", res)
	}
	return time.Duration(num(res, 0)) * time.Millisecond, nil
}

// HoldSend keeps upstream from sending to site for hold (a 429's Retry-After, at most an hour)
// and makes floor the shortest interval any replica books for site during PaceFloorTTL.
func (s *Store) HoldSend(ctx context.Context, site, upstream string, hold, floor time.Duration) error {
	hold = min(hold, maxPaceHold)
	if hold <= 0 && floor <= 0 {
		return nil
	}
	ctx, cancel := s.op(ctx)
	defer cancel()
	args := append(s.head(6), site, upstream, max(ms(floor), 1), max(ms(hold), 1), ms(floor), ms(PaceFloorTTL))
	if err := s.write(ctx, s.sc.pace, args...).Err(); err != nil {
		return unavailable("pace", err)
	}
	return nil
}
