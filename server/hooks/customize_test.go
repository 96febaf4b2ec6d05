package hooks_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proxy-operator/proxy-operator/metacontroller"
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/server/hooks"
)

func customize(t *testing.T, h http.Handler, parent map[string]any) (int, []byte) {
	t.Helper()
	body, err := json.Marshal(map[string]any{"controller": map[string]any{"kind": "CompositeController"}, "parent": parent})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/customize", bytes.NewReader(body)))
	return rec.Code, rec.Body.Bytes()
}

func customizeParent(ns string, cloudInit map[string]any) map[string]any {
	spec := map[string]any{"mode": "Managed", "provider": "mock"}
	if cloudInit != nil {
		spec["cloudInit"] = cloudInit
	}
	return map[string]any{
		"apiVersion": "crawl.example.com/v1alpha1", "kind": "Proxy",
		"metadata": map[string]any{"name": "edge", "namespace": ns, "uid": "uid-c", "generation": 1},
		"spec":     spec,
	}
}

func TestCustomizeRules(t *testing.T) {
	h := (&hooks.Hooks{Providers: providers.NewSet()}).Handler()
	// Only the named Secret is asked for (issue 10, item 7): every labelled Secret of the
	// namespace used to be, and four other 1 MB Secrets made every sync a 413.
	secretRule := func(ns string) []metacontroller.RelatedResourceRule {
		return []metacontroller.RelatedResourceRule{{
			APIVersion: "v1",
			Resource:   "secrets",
			Namespace:  ns,
			Names:      []string{"ci"},
		}}
	}
	for _, tc := range []struct {
		name      string
		parent    map[string]any
		wantRules []metacontroller.RelatedResourceRule
	}{
		{"no cloud-init", customizeParent("crawl", nil), []metacontroller.RelatedResourceRule{}},
		{"inline", customizeParent("crawl", map[string]any{"inline": "#cloud-config"}), []metacontroller.RelatedResourceRule{}},
		{"secret ref", customizeParent("crawl", map[string]any{"secretRef": map[string]any{"name": "ci", "key": "k"}}), secretRule("crawl")},
		{"secret ref, other namespace", customizeParent("team-b", map[string]any{"secretRef": map[string]any{"name": "ci", "key": "k"}}), secretRule("team-b")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := customize(t, h, tc.parent)
			if code != http.StatusOK {
				t.Fatalf("code %d: %s", code, body)
			}
			if bytes.Contains(body, []byte("null")) {
				t.Errorf("answer carries a null: %s", body)
			}
			var got metacontroller.CustomizeResponse
			dec := json.NewDecoder(bytes.NewReader(body))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&got); err != nil {
				t.Fatalf("answer does not decode strictly: %v", err)
			}
			if diff := cmp.Diff(tc.wantRules, got.RelatedResources); diff != "" {
				t.Errorf("rules (-want +got):\n%s", diff)
			}
			for _, r := range got.RelatedResources {
				if len(r.Names) > 0 && r.LabelSelector != nil {
					t.Errorf("rule %+v combines names with a selector, which Metacontroller rejects", r)
				}
			}
		})
	}
}

// TestCustomizeDependsOnlyOnSpec: Metacontroller caches the answer per (UID, generation), so
// anything outside the spec (status, labels, annotations, resourceVersion, the Secret's
// presence) must not change it.
func TestCustomizeDependsOnlyOnSpec(t *testing.T) {
	h := (&hooks.Hooks{Providers: providers.NewSet()}).Handler()
	ref := map[string]any{"secretRef": map[string]any{"name": "ci", "key": "k"}}
	base := customizeParent("crawl", ref)
	_, want := customize(t, h, base)

	varied := customizeParent("crawl", ref)
	meta := varied["metadata"].(map[string]any)
	meta["resourceVersion"] = "999"
	meta["labels"] = map[string]any{"team": "b"}
	meta["annotations"] = map[string]any{"note": "x"}
	meta["deletionTimestamp"] = "2026-11-30T12:00:00Z"
	varied["status"] = map[string]any{"phase": "Ready", "providerID": "mock://x", "ip": "127.0.0.2",
		"conditions": []any{map[string]any{"type": "Provisioned", "status": "False", "reason": "CloudInitError", "message": "m", "lastTransitionTime": "2026-11-30T12:00:00Z"}}}
	_, got := customize(t, h, varied)
	if !bytes.Equal(want, got) {
		t.Errorf("answer changed with non-spec fields:\nwant %s\ngot  %s", want, got)
	}

	// A different Secret name asks for that Secret alone.
	other := customizeParent("crawl", map[string]any{"secretRef": map[string]any{"name": "other", "key": "k2"}})
	if _, got := customize(t, h, other); !bytes.Contains(got, []byte(`"names":["other"]`)) || bytes.Contains(got, []byte("labelSelector")) {
		t.Errorf("answer for Secret other: %s, want names [other] and no label selector", got)
	}
}

func TestCustomizeRejectsBadParent(t *testing.T) {
	h := (&hooks.Hooks{Providers: providers.NewSet()}).Handler()
	for _, tc := range []struct {
		name   string
		parent map[string]any
	}{
		{"no namespace", map[string]any{"kind": "Proxy", "metadata": map[string]any{"name": "e", "uid": "u"}}},
		{"wrong kind", map[string]any{"kind": "Pod", "metadata": map[string]any{"name": "e", "namespace": "n", "uid": "u"}}},
		{"null", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if code, body := customize(t, h, tc.parent); code != http.StatusBadRequest {
				t.Errorf("code %d (%s), want 400", code, body)
			}
		})
	}
}
