package metacontroller_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// upstreamDir holds Metacontroller's own CRDs, vendored unmodified (see its README.md).
const upstreamDir = "../testdata/metacontroller"

// upstreamPin is what testdata/metacontroller/README.md records about the vendored file.
type upstreamPin struct{ tag, commit, sha256 string }

func readUpstreamPin(t *testing.T) upstreamPin {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(upstreamDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := func(name string) string {
		m := regexp.MustCompile(`(?m)^\| ` + name + ` \| ([^|]+) \|$`).FindSubmatch(b)
		if m == nil {
			t.Fatalf("%s/README.md has no %q row", upstreamDir, name)
		}
		return strings.TrimSpace(string(m[1]))
	}
	return upstreamPin{tag: row("tag"), commit: row("commit"), sha256: row("sha256")}
}

// upstreamCRDs decodes the vendored CRD file strictly, by name.
func upstreamCRDs(t *testing.T) map[string]*apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(upstreamDir, "metacontroller-crds-v1.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*apiextensionsv1.CustomResourceDefinition{}
	for _, doc := range bytes.Split(b, []byte("\n---\n")) {
		if len(bytes.TrimSpace(bytes.TrimPrefix(doc, []byte("---")))) == 0 {
			continue
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(doc, crd); err != nil {
			t.Fatalf("vendored CRD does not decode: %v", err)
		}
		out[crd.Name] = crd
	}
	return out
}

// TestMetacontrollerCRDsArePinned checks that testdata/metacontroller holds the CRD set the
// install targets: the unmodified file of the Metacontroller release the README pins, defining
// a CompositeController that has every field our compositecontroller.yaml sets. It needs no API
// server, so it also runs where KUBEBUILDER_ASSETS is unset.
func TestMetacontrollerCRDsArePinned(t *testing.T) {
	pin := readUpstreamPin(t)

	t.Run("the file is the one recorded, unmodified", func(t *testing.T) {
		b, err := os.ReadFile(filepath.Join(upstreamDir, "metacontroller-crds-v1.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		if got := hex.EncodeToString(sum[:]); got != pin.sha256 {
			t.Errorf("sha256 = %s, README.md records %s: the vendored file was edited or replaced without updating its provenance", got, pin.sha256)
		}
		if !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(pin.commit) {
			t.Errorf("commit %q is not a full commit hash", pin.commit)
		}
		lic, err := os.ReadFile(filepath.Join(upstreamDir, "LICENSE"))
		if err != nil || !bytes.Contains(lic, []byte("Apache License")) || !bytes.Contains(lic, []byte("Version 2.0")) {
			t.Errorf("LICENSE beside the vendored file is missing or not Apache-2.0 (%v)", err)
		}
	})

	t.Run("the tag is the Metacontroller version the README pins", func(t *testing.T) {
		readme, err := os.ReadFile("../README.md")
		if err != nil {
			t.Fatal(err)
		}
		installs := regexp.MustCompile(`metacontroller/manifests/production\?ref=(v[0-9.]+)`).FindAllSubmatch(readme, -1)
		pins := regexp.MustCompile(`Metacontroller (v[0-9]+\.[0-9]+\.[0-9]+)`).FindAllSubmatch(readme, -1)
		if len(installs) == 0 || len(pins) == 0 {
			t.Fatalf("README names no Metacontroller install ref (%d) or version pin (%d)", len(installs), len(pins))
		}
		for _, m := range append(installs, pins...) {
			if string(m[1]) != pin.tag {
				t.Errorf("README says %q, the vendored CRDs are from %s", m[0], pin.tag)
			}
		}
	})

	crds := upstreamCRDs(t)
	t.Run("the set is Metacontroller's three CRDs", func(t *testing.T) {
		var names []string
		for n := range crds {
			names = append(names, n)
		}
		slices.Sort(names)
		want := []string{
			"compositecontrollers.metacontroller.k8s.io",
			"controllerrevisions.metacontroller.k8s.io",
			"decoratorcontrollers.metacontroller.k8s.io",
		}
		if diff := cmp.Diff(want, names); diff != "" {
			t.Errorf("CRDs (-want +got):\n%s", diff)
		}
	})

	cc := crds["compositecontrollers.metacontroller.k8s.io"]
	if cc == nil {
		t.Fatal("no compositecontrollers CRD")
	}
	schema := compositeControllerSchema(t, cc)

	t.Run("every field of our CompositeController is declared upstream", func(t *testing.T) {
		obj := ourCompositeController(t)
		if got := undeclared("", obj, schema); len(got) > 0 {
			t.Errorf("compositecontroller.yaml sets fields Metacontroller %s does not declare (the API server refuses them under strict validation): %v", pin.tag, got)
		}
	})

	t.Run("the misplaced hook version of issue 16 is caught", func(t *testing.T) {
		obj := misplaceHookVersions(t, ourCompositeController(t))
		want := []string{"spec.hooks.customize.webhook.version", "spec.hooks.finalize.webhook.version", "spec.hooks.sync.webhook.version"}
		if diff := cmp.Diff(want, undeclared("", obj, schema)); diff != "" {
			t.Errorf("undeclared fields (-want +got):\n%s", diff)
		}
	})

	t.Run("the controller in every recorded hook request is one Metacontroller could send", func(t *testing.T) {
		files, err := filepath.Glob("../testdata/*/*/request.json")
		if err != nil || len(files) == 0 {
			t.Fatalf("no recorded requests (%v)", err)
		}
		checked := 0
		for _, f := range files {
			var req map[string]any
			if json.Unmarshal(mustRead(t, f), &req) != nil || req["controller"] == nil {
				continue // the bad-body fixtures, and captures without the controller
			}
			checked++
			if got := undeclared("", req["controller"], schema); len(got) > 0 {
				t.Errorf("%s: controller has fields the CompositeController CRD does not declare: %v", f, got)
			}
		}
		if checked == 0 {
			t.Error("no recorded request carries a controller")
		}
	})

	t.Run("hook version is an enum of v1 and v2 beside webhook", func(t *testing.T) {
		for _, hook := range []string{"sync", "finalize", "customize"} {
			h, ok := schema.Properties["spec"].Properties["hooks"].Properties[hook]
			if !ok {
				t.Fatalf("no spec.hooks.%s", hook)
			}
			v, ok := h.Properties["version"]
			if !ok {
				t.Fatalf("no spec.hooks.%s.version", hook)
			}
			var enum []string
			for _, e := range v.Enum {
				enum = append(enum, strings.Trim(string(e.Raw), `"`))
			}
			if !slices.Contains(enum, "v2") {
				t.Errorf("spec.hooks.%s.version enum = %v, want it to allow v2", hook, enum)
			}
			if _, ok := h.Properties["webhook"].Properties["version"]; ok {
				t.Errorf("spec.hooks.%s.webhook.version is declared: this CRD set is not the v4.17 schema", hook)
			}
		}
	})
}

func compositeControllerSchema(t *testing.T, crd *apiextensionsv1.CustomResourceDefinition) *apiextensionsv1.JSONSchemaProps {
	t.Helper()
	if crd.Spec.Group != "metacontroller.k8s.io" || crd.Spec.Names.Kind != "CompositeController" || crd.Spec.Scope != apiextensionsv1.ClusterScoped {
		t.Fatalf("compositecontrollers CRD: group %q kind %q scope %q", crd.Spec.Group, crd.Spec.Names.Kind, crd.Spec.Scope)
	}
	for _, v := range crd.Spec.Versions {
		if v.Name == "v1alpha1" && v.Served && v.Storage {
			if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
				t.Fatal("compositecontrollers v1alpha1 has no schema")
			}
			return v.Schema.OpenAPIV3Schema
		}
	}
	t.Fatal("compositecontrollers has no served storage version v1alpha1")
	return nil
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// ourCompositeController is metacontroller/compositecontroller.yaml as a generic object.
func ourCompositeController(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile("install/compositecontroller.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := yaml.Unmarshal(b, &obj); err != nil {
		t.Fatal(err)
	}
	if obj["apiVersion"] != "metacontroller.k8s.io/v1alpha1" || obj["kind"] != "CompositeController" {
		t.Fatalf("compositecontroller.yaml is %v %v", obj["apiVersion"], obj["kind"])
	}
	return obj
}

// misplaceHookVersions moves each hook's version inside its webhook: the layout that Metacontroller
// refused in issue 16.
func misplaceHookVersions(t *testing.T, obj map[string]any) map[string]any {
	t.Helper()
	spec, _ := obj["spec"].(map[string]any)
	hooks, _ := spec["hooks"].(map[string]any)
	if len(hooks) == 0 {
		t.Fatal("no spec.hooks to misplace")
	}
	for name, h := range hooks {
		hook := h.(map[string]any)
		v, ok := hook["version"]
		if !ok {
			t.Fatalf("spec.hooks.%s has no version to misplace", name)
		}
		delete(hook, "version")
		hook["webhook"].(map[string]any)["version"] = v
	}
	return obj
}

// undeclared lists, sorted, the paths of fields in v that the structural schema s does not
// declare: what the API server's strict field validation refuses (or, without it, prunes).
func undeclared(path string, v any, s *apiextensionsv1.JSONSchemaProps) []string {
	if s == nil || (s.XPreserveUnknownFields != nil && *s.XPreserveUnknownFields) {
		return nil
	}
	var out []string
	switch v := v.(type) {
	case map[string]any:
		if path == "metadata" {
			return nil // ObjectMeta: validated by the server's own types, not the CRD schema
		}
		for k, child := range v {
			p := k
			if path != "" {
				p = path + "." + k
			}
			if prop, ok := s.Properties[k]; ok {
				out = append(out, undeclared(p, child, &prop)...)
			} else if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
				out = append(out, undeclared(p, child, s.AdditionalProperties.Schema)...)
			} else {
				out = append(out, p)
			}
		}
	case []any:
		if s.Items != nil && s.Items.Schema != nil {
			for _, child := range v {
				out = append(out, undeclared(path+"[]", child, s.Items.Schema)...)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
