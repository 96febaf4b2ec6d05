package pool

import (
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
)

// TestKstatus computes the pool's status with kstatus itself, the library Flux, Config Sync
// and cli-utils' apply use to wait for resources: a rolling pool must read InProgress and a
// settled one Current.
func TestKstatus(t *testing.T) {
	p := newPool(3, withStatus(3))
	tests := []struct {
		name    string
		members []Member
		want    status.Status
	}{
		{"settled", members(p, 3), status.CurrentStatus},
		{"rolling out", members(p, 3, outdated), status.InProgressStatus},
		{"waiting for new members", members(p, 3, provisioning), status.InProgressStatus},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Decide(Input{Pool: p, Members: tt.members, Now: t0})
			obj := *p
			obj.TypeMeta.APIVersion, obj.TypeMeta.Kind = v1.APIVersion, v1.PoolKind
			obj.Status = d.Status
			b, err := json.Marshal(obj)
			if err != nil {
				t.Fatal(err)
			}
			u := &unstructured.Unstructured{}
			if err := u.UnmarshalJSON(b); err != nil {
				t.Fatal(err)
			}
			res, err := status.Compute(u)
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != tt.want {
				t.Errorf("kstatus = %s (%s), want %s", res.Status, res.Message, tt.want)
			}
		})
	}
}
