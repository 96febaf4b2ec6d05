package hooks

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/proxy-operator/proxy-operator/lease"
	"github.com/proxy-operator/proxy-operator/server/hooks/poolhook"
	"github.com/proxy-operator/proxy-operator/server/httpx"
)

// The pools CompositeController's hooks, as captured and replayed (testdata/<hook>/).
const (
	PoolSyncHook     = "pools-sync"
	PoolFinalizeHook = "pools-finalize"
)

// poolSync answers the ProxyPool controller's sync and finalize through poolhook, under the
// same load shedding, body limit, timing and capture as the Proxy hooks.
func (h *Hooks) poolSync(ctx context.Context, hook string, body []byte, ex *Exchange) (any, error) {
	resp, in, err := h.Pools.Handle(ctx, strings.TrimPrefix(hook, "pools-"), body)
	ex.Pool = in
	if errors.Is(err, poolhook.ErrBadRequest) {
		return nil, &httpx.Error{Code: http.StatusBadRequest, Message: err.Error()}
	}
	if errors.Is(err, lease.ErrUnavailable) {
		// The pool's lease view could not be read: Metacontroller retries; no decision was made.
		return nil, &httpx.Error{Code: http.StatusServiceUnavailable, Message: "lease store unavailable", RetryAfter: 1, Err: err}
	}
	if err != nil {
		return nil, err
	}
	return resp, nil
}
