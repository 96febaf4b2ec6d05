package parents_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/kube/parents"
)

// liveProxy is a Proxy as the API server serves it after a while in a cluster: spec with
// attributes, a full status with conditions, the annotations the operator and kubectl set,
// a finalizer and the managedFields of three writers.
func liveProxy(i int) *unstructured.Unstructured {
	attrs := map[string]any{}
	for _, k := range []string{"geo", "pool", "tier", "asn", "team", "region"} {
		attrs[k] = fmt.Sprintf("%s-value-%d", k, i%17)
	}
	now := time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC).Format(time.RFC3339)
	cond := func(t string) map[string]any {
		return map[string]any{"type": t, "status": "True", "reason": "Probed", "message": "probe through the proxy answered 204 in 41 ms", "lastTransitionTime": now, "observedGeneration": int64(1)}
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1.APIVersion, "kind": v1.Kind,
		"spec": map[string]any{"mode": "Managed", "provider": "gcp", "maxLeases": int64(10), "attributes": attrs,
			"placement":   map[string]any{"zone": "europe-west1-b", "machineType": "e2-micro"},
			"healthCheck": map[string]any{"probeURL": "http://probe.example.com/generate_204", "intervalSeconds": int64(30), "timeoutSeconds": int64(5), "failureThreshold": int64(3), "successThreshold": int64(1)}},
		"status": map[string]any{"phase": "Ready", "providerID": fmt.Sprintf("gcp://project/europe-west1-b/proxy-%012x", i), "ip": fmt.Sprintf("203.0.%d.%d", i/256%256, i%256),
			"observedGeneration": int64(1), "lastHealthCheckTime": now, "latencyMillis": int64(41),
			"exit":       map[string]any{"ip": fmt.Sprintf("203.0.%d.%d", i/256%256, i%256), "country": "BE", "asn": int64(15169)},
			"conditions": []any{cond("Ready"), cond("Healthy"), cond("Provisioned"), cond("ExitVerified")}},
	}}
	u.SetName(fmt.Sprintf("proxy-%05d", i))
	u.SetNamespace("team-a")
	u.SetUID(types.UID(fmt.Sprintf("0b4d1d00-0000-4000-8000-%012d", i)))
	u.SetGeneration(1)
	u.SetResourceVersion(fmt.Sprint(100000 + i))
	u.SetCreationTimestamp(metav1.NewTime(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)))
	u.SetFinalizers([]string{"metacontroller.io/compositecontroller-proxy-operator"})
	u.SetLabels(map[string]string{v1.PoolLabel: "web", "team": "crawling"})
	u.SetAnnotations(map[string]string{"crawl.example.com/health": "Healthy,band=Good@12",
		"kubectl.kubernetes.io/last-applied-configuration": `{"apiVersion":"crawl.example.com/v1alpha1","kind":"Proxy","metadata":{"name":"proxy","namespace":"team-a"},"spec":{"mode":"Managed","provider":"gcp","maxLeases":10}}`})
	mf := []metav1.ManagedFieldsEntry{}
	for _, m := range []string{"kubectl-client-side-apply", "metacontroller", "proxy-operator"} {
		mf = append(mf, metav1.ManagedFieldsEntry{Manager: m, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: v1.APIVersion,
			FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:annotations":{".":{},"f:crawl.example.com/health":{}}},"f:status":{".":{},"f:conditions":{},"f:exit":{".":{},"f:asn":{},"f:country":{},"f:ip":{}},"f:ip":{},"f:phase":{},"f:providerID":{}}}`)}})
	}
	u.SetManagedFields(mf)
	return u
}

// heapOf is the live heap after build returns what it made, minus before; keep holds it.
func heapOf(build func() []any) (uint64, []any) {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapAlloc
	keep := build()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc - before, keep
}

// BenchmarkCacheMemory reports what 10,000 live Proxies cost held as the informer would hold
// them untrimmed (bytes/proxy-full) and as Trim leaves them (bytes/proxy-trimmed).
func BenchmarkCacheMemory(b *testing.B) {
	const n = 10000
	for range b.N {
		full, keepFull := heapOf(func() []any {
			out := make([]any, n)
			for i := range out {
				out[i] = liveProxy(i)
			}
			return out
		})
		trim := parents.Trim(parents.Proxy)
		trimmed, keepTrimmed := heapOf(func() []any {
			out := make([]any, n)
			for i := range out {
				out[i], _ = trim(liveProxy(i))
			}
			return out
		})
		runtime.KeepAlive(keepFull)
		runtime.KeepAlive(keepTrimmed)
		b.ReportMetric(float64(full)/n, "bytes/proxy-full")
		b.ReportMetric(float64(trimmed)/n, "bytes/proxy-trimmed")
	}
}
