package gateway_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proxy-operator/proxy-operator/server/gateway"
)

func TestParseRulesRejects(t *testing.T) {
	cases := []struct{ name, doc, want string }{
		{"unknown field", "rules:\n  - name: a\n    statuses: [429]\n    result: banned\n", `unknown field "statuses"`},
		{"no name", "rules:\n  - status: [429]\n    result: banned\n", "rule 1 (): name is required"},
		{"bad result", "rules:\n  - name: a\n    status: [429]\n    result: ok\n", `rule 1 (a): result "ok": want rate_limited or banned`},
		{"no condition", "rules:\n  - name: a\n    result: banned\n", "rule 1 (a): no condition"},
		{"bad status", "rules:\n  - name: a\n    status: [42]\n    result: banned\n", "rule 1 (a): status 42 is not an HTTP status"},
		{"bad regexp", "rules:\n  - name: a\n    bodyPattern: \"(\"\n    result: banned\n", "rule 1 (a): bodyPattern: error parsing regexp"},
		{"pattern without header", "rules:\n  - name: a\n    status: [200]\n    headerPattern: x\n    result: banned\n", "headerPattern without header"},
		{"bad glob", "rules:\n  - name: a\n    hosts: [\"[\"]\n    status: [200]\n    result: banned\n", `host glob "[" is malformed`},
		{"body bytes", "bodyBytes: 99999999\nrules: []\n", "bodyBytes 99999999 out of range"},
		{"not yaml", "rules: [", "gateway rules: error converting YAML"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := gateway.ParseRules([]byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if _, err := gateway.LoadRules(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Error("a missing rules file loaded")
	}
}

func TestRulesMatch(t *testing.T) {
	p := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(p, []byte(`
rules:
  - name: shop-blocked
    hosts: ["*.shop.example"]
    header: X-Blocked
    headerPattern: "^yes$"
    result: banned
  - name: soft-limit
    status: [503]
    bodyPattern: "slow down"
    result: rate_limited
`), 0o644); err != nil {
		t.Fatal(err)
	}
	rs, err := gateway.LoadRules(p)
	if err != nil {
		t.Fatal(err)
	}
	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	cases := []struct {
		name, host string
		status     int
		h          http.Header
		body, want string
	}{
		{"header rule", "www.shop.example", 200, hdr("X-Blocked", "yes"), "", "shop-blocked"},
		{"header rule, port ignored", "www.shop.example:8080", 200, hdr("X-Blocked", "yes"), "", "shop-blocked"},
		{"header value differs", "www.shop.example", 200, hdr("X-Blocked", "no"), "", ""},
		{"other host", "news.example", 200, hdr("X-Blocked", "yes"), "", ""},
		{"body rule", "news.example", 503, nil, "please slow down", "soft-limit"},
		{"body rule, other body", "news.example", 503, nil, "maintenance", ""},
		{"default 429", "news.example", 429, nil, "", "default-429"},
		{"default 403", "news.example", 403, nil, "", "default-403"},
		{"200", "news.example", 200, nil, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := ""
			if r := rs.Match(tc.host, tc.status, tc.h, []byte(tc.body)); r != nil {
				got = r.Name
			}
			if got != tc.want {
				t.Errorf("matched %q, want %q", got, tc.want)
			}
		})
	}
	noDef, err := gateway.ParseRules([]byte("noDefaults: true\nrules: []\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r := noDef.Match("x", 429, nil, nil); r != nil {
		t.Errorf("noDefaults still matched %s", r.Name)
	}
}

func TestConfigValidate(t *testing.T) {
	ok := gateway.DefaultConfig()
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		mod  func(*gateway.Config)
		want string
	}{
		{"ttl", func(c *gateway.Config) { c.LeaseTTL = time.Second }, "-gateway-lease-ttl"},
		{"tries", func(c *gateway.Config) { c.MaxTries = 0 }, "-gateway-max-tries 0"},
		{"body", func(c *gateway.Config) { c.MaxRetryBody = 1 << 40 }, "-gateway-max-retry-body"},
		{"conns", func(c *gateway.Config) { c.MaxConns = 0 }, "-gateway-max-conns"},
		{"header", func(c *gateway.Config) { c.MaxHeaderBytes = 10 }, "-gateway-max-header-bytes 10"},
		{"idle", func(c *gateway.Config) { c.IdleTimeout = 0 }, "-gateway-idle-timeout"},
	} {
		c := gateway.DefaultConfig()
		tc.mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %s", tc.name, err, tc.want)
		}
	}
	bad := gateway.DefaultConfig()
	bad.RulesFile = filepath.Join(t.TempDir(), "none.yaml")
	if err := bad.Apply(&gateway.Gateway{}); err == nil {
		t.Error("Apply with a missing rules file succeeded")
	}
}
