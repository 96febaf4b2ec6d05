package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Usage kept for the gateway (decision 0295): bytes and requests per team and source, and the
// bytes of each UTC day and month, so a budget holds across restarts and for every gateway
// replica. Keys: u:in, u:out, u:req (hashes by "team\x00source\x00pool"); u:d:<YYYY-MM-DD>:<team> and
// u:m:<YYYY-MM>:<team> (hashes by source), each expiring after its period has long passed.
const (
	usageDayTTL   = 40 * 24 * time.Hour
	usageMonthTTL = 400 * 24 * time.Hour
)

func (s *Store) usageKeys(team string, at time.Time) (day, month string) {
	at = at.UTC()
	return s.cfg.Prefix + "u:d:" + at.Format("2006-01-02") + ":" + team, s.cfg.Prefix + "u:m:" + at.Format("2006-01") + ":" + team
}

// AddUsage adds one request's or tunnel's bytes of team through source (an upstream of pool)
// at time at.
func (s *Store) AddUsage(ctx context.Context, team, source, pool string, in, out int64, at time.Time) error {
	ctx, cancel := s.op(ctx)
	defer cancel()
	field := team + "\x00" + source + "\x00" + pool
	day, month := s.usageKeys(team, at)
	_, err := s.cfg.Client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HIncrBy(ctx, s.cfg.Prefix+"u:in", field, in)
		p.HIncrBy(ctx, s.cfg.Prefix+"u:out", field, out)
		p.HIncrBy(ctx, s.cfg.Prefix+"u:req", field, 1)
		p.HIncrBy(ctx, day, source, in+out)
		p.Expire(ctx, day, usageDayTTL)
		p.HIncrBy(ctx, month, source, in+out)
		p.Expire(ctx, month, usageMonthTTL)
		return nil
	})
	if err != nil {
		return unavailable("usage", err)
	}
	return nil
}

// SpentIn is team's bytes per source in the UTC day (month false) or month holding at.
func (s *Store) SpentIn(ctx context.Context, team string, month bool, at time.Time) (map[string]int64, error) {
	ctx, cancel := s.op(ctx)
	defer cancel()
	key, mkey := s.usageKeys(team, at)
	if month {
		key = mkey
	}
	m, err := s.cfg.Client.HGetAll(ctx, key).Result()
	if err != nil {
		return nil, unavailable("usage", err)
	}
	out := make(map[string]int64, len(m))
	for src, v := range m {
		n, _ := strconv.ParseInt(v, 10, 64)
		out[src] = n
	}
	return out, nil
}

// EachUsage calls f with every team's traffic per source and pool.
func (s *Store) EachUsage(ctx context.Context, f func(team, source, pool string, in, out, requests int64)) error {
	ctx, cancel := s.op(ctx)
	defer cancel()
	var in, out, req *redis.MapStringStringCmd
	_, err := s.cfg.Client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		in = p.HGetAll(ctx, s.cfg.Prefix+"u:in")
		out = p.HGetAll(ctx, s.cfg.Prefix+"u:out")
		req = p.HGetAll(ctx, s.cfg.Prefix+"u:req")
		return nil
	})
	if err != nil {
		return unavailable("usage", err)
	}
	num := func(m map[string]string, k string) int64 { n, _ := strconv.ParseInt(m[k], 10, 64); return n }
	for field := range req.Val() {
		parts := strings.Split(field, "\x00")
		if len(parts) != 3 {
			return fmt.Errorf("usage: unreadable field %q", field)
		}
		f(parts[0], parts[1], parts[2], num(in.Val(), field), num(out.Val(), field), num(req.Val(), field))
	}
	return nil
}
