package hooks

import (
	"time"

	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/lifecycle"
)

// retryWait is a provider-error wait for one generation of a Proxy (and one side of its
// life: a sync-time error must not delay its finalize).
type retryWait struct {
	generation int64
	finalizing bool
	until      time.Time
}

// retryAt returns the end of the Proxy's current wait, or zero.
func (h *Hooks) retryAt(p *v1.Proxy, finalizing bool) time.Time {
	h.retryMu.Lock()
	defer h.retryMu.Unlock()
	w, ok := h.retries[p.UID]
	if !ok || w.generation != p.Generation || w.finalizing != finalizing {
		return time.Time{}
	}
	return w.until
}

// setRetry records or clears the Proxy's wait after a decision.
func (h *Hooks) setRetry(p *v1.Proxy, finalizing bool, d lifecycle.Decision) {
	h.retryMu.Lock()
	defer h.retryMu.Unlock()
	if d.RetryAt.IsZero() || d.Finalized {
		delete(h.retries, p.UID)
		return
	}
	if h.retries == nil {
		h.retries = map[types.UID]retryWait{}
	}
	h.retries[p.UID] = retryWait{generation: p.Generation, finalizing: finalizing, until: d.RetryAt}
}
