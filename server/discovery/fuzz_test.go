package discovery_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proxy-operator/proxy-operator/client"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
)

// FuzzDiscovery sends arbitrary methods, paths and bodies with a valid token: the answer is
// never a 5xx, always JSON (or an empty 204), and a 4xx never changes the leases. "LEASE" in
// a path stands for a live lease's ID.
func FuzzDiscovery(f *testing.F) {
	for _, s := range []struct{ method, path, body string }{
		{"POST", "/v1/leases", `{"selector":{"geo":"eu"},"ttlSeconds":60,"target":"a.example","sessionKey":"s"}`},
		{"POST", "/v1/leases", `{"ttlSeconds":-1}`},
		{"POST", "/v1/leases", `{"selector":{"geo":1}}`},
		{"GET", "/v1/proxies?attr.geo=eu&healthy=true", ``},
		{"GET", "/v1/proxies?attr.%00=x", ``},
		{"POST", "/v1/leases/LEASE/report", `{"result":"banned","target":"a.example","retryAfterSeconds":60}`},
		{"POST", "/v1/leases/LEASE/renew", `{"ttlSeconds":30}`},
		{"DELETE", "/v1/leases/LEASE", ``},
		{"PATCH", "/v1/leases", `{}`},
	} {
		f.Add(s.method, s.path, s.body)
	}
	fx := newDiscFixture(f, discOpts{token: discToken})
	for _, n := range []string{"p1", "p2", "p3"} {
		fx.add(n, map[string]string{"geo": "eu"}, 3, verdict.Healthy, 10)
	}
	fx.add("p4", nil, 3, verdict.Unhealthy, 10)
	f.Fuzz(func(t *testing.T, method, path, body string) {
		held := fx.do(t, "POST", "/v1/leases", discToken, `{"ttlSeconds": 3600}`)
		if held.code == http.StatusOK {
			id := decodeAs[client.Lease](t, held).ID
			path = strings.ReplaceAll(path, "LEASE", id)
			defer fx.do(t, "DELETE", "/v1/leases/"+id, discToken, "")
		}
		req, err := http.NewRequest(method, fx.srv.URL+"/"+strings.TrimPrefix(path, "/"), strings.NewReader(body))
		if err != nil {
			t.Skip("not a request")
		}
		req.Header.Set("Authorization", "Bearer "+discToken)
		before := fx.store.ActiveByProxy()
		res, err := fx.srv.Client().Do(req)
		if err != nil {
			t.Skip("client refused the request")
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		switch {
		case res.StatusCode >= 500:
			t.Fatalf("%s %q: %d %s", method, path, res.StatusCode, b)
		case res.StatusCode == http.StatusNoContent:
			if len(b) != 0 {
				t.Errorf("204 with a body %q", b)
			}
			return
		case method != http.MethodHead && !json.Valid(b):
			t.Fatalf("%s %q: %d answered non-JSON %q", method, path, res.StatusCode, b)
		}
		if res.StatusCode >= 400 {
			if diff := cmp.Diff(before, fx.store.ActiveByProxy()); diff != "" {
				t.Errorf("%s %q answered %d but changed the leases (-before +after):\n%s", method, path, res.StatusCode, diff)
			}
		}
	})
}
