package driver

import (
	"bytes"
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/metacontroller"
)

// The loop both controllers run (the Driver for Proxies, Pools for ProxyPools): a store of
// parents with one pending sync each, a heap queue, per-item backoff, one hook call (429 +
// Retry-After, the hook timeout, the 16 MiB answer cap) and the Run* functions. What a level
// does with an answer (children, status) stays in driver.go and pools.go.

// maxAnswer is the most of an answer read; a longer one fails the sync.
const maxAnswer = 16 << 20

// parent is a level's live object: its key and its place in the queue.
type parent interface {
	comparable
	key() string
	slot() *schedule
}

// schedule is a parent's place in its level's queue.
type schedule struct {
	due      time.Time
	pending  bool
	failures int
}

func (s *schedule) slot() *schedule { return s }

// store is one controller's parents, queue, events and counters. Its owner locks it.
type store[O parent] struct {
	objs   map[string]O
	queue  syncQueue
	uids   int
	syncs  int
	events []Event
}

// enqueue schedules a sync at t; the earliest pending time wins.
func (s *store[O]) enqueue(o O, t time.Time) {
	sl := o.slot()
	if !sl.pending || t.Before(sl.due) {
		sl.due, sl.pending = t, true
		heap.Push(&s.queue, queued{due: t, key: o.key()})
	}
}

// next returns the parent due first (ties by key, for determinism).
// The queue holds an entry per enqueue; entries that no longer match their object (synced,
// moved earlier, deleted) are dropped when they reach the top.
func (s *store[O]) next() (string, time.Time, bool) {
	for s.queue.Len() > 0 {
		e := s.queue[0]
		if o, ok := s.objs[e.key]; ok && o.slot().pending && o.slot().due.Equal(e.due) {
			return e.key, e.due, true
		}
		heap.Pop(&s.queue)
	}
	return "", time.Time{}, false
}

// failed records a hook call that failed at now: a 429 with Retry-After requeues the parent
// then, without penalty (Throttled); any other error backs off (SyncError).
func (s *store[O]) failed(o O, now time.Time, retryAfter time.Duration, err error) {
	reason := "SyncError"
	if retryAfter > 0 {
		reason = "Throttled"
		s.enqueue(o, now.Add(retryAfter))
	} else {
		o.slot().failures++
		s.enqueue(o, now.Add(backoff(o.slot().failures)))
	}
	s.events = append(s.events, Event{Time: now, Key: o.key(), Reason: reason, Message: err.Error()})
}

// answered records a 200 answer.
func (s *store[O]) answered(o O) {
	o.slot().failures = 0
	s.syncs++
}

// resync queues the next sync an answer and the controller's period ask for (period 0: none).
func (s *store[O]) resync(o O, now time.Time, resp *metacontroller.SyncResponse, period time.Duration) {
	if resp.ResyncAfterSeconds > 0 {
		s.enqueue(o, now.Add(time.Duration(resp.ResyncAfterSeconds*float64(time.Second))))
	}
	if period > 0 {
		s.enqueue(o, now.Add(period))
	}
}

// queued is one entry of a sync queue.
type queued struct {
	due time.Time
	key string
}

// syncQueue orders entries by due time, then key.
type syncQueue []queued

func (q syncQueue) Len() int { return len(q) }
func (q syncQueue) Less(i, j int) bool {
	return q[i].due.Before(q[j].due) || (q[i].due.Equal(q[j].due) && q[i].key < q[j].key)
}
func (q syncQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *syncQueue) Push(x any)   { *q = append(*q, x.(queued)) }
func (q *syncQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

func backoff(failures int) time.Duration {
	d := backoffBase
	for i := 1; i < failures && d < backoffCap; i++ {
		d *= 2
	}
	return min(d, backoffCap)
}

// request is the v2 hook body; P is the parent's type.
type request[P any] struct {
	Controller json.RawMessage                `json:"controller"`
	Parent     P                              `json:"parent"`
	Children   metacontroller.RelativeObjects `json:"children"`
	Related    metacontroller.RelativeObjects `json:"related"`
	Finalizing bool                           `json:"finalizing"`
}

// controllerJSON is the CompositeController sent in every request of a level.
func controllerJSON(name, resource string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{
		"apiVersion": "metacontroller.k8s.io/v1alpha1",
		"kind":       "CompositeController",
		"metadata":   map[string]any{"name": name},
		"spec": map[string]any{
			"generateSelector": true,
			"parentResource":   map[string]any{"apiVersion": v1.APIVersion, "resource": resource},
		},
	})
	return b
}

// hook is one CompositeController's webhook as Metacontroller calls it.
type hook struct {
	url      string
	client   *http.Client // nil: one with timeout, over endpoint's TLS when set
	endpoint *Endpoint
	timeout  time.Duration // 0: DefaultHookTimeout
	prefix   string        // of error messages: "" or "pool "
}

// call POSTs one hook body and decodes the answer strictly, as a v2 hook does. A 429 with a
// Retry-After of whole seconds returns that wait with the error.
func (h hook) call(name string, req any) (*metacontroller.SyncResponse, time.Duration, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, 0, err
	}
	timeout := h.timeout
	if timeout <= 0 {
		timeout = DefaultHookTimeout
	}
	client, err := h.endpoint.httpClient(h.client, timeout)
	if err != nil {
		return nil, 0, fmt.Errorf("%s%s hook: %w", h.prefix, name, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(h.url, "/")+"/"+name, bytes.NewReader(body))
	if err != nil {
		return nil, 0, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	h.endpoint.authorize(hreq)
	res, err := client.Do(hreq)
	if err != nil {
		return nil, 0, fmt.Errorf("%s%s hook: %w", h.prefix, name, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, maxAnswer+1))
	if err != nil {
		return nil, 0, fmt.Errorf("%s%s hook: reading answer: %w", h.prefix, name, err)
	}
	if len(b) > maxAnswer {
		return nil, 0, fmt.Errorf("%s%s hook: answer larger than %d MiB", h.prefix, name, maxAnswer>>20)
	}
	if res.StatusCode == http.StatusTooManyRequests {
		if s, err := strconv.Atoi(res.Header.Get("Retry-After")); err == nil && s > 0 {
			return nil, time.Duration(s) * time.Second, fmt.Errorf("%s%s hook: 429: %s", h.prefix, name, strings.TrimSpace(string(b)))
		}
	}
	if res.StatusCode != http.StatusOK {
		return nil, 0, fmt.Errorf("%s%s hook: HTTP %d: %s", h.prefix, name, res.StatusCode, strings.TrimSpace(string(b)))
	}
	var resp metacontroller.SyncResponse
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&resp); err != nil {
		return nil, 0, fmt.Errorf("%s%s hook: undecodable answer: %w", h.prefix, name, err)
	}
	return &resp, 0, nil
}

// errDropped is what a BeforeApply that drops an answer makes of it.
var errDropped = errors.New("answer dropped before it was applied")

// loop is what the Run functions drive: either level alone (Driver) or both (Pools).
type loop interface {
	Step() (bool, error)
	NextDue() (time.Time, bool)
}

// runUntilIdle runs every sync due now or earlier, without moving the clock.
func runUntilIdle(c *Clock, l loop) error {
	for range maxSteps {
		due, ok := l.NextDue()
		if !ok || due.After(c.Now()) {
			return nil
		}
		if _, err := l.Step(); err != nil {
			return err
		}
	}
	return ErrHotLoop
}

// runFor runs every sync due within dur of now, then leaves the clock at now+dur.
func runFor(c *Clock, l loop, dur time.Duration) error {
	end := c.Now().Add(dur)
	for range maxSteps {
		due, ok := l.NextDue()
		if !ok || due.After(end) {
			c.AdvanceTo(end)
			return nil
		}
		if _, err := l.Step(); err != nil {
			return err
		}
	}
	return ErrHotLoop
}

// runUntil runs syncs until cond holds, failing once the clock would pass now+limit.
func runUntil(c *Clock, l loop, cond func() bool, limit time.Duration) error {
	end := c.Now().Add(limit)
	for range maxSteps {
		if cond() {
			return nil
		}
		due, ok := l.NextDue()
		if !ok || due.After(end) {
			c.AdvanceTo(end)
			if cond() {
				return nil
			}
			return fmt.Errorf("driver: condition not met within %s", limit)
		}
		if _, err := l.Step(); err != nil {
			return err
		}
	}
	return ErrHotLoop
}
