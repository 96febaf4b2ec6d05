package hooks

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/proxy-operator/proxy-operator/server/httpx"
)

// Defaults of the big-body lane (decision 0240).
const (
	// DefaultBigBodyBytes: a body declared longer (or not declared) is big. A Proxy sync is a
	// few KB; a 1,000-member pool sync is about 1.5 MB and is big.
	DefaultBigBodyBytes = 256 << 10
	// DefaultBigBodyWait bounds how long a big body waits for a lane slot before 429.
	DefaultBigBodyWait = 2 * time.Second
)

// DefaultBigBodyLanes is GOMAXPROCS-1, at least 1: one core is always left to small calls.
func DefaultBigBodyLanes() int { return max(1, runtime.GOMAXPROCS(0)-1) }

// enterLane makes a big body wait, at most BigBodyWait, for one of BigBodyLanes slots, held
// while it is read, scanned, decoded, handled and its answer encoded: the CPU that TLS and big
// bodies cost is bounded to the lanes, and small calls never wait for them. It returns the
// release (idempotent), or a 429 with Retry-After when no slot came in time. A body declared
// longer than MaxBodyBytes takes a slot too: readBody refuses it at once, but its connection
// (a TLS handshake, the bytes net/http discards) would otherwise be free to loop as fast as
// the caller can send.
func (h *Hooks) enterLane(r *http.Request) (func(), error) {
	if n := r.ContentLength; n >= 0 && n <= h.BigBodyBytes {
		return func() {}, nil
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.BigBodyWait)
	defer cancel()
	if err := h.lane.Acquire(ctx, 1); err != nil {
		h.shed.WithLabelValues("big_body").Inc()
		return nil, &httpx.Error{Code: http.StatusTooManyRequests, RetryAfter: 1, Err: err,
			Message: fmt.Sprintf("hook bodies over %d bytes are read %d at a time and none could start within %s; retry after the Retry-After seconds",
				h.BigBodyBytes, h.BigBodyLanes, h.BigBodyWait)}
	}
	var once sync.Once
	return func() { once.Do(func() { h.lane.Release(1) }) }, nil
}

func newLane(n int) *semaphore.Weighted { return semaphore.NewWeighted(int64(n)) }
