package redisstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/redistest"
	"github.com/proxy-operator/proxy-operator/lease"
)

// TestCredentialsSurviveRedis: fleet.Credentials redacts its password in JSON, so a record
// written with plain json.Marshal would hand crawlers "[redacted]" from a discovery replica.
// The credential must come back whole from the reader and from a lease granted by a script.
func TestCredentialsSurviveRedis(t *testing.T) {
	srv := redistest.Start(t)
	client := newClient(t, srv)
	s, err := New(Config{Client: client, Prefix: freshPrefix()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cred := &fleet.Credentials{Username: "proxy-user", Password: "s3cret-pass"}
	publish(t, s, fleet.Proxy{Key: "ns/a", IP: "10.0.0.1", Port: 3128, MaxLeases: 2, Credentials: cred})

	reader := NewReader(ReaderConfig{Store: s})
	if err := reader.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	p, ok := reader.Get("ns/a")
	if !ok || p.Credentials == nil || *p.Credentials != *cred {
		t.Fatalf("reader: proxy %v found %v, credentials %#v; want the published ones", p.Key, ok, p.Credentials)
	}
	l, err := s.Acquire(ctx, lease.Request{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if c := l.Proxy.Credentials; c == nil || c.Password != cred.Password || c.Username != cred.Username {
		t.Fatalf("lease from Redis carries credentials %#v, want the published ones", c)
	}
	// The embedded record never holds the redacted form, which would mislead a reader.
	vals, err := client.HGetAll(ctx, s.cfg.Prefix+"fleet").Result()
	if err != nil || len(vals) != 1 {
		t.Fatalf("fleet hash: %d records, %v", len(vals), err)
	}
	for _, v := range vals {
		if strings.Contains(v, "redacted") {
			t.Errorf("stored record holds a redacted credential: %s", v)
		}
	}
}
