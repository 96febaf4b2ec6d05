//go:build !omit_gcp

package gcp

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/api/option"

	"github.com/proxy-operator/proxy-operator/providers"
)

// The tests drive the real Cloud Client Library against computeAPI, a local stand-in for the
// Compute Engine REST API that records what the library sent and answers with scripted JSON
// shaped like the real API's.

const (
	testProject = "crawl-proj-1"
	testZone    = "europe-west1-b"
	testUID     = "0b6f3c2e-8a41-4f1e-9d3a-5c7e2b1f0a99"
	testHash    = "3f2a9c0d1e4b5a67"
)

// apiCall is one request the stand-in received.
type apiCall struct {
	Method string
	Path   string
	Query  url.Values
	Body   map[string]any
}

// reply is a scripted answer: a status and a JSON body.
type reply struct {
	status int
	body   string
}

// computeAPI answers every request with the next scripted reply for its "METHOD path", or with
// the last one once they run out, and records every request.
type computeAPI struct {
	t       *testing.T
	srv     *httptest.Server
	mu      sync.Mutex
	calls   []apiCall
	replies map[string][]reply
	// hold, when set, is waited on before answering (to make a call outlive its deadline);
	// release closes it once.
	hold    chan struct{}
	release sync.Once
}

func newComputeAPI(t *testing.T) *computeAPI {
	t.Helper()
	a := &computeAPI{t: t, replies: map[string][]reply{}}
	a.srv = httptest.NewServer(http.HandlerFunc(a.serve))
	t.Cleanup(func() {
		a.unhold()
		a.srv.Close()
	})
	return a
}

// unhold lets held requests answer.
func (a *computeAPI) unhold() {
	a.release.Do(func() {
		if a.hold != nil {
			close(a.hold)
		}
	})
}

func (a *computeAPI) on(method, path string, rs ...reply) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.replies[method+" "+path] = append(a.replies[method+" "+path], rs...)
}

func (a *computeAPI) serve(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		a.t.Errorf("reading request body: %v", err)
	}
	c := apiCall{Method: r.Method, Path: r.URL.Path, Query: r.URL.Query()}
	if len(b) > 0 {
		if err := json.Unmarshal(b, &c.Body); err != nil {
			a.t.Errorf("request body is not JSON: %v: %s", err, b)
		}
	}
	a.mu.Lock()
	a.calls = append(a.calls, c)
	key := r.Method + " " + r.URL.Path
	rs := a.replies[key]
	var rep reply
	switch {
	case len(rs) == 0:
		rep = reply{http.StatusInternalServerError, apiError(500, "no reply scripted for "+key, "backendError")}
	case len(rs) == 1:
		rep = rs[0]
	default:
		rep, a.replies[key] = rs[0], rs[1:]
	}
	hold := a.hold
	a.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-r.Context().Done():
			return
		}
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(rep.status)
	_, _ = io.WriteString(w, rep.body)
}

func (a *computeAPI) recorded() []apiCall {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]apiCall(nil), a.calls...)
}

// provider builds a Provider whose client talks to the stand-in.
func (a *computeAPI) provider(t *testing.T, cfg Config) *Provider {
	t.Helper()
	if cfg.Project == "" {
		cfg.Project = testProject
	}
	p, err := New(context.Background(), cfg,
		option.WithEndpoint(a.srv.URL),
		option.WithoutAuthentication(),
		option.WithHTTPClient(a.srv.Client()))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		a.unhold()
		_ = p.Close()
	})
	return p
}

// testCtx bounds every call a test makes, so a retrying client fails the test instead of hanging it.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// apiError is the Compute API's error payload.
func apiError(code int, message, reason string) string {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{
		"code":    code,
		"message": message,
		"errors":  []any{map[string]any{"message": message, "domain": "global", "reason": reason}},
	}})
	return string(b)
}

// operation is the Operation the API answers an insert or delete with.
func operation(kind, status string) string {
	return `{"kind":"compute#operation","id":"8231712391","name":"operation-1732981234567-` + kind + `","zone":"https://www.googleapis.com/compute/v1/projects/` + testProject + `/zones/` + testZone + `","operationType":"` + kind + `","targetLink":"https://www.googleapis.com/compute/v1/projects/` + testProject + `/zones/` + testZone + `/instances/x","status":"` + status + `","progress":0,"insertTime":"2026-11-30T11:22:33.456-08:00","selfLink":"https://www.googleapis.com/compute/v1/projects/` + testProject + `/zones/` + testZone + `/operations/operation-1"}`
}

func instancesPath(zone string) string {
	return "/compute/v1/projects/" + testProject + "/zones/" + zone + "/instances"
}

func createRequest() providers.CreateRequest {
	return providers.CreateRequest{
		Name:        providers.InstanceName(testUID, testHash),
		OwnerUID:    testUID,
		SpecHash:    testHash,
		Namespace:   "crawl",
		ProxyName:   "eu-1",
		Zone:        testZone,
		MachineType: "e2-small",
		Image:       "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64",
		Port:        3128,
		CloudInit:   "#cloud-config\npackages: [squid]\n",
	}
}

func TestCreateSendsInsert(t *testing.T) {
	name := providers.InstanceName(testUID, testHash)
	wantLabels := map[string]any{
		"proxy-operator-uid":       testUID,
		"proxy-operator-managed":   "true",
		"proxy-operator-spec-hash": testHash,
	}
	base := func() map[string]any {
		return map[string]any{
			"name":        name,
			"description": "proxy-operator: Proxy crawl/eu-1",
			"machineType": "zones/europe-west1-b/machineTypes/e2-small",
			"labels":      wantLabels,
			"tags":        map[string]any{"items": []any{"proxy-operator"}},
			"disks": []any{map[string]any{
				"boot":       true,
				"autoDelete": true,
				"type":       "PERSISTENT",
				"initializeParams": map[string]any{
					"sourceImage": "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64",
				},
			}},
			"networkInterfaces": []any{map[string]any{
				"network":       "global/networks/default",
				"accessConfigs": []any{map[string]any{"name": "External NAT", "type": "ONE_TO_ONE_NAT"}},
			}},
			"metadata": map[string]any{"items": []any{map[string]any{
				"key": "user-data", "value": "#cloud-config\npackages: [squid]\n",
			}}},
		}
	}
	tests := []struct {
		name string
		cfg  Config
		req  func(r *providers.CreateRequest)
		want func(b map[string]any)
	}{
		{
			name: "defaults",
			req:  func(r *providers.CreateRequest) {},
			want: func(b map[string]any) {},
		},
		{
			name: "full image URL and machine type URL pass through",
			req: func(r *providers.CreateRequest) {
				r.Image = "https://www.googleapis.com/compute/v1/projects/debian-cloud/global/images/debian-12-bookworm-v20261111"
				r.MachineType = "zones/europe-west1-b/machineTypes/custom-2-4096"
			},
			want: func(b map[string]any) {
				b["machineType"] = "zones/europe-west1-b/machineTypes/custom-2-4096"
				disk(b)["initializeParams"] = map[string]any{"sourceImage": "https://www.googleapis.com/compute/v1/projects/debian-cloud/global/images/debian-12-bookworm-v20261111"}
			},
		},
		{
			name: "bare image name is the project's own",
			req:  func(r *providers.CreateRequest) { r.Image = "squid-golden-v3" },
			want: func(b map[string]any) {
				disk(b)["initializeParams"] = map[string]any{"sourceImage": "projects/crawl-proj-1/global/images/squid-golden-v3"}
			},
		},
		{
			name: "family shorthand is the project's own family",
			req:  func(r *providers.CreateRequest) { r.Image = "family/squid-golden" },
			want: func(b map[string]any) {
				disk(b)["initializeParams"] = map[string]any{"sourceImage": "projects/crawl-proj-1/global/images/family/squid-golden"}
			},
		},
		{
			name: "global partial URL gets the project",
			req:  func(r *providers.CreateRequest) { r.Image = "global/images/family/squid-golden" },
			want: func(b map[string]any) {
				disk(b)["initializeParams"] = map[string]any{"sourceImage": "projects/crawl-proj-1/global/images/family/squid-golden"}
			},
		},
		{
			name: "no cloud-init sends no metadata",
			req:  func(r *providers.CreateRequest) { r.CloudInit = "" },
			want: func(b map[string]any) { delete(b, "metadata") },
		},
		{
			name: "configured network, subnetwork, tag, service account and disk size",
			cfg: Config{
				Network:        "projects/shared-vpc-host/global/networks/egress",
				Subnetwork:     "regions/europe-west1/subnetworks/proxies",
				NetworkTag:     "egress-proxy",
				ServiceAccount: "proxy-vm@crawl-proj-1.iam.gserviceaccount.com",
				DiskSizeGb:     20,
			},
			req: func(r *providers.CreateRequest) {},
			want: func(b map[string]any) {
				b["tags"] = map[string]any{"items": []any{"egress-proxy"}}
				// int64 fields travel as JSON strings in the REST encoding.
				disk(b)["initializeParams"].(map[string]any)["diskSizeGb"] = "20"
				b["networkInterfaces"] = []any{map[string]any{
					"network":       "projects/shared-vpc-host/global/networks/egress",
					"subnetwork":    "regions/europe-west1/subnetworks/proxies",
					"accessConfigs": []any{map[string]any{"name": "External NAT", "type": "ONE_TO_ONE_NAT"}},
				}}
				b["serviceAccounts"] = []any{map[string]any{
					"email":  "proxy-vm@crawl-proj-1.iam.gserviceaccount.com",
					"scopes": []any{"https://www.googleapis.com/auth/cloud-platform"},
				}}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := newComputeAPI(t)
			api.on("POST", instancesPath(testZone), reply{200, operation("insert", "RUNNING")})
			p := api.provider(t, tt.cfg)
			req := createRequest()
			tt.req(&req)

			id, err := p.Create(testCtx(t), req)
			if err != nil {
				t.Fatalf("Create: %v", err)
			}
			if want := "gcp://crawl-proj-1/europe-west1-b/" + name; id != want {
				t.Errorf("id = %q, want %q", id, want)
			}
			wantBody := base()
			tt.want(wantBody)
			want := []apiCall{{Method: "POST", Path: instancesPath(testZone), Query: url.Values{}, Body: wantBody}}
			if diff := cmp.Diff(want, api.recorded()); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
		})
	}
}

// disk returns the boot disk of an expected insert body.
func disk(b map[string]any) map[string]any {
	return b["disks"].([]any)[0].(map[string]any)
}

func TestCreateFindsExistingInstance(t *testing.T) {
	api := newComputeAPI(t)
	api.on("POST", instancesPath(testZone), reply{409, apiError(409,
		"The resource 'projects/crawl-proj-1/zones/europe-west1-b/instances/"+providers.InstanceName(testUID, testHash)+"' already exists", "alreadyExists")})
	p := api.provider(t, Config{})

	id, err := p.Create(testCtx(t), createRequest())
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if want := FormatID(testProject, testZone, providers.InstanceName(testUID, testHash)); id != want {
		t.Errorf("id = %q, want %q", id, want)
	}
}

func TestCreateRejectsIncompletePlacement(t *testing.T) {
	tests := []struct {
		name    string
		req     func(r *providers.CreateRequest)
		wantMsg string
	}{
		{"no zone", func(r *providers.CreateRequest) { r.Zone = "" }, "placement.zone is required"},
		{"no machine type", func(r *providers.CreateRequest) { r.MachineType = "" }, "placement.machineType is required"},
		{"no image", func(r *providers.CreateRequest) { r.Image = "" }, "placement.image is required"},
		{"zone is a region", func(r *providers.CreateRequest) { r.Zone = "Europe/West1" }, `placement.zone "Europe/West1"`},
		{"spec hash not a label value", func(r *providers.CreateRequest) { r.SpecHash = "ABC" }, "proxy-operator-spec-hash"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := newComputeAPI(t)
			p := api.provider(t, Config{})
			req := createRequest()
			tt.req(&req)

			_, err := p.Create(testCtx(t), req)
			if !errors.Is(err, providers.ErrPermanent) {
				t.Fatalf("err = %v, want ErrPermanent", err)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("err = %q, want it to contain %q", err, tt.wantMsg)
			}
			if got := api.recorded(); len(got) != 0 {
				t.Errorf("made %d API calls, want none: %+v", len(got), got)
			}
		})
	}
}

// instanceJSON is an instance as instances.get returns it.
func instanceJSON(name, zone, status, natIP string, labels map[string]string) string {
	nic := map[string]any{
		"kind":      "compute#networkInterface",
		"network":   "https://www.googleapis.com/compute/v1/projects/" + testProject + "/global/networks/default",
		"networkIP": "10.132.0.7",
		"name":      "nic0",
	}
	ac := map[string]any{"kind": "compute#accessConfig", "type": "ONE_TO_ONE_NAT", "name": "External NAT", "networkTier": "PREMIUM"}
	if natIP != "" {
		ac["natIP"] = natIP
	}
	nic["accessConfigs"] = []any{ac}
	b, _ := json.Marshal(map[string]any{
		"kind":                   "compute#instance",
		"id":                     "4567890123456789012",
		"creationTimestamp":      "2026-11-30T11:22:33.456-08:00",
		"name":                   name,
		"machineType":            "https://www.googleapis.com/compute/v1/projects/" + testProject + "/zones/" + zone + "/machineTypes/e2-small",
		"status":                 status,
		"zone":                   "https://www.googleapis.com/compute/v1/projects/" + testProject + "/zones/" + zone,
		"networkInterfaces":      []any{nic},
		"labels":                 labels,
		"labelFingerprint":       "42WmSpB8rSM=",
		"selfLink":               "https://www.googleapis.com/compute/v1/projects/" + testProject + "/zones/" + zone + "/instances/" + name,
		"someFieldFromTheFuture": map[string]any{"ignored": true},
	})
	return string(b)
}

func managedLabels(uid, hash string) map[string]string {
	return map[string]string{providers.TagOwnerUID: uid, providers.TagManaged: "true", providers.TagSpecHash: hash}
}

func TestGetMapsInstance(t *testing.T) {
	name := providers.InstanceName(testUID, testHash)
	created := time.Date(2026, 11, 30, 19, 22, 33, 456e6, time.UTC)
	tests := []struct {
		status, natIP string
		wantState     providers.State
	}{
		{"PROVISIONING", "", providers.StateProvisioning},
		{"STAGING", "34.76.1.2", providers.StateProvisioning},
		{"RUNNING", "34.76.1.2", providers.StateRunning},
		{"REPAIRING", "34.76.1.2", providers.StateProvisioning},
		{"STOPPING", "34.76.1.2", providers.StateStopped},
		{"STOPPED", "", providers.StateStopped},
		{"SUSPENDING", "34.76.1.2", providers.StateStopped},
		{"SUSPENDED", "", providers.StateStopped},
		{"TERMINATED", "", providers.StateTerminated},
	}
	for _, tt := range tests {
		t.Run(tt.status, func(t *testing.T) {
			api := newComputeAPI(t)
			api.on("GET", instancesPath(testZone)+"/"+name, reply{200, instanceJSON(name, testZone, tt.status, tt.natIP, managedLabels(testUID, testHash))})
			p := api.provider(t, Config{})

			got, err := p.Get(testCtx(t), FormatID(testProject, testZone, name))
			if err != nil {
				t.Fatalf("Get: %v", err)
			}
			want := &providers.Instance{
				ID:        "gcp://crawl-proj-1/europe-west1-b/" + name,
				Name:      name,
				IP:        tt.natIP,
				State:     tt.wantState,
				OwnerUID:  testUID,
				SpecHash:  testHash,
				CreatedAt: created,
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("instance (-want +got):\n%s", diff)
			}
			wantCalls := []apiCall{{Method: "GET", Path: instancesPath(testZone) + "/" + name, Query: url.Values{}}}
			if diff := cmp.Diff(wantCalls, api.recorded()); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
		})
	}
}

func TestGetNotFound(t *testing.T) {
	api := newComputeAPI(t)
	name := providers.InstanceName(testUID, testHash)
	api.on("GET", instancesPath(testZone)+"/"+name, reply{404, apiError(404,
		"The resource 'projects/crawl-proj-1/zones/europe-west1-b/instances/"+name+"' was not found", "notFound")})
	p := api.provider(t, Config{})

	got, err := p.Get(testCtx(t), FormatID(testProject, testZone, name))
	if !errors.Is(err, providers.ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
	if got != nil {
		t.Errorf("instance = %+v, want nil", got)
	}
}

func TestDelete(t *testing.T) {
	name := providers.InstanceName(testUID, testHash)
	path := instancesPath(testZone) + "/" + name
	tests := []struct {
		name      string
		rep       reply
		wantClass error
	}{
		{"submitted", reply{200, operation("delete", "PENDING")}, nil},
		{"already gone", reply{404, apiError(404, "The resource '"+name+"' was not found", "notFound")}, nil},
		{"previous operation still running", reply{400, apiError(400, "The resource '"+name+"' is not ready", "resourceNotReady")}, providers.ErrTransient},
		{"permission denied", reply{403, apiError(403, "Required 'compute.instances.delete' permission for '"+name+"'", "forbidden")}, providers.ErrPermanent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := newComputeAPI(t)
			api.on("DELETE", path, tt.rep)
			p := api.provider(t, Config{})

			err := p.Delete(testCtx(t), FormatID(testProject, testZone, name))
			if tt.wantClass == nil && err != nil {
				t.Fatalf("Delete: %v", err)
			}
			if tt.wantClass != nil && !errors.Is(err, tt.wantClass) {
				t.Fatalf("err = %v, want %v", err, tt.wantClass)
			}
			want := []apiCall{{Method: "DELETE", Path: path, Query: url.Values{}}}
			if diff := cmp.Diff(want, api.recorded()); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMalformedIDIsPermanent(t *testing.T) {
	for _, id := range []string{
		"",
		"mock://x",
		"gcp://crawl-proj-1/europe-west1-b",
		"gcp://crawl-proj-1/europe-west1-b/proxy-1/extra",
		"gcp://crawl-proj-1//proxy-1",
		"gcp://crawl-proj-1/europe-west1-b/../../x",
		"gcp://UPPER-proj/europe-west1-b/proxy-1",
	} {
		t.Run(id, func(t *testing.T) {
			api := newComputeAPI(t)
			p := api.provider(t, Config{})
			if _, err := p.Get(testCtx(t), id); !errors.Is(err, providers.ErrPermanent) {
				t.Errorf("Get err = %v, want ErrPermanent", err)
			}
			if err := p.Delete(testCtx(t), id); !errors.Is(err, providers.ErrPermanent) {
				t.Errorf("Delete err = %v, want ErrPermanent", err)
			}
			if got := api.recorded(); len(got) != 0 {
				t.Errorf("made %d API calls, want none", len(got))
			}
		})
	}
}

func TestIDRoundTrip(t *testing.T) {
	id := FormatID("example.com:crawl-proj", "us-central1-a", "proxy-0123456789ab")
	project, zone, name, err := ParseID(id)
	if err != nil {
		t.Fatalf("ParseID(%q): %v", id, err)
	}
	got := []string{project, zone, name}
	want := []string{"example.com:crawl-proj", "us-central1-a", "proxy-0123456789ab"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("parts (-want +got):\n%s", diff)
	}
}

func TestListByTagReadsEveryZoneAndPage(t *testing.T) {
	api := newComputeAPI(t)
	path := "/compute/v1/projects/" + testProject + "/aggregated/instances"
	page := func(next string, items map[string]any) string {
		m := map[string]any{"kind": "compute#instanceAggregatedList", "id": "projects/" + testProject + "/aggregated/instances", "items": items}
		if next != "" {
			m["nextPageToken"] = next
		}
		b, _ := json.Marshal(m)
		return string(b)
	}
	inst := func(name, zone, status, ip, uid string) any {
		var v any
		_ = json.Unmarshal([]byte(instanceJSON(name, zone, status, ip, managedLabels(uid, testHash))), &v)
		return v
	}
	var unmanaged any
	_ = json.Unmarshal([]byte(instanceJSON("bastion", "europe-west1-b", "RUNNING", "34.1.1.1", map[string]string{"team": "infra"})), &unmanaged)
	noInstances := map[string]any{"warning": map[string]any{
		"code": "NO_RESULTS_ON_PAGE", "message": "There are no results for scope 'zones/asia-east1-a' on this page.",
		"data": []any{map[string]any{"key": "scope", "value": "zones/asia-east1-a"}},
	}}
	api.on("GET", path,
		reply{200, page("page-2-token", map[string]any{
			"zones/europe-west1-b": map[string]any{"instances": []any{inst("proxy-aaaaaaaaaaaa", "europe-west1-b", "RUNNING", "34.76.1.2", "uid-a"), unmanaged}},
			"zones/asia-east1-a":   noInstances,
		})},
		reply{200, page("", map[string]any{
			"zones/us-central1-a": map[string]any{"instances": []any{inst("proxy-bbbbbbbbbbbb", "us-central1-a", "PROVISIONING", "", "uid-b")}},
		})},
	)
	p := api.provider(t, Config{})

	got, err := p.ListByTag(testCtx(t))
	if err != nil {
		t.Fatalf("ListByTag: %v", err)
	}
	created := time.Date(2026, 11, 30, 19, 22, 33, 456e6, time.UTC)
	want := []providers.Instance{
		{ID: "gcp://crawl-proj-1/europe-west1-b/proxy-aaaaaaaaaaaa", Name: "proxy-aaaaaaaaaaaa", IP: "34.76.1.2", State: providers.StateRunning, OwnerUID: "uid-a", SpecHash: testHash, CreatedAt: created},
		{ID: "gcp://crawl-proj-1/us-central1-a/proxy-bbbbbbbbbbbb", Name: "proxy-bbbbbbbbbbbb", State: providers.StateProvisioning, OwnerUID: "uid-b", SpecHash: testHash, CreatedAt: created},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("instances (-want +got):\n%s", diff)
	}
	filter := "labels.proxy-operator-managed=true"
	wantCalls := []apiCall{
		{Method: "GET", Path: path, Query: url.Values{"filter": {filter}}},
		{Method: "GET", Path: path, Query: url.Values{"filter": {filter}, "pageToken": {"page-2-token"}}},
	}
	if diff := cmp.Diff(wantCalls, api.recorded()); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}

// TestListByOwnerFiltersOnTheServer: the lookup a sync makes before a create asks the API for
// one owner's instances (label filter), and still drops any other owner's the answer holds.
func TestListByOwnerFiltersOnTheServer(t *testing.T) {
	api := newComputeAPI(t)
	path := "/compute/v1/projects/" + testProject + "/aggregated/instances"
	old := providers.InstanceName("uid-a", "0000000000aaaa")
	api.on("GET", path,
		reply{200, `{"items":{"zones/europe-west1-b":{"instances":[` +
			instanceJSON(old, testZone, "RUNNING", "34.76.1.2", managedLabels("uid-a", "0000000000aaaa")) + `,` +
			instanceJSON("proxy-bbbbbbbbbbbb", testZone, "RUNNING", "34.76.1.3", managedLabels("uid-b", testHash)) + `]}}}`},
	)
	p := api.provider(t, Config{})

	got, err := providers.ListByOwner(testCtx(t), p, "uid-a")
	if err != nil {
		t.Fatalf("ListByOwner: %v", err)
	}
	if len(got) != 1 || got[0].Name != old || got[0].OwnerUID != "uid-a" {
		t.Errorf("instances = %+v, want only %s of uid-a", got, old)
	}
	wantCalls := []apiCall{{Method: "GET", Path: path, Query: url.Values{"filter": {`(labels.proxy-operator-managed = "true") (labels.proxy-operator-uid = "uid-a")`}}}}
	if diff := cmp.Diff(wantCalls, api.recorded()); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}

	// An owner that cannot be a label value owns nothing here, and costs no request.
	if got, err := p.ListByOwner(testCtx(t), `x" OR labels.a = "b`); err != nil || len(got) != 0 {
		t.Errorf("hostile owner: %v %v, want nothing", got, err)
	}
	if n := len(api.recorded()); n != 1 {
		t.Errorf("%d requests after the hostile owner, want still 1", n)
	}
}

func TestListByTagFailsWhole(t *testing.T) {
	// A list that breaks on page two must not return page one as if it were everything:
	// orphan GC would take the missing instances for deleted ones and skip nothing, but a
	// partial list is still not the list.
	api := newComputeAPI(t)
	path := "/compute/v1/projects/" + testProject + "/aggregated/instances"
	api.on("GET", path,
		reply{200, `{"items":{"zones/europe-west1-b":{"instances":[` + instanceJSON("proxy-aaaaaaaaaaaa", testZone, "RUNNING", "34.76.1.2", managedLabels("uid-a", testHash)) + `]}},"nextPageToken":"t2"}`},
		reply{503, apiError(503, "The service is currently unavailable.", "backendError")},
	)
	p := api.provider(t, Config{})

	got, err := p.ListByTag(testCtx(t))
	if !errors.Is(err, providers.ErrTransient) {
		t.Fatalf("err = %v, want ErrTransient", err)
	}
	if got != nil {
		t.Errorf("instances = %+v, want nil", got)
	}
}

// TestErrorMapping sends each operation the API's real error payloads and checks the class
// and that the API's message survives into the error (it becomes the condition message).
func TestErrorMapping(t *testing.T) {
	name := providers.InstanceName(testUID, testHash)
	id := FormatID(testProject, testZone, name)
	listPath := "/compute/v1/projects/" + testProject + "/aggregated/instances"
	type call struct {
		method, path string
		do           func(ctx context.Context, p *Provider) error
	}
	insert := call{"POST", instancesPath(testZone), func(ctx context.Context, p *Provider) error {
		_, err := p.Create(ctx, createRequest())
		return err
	}}
	get := call{"GET", instancesPath(testZone) + "/" + name, func(ctx context.Context, p *Provider) error {
		_, err := p.Get(ctx, id)
		return err
	}}
	del := call{"DELETE", instancesPath(testZone) + "/" + name, func(ctx context.Context, p *Provider) error {
		return p.Delete(ctx, id)
	}}
	list := call{"GET", listPath, func(ctx context.Context, p *Provider) error {
		_, err := p.ListByTag(ctx)
		return err
	}}
	tests := []struct {
		name      string
		call      call
		rep       reply
		wantClass error
		wantMsg   string
	}{
		{"insert CPU quota", insert, reply{403, apiError(403, "Quota 'CPUS' exceeded.  Limit: 24.0 in region europe-west1.", "quotaExceeded")}, providers.ErrQuotaExceeded, "Quota 'CPUS' exceeded"},
		{"insert rate limit", insert, reply{403, apiError(403, "Rate Limit Exceeded", "rateLimitExceeded")}, providers.ErrQuotaExceeded, "Rate Limit Exceeded"},
		{"insert user rate limit", insert, reply{403, apiError(403, "User Rate Limit Exceeded", "userRateLimitExceeded")}, providers.ErrQuotaExceeded, "User Rate Limit Exceeded"},
		{"insert too many requests", insert, reply{429, apiError(429, "Too many requests", "rateLimitExceeded")}, providers.ErrQuotaExceeded, "Too many requests"},
		{"insert zone exhausted", insert, reply{503, apiError(503, "The zone 'projects/crawl-proj-1/zones/europe-west1-b' does not have enough resources available to fulfill the request.", "ZONE_RESOURCE_POOL_EXHAUSTED")}, providers.ErrQuotaExceeded, "does not have enough resources"},
		{"insert invalid machine type", insert, reply{400, apiError(400, "Invalid value for field 'resource.machineType': 'zones/europe-west1-b/machineTypes/e2-smal'. Machine type with name 'e2-smal' does not exist in zone 'europe-west1-b'.", "invalid")}, providers.ErrPermanent, "Machine type with name 'e2-smal' does not exist"},
		{"insert image missing is permanent, not not-found", insert, reply{404, apiError(404, "The resource 'projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd6' was not found", "notFound")}, providers.ErrPermanent, "ubuntu-2404-lts-amd6' was not found"},
		{"insert permission denied", insert, reply{403, apiError(403, "Required 'compute.instances.create' permission for 'projects/crawl-proj-1/zones/europe-west1-b/instances/"+name+"'", "forbidden")}, providers.ErrPermanent, "Required 'compute.instances.create' permission"},
		{"insert service account not usable", insert, reply{400, apiError(400, "The user does not have access to service account 'proxy-vm@crawl-proj-1.iam.gserviceaccount.com'.  User: 'operator@crawl-proj-1.iam.gserviceaccount.com'.  Ask a project owner to grant you the iam.serviceAccountUser role on the service account", "invalid")}, providers.ErrPermanent, "iam.serviceAccountUser"},
		{"insert backend error", insert, reply{500, apiError(500, "Internal error. Please try again or contact Google Support.", "backendError")}, providers.ErrTransient, "Internal error"},
		{"insert failed operation", insert, reply{200, `{"kind":"compute#operation","name":"operation-9","status":"DONE","httpErrorStatusCode":403,"httpErrorMessage":"FORBIDDEN","error":{"errors":[{"code":"QUOTA_EXCEEDED","message":"Quota 'IN_USE_ADDRESSES' exceeded.  Limit: 8.0 in region europe-west1."}]}}`}, providers.ErrQuotaExceeded, "IN_USE_ADDRESSES"},
		{"insert operation says it exists", insert, reply{200, `{"kind":"compute#operation","name":"operation-9","status":"DONE","httpErrorStatusCode":409,"error":{"errors":[{"code":"RESOURCE_ALREADY_EXISTS","message":"The resource already exists"}]}}`}, nil, ""},
		{"insert garbage body", insert, reply{502, `<html><body>Bad Gateway</body></html>`}, providers.ErrTransient, "502"},
		{"get not found", get, reply{404, apiError(404, "The resource was not found", "notFound")}, providers.ErrNotFound, "was not found"},
		{"get unavailable", get, reply{503, apiError(503, "The service is currently unavailable.", "backendError")}, providers.ErrTransient, "currently unavailable"},
		{"get rate limit", get, reply{403, apiError(403, "Rate Limit Exceeded", "rateLimitExceeded")}, providers.ErrQuotaExceeded, "Rate Limit Exceeded"},
		{"get permission denied", get, reply{403, apiError(403, "Required 'compute.instances.get' permission", "forbidden")}, providers.ErrPermanent, "compute.instances.get"},
		{"delete unavailable", del, reply{503, apiError(503, "The service is currently unavailable.", "backendError")}, providers.ErrTransient, "currently unavailable"},
		{"list project missing", list, reply{404, apiError(404, "The resource 'projects/crawl-proj-1' was not found", "notFound")}, providers.ErrPermanent, "projects/crawl-proj-1' was not found"},
		{"list rate limit", list, reply{429, apiError(429, "Too many requests", "rateLimitExceeded")}, providers.ErrQuotaExceeded, "Too many requests"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := newComputeAPI(t)
			api.on(tt.call.method, tt.call.path, tt.rep)
			p := api.provider(t, Config{})

			err := tt.call.do(testCtx(t), p)
			if tt.wantClass == nil {
				if err != nil {
					t.Fatalf("err = %v, want nil", err)
				}
				return
			}
			if got := providers.Class(err); got != tt.wantClass || !errors.Is(err, tt.wantClass) {
				t.Fatalf("class = %v (err %v), want %v", got, err, tt.wantClass)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("err = %q, want it to contain %q", err, tt.wantMsg)
			}
			// The library's own retries are off: the sync core owns retrying.
			if n := len(api.recorded()); n != 1 {
				t.Errorf("made %d requests, want 1", n)
			}
		})
	}
}

func TestConnectionErrorsAreTransient(t *testing.T) {
	t.Run("refused", func(t *testing.T) {
		api := newComputeAPI(t)
		p := api.provider(t, Config{})
		api.srv.Close()
		_, err := p.Get(testCtx(t), FormatID(testProject, testZone, "proxy-1"))
		if !errors.Is(err, providers.ErrTransient) {
			t.Errorf("err = %v, want ErrTransient", err)
		}
	})
	t.Run("request timeout", func(t *testing.T) {
		api := newComputeAPI(t)
		api.hold = make(chan struct{})
		p := api.provider(t, Config{RequestTimeout: Duration(200 * time.Millisecond)})
		start := time.Now()
		_, err := p.Create(testCtx(t), createRequest())
		if !errors.Is(err, providers.ErrTransient) {
			t.Errorf("err = %v, want ErrTransient", err)
		}
		// The bound is the configured request timeout, not the caller's 10s test deadline.
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("Create returned after %v; the 200ms request timeout did not apply", d)
		}
	})
	t.Run("caller deadline", func(t *testing.T) {
		api := newComputeAPI(t)
		api.hold = make(chan struct{})
		p := api.provider(t, Config{})
		ctx, cancel := context.WithTimeout(testCtx(t), 100*time.Millisecond)
		defer cancel()
		_, err := p.ListByTag(ctx)
		if !errors.Is(err, providers.ErrTransient) {
			t.Errorf("err = %v, want ErrTransient", err)
		}
	})
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{"minimal", Config{Project: "crawl-proj-1"}, ""},
		{"domain-scoped project", Config{Project: "example.com:crawl-proj"}, ""},
		{"no project", Config{}, "gcp: project is required"},
		{"bad project", Config{Project: "Crawl Proj"}, `gcp: project "Crawl Proj" is not a project ID`},
		{"bad tag", Config{Project: "crawl-proj-1", NetworkTag: "Proxy_Tag"}, `gcp: networkTag "Proxy_Tag"`},
		{"negative disk", Config{Project: "crawl-proj-1", DiskSizeGb: -1}, "gcp: diskSizeGb -1 must not be negative"},
		{"service account not an email", Config{Project: "crawl-proj-1", ServiceAccount: "proxy-vm"}, `gcp: serviceAccount "proxy-vm" must be a service account email`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			got := ""
			if err != nil {
				got = err.Error()
			}
			if !strings.HasPrefix(got, tt.wantErr) || (tt.wantErr == "" && got != "") {
				t.Errorf("Validate() = %q, want %q", got, tt.wantErr)
			}
		})
	}
}

func TestDurationJSON(t *testing.T) {
	var c Config
	if err := json.Unmarshal([]byte(`{"project":"crawl-proj-1","requestTimeout":"45s"}`), &c); err != nil {
		t.Fatalf("Unmarshal: %v", err)
	}
	if got, want := time.Duration(c.RequestTimeout), 45*time.Second; got != want {
		t.Errorf("requestTimeout = %v, want %v", got, want)
	}
	for _, bad := range []string{`{"requestTimeout":45}`, `{"requestTimeout":"soon"}`, `{"requestTimeout":"-1s"}`} {
		if err := json.Unmarshal([]byte(bad), &c); err == nil {
			t.Errorf("Unmarshal(%s) succeeded, want an error", bad)
		}
	}
}

// TestNewUsesApplicationDefaultCredentials points ADC at a file that does not exist: New must
// fail there, naming ADC, rather than build a client that fails on every call. (The env var
// also keeps ADC from asking the metadata server, so the test sends nothing anywhere.)
func TestNewUsesApplicationDefaultCredentials(t *testing.T) {
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", t.TempDir()+"/missing.json")
	_, err := New(testCtx(t), Config{Project: testProject})
	if err == nil {
		t.Fatal("New succeeded without credentials")
	}
	if !strings.Contains(err.Error(), "Application Default Credentials") {
		t.Errorf("err = %q, want it to name Application Default Credentials", err)
	}
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	_, err := New(testCtx(t), Config{}, option.WithoutAuthentication())
	if err == nil || err.Error() != "gcp: project is required" {
		t.Errorf("err = %v, want \"gcp: project is required\"", err)
	}
}

// TestGetReportsFailedInsert: an insert accepted and then failed (the zone has no machines)
// leaves no instance. Get says why, once, instead of a bare NotFound.
func TestGetReportsFailedInsert(t *testing.T) {
	name := providers.InstanceName(testUID, testHash)
	getPath := instancesPath(testZone) + "/" + name
	opPath := "/compute/v1/projects/" + testProject + "/zones/" + testZone + "/operations/operation-1732981234567-insert"
	notFound := reply{404, apiError(404, "The resource 'projects/crawl-proj-1/zones/europe-west1-b/instances/"+name+"' was not found", "notFound")}
	failedOp := func(code, message string, status int) reply {
		b, _ := json.Marshal(map[string]any{
			"kind": "compute#operation", "name": "operation-1732981234567-insert", "operationType": "insert",
			"status": "DONE", "httpErrorStatusCode": status, "httpErrorMessage": "SERVICE UNAVAILABLE",
			"error": map[string]any{"errors": []any{map[string]any{"code": code, "message": message}}},
		})
		return reply{200, string(b)}
	}
	tests := []struct {
		name      string
		op        reply
		wantClass error
		wantMsg   string
		// wantPolls is how many times the operation is read over two Gets.
		wantPolls int
	}{
		{"zone exhausted", failedOp("ZONE_RESOURCE_POOL_EXHAUSTED", "The zone 'projects/crawl-proj-1/zones/europe-west1-b' does not have enough resources available to fulfill the request.", 503),
			providers.ErrQuotaExceeded, "ZONE_RESOURCE_POOL_EXHAUSTED", 1},
		{"image unusable", failedOp("INVALID_USAGE", "Image 'squid-golden' is not ready.", 400),
			providers.ErrPermanent, "Image 'squid-golden' is not ready", 1},
		{"succeeded, instance since gone", reply{200, operation("insert", "DONE")}, providers.ErrNotFound, "was not found", 1},
		{"still running", reply{200, operation("insert", "RUNNING")}, providers.ErrNotFound, "was not found", 2},
		{"operation unreadable", reply{503, apiError(503, "The service is currently unavailable.", "backendError")}, providers.ErrNotFound, "was not found", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			api := newComputeAPI(t)
			api.on("POST", instancesPath(testZone), reply{200, operation("insert", "RUNNING")})
			api.on("GET", getPath, notFound)
			api.on("GET", opPath, tt.op)
			p := api.provider(t, Config{})
			id, err := p.Create(testCtx(t), createRequest())
			if err != nil {
				t.Fatalf("Create: %v", err)
			}

			got, err := p.Get(testCtx(t), id)
			if got != nil || providers.Class(err) != tt.wantClass {
				t.Fatalf("Get = %+v, %v; want class %v", got, err, tt.wantClass)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("err = %q, want it to contain %q", err, tt.wantMsg)
			}
			// Reported once: the next Get is a plain NotFound, so the sync core inserts again
			// (after its quota wait) instead of failing on an old answer.
			if _, err := p.Get(testCtx(t), id); tt.wantPolls == 1 && !errors.Is(err, providers.ErrNotFound) {
				t.Errorf("second Get err = %v, want ErrNotFound", err)
			}
			polls := 0
			for _, c := range api.recorded() {
				if c.Path == opPath {
					polls++
				}
			}
			if polls != tt.wantPolls {
				t.Errorf("operation read %d times, want %d", polls, tt.wantPolls)
			}
		})
	}
}

func TestFoundOrDeletedInstanceStopsFollowingInsert(t *testing.T) {
	name := providers.InstanceName(testUID, testHash)
	getPath := instancesPath(testZone) + "/" + name
	opPath := "/compute/v1/projects/" + testProject + "/zones/" + testZone + "/operations/operation-1732981234567-insert"
	api := newComputeAPI(t)
	api.on("POST", instancesPath(testZone), reply{200, operation("insert", "RUNNING")})
	api.on("GET", getPath,
		reply{200, instanceJSON(name, testZone, "PROVISIONING", "", managedLabels(testUID, testHash))},
		reply{404, apiError(404, "not found", "notFound")})
	api.on("GET", opPath, reply{200, `{"name":"operation-1732981234567-insert","status":"DONE","error":{"errors":[{"code":"QUOTA_EXCEEDED","message":"late"}]}}`})
	p := api.provider(t, Config{})
	id, err := p.Create(testCtx(t), createRequest())
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if _, err := p.Get(testCtx(t), id); err != nil {
		t.Fatalf("first Get: %v", err)
	}
	if _, err := p.Get(testCtx(t), id); !errors.Is(err, providers.ErrNotFound) {
		t.Errorf("second Get err = %v, want ErrNotFound (the instance was seen: its insert is no longer followed)", err)
	}
	for _, c := range api.recorded() {
		if c.Path == opPath {
			t.Errorf("operation was read after the instance was seen")
		}
	}
}
