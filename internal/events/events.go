// Package events owns the Kubernetes Events the operator records on Proxies: which decisions
// and status transitions of one sync deserve an event (For, a pure function), and the
// client-go recorder that sends them, aggregated and rate-limited as client-go does. It knows
// nothing of how decisions are made; a sync whose status does not change and that acts on no
// instance yields no event, so a steady fleet records none.
package events

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/lifecycle"
)

// Reasons, as `kubectl describe px` shows them.
const (
	ReasonCreating         = "CreatingInstance"
	ReasonReplacing        = "ReplacingInstance"
	ReasonInstanceLost     = "InstanceLost"
	ReasonDeleting         = "DeletingInstance"
	ReasonInstanceDeleted  = "InstanceDeleted"
	ReasonQuotaExceeded    = "QuotaExceeded"
	ReasonProvisioningFail = "ProvisioningFailed"
	ReasonHealthLost       = "HealthLost"
	ReasonHealthRegained   = "HealthRegained"
)

// Event is one event to record on the Proxy of the sync.
type Event struct {
	Type    string // corev1.EventTypeNormal or corev1.EventTypeWarning
	Reason  string
	Message string
}

// For returns the events of one sync: the action it ran (an instance created, or deleted for
// a replacement, a lost machine or the finalizer) and the status transitions from the status
// Metacontroller sent to the one answered (quota exceeded, permanent failure, health lost and
// regained, the instance gone at finalize). Re-running a sync on an unchanged status never
// repeats a transition event, and provider-error retries repeat no creation event: a create
// is reported when it succeeds.
func For(in lifecycle.Input, d lifecycle.Decision) []Event {
	prev, next := in.Proxy.Status, d.Status
	var out []Event
	add := func(typ, reason, format string, a ...any) {
		out = append(out, Event{Type: typ, Reason: reason, Message: fmt.Sprintf(format, a...)})
	}
	if o := in.Outcome; o != nil && o.Err == nil {
		switch o.Action.Kind {
		case lifecycle.ActionCreate:
			if prev.ProviderID != "" && prev.ProviderID != o.ProviderID {
				add(corev1.EventTypeNormal, ReasonCreating, "creating instance %s on provider %s, replacing %s", o.ProviderID, in.Proxy.Spec.Provider, prev.ProviderID)
			} else {
				add(corev1.EventTypeNormal, ReasonCreating, "creating instance %s on provider %s", o.ProviderID, in.Proxy.Spec.Provider)
			}
		case lifecycle.ActionDelete:
			switch reason(next, v1.ConditionProvisioned) {
			case lifecycle.ReasonDeleting:
				add(corev1.EventTypeNormal, ReasonDeleting, "deleting instance %s: the Proxy is being deleted", o.Action.ProviderID)
			case lifecycle.ReasonInstanceLost:
				add(corev1.EventTypeWarning, ReasonInstanceLost, "instance %s stopped or terminated: deleting it to create a replacement", o.Action.ProviderID)
			default:
				add(corev1.EventTypeNormal, ReasonReplacing, "deleting instance %s to replace it: spec changed (hash %s -> %s)",
					o.Action.ProviderID, short(prev.SpecHash), short(lifecycle.SpecHash(&in.Proxy.Spec, in.CloudInit)))
			}
		}
	}
	if r := reason(next, v1.ConditionProvisioned); r == lifecycle.ReasonQuotaExceeded && reason(prev, v1.ConditionProvisioned) != r {
		add(corev1.EventTypeWarning, ReasonQuotaExceeded, "%s", message(next, v1.ConditionProvisioned))
	}
	if next.Phase == v1.PhaseFailed && prev.Phase != v1.PhaseFailed {
		add(corev1.EventTypeWarning, ReasonProvisioningFail, "%s", message(next, v1.ConditionProvisioned))
	}
	switch was, is := status(prev, v1.ConditionHealthy), status(next, v1.ConditionHealthy); {
	case is == metav1.ConditionFalse && was != metav1.ConditionFalse && d.Status.IP != "":
		add(corev1.EventTypeWarning, ReasonHealthLost, "%s", message(next, v1.ConditionHealthy))
	case is == metav1.ConditionTrue && was == metav1.ConditionFalse:
		add(corev1.EventTypeNormal, ReasonHealthRegained, "%s", message(next, v1.ConditionHealthy))
	}
	if d.Finalized && prev.ProviderID != "" {
		add(corev1.EventTypeNormal, ReasonInstanceDeleted, "instance %s is gone; the Proxy can go", prev.ProviderID)
	}
	return out
}

func short(hash string) string {
	if len(hash) > 10 {
		return hash[:10]
	}
	if hash == "" {
		return "none"
	}
	return hash
}

func find(st v1.ProxyStatus, typ string) *metav1.Condition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == typ {
			return &st.Conditions[i]
		}
	}
	return nil
}

func reason(st v1.ProxyStatus, typ string) string {
	if c := find(st, typ); c != nil {
		return c.Reason
	}
	return ""
}

func message(st v1.ProxyStatus, typ string) string {
	if c := find(st, typ); c != nil {
		return c.Message
	}
	return ""
}

func status(st v1.ProxyStatus, typ string) metav1.ConditionStatus {
	if c := find(st, typ); c != nil {
		return c.Status
	}
	return metav1.ConditionUnknown
}
