// Package docs_test checks docs/openapi.yaml against the real discovery server: every
// request this test sends and every answer it gets back, errors included, is validated with
// kin-openapi's request and response validation, and the document, docs/api.md and the router
// must agree on routes and on the error statuses of each route.
package docs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/go-chi/chi/v5"

	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/healthtest"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/server/discovery"
	"github.com/proxy-operator/proxy-operator/server/discovery/access"
)

const token = "openapi-test-token"

// discovery is a real discovery server on a real listener.
type discoveryServer struct {
	srv     *httptest.Server
	handler http.Handler
}

func newDiscovery(t *testing.T, warmup time.Duration, proxies ...fleet.Proxy) *discoveryServer {
	t.Helper()
	view := fleet.New(time.Now, warmup)
	h := &healthtest.Map{}
	for _, p := range proxies {
		view.Upsert(p)
		h.Set(p.Key, verdict.Health{State: verdict.Healthy, LatencyMillis: 12})
	}
	// A small cooldown bound, so an exchange can reach the report's 429.
	store := lease.NewMemory(lease.Config{Fleet: view, Health: h, MaxCooldownsPerProxy: 2})
	d := &discovery.Discovery{Fleet: view, Health: h, Leases: store, Token: token, Log: slog.New(slog.DiscardHandler)}
	handler := d.Handler()
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	return &discoveryServer{srv: srv, handler: handler}
}

// newCappedDiscovery is a discovery server with two tokens (the test's and another) and a
// share of one live lease per token and namespace.
func newCappedDiscovery(t *testing.T, proxies ...fleet.Proxy) *discoveryServer {
	t.Helper()
	view := fleet.New(time.Now, 0)
	h := &healthtest.Map{}
	for _, p := range proxies {
		view.Upsert(p)
		h.Set(p.Key, verdict.Health{State: verdict.Healthy, LatencyMillis: 12})
	}
	toks, err := access.New([]access.TokenSpec{
		{Name: "crawler", Token: token, Namespaces: []string{access.AllNamespaces}, Right: access.RightLease},
		{Name: "other", Token: "another-token-0123456789", Namespaces: []string{access.AllNamespaces}, Right: access.RightLease},
	})
	if err != nil {
		t.Fatal(err)
	}
	store := lease.NewMemory(lease.Config{Fleet: view, Health: h, MaxLeasesPerHolder: 1})
	d := &discovery.Discovery{Fleet: view, Health: h, Leases: store, Tokens: toks, Log: slog.New(slog.DiscardHandler), Usage: usageView{}}
	handler := d.Handler()
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	return &discoveryServer{srv: srv, handler: handler}
}

// checker validates exchanges against the document and remembers which (operation, status)
// pairs were seen.
type checker struct {
	doc    *openapi3.T
	router routers.Router
	seen   map[string]bool // "operationId status"
}

func loadDoc(t *testing.T, serverURL string) *checker {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile("openapi.yaml")
	if err != nil {
		t.Fatalf("load openapi.yaml: %v", err)
	}
	if !doc.IsOpenAPI31OrLater() {
		t.Fatalf("openapi.yaml is %s, want 3.1", doc.OpenAPI)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("openapi.yaml is not a valid document: %v", err)
	}
	// The document names the default address; the router must match the test's listener.
	doc.Servers = openapi3.Servers{{URL: serverURL}}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return &checker{doc: doc, router: router, seen: map[string]bool{}}
}

// authenticate is what the document can say about a bearer token: one must be present. Its
// value is the server's business (a wrong one is a valid request answered 401).
func authenticate(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	h := in.RequestValidationInput.Request.Header.Get("Authorization")
	if scheme, tok, ok := strings.Cut(h, " "); !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return fmt.Errorf("no bearer token")
	}
	return nil
}

type exchange struct {
	name   string
	method string
	path   string
	body   string
	// noToken sends no Authorization header; badToken a wrong one.
	noToken, badToken bool
	want              int
	// invalid says the request itself breaks the document (the server must refuse it too).
	invalid bool
}

type answer struct {
	code   int
	header http.Header
	body   []byte
}

// do sends ex to the real server, checks the request against the document, then the answer.
func (c *checker) do(t *testing.T, d *discoveryServer, ex exchange) answer {
	t.Helper()
	newReq := func() *http.Request {
		var rd io.Reader
		if ex.body != "" {
			rd = strings.NewReader(ex.body)
		}
		req, err := http.NewRequest(ex.method, d.srv.URL+ex.path, rd)
		if err != nil {
			t.Fatal(err)
		}
		if ex.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		switch {
		case ex.badToken:
			req.Header.Set("Authorization", "Bearer wrong-"+token)
		case !ex.noToken:
			req.Header.Set("Authorization", "Bearer "+token)
		}
		return req
	}

	res, err := d.srv.Client().Do(newReq())
	if err != nil {
		t.Fatalf("%s: %v", ex.name, err)
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	got := answer{res.StatusCode, res.Header, body}
	if got.code != ex.want {
		t.Fatalf("%s: %s %s answered %d, want %d: %s", ex.name, ex.method, ex.path, got.code, ex.want, body)
	}

	req := newReq()
	route, params, err := c.router.FindRoute(req)
	if err != nil {
		// No operation: an unknown path (404) or another method on a known one (405). The
		// document's description promises the Error body for both.
		if ex.want != http.StatusNotFound && ex.want != http.StatusMethodNotAllowed {
			t.Fatalf("%s: %s %s is not in the document: %v", ex.name, ex.method, ex.path, err)
		}
		c.checkSchema(t, ex.name, "Error", body)
		c.seen["(no route) "+strconv.Itoa(got.code)] = true
		return got
	}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: authenticate, MultiError: true}}
	reqErr := openapi3filter.ValidateRequest(context.Background(), in)
	switch {
	case ex.invalid && reqErr == nil:
		t.Errorf("%s: the document accepts a request the server refuses with %d", ex.name, got.code)
	case !ex.invalid && reqErr != nil:
		t.Errorf("%s: request does not conform to the document: %v", ex.name, reqErr)
	}
	if !ex.invalid && got.code >= 200 && got.code < 300 && reqErr != nil {
		t.Errorf("%s: server accepted a request the document rejects", ex.name)
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 got.code,
		Header:                 got.header,
		Body:                   io.NopCloser(bytes.NewReader(body)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		t.Errorf("%s: %s %s answer %d does not conform to the document: %v\nbody: %s", ex.name, ex.method, ex.path, got.code, err, body)
	}
	c.checkHeaders(t, ex.name, route, got)
	c.seen[route.Operation.OperationID+" "+strconv.Itoa(got.code)] = true
	return got
}

// checkHeaders enforces the document's required response headers, which kin-openapi's
// response validation does not check.
func (c *checker) checkHeaders(t *testing.T, name string, route *routers.Route, got answer) {
	t.Helper()
	ref := route.Operation.Responses.Status(got.code)
	if ref == nil || ref.Value == nil {
		return
	}
	for h, hr := range ref.Value.Headers {
		v := got.header.Get(h)
		if v == "" {
			if hr.Value.Required {
				t.Errorf("%s: answer %d lacks required header %s", name, got.code, h)
			}
			continue
		}
		if err := hr.Value.Schema.Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
			t.Errorf("%s: header %s %q: %v", name, h, v, err)
		}
	}
}

func (c *checker) checkSchema(t *testing.T, name, schema string, body []byte) {
	t.Helper()
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Errorf("%s: body is not JSON: %v: %s", name, err, body)
		return
	}
	if err := c.doc.Components.Schemas[schema].Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
		t.Errorf("%s: body does not match %s: %v: %s", name, schema, err, body)
	}
}

func TestOpenAPIAgainstRealServer(t *testing.T) {
	creds := &fleet.Credentials{Username: "proxy-0a1b2c3d4e5f", Password: "P@ss:word/with#chars"}
	withCreds := fleet.Proxy{Key: "crawl/eu-1", UID: "u1", IP: "127.10.0.1", Port: 3128, Phase: "Ready", MaxLeases: 10,
		Attributes: map[string]string{"geo": "eu"}, Credentials: creds}
	open := fleet.Proxy{Key: "crawl/us-1", UID: "u2", IP: "127.10.0.2", Port: 8080, Phase: "Ready", MaxLeases: 1,
		Attributes: map[string]string{"geo": "us"}}
	d := newDiscovery(t, 0, withCreds, open)
	warming := newDiscovery(t, time.Hour, withCreds)
	c := loadDoc(t, d.srv.URL)
	cw := loadDoc(t, warming.srv.URL)
	cw.seen = c.seen

	big := `{"sessionKey":"` + strings.Repeat("x", 70<<10) + `"}`
	lookup := func(ex exchange) answer { return c.do(t, d, ex) }

	// Lists: never a credential.
	for _, ex := range []exchange{
		{name: "healthz", method: "GET", path: "/healthz", noToken: true, want: 200},
		{name: "list", method: "GET", path: "/v1/proxies", want: 200},
		{name: "list filtered", method: "GET", path: "/v1/proxies?healthy=true&attr.geo=eu", want: 200},
		{name: "list healthy not a bool", method: "GET", path: "/v1/proxies?healthy=maybe", want: 400, invalid: true},
		{name: "list unknown parameter", method: "GET", path: "/v1/proxies?color=red", want: 400},
		{name: "list attr repeated", method: "GET", path: "/v1/proxies?attr.geo=eu&attr.geo=us", want: 400},
		{name: "list without token", method: "GET", path: "/v1/proxies", noToken: true, want: 401, invalid: true},
		{name: "list wrong token", method: "GET", path: "/v1/proxies", badToken: true, want: 401},
		{name: "sites", method: "GET", path: "/v1/sites?limit=10", want: 200},
		{name: "sites limit out of range", method: "GET", path: "/v1/sites?limit=0", want: 400, invalid: true},
		{name: "sites without token", method: "GET", path: "/v1/sites", noToken: true, want: 401, invalid: true},
		{name: "usage", method: "GET", path: "/v1/usage", want: 200},
		{name: "usage without token", method: "GET", path: "/v1/usage", noToken: true, want: 401, invalid: true},
	} {
		a := lookup(ex)
		if bytes.Contains(a.body, []byte(creds.Password)) || bytes.Contains(a.body, []byte("password")) {
			t.Errorf("%s: the answer carries a credential: %s", ex.name, a.body)
		}
	}
	wl := cw.do(t, warming, exchange{name: "list while warming up", method: "GET", path: "/v1/proxies", want: 200})
	if wl.header.Get("Retry-After") == "" {
		t.Error("list while warming up: no Retry-After")
	}

	// Leases.
	a := lookup(exchange{name: "lease with credentials", method: "POST", path: "/v1/leases",
		body: `{"selector":{"geo":"eu"},"ttlSeconds":60,"target":"Shop.Example","sessionKey":"s1"}`, want: 200})
	var l struct {
		LeaseID, ProxyURL, Username, Password string
	}
	if err := json.Unmarshal(a.body, &l); err != nil {
		t.Fatal(err)
	}
	wantURL := "http://proxy-0a1b2c3d4e5f:P%40ss%3Aword%2Fwith%23chars@127.10.0.1:3128"
	if l.ProxyURL != wantURL || l.Username != creds.Username || l.Password != creds.Password {
		t.Errorf("lease credentials: proxyURL %q username %q password %q, want %q and the parts", l.ProxyURL, l.Username, l.Password, wantURL)
	}
	b := lookup(exchange{name: "lease without credentials (empty body)", method: "POST", path: "/v1/leases", want: 200})
	var lb struct{ ProxyURL, Password string }
	_ = json.Unmarshal(b.body, &lb)
	if lb.ProxyURL != "http://127.10.0.2:8080" || lb.Password != "" {
		t.Errorf("lease of a proxy without credentials: %s", b.body)
	}
	for _, ex := range []exchange{
		{name: "lease unknown field", method: "POST", path: "/v1/leases", body: `{"ttl":5}`, want: 400, invalid: true},
		{name: "lease ttl out of range", method: "POST", path: "/v1/leases", body: `{"ttlSeconds":0}`, want: 400, invalid: true},
		{name: "lease malformed JSON", method: "POST", path: "/v1/leases", body: `{`, want: 400, invalid: true},
		{name: "lease target is a URL", method: "POST", path: "/v1/leases", body: `{"target":"https://x/"}`, want: 400, invalid: true},
		{name: "lease nothing matches", method: "POST", path: "/v1/leases", body: `{"selector":{"geo":"mars"}}`, want: 409},
		{name: "lease all busy", method: "POST", path: "/v1/leases", body: `{"selector":{"geo":"us"}}`, want: 409},
		{name: "lease body too large", method: "POST", path: "/v1/leases", body: big, want: 413, invalid: true},
		{name: "lease without token", method: "POST", path: "/v1/leases", body: `{}`, noToken: true, want: 401, invalid: true},
	} {
		lookup(ex)
	}
	// Two tokens, each with a share of one lease per namespace: the second lease is a 429.
	capped := newCappedDiscovery(t, withCreds)
	cc := loadDoc(t, capped.srv.URL)
	cc.seen = c.seen
	for _, ex := range []exchange{
		{name: "lease within the token's share", method: "POST", path: "/v1/leases", body: `{}`, want: 200},
		{name: "lease beyond the token's share", method: "POST", path: "/v1/leases", body: `{}`, want: 429},
	} {
		if a := cc.do(t, capped, ex); ex.want == 429 && a.header.Get("Retry-After") == "" {
			t.Errorf("%s: no Retry-After", ex.name)
		}
	}
	w := cw.do(t, warming, exchange{name: "lease while warming up", method: "POST", path: "/v1/leases", body: `{}`, want: 503})
	if w.header.Get("Retry-After") == "" {
		t.Error("lease while warming up: no Retry-After")
	}

	id := "/v1/leases/" + l.LeaseID
	for _, ex := range []exchange{
		{name: "renew", method: "POST", path: id + "/renew", want: 200},
		{name: "renew with ttl", method: "POST", path: id + "/renew", body: `{"ttlSeconds":120}`, want: 200},
		{name: "renew ttl out of range", method: "POST", path: id + "/renew", body: `{"ttlSeconds":99999}`, want: 400, invalid: true},
		{name: "renew unknown lease", method: "POST", path: "/v1/leases/nope/renew", body: `{}`, want: 404},
		{name: "renew too large", method: "POST", path: id + "/renew", body: big, want: 413, invalid: true},
		{name: "renew without token", method: "POST", path: id + "/renew", noToken: true, want: 401, invalid: true},
		{name: "report rate limited", method: "POST", path: id + "/report", body: `{"result":"rate_limited","target":"shop.example","retryAfterSeconds":60}`, want: 200},
		{name: "report ok", method: "POST", path: id + "/report", body: `{"result":"ok","target":"shop.example"}`, want: 200},
		{name: "report a second target", method: "POST", path: id + "/report", body: `{"result":"banned","target":"news.example"}`, want: 200},
		{name: "report beyond the cooldown bound", method: "POST", path: id + "/report", body: `{"result":"rate_limited","target":"third.example"}`, want: 429},
		{name: "banned beyond the bound replaces the oldest", method: "POST", path: id + "/report", body: `{"result":"banned","target":"fourth.example"}`, want: 200},
		{name: "report unknown result", method: "POST", path: id + "/report", body: `{"result":"meh","target":"shop.example"}`, want: 400, invalid: true},
		{name: "report empty body", method: "POST", path: id + "/report", want: 400, invalid: true},
		{name: "report unknown lease", method: "POST", path: "/v1/leases/nope/report", body: `{"result":"ok","target":"a.example"}`, want: 404},
		{name: "report too large", method: "POST", path: id + "/report", body: big, want: 413, invalid: true},
		{name: "report without token", method: "POST", path: id + "/report", body: `{"result":"ok","target":"a.example"}`, noToken: true, want: 401, invalid: true},
		{name: "release", method: "DELETE", path: id, want: 204},
		{name: "release again", method: "DELETE", path: id, want: 204},
		{name: "release without token", method: "DELETE", path: id, noToken: true, want: 401, invalid: true},
		{name: "renew released", method: "POST", path: id + "/renew", want: 404},
		{name: "unknown route", method: "GET", path: "/v1/nothing", want: 404},
		{name: "wrong method", method: "DELETE", path: "/v1/proxies", want: 405},
	} {
		lookup(ex)
	}

	// Every documented answer of every operation was produced by the real server.
	for path, item := range c.doc.Paths.Map() {
		for method, op := range item.Operations() {
			for status := range op.Responses.Map() {
				if !c.seen[op.OperationID+" "+status] {
					t.Errorf("%s %s answer %s is documented but no test exchange produced it", method, path, status)
				}
			}
		}
	}
	for _, s := range []string{"404", "405"} {
		if !c.seen["(no route) "+s] {
			t.Errorf("no exchange produced the router's %s", s)
		}
	}
	checkRoutesAndAPIDoc(t, c.doc, d.handler)
}

var (
	apiHeading = regexp.MustCompile(`(?m)^### (GET|POST|PUT|PATCH|DELETE|HEAD) (\S+)$`)
	statusCode = regexp.MustCompile("`([1-5][0-9][0-9])`")
)

// checkRoutesAndAPIDoc: the router, docs/api.md and openapi.yaml name the same routes, and
// every status docs/api.md gives a route (its section's `NNN` codes) is documented for that
// operation (the router's own 404 and 405 apart).
func checkRoutesAndAPIDoc(t *testing.T, doc *openapi3.T, handler http.Handler) {
	t.Helper()
	inDoc := map[string]*openapi3.Operation{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			inDoc[method+" "+path] = op
		}
	}
	routes, ok := handler.(chi.Routes)
	if !ok {
		t.Fatal("discovery handler is not a chi router")
	}
	served := map[string]bool{}
	_ = chi.Walk(routes, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		served[method+" "+route] = true
		if inDoc[method+" "+route] == nil {
			t.Errorf("route %s %s is served but not in openapi.yaml", method, route)
		}
		return nil
	})
	for r := range inDoc {
		if !served[r] {
			t.Errorf("openapi.yaml documents %s, which the router does not serve", r)
		}
	}
	md, err := os.ReadFile("api.md")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(md, []byte("(openapi.yaml)")) {
		t.Error("docs/api.md does not link to openapi.yaml")
	}
	heads := apiHeading.FindAllSubmatchIndex(md, -1)
	for i, h := range heads {
		route := string(md[h[2]:h[3]]) + " " + string(md[h[4]:h[5]])
		end := len(md)
		if i+1 < len(heads) {
			end = heads[i+1][0]
		}
		if next := bytes.Index(md[h[1]:end], []byte("\n## ")); next >= 0 {
			end = h[1] + next
		}
		op := inDoc[route]
		if op == nil {
			t.Errorf("docs/api.md documents %s, which openapi.yaml lacks", route)
			continue
		}
		documented := slices.Collect(maps.Keys(op.Responses.Map()))
		for _, m := range statusCode.FindAllSubmatch(md[h[1]:end], -1) {
			code := string(m[1])
			if code == "404" && route != "POST /v1/leases/{id}/renew" && route != "POST /v1/leases/{id}/report" {
				continue
			}
			if !slices.Contains(documented, code) {
				t.Errorf("docs/api.md gives %s the answer %s, which openapi.yaml does not document (it has %v)", route, code, documented)
			}
		}
	}
}

// TestOpenAPISaysAuthIsRequired: without a token the discovery API does not start (unless
// -discovery-insecure); the spec must not tell clients that auth is off by default.
func TestOpenAPISaysAuthIsRequired(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromFile("openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := doc.Components.SecuritySchemes["bearer"]
	if s == nil || s.Value == nil {
		t.Fatal("no bearer security scheme")
	}
	d := strings.ToLower(s.Value.Description)
	if strings.Contains(d, "auth is off") || !strings.Contains(d, "-discovery-insecure") {
		t.Errorf("bearer scheme description %q: want it to say a token is required (the process does not start without one) and name -discovery-insecure", s.Value.Description)
	}
}

// usageView is a gateway's usage with a vendor row and its budget, for the schema.
type usageView struct{}

func (usageView) Usage() []discovery.UsageRow {
	return []discovery.UsageRow{
		{Team: "crawler", Source: "crawl/oxylabs", BytesIn: 7340032, BytesOut: 18000, Requests: 6120, Cost: 0.0548,
			Budgets: []discovery.UsageBudget{{Source: "crawl/oxylabs", Period: "day", Bytes: 10 << 30, Used: 7358032, Resets: time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)}}},
		{Team: "crawler", Source: "fleet", Pool: "web", BytesIn: 90177536, Requests: 80511},
	}
}
