package hooks

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/kube/parents"
	"github.com/proxy-operator/proxy-operator/metacontroller"
	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/server/hooks/poolhook"
)

// DisagreementResync is how soon Metacontroller is asked back after a body the API server does
// not agree with. Metacontroller's informer may be ahead of the operator's by a moment (a new
// Proxy, an edited spec, a delete): the call that follows once the cache has caught up acts.
const DisagreementResync = poolhook.DisagreementResync

// newDisagreements is proxy_operator_hook_disagreements_total{hook,reason}.
func newDisagreements() *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "proxy_operator_hook_disagreements_total",
		Help: "Hook calls answered without acting because the body disagreed with the API server, by hook and reason.",
	}, []string{"hook", "reason"})
	for _, hook := range []string{"sync", "finalize", PoolSyncHook, PoolFinalizeHook} {
		for _, r := range parents.Reasons {
			c.WithLabelValues(hook, r)
		}
	}
	return c
}

// disagrees checks a Proxy hook body against the API server; it logs and counts a
// disagreement and returns its reason ("" when the API server agrees or no check is
// configured).
func (h *Hooks) disagrees(log *slog.Logger, hook string, p *v1.Proxy, finalizing bool) string {
	if h.Parents == nil {
		return ""
	}
	reason := parents.Check(h.Parents, parents.Proxy, p.Namespace, p.Name, p.UID, finalizing, &p.Spec)
	if reason != "" {
		h.disagreed(log, hook, string(p.UID), reason)
	}
	return reason
}

// verifyPool is the pool hook's check (poolhook.Hooks.Verify).
func (h *Hooks) verifyPool(hook string, p *v1.ProxyPool, finalizing bool) string {
	reason := parents.Check(h.Parents, parents.Pool, p.Namespace, p.Name, p.UID, finalizing, &p.Spec)
	if reason != "" {
		h.disagreed(h.Log.With("pool", p.Key(), "hook", "pools-"+hook), "pools-"+hook, string(p.UID), reason)
	}
	return reason
}

func (h *Hooks) disagreed(log *slog.Logger, hook, uid, reason string) {
	log.Warn("hook body disagrees with the API server: answered without acting", "reason", reason, "bodyUID", uid)
	h.disagreements.WithLabelValues(hook, reason).Inc()
}

// unchanged is the answer to a body the API server does not agree with: the status and the
// children as the body shows them, so nothing changes whoever sent it, and a short resync so
// that Metacontroller comes back once the cache has caught up. Never finalized.
func unchanged(status any, observed metacontroller.RelativeObjects) metacontroller.SyncResponse {
	return metacontroller.SyncResponse{
		Status:             status,
		Children:           providers.DesiredChildren(nil, observed, false),
		ResyncAfterSeconds: DisagreementResync.Seconds(),
	}
}
