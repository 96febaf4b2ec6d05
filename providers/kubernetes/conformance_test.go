package kubernetes_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/kubernetes"
	"github.com/proxy-operator/proxy-operator/providers/providertest"
)

// cluster plays Metacontroller and the kubelet around the kubernetes provider: every call
// binds the provider to the owning Proxy's observed Pods, as one sync does, and what the bound
// provider returns as children is applied (new Pods created Pending, dropped ones deleted);
// Settle starts Pending Pods and removes deleted ones. A call whose context is done applies
// nothing, as a hook call that failed.
type cluster struct {
	p *kubernetes.Provider

	mu    sync.Mutex
	now   time.Time
	pods  map[string]map[string]*corev1.Pod // by parent UID, then name
	owner map[string]string                 // pod name -> parent UID
	ip    int
}

func (c *cluster) parent(uid string) providers.Parent {
	return providers.Parent{Namespace: "crawl", Name: "conformance", UID: uid}
}

func (c *cluster) observed(uid string) (map[string]map[string]json.RawMessage, error) {
	objs := map[string]json.RawMessage{}
	for name, pod := range c.pods[uid] {
		b, err := json.Marshal(pod)
		if err != nil {
			return nil, err
		}
		objs["crawl/"+name] = b
	}
	return map[string]map[string]json.RawMessage{kubernetes.PodTypeKey: objs}, nil
}

// sync binds the provider for uid, runs call on it and applies the children it answers.
func (c *cluster) sync(ctx context.Context, uid string, call func(providers.BoundProvider) error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return providers.Wrap(providers.ErrTransient, "sync", err)
	}
	observed, err := c.observed(uid)
	if err != nil {
		return err
	}
	b := c.p.Bind(c.parent(uid), observed)
	if err := call(b); err != nil {
		return err
	}
	desired := map[string]bool{}
	for _, raw := range b.Children(false) {
		var pod corev1.Pod
		if err := json.Unmarshal(raw, &pod); err != nil {
			return fmt.Errorf("child is not a Pod: %w", err)
		}
		desired[pod.Name] = true
		if _, ok := c.pods[uid][pod.Name]; ok {
			continue
		}
		pod.CreationTimestamp = metav1.NewTime(c.now)
		pod.Status = corev1.PodStatus{Phase: corev1.PodPending}
		if c.pods[uid] == nil {
			c.pods[uid] = map[string]*corev1.Pod{}
		}
		c.pods[uid][pod.Name] = &pod
		c.owner[pod.Name] = uid
	}
	for name, pod := range c.pods[uid] {
		if !desired[name] && pod.DeletionTimestamp == nil {
			pod.DeletionTimestamp = &metav1.Time{Time: c.now}
		}
	}
	return nil
}

func (c *cluster) settle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(time.Second)
	for uid, pods := range c.pods {
		for name, pod := range pods {
			switch {
			case pod.DeletionTimestamp != nil:
				delete(pods, name)
				delete(c.owner, name)
			case pod.Status.Phase == corev1.PodPending:
				c.ip++
				pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: fmt.Sprintf("10.244.0.%d", c.ip),
					Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
			}
		}
		if len(pods) == 0 {
			delete(c.pods, uid)
		}
	}
}

// provider is the four methods over the cluster.
type provider struct{ c *cluster }

func (p provider) Create(ctx context.Context, req providers.CreateRequest) (id string, err error) {
	err = p.c.sync(ctx, req.OwnerUID, func(b providers.BoundProvider) error {
		id, err = b.Create(ctx, req)
		return err
	})
	return id, err
}

func (p provider) ownerOf(id string) string {
	p.c.mu.Lock()
	defer p.c.mu.Unlock()
	return p.c.owner[id]
}

func (p provider) Get(ctx context.Context, id string) (inst *providers.Instance, err error) {
	err = p.c.sync(ctx, p.ownerOf(id), func(b providers.BoundProvider) error {
		inst, err = b.Get(ctx, id)
		return err
	})
	return inst, err
}

func (p provider) Delete(ctx context.Context, id string) error {
	return p.c.sync(ctx, p.ownerOf(id), func(b providers.BoundProvider) error { return b.Delete(ctx, id) })
}

func (p provider) ListByTag(ctx context.Context) ([]providers.Instance, error) {
	p.c.mu.Lock()
	uids := slices.Sorted(maps.Keys(p.c.pods))
	p.c.mu.Unlock()
	var out []providers.Instance
	for _, uid := range uids {
		err := p.c.sync(ctx, uid, func(b providers.BoundProvider) error {
			list, err := b.ListByTag(ctx)
			out = append(out, list...)
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func TestConformance(t *testing.T) {
	providertest.Run(t, func(t *testing.T) providertest.Env {
		c := &cluster{p: newProvider(t, kubernetes.Config{}), now: time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC),
			pods: map[string]map[string]*corev1.Pod{}, owner: map[string]string{}}
		return providertest.Env{
			Provider:  provider{c},
			UnknownID: "proxy-000000000000-0000000000",
			Settle:    c.settle,
			// No Fail or Hold: the provider makes no call that a cloud could fail or hold;
			// Metacontroller applies its answer.
			Foreign: func() {
				c.mu.Lock()
				defer c.mu.Unlock()
				c.pods["someone"] = map[string]*corev1.Pod{"sidecar": {ObjectMeta: metav1.ObjectMeta{Name: "sidecar", Namespace: "crawl",
					Labels: map[string]string{"app": "other"}}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}}
				c.owner["sidecar"] = "someone"
			},
		}
	})
}
