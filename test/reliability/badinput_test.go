package reliability

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/api/option"

	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/credentials"
	"github.com/proxy-operator/proxy-operator/providers/factory"
	"github.com/proxy-operator/proxy-operator/providers/gcp"
)

// The table's surfaces.
const (
	hookSurface      = "hook"      // the Metacontroller hook server (-hook-addr)
	discoverySurface = "discovery" // the crawler API (-discovery-addr)
	configSurface    = "config"    // the providers config file (-providers-config)
)

const badToken = "reliability-token"

// badInput is one external input and what the operator must answer. For a hook answered 200
// (a Proxy spec that passes the schema but makes no sense), phase and reason are the status
// the sync writes and says is in that condition's message; for a config file, code is unused
// and says is in factory.Parse's error.
type badInput struct {
	name, surface string
	method, path  string
	token         string // discovery: the bearer token sent ("-" sends none)
	body          string
	code          int
	says          string
	phase, reason string
}

// proxyBody is a sync request for a Proxy crawl/<name> with the given spec JSON; related, when
// not empty, is the request's related object map (JSON). A Managed Proxy's credentials Secret
// is stored already, so the sync gets as far as the provider.
func proxyBody(name, spec, related string) string {
	if related == "" {
		related = "{}"
	}
	children := "{}"
	if strings.Contains(spec, `"Managed"`) {
		cred, err := credentials.ForManaged(providers.Parent{Namespace: "crawl", Name: name, UID: "uid-" + name}, nil)
		if err != nil {
			panic(err)
		}
		var secret map[string]any
		_ = json.Unmarshal(cred.Child, &secret)
		secret["metadata"].(map[string]any)["uid"] = "secret-uid-" + name
		b, _ := json.Marshal(map[string]any{credentials.SecretTypeKey: map[string]any{"crawl/" + credentials.SecretName("uid-"+name): secret}})
		children = string(b)
	}
	return fmt.Sprintf(`{"controller":{},"parent":{"apiVersion":"crawl.example.com/v1alpha1","kind":"Proxy",`+
		`"metadata":{"name":%q,"namespace":"crawl","uid":"uid-%s","generation":1},"spec":%s,"status":{}},`+
		`"children":%s,"related":%s,"finalizing":false}`, name, name, spec, children, related)
}

const mockSpec = `{"mode":"Managed","provider":"mock","healthCheck":{"probeURL":"http://127.0.0.1:9/"}}`

// badInputs is every external input the operator takes that can be wrong. The discovery rows
// are a cross-section: server.TestDiscoveryBadInput holds the full table of discovery bodies
// and query strings against the discovery router alone; providers/factory's TestInvalidConfigs
// checks each invalid-*.yaml fixture's exact message.
func badInputs() []badInput {
	parent := func(meta string) string {
		return `{"parent":{"apiVersion":"crawl.example.com/v1alpha1","kind":"Proxy","metadata":` + meta + `,"spec":` + mockSpec + `}}`
	}
	unlabelled := `{"Secret.v1":{"crawl/init":{"apiVersion":"v1","kind":"Secret","metadata":{"name":"init","namespace":"crawl"},"data":{"user-data":"I2Nsb3VkLWNvbmZpZw=="}}}}`
	labelled := `{"Secret.v1":{"crawl/init":{"apiVersion":"v1","kind":"Secret","metadata":{"name":"init","namespace":"crawl","labels":{"crawl.example.com/cloud-init":"true"}},"data":{"other":"eA=="}}}}`
	return []badInput{
		// Hook bodies.
		{name: "sync empty body", surface: hookSurface, method: "POST", path: "/sync", body: ``, code: 400, says: "sync request: empty body"},
		{name: "sync malformed JSON", surface: hookSurface, method: "POST", path: "/sync", body: `{"parent":{"kind":`, code: 400, says: "malformed JSON"},
		{name: "sync not an object", surface: hookSurface, method: "POST", path: "/sync", body: `[1,2]`, code: 400, says: "sync request"},
		{name: "sync parent a string", surface: hookSurface, method: "POST", path: "/sync", body: `{"parent":"p"}`, code: 400, says: "parent"},
		{name: "sync spec.port a string", surface: hookSurface, method: "POST", path: "/sync", body: strings.Replace(proxyBody("p", mockSpec, ""), `"mode"`, `"port":"3128","mode"`, 1), code: 400, says: "field spec.port: got JSON string, want int32"},
		{name: "sync maxLeases a bool", surface: hookSurface, method: "POST", path: "/sync", body: proxyBody("p", `{"mode":"Managed","provider":"mock","maxLeases":true}`, ""), code: 400, says: "field spec.maxLeases"},
		{name: "sync missing parent", surface: hookSurface, method: "POST", path: "/sync", body: `{"children":{}}`, code: 400, says: "body has no parent object"},
		{name: "sync null parent", surface: hookSurface, method: "POST", path: "/sync", body: `{"parent":null}`, code: 400, says: "no parent object"},
		{name: "sync missing uid", surface: hookSurface, method: "POST", path: "/sync", body: parent(`{"name":"p","namespace":"crawl"}`), code: 400, says: "metadata.uid is required"},
		{name: "sync missing name", surface: hookSurface, method: "POST", path: "/sync", body: parent(`{"namespace":"crawl","uid":"u"}`), code: 400, says: "metadata.name is required"},
		{name: "sync missing namespace", surface: hookSurface, method: "POST", path: "/sync", body: parent(`{"name":"p","uid":"u"}`), code: 400, says: "metadata.namespace is required"},
		{name: "sync wrong kind", surface: hookSurface, method: "POST", path: "/sync", body: strings.Replace(proxyBody("p", mockSpec, ""), `"kind":"Proxy"`, `"kind":"Pod"`, 1), code: 400, says: `kind "Pod", want Proxy`},
		{name: "sync wrong apiVersion", surface: hookSurface, method: "POST", path: "/sync", body: strings.Replace(proxyBody("p", mockSpec, ""), `crawl.example.com/v1alpha1`, `crawl.example.com/v2`, 1), code: 400, says: `apiVersion "crawl.example.com/v2"`},
		{name: "sync oversized", surface: hookSurface, method: "POST", path: "/sync", body: `{"pad":"` + strings.Repeat("x", 4<<20) + `"}`, code: 413, says: "exceeds 4194304 bytes"},
		{name: "finalize malformed JSON", surface: hookSurface, method: "POST", path: "/finalize", body: `{`, code: 400, says: "finalize request: malformed JSON"},
		{name: "finalize missing uid", surface: hookSurface, method: "POST", path: "/finalize", body: parent(`{"name":"p","namespace":"crawl"}`), code: 400, says: "metadata.uid is required"},
		{name: "customize missing parent", surface: hookSurface, method: "POST", path: "/customize", body: `{"controller":{}}`, code: 400, says: "customize request: body has no parent object"},
		{name: "customize wrong types", surface: hookSurface, method: "POST", path: "/customize", body: `{"parent":{"metadata":{"name":7}}}`, code: 400, says: "metadata.name"},
		{name: "sync wrong method", surface: hookSurface, method: "GET", path: "/sync", code: 405, says: "method GET not allowed on /sync"},
		{name: "finalize wrong method", surface: hookSurface, method: "PUT", path: "/finalize", body: `{}`, code: 405, says: "method PUT not allowed"},
		{name: "unknown hook path", surface: hookSurface, method: "POST", path: "/resync", body: `{}`, code: 404, says: "no route POST /resync"},

		// Proxy specs that pass the schema (or slip past it) but make no sense: the sync answers
		// 200 with a status saying why, so Metacontroller writes it and does not back off.
		{name: "spec unknown provider", surface: hookSurface, method: "POST", path: "/sync", body: proxyBody("p1", `{"mode":"Managed","provider":"nimbus"}`, ""), code: 200, phase: "Failed", reason: "UnknownProvider", says: `provider "nimbus" is not configured`},
		{name: "spec probe timeout above interval", surface: hookSurface, method: "POST", path: "/sync", body: proxyBody("p2", `{"mode":"Managed","provider":"mock","healthCheck":{"intervalSeconds":5,"timeoutSeconds":30}}`, ""), code: 200, phase: "Failed", reason: "InvalidSpec", says: "spec.healthCheck.timeoutSeconds: 30 must not exceed intervalSeconds 5"},
		{name: "spec External without endpoint", surface: hookSurface, method: "POST", path: "/sync", body: proxyBody("p3", `{"mode":"External"}`, ""), code: 200, phase: "Failed", reason: "InvalidSpec", says: "spec.endpoint: required when mode is External"},
		{name: "spec Managed with endpoint", surface: hookSurface, method: "POST", path: "/sync", body: proxyBody("p4", `{"mode":"Managed","provider":"mock","endpoint":{"host":"127.0.0.1","port":3128}}`, ""), code: 200, phase: "Failed", reason: "InvalidSpec", says: "spec.endpoint: must be absent when mode is Managed"},
		{name: "spec both cloud-init sources", surface: hookSurface, method: "POST", path: "/sync", body: proxyBody("p5", `{"mode":"Managed","provider":"mock","cloudInit":{"inline":"x","secretRef":{"name":"init","key":"user-data"}}}`, ""), code: 200, phase: "Failed", reason: "InvalidSpec", says: "spec.cloudInit: exactly one of inline or secretRef"},
		{name: "spec cloud-init Secret missing", surface: hookSurface, method: "POST", path: "/sync", body: proxyBody("p6", `{"mode":"Managed","provider":"mock","cloudInit":{"secretRef":{"name":"init","key":"user-data"}}}`, ""), code: 200, phase: "Pending", reason: "CloudInitError", says: "secret crawl/init not found, or not labelled"},
		{name: "spec cloud-init Secret unlabelled", surface: hookSurface, method: "POST", path: "/sync", body: proxyBody("p7", `{"mode":"Managed","provider":"mock","cloudInit":{"secretRef":{"name":"init","key":"user-data"}}}`, unlabelled), code: 200, phase: "Pending", reason: "CloudInitError", says: "is not labelled crawl.example.com/cloud-init=true"},
		{name: "spec cloud-init Secret lacks the key", surface: hookSurface, method: "POST", path: "/sync", body: proxyBody("p8", `{"mode":"Managed","provider":"mock","cloudInit":{"secretRef":{"name":"init","key":"user-data"}}}`, labelled), code: 200, phase: "Pending", reason: "CloudInitError", says: `has no key "user-data"`},
		{name: "spec gcp without zone", surface: hookSurface, method: "POST", path: "/sync", body: proxyBody("p10", `{"mode":"Managed","provider":"gcp","placement":{"machineType":"e2-micro","image":"projects/debian-cloud/global/images/family/debian-12"}}`, ""), code: 200, phase: "Failed", reason: "PermanentError", says: "placement.zone is required"},
		{name: "spec gcp zone not a zone", surface: hookSurface, method: "POST", path: "/sync", body: proxyBody("p11", `{"mode":"Managed","provider":"gcp","placement":{"zone":"Europe/West1","machineType":"e2-micro","image":"projects/debian-cloud/global/images/family/debian-12"}}`, ""), code: 200, phase: "Failed", reason: "PermanentError", says: `placement.zone "Europe/West1" is not a zone name`},
		{name: "spec probe URL not http", surface: hookSurface, method: "POST", path: "/sync", body: proxyBody("p9", `{"mode":"Managed","provider":"mock","healthCheck":{"probeURL":"ftp://x"}}`, ""), code: 200, phase: "Failed", reason: "InvalidSpec", says: "spec.healthCheck.probeURL"},

		// Discovery API bodies, query strings and auth, through the real router and listener.
		{name: "discovery no token", surface: discoverySurface, method: "GET", path: "/v1/proxies", token: "-", code: 401, says: "missing bearer token"},
		{name: "discovery wrong token", surface: discoverySurface, method: "POST", path: "/v1/leases", token: "nope", body: `{}`, code: 401, says: "invalid bearer token"},
		{name: "lease malformed JSON", surface: discoverySurface, method: "POST", path: "/v1/leases", body: `{"ttlSeconds":`, code: 400, says: "malformed JSON"},
		{name: "lease unknown field", surface: discoverySurface, method: "POST", path: "/v1/leases", body: `{"ttl":30}`, code: 400, says: `unknown field "ttl"`},
		{name: "lease ttl out of range", surface: discoverySurface, method: "POST", path: "/v1/leases", body: `{"ttlSeconds":0}`, code: 400, says: "ttlSeconds 0 out of range"},
		{name: "lease target a URL", surface: discoverySurface, method: "POST", path: "/v1/leases", body: `{"target":"https://example.com/x"}`, code: 400, says: "not a URL"},
		{name: "lease selector syntax", surface: discoverySurface, method: "POST", path: "/v1/leases", body: `{"selector":{"geo!":"eu"}}`, code: 400, says: "unsupported selector syntax"},
		{name: "lease oversized", surface: discoverySurface, method: "POST", path: "/v1/leases", body: `{"sessionKey":"` + strings.Repeat("a", 70<<10) + `"}`, code: 413, says: "exceeds 65536 bytes"},
		{name: "lease no proxy matches", surface: discoverySurface, method: "POST", path: "/v1/leases", body: `{"selector":{"geo":"mars"}}`, code: 409, says: "no proxy matches the selector"},
		{name: "renew unknown lease", surface: discoverySurface, method: "POST", path: "/v1/leases/no-such-lease/renew", body: ``, code: 404, says: "lease"},
		{name: "report unknown result", surface: discoverySurface, method: "POST", path: "/v1/leases/no-such-lease/report", body: `{"result":"captcha","target":"x.org"}`, code: 400, says: `result "captcha"`},
		{name: "list unknown parameter", surface: discoverySurface, method: "GET", path: "/v1/proxies?geo=eu", code: 400, says: `unknown query parameter "geo"`},
		{name: "list healthy not a bool", surface: discoverySurface, method: "GET", path: "/v1/proxies?healthy=maybe", code: 400, says: "healthy"},
		{name: "list attribute twice", surface: discoverySurface, method: "GET", path: "/v1/proxies?attr.geo=eu&attr.geo=us", code: 400, says: "given 2 times"},
		{name: "discovery wrong method", surface: discoverySurface, method: "GET", path: "/v1/leases", code: 405, says: "method GET not allowed"},
		{name: "discovery unknown route", surface: discoverySurface, method: "GET", path: "/v1/leases/x/y/z", code: 404, says: "no route"},
		{name: "hook path on the discovery listener", surface: discoverySurface, method: "POST", path: "/sync", token: "-", body: `{}`, code: 404, says: "no route POST /sync"},

		// Providers config files: every error names the entry at fault.
		{name: "config empty", surface: configSurface, body: ``, says: "providers config: no providers listed"},
		{name: "config not YAML", surface: configSurface, body: "providers: [", says: "providers config: invalid YAML: line 1:"},
		{name: "config unknown top-level field", surface: configSurface, body: "provider:\n- {name: a, type: mock}\n", says: `unknown field "provider"`},
		{name: "config second entry unknown type", surface: configSurface, body: "providers:\n- {name: a, type: mock}\n- {name: b, type: nimbus}\n", says: `providers[1] (b): unknown type "nimbus"`},
		{name: "config duplicate name", surface: configSurface, body: "providers:\n- {name: a, type: mock}\n- {name: a, type: kubernetes}\n", says: `providers[1] (a): name "a" already used by providers[0]`},
		{name: "config bad name", surface: configSurface, body: "providers:\n- {name: East_1, type: mock}\n", says: `providers[0] (East_1): name "East_1" must be a DNS label`},
		{name: "config no type", surface: configSurface, body: "providers:\n- {name: a}\n", says: "providers[0] (a): type is required"},
		{name: "config block of another type", surface: configSurface, body: "providers:\n- name: a\n  type: kubernetes\n  mock: {}\n", says: `providers[0] (a): has a "mock" block but type "kubernetes"`},
		{name: "config gcp without block", surface: configSurface, body: "providers:\n- {name: g, type: gcp}\n", says: "providers[0] (g): type gcp needs a gcp block"},
		{name: "config gcp without project", surface: configSurface, body: "providers:\n- name: g\n  type: gcp\n  gcp: {network: default}\n", says: "providers[0] (g): gcp: project is required"},
		{name: "config mock fault kind", surface: configSurface, body: "providers:\n- name: m\n  type: mock\n  mock:\n    faults: [{op: create, kind: flaky}]\n", says: `providers[0] (m): mock.faults[0]: fault kind "flaky"`},
		{name: "config gcp project not an ID", surface: configSurface, body: "providers:\n- name: g\n  type: gcp\n  gcp: {project: My Project}\n", says: `providers[0] (g): gcp: project "My Project" is not a project ID`},
		{name: "config bad duration", surface: configSurface, body: "providers:\n- name: m\n  type: mock\n  mock: {provisioningDelay: soon}\n", says: `bad duration "soon"`},
	}
}

// TestBadInput runs every row of the table against one operator assembled as main.go does.
func TestBadInput(t *testing.T) {
	// The real GCP client against a stand-in that must never be reached: a spec that cannot
	// make a VM is refused before any call.
	standIn := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the GCP stand-in was called: %s %s", r.Method, r.URL.Path)
		http.Error(w, `{"error":{"code":500,"message":"unexpected"}}`, http.StatusInternalServerError)
	}))
	defer standIn.Close()
	gp, err := gcp.New(context.Background(), gcp.Config{Project: "my-project"}, option.WithEndpoint(standIn.URL), option.WithoutAuthentication())
	if err != nil {
		t.Fatal(err)
	}
	defer gp.Close()
	op := bootOperator(t, operatorOpts{token: badToken, extra: []providers.Entry{{Name: "gcp", Type: "gcp", Provider: gp}}})
	client := &http.Client{Timeout: 30 * time.Second}
	for _, tc := range badInputs() {
		t.Run(tc.surface+"/"+tc.name, func(t *testing.T) {
			switch tc.surface {
			case configSurface:
				_, err := factory.Parse([]byte(tc.body))
				if err == nil {
					t.Fatalf("accepted, want an error saying %q", tc.says)
				}
				if !strings.Contains(err.Error(), tc.says) {
					t.Errorf("error %q does not say %q", err, tc.says)
				}
				return
			case hookSurface:
				code, body := call(t, client, tc.method, op.hookURL+tc.path, "", tc.body)
				checkAnswer(t, tc, code, body)
			case discoverySurface:
				tok := badToken
				if tc.token != "" {
					tok = tc.token
				}
				code, body := call(t, client, tc.method, op.discURL+tc.path, tok, tc.body)
				checkAnswer(t, tc, code, body)
			default:
				t.Fatalf("unknown surface %q", tc.surface)
			}
		})
	}
	// No row may give the prober an address: a probe of a Proxy the table made up could leave
	// the machine (the default probe URL is public).
	for _, p := range op.view.List() {
		if p.IP != "" {
			t.Errorf("bad input left %s in the fleet with address %s", p.Key, p.IP)
		}
	}
}

// call makes one request and returns the status and body. token "-" sends no Authorization.
func call(t *testing.T, c *http.Client, method, url, token, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" && token != "-" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, b
}

// checkAnswer compares an HTTP answer with its row: an error answer carries the message in a
// JSON "error"; a 200 sync answer carries the phase and the Provisioned condition.
func checkAnswer(t *testing.T, tc badInput, code int, body []byte) {
	t.Helper()
	if code != tc.code {
		t.Fatalf("status %d, want %d; body %.300s", code, tc.code, body)
	}
	if code != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		if err := json.Unmarshal(body, &e); err != nil {
			t.Fatalf("error answer is not JSON: %v: %.300s", err, body)
		}
		if !strings.Contains(e.Error, tc.says) {
			t.Errorf("error %q does not say %q", e.Error, tc.says)
		}
		return
	}
	var resp struct {
		Status struct {
			Phase      string `json:"phase"`
			Conditions []struct {
				Type, Status, Reason, Message string
			} `json:"conditions"`
		} `json:"status"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		t.Fatalf("sync answer does not decode: %v: %.300s", err, body)
	}
	if resp.Status.Phase != tc.phase {
		t.Errorf("phase %q, want %q", resp.Status.Phase, tc.phase)
	}
	found := false
	for _, c := range resp.Status.Conditions {
		if c.Type == "Provisioned" {
			found = true
			if c.Reason != tc.reason || c.Status != "False" || !strings.Contains(c.Message, tc.says) {
				t.Errorf("Provisioned %s/%s %q, want False/%s saying %q", c.Status, c.Reason, c.Message, tc.reason, tc.says)
			}
		}
	}
	if !found {
		t.Errorf("no Provisioned condition in %s", body)
	}
}
