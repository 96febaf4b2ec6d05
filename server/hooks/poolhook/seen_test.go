package poolhook

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/pool"
)

// TestSeen: the last answer per pool, with the last scaling change kept across answers that
// did not scale, and the pool dropped once finalized.
func TestSeen(t *testing.T) {
	var s Seen
	now := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	web := &v1.ProxyPool{ObjectMeta: metav1.ObjectMeta{Namespace: "crawl", Name: "web"}}
	s.record(web, pool.Decision{Status: v1.ProxyPoolStatus{DesiredReplicas: 3}, Scale: &pool.Scale{From: 2, To: 3, Reason: "Autoscale"}}, now)
	s.record(web, pool.Decision{Status: v1.ProxyPoolStatus{DesiredReplicas: 3, ReadyReplicas: 3}}, now.Add(time.Minute))
	got := s.List()
	if len(got) != 1 || got[0].Key != "crawl/web" || got[0].Status.ReadyReplicas != 3 || got[0].LastScale != "2 -> 3 (Autoscale)" || !got[0].LastScaleAt.Equal(now) {
		t.Fatalf("seen %+v", got)
	}
	s.record(web, pool.Decision{Finalized: true}, now.Add(2*time.Minute))
	if got := s.List(); len(got) != 0 {
		t.Fatalf("a finalized pool is still seen: %+v", got)
	}
	var none *Seen
	none.record(web, pool.Decision{}, now) // a nil Seen records nothing
}
