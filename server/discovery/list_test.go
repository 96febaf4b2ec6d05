package discovery_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/proxy-operator/proxy-operator/client"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
)

// TestDiscoveryListPages: limit and continue walk the list in id order, every proxy once;
// without a limit a page holds at most 500; the query checks its values.
func TestDiscoveryListPages(t *testing.T) {
	f := newDiscFixture(t, discOpts{token: discToken})
	const n = 1203
	for i := range n {
		f.add(fmt.Sprintf("p%04d", i), map[string]string{"geo": []string{"eu", "us"}[i%2]}, 1, verdict.Healthy, 1)
	}
	walk := func(query string) (pages []int, ids []string) {
		t.Helper()
		cont := ""
		for len(pages) <= n {
			q := query
			if cont != "" {
				q += "&continue=" + cont
			}
			r := f.do(t, "GET", "/v1/proxies?"+q, discToken, "")
			if r.code != 200 {
				t.Fatalf("GET ?%s: %d %s", q, r.code, r.body)
			}
			l := decodeAs[client.ProxyList](t, r)
			if l.Count != len(l.Proxies) {
				t.Fatalf("count %d with %d proxies", l.Count, len(l.Proxies))
			}
			pages = append(pages, l.Count)
			for _, p := range l.Proxies {
				ids = append(ids, p.ID)
			}
			if l.Continue == "" {
				return pages, ids
			}
			cont = l.Continue
		}
		t.Fatalf("?%s: more pages than proxies", query)
		return nil, nil
	}
	check := func(query string, wantPages []int, wantIDs int) {
		t.Helper()
		pages, ids := walk(query)
		if fmt.Sprint(pages) != fmt.Sprint(wantPages) {
			t.Errorf("?%s: pages of %v, want %v", query, pages, wantPages)
		}
		if len(ids) != wantIDs {
			t.Errorf("?%s: %d proxies, want %d", query, len(ids), wantIDs)
		}
		for i := 1; i < len(ids); i++ {
			if ids[i] <= ids[i-1] {
				t.Fatalf("?%s: %s after %s: not in id order, or twice", query, ids[i], ids[i-1])
			}
		}
	}
	check("healthy=true", []int{500, 500, 203}, n)
	check("limit=1000", []int{1000, 203}, n)
	check("limit=400&attr.geo=eu", []int{400, 202}, 602)
	check("limit=602&attr.geo=eu", []int{602}, 602) // no empty last page

	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "limit=1&limit=2", "continue=", "continue=%%", "continue=not*base64", "continue=" + strings.Repeat("A", 600)} {
		if r := f.do(t, "GET", "/v1/proxies?"+q, discToken, ""); r.code != 400 {
			t.Errorf("GET ?%s: %d %s, want 400", q, r.code, r.body)
		}
	}
}

// TestDiscoveryListPagesBySize: proxies with long attributes page by bytes (about 1 MiB)
// before the count (issue 30: 600 proxies x 32 attributes x 256 characters made 6.1 MB).
func TestDiscoveryListPagesBySize(t *testing.T) {
	f := newDiscFixture(t, discOpts{token: discToken})
	attrs := map[string]string{}
	for i := range 32 {
		attrs[fmt.Sprintf("k%02d", i)] = strings.Repeat("v", 256)
	}
	for i := range 600 {
		f.add(fmt.Sprintf("p%04d", i), attrs, 1, verdict.Healthy, 1)
	}
	r := f.do(t, "GET", "/v1/proxies?limit=1000", discToken, "")
	l := decodeAs[client.ProxyList](t, r)
	if r.code != 200 || l.Continue == "" || l.Count >= 600 {
		t.Fatalf("first page: %d, %d proxies, continue %q: want a page cut by size", r.code, l.Count, l.Continue)
	}
	if len(r.body) > 1<<20+64<<10 {
		t.Errorf("page of %d bytes, want about 1 MiB at most", len(r.body))
	}
}
