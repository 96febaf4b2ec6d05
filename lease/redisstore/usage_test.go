package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proxy-operator/proxy-operator/internal/redistest"
)

// TestUsage: bytes add up per team, source and pool in totals, and per team and source in each
// UTC day and month, a new day
// starts from zero while its month goes on, and every period key expires.
func TestUsage(t *testing.T) {
	client := newClient(t, redistest.Start(t))
	s, err := New(Config{Client: client, Prefix: freshPrefix()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	day1 := time.Date(2026, 12, 6, 23, 59, 0, 0, time.UTC)
	day2 := day1.Add(2 * time.Minute)
	for _, a := range []struct {
		team, source, pool string
		in, out            int64
		at                 time.Time
	}{
		{"a", "ns/oxylabs", "", 100, 10, day1},
		{"a", "ns/oxylabs", "", 200, 20, day2},
		{"a", "fleet", "web", 4000, 0, day1},
		{"a", "fleet", "", 1000, 0, day1},
		{"b", "ns/oxylabs", "", 7, 0, day2},
	} {
		if err := s.AddUsage(ctx, a.team, a.source, a.pool, a.in, a.out, a.at); err != nil {
			t.Fatal(err)
		}
	}
	type total struct {
		Team, Source, Pool string
		In, Out, Requests  int64
	}
	var got []total
	if err := s.EachUsage(ctx, func(team, source, pool string, in, out, requests int64) {
		got = append(got, total{team, source, pool, in, out, requests})
	}); err != nil {
		t.Fatal(err)
	}
	want := []total{{"a", "fleet", "web", 4000, 0, 1}, {"a", "fleet", "", 1000, 0, 1}, {"a", "ns/oxylabs", "", 300, 30, 2}, {"b", "ns/oxylabs", "", 7, 0, 1}}
	if diff := cmp.Diff(want, got, cmp.Transformer("sort", func(ts []total) map[string]total {
		m := map[string]total{}
		for _, x := range ts {
			m[x.Team+"|"+x.Source+"|"+x.Pool] = x
		}
		return m
	})); diff != "" {
		t.Errorf("totals mismatch (-want +got):\n%s", diff)
	}
	for _, c := range []struct {
		month bool
		at    time.Time
		want  map[string]int64
	}{
		{false, day1, map[string]int64{"ns/oxylabs": 110, "fleet": 5000}},
		{false, day2, map[string]int64{"ns/oxylabs": 220}},
		{true, day2, map[string]int64{"ns/oxylabs": 330, "fleet": 5000}},
	} {
		got, err := s.SpentIn(ctx, "a", c.month, c.at)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("SpentIn(month %v, %s) mismatch (-want +got):\n%s", c.month, c.at, diff)
		}
	}
	day, month := s.usageKeys("a", day1)
	for _, k := range []string{day, month} {
		if ttl := client.TTL(ctx, k).Val(); ttl <= 0 {
			t.Errorf("%s has no expiry (TTL %v)", k, ttl)
		}
	}
}
