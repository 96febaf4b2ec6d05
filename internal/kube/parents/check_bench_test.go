package parents

import (
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
)

type oneParent struct{ p Parent }

func (o oneParent) Synced() bool                            { return true }
func (o oneParent) Get(Kind, string, string) (Parent, bool) { return o.p, true }

// BenchmarkCheck is what the check adds to every hook call: one lookup (here a stand-in) and
// the cached spec, decoded when the watch delivered it, compared with the body's. Baseline: decoding the body's spec from JSON,
// which every hook call already does.
func BenchmarkCheck(b *testing.B) {
	raw := []byte(`{"mode":"Managed","provider":"gcp","maxLeases":10,"attributes":{"geo":"eu","pool":"web","tier":"a","asn":"15169","team":"x","region":"ew1"},
		"healthCheck":{"probeURL":"http://probe.example.com/generate_204","intervalSeconds":30,"timeoutSeconds":5,"failureThreshold":3,"successThreshold":1}}`)
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON([]byte(`{"apiVersion":"crawl.example.com/v1alpha1","kind":"Proxy","metadata":{"name":"a","namespace":"n","uid":"u"},"spec":` + string(raw) + `}`)); err != nil {
		b.Fatal(err)
	}
	obj, err := Trim(Proxy)(u)
	if err != nil {
		b.Fatal(err)
	}
	src := oneParent{Parent{UID: "u", spec: obj.(*object).spec}}
	var body v1.ProxySpec
	if err := json.Unmarshal(raw, &body); err != nil {
		b.Fatal(err)
	}
	b.Run("decode body spec (baseline)", func(b *testing.B) {
		for range b.N {
			var s v1.ProxySpec
			if err := json.Unmarshal(raw, &s); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("check", func(b *testing.B) {
		for range b.N {
			if r := Check(src, Proxy, "n", "a", "u", false, &body); r != "" {
				b.Fatal(r)
			}
		}
	})
}
