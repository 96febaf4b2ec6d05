package console

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/events"
	"github.com/proxy-operator/proxy-operator/internal/kube"
)

// Reasons of the Events the console's actions record on a Proxy.
const (
	ReasonDrained         = "DrainedFromConsole"
	ReasonUndrained       = "UndrainedFromConsole"
	ReasonLeaseReleased   = "LeaseReleasedFromConsole"
	ReasonCooldownCleared = "CooldownClearedFromConsole"
)

const drainLabelHint = v1.PoolDrainingLabel + "=true"

// Kube is how the console acts through the API server: the operator's own dynamic client
// patches the draining label (so Metacontroller syncs the Proxy and GitOps sees the change),
// and its Event recorder records every action on the Proxy.
type Kube struct {
	Dynamic dynamic.Interface
	// Events records the actions (nil: none recorded).
	Events *events.Recorder
}

// drain sets (drain) or removes the draining label of Proxy namespace/name with a merge
// patch of the label alone, and records an Event naming the token.
func (k *Kube) drain(ctx context.Context, namespace, name string, drain bool, by string) error {
	var value any // nil removes the label
	reason, verb := ReasonUndrained, "undrained"
	if drain {
		value, reason, verb = "true", ReasonDrained, "drained"
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{v1.PoolDrainingLabel: value}}})
	if err != nil {
		return err
	}
	u, err := k.Dynamic.Resource(kube.ProxyResource).Namespace(namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "proxy-operator-console"})
	if err != nil {
		return fmt.Errorf("patch %s/%s: %w", namespace, name, err)
	}
	k.event(namespace, name, string(u.GetUID()), reason, fmt.Sprintf("%s from the web console by token %s (label %s)", verb, by, v1.PoolDrainingLabel))
	return nil
}

// event records one Normal event on the Proxy.
func (k *Kube) event(namespace, name, uid, reason, message string) {
	if k == nil || k.Events == nil {
		return
	}
	p := &v1.Proxy{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID(uid)}}
	k.Events.Record(p, []events.Event{{Type: corev1.EventTypeNormal, Reason: reason, Message: message}})
}
