package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// TestDemoSite: the demo site serves its pages, answers 429 with Retry-After beyond its rate
// for one source address, and its /stats says what it served and refused to whom.
func TestDemoSite(t *testing.T) {
	srv := httptest.NewServer(newDemoSite())
	defer srv.Close()
	get := func(path string) *http.Response {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	for _, p := range []string{"/page/0", "/page/51", "/page/x", "/other"} {
		if got := get(p).StatusCode; got != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", p, got)
		}
	}
	// The burst is DemoSiteRate: far more requests in a row than the rate refills must meet a 429.
	ok, limited := 0, 0
	for i := 1; i <= 40; i++ {
		resp := get("/page/" + strconv.Itoa(i))
		switch resp.StatusCode {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
			limited++
			if resp.Header.Get("Retry-After") != "1" {
				t.Errorf("429 without Retry-After: 1: %q", resp.Header.Get("Retry-After"))
			}
		default:
			t.Fatalf("page %d: %d", i, resp.StatusCode)
		}
	}
	if ok < DemoSiteRate || limited == 0 {
		t.Errorf("40 requests in a row: %d served, %d limited; want at least %d served and some 429s", ok, limited, DemoSiteRate)
	}
	resp, err := http.Get(srv.URL + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st demoSiteStats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	src := st.Sources["127.0.0.1"]
	if len(st.Sources) != 1 || src.Served != ok || src.RateLimited != limited {
		t.Errorf("stats %+v, want one source with %d served and %d limited", st, ok, limited)
	}
}

// TestDemoSiteBoundsItsTable: past demoSiteMaxSources addresses a new source is refused, not
// remembered.
func TestDemoSiteBoundsItsTable(t *testing.T) {
	s := newDemoSite()
	for i := range demoSiteMaxSources {
		s.admit("10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256))
	}
	if s.admit("192.0.2.1") {
		t.Error("a source past the bound was admitted")
	}
	if len(s.sources) != demoSiteMaxSources {
		t.Errorf("%d sources remembered, want %d", len(s.sources), demoSiteMaxSources)
	}
}
