// Package driver owns a test stand-in for Metacontroller: it plays the CompositeController
// loop against a hook server over real HTTP, on a virtual clock, as
// metacontroller/metacontroller@v4.17.2 does (status replaces status, observedGeneration
// injected, deep-equal skip, children applied, resyncAfterSeconds, the finalizer on every
// parent, finalize until finalized, any parent update enqueues a sync). With a Budget it also
// paces syncs by Metacontroller's client rate limit and worker pool (budget.go). It knows
// nothing of what the server decides or how.
//
// Upstream sources it follows: pkg/controller/composite/controller.go (sync order, the
// update handler that enqueues on every parent change, updateParentStatus injecting
// observedGeneration and skipping a deep-equal status, 429 + Retry-After requeued without
// penalty, other errors requeued with backoff and a SyncError event),
// pkg/dynamic/clientset/clientset.go (AtomicStatusUpdate, AddFinalizer, RemoveFinalizer),
// pkg/controller/common/finalizer/finalizer.go, pkg/dynamic/informer/informer.go (resync
// ticks), pkg/cmd/metacontroller/main.go (flag defaults), and client-go's workqueue
// DefaultTypedControllerRateLimiter (per-item backoff 5 ms doubling to 1000 s).
//
// Where it knowingly differs:
//   - Apply puts the finalizer on a new parent at once; upstream the first sync adds it
//     (GET + update) and that update enqueues one more sync. With a Budget both the 2 calls
//     and the extra sync are modelled; the first sync request already shows the finalizer.
//   - A parent has one pending sync time, the earliest asked for. Upstream a key can sit in
//     the ready queue and in the delaying queue (AddAfter) at once and then syncs twice; here
//     the later one is dropped and the next answer's resyncAfterSeconds asks again.
//   - Without a Budget, ResyncPeriod re-queues each parent one period after its own sync and
//     syncs take no time, one at a time; upstream (and with a Budget) the period is a
//     fleet-wide ticker and up to --workers syncs run at once under the client's token bucket.
//   - Only the per-item backoff of the workqueue's rate limiter is modelled, not its overall
//     10 qps / 100 burst bucket (which only paces failing syncs).
//   - Children in an answer replace the observed ones at once, whatever the updateStrategy;
//     there is no adoption or orphaning. Under a Budget each child created, changed (any byte)
//     or deleted costs one call and enqueues the parent; without one, child writes are free.
//   - The customize hook is not called; related objects come from the Related callback.
//   - The parent sent is the live object, never a lagging informer copy; status updates never
//     conflict (no RetryOnConflict rounds); hook and API call latencies are constants.
//   - Events are a list in memory, not Event objects with --events-qps spam filtering.
//   - TLS and auth: with an Endpoint it verifies the server with the CA bundle and sends the
//     Authorization header as Metacontroller resolves them from endpointConfigs
//     (pkg/hooks/endpoint_config.go, auth.go, webhook.go); clientTLS and basicAuth are not
//     modelled, and the Endpoint is fixed, not re-read when a controller is rebuilt.
package driver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/clocktest"
	"github.com/proxy-operator/proxy-operator/metacontroller"
)

// Clock is a virtual clock to share between the driver and the server under test.
type Clock = clocktest.Clock

// NewClock returns a clock reading t.
func NewClock(t time.Time) *Clock { return clocktest.New(t) }

// Metacontroller's numbers: webhook.timeout's default (pkg/hooks/webhook.go) and client-go's
// per-item backoff (docs/decisions/0056).
const (
	DefaultController  = "proxy-operator"
	DefaultHookTimeout = 30 * time.Second
	backoffBase        = 5 * time.Millisecond
	backoffCap         = 1000 * time.Second
	// maxSteps bounds a run: a hook that keeps asking for immediate work is a hot loop.
	maxSteps = 100000
)

// ErrHotLoop is returned when a run needs more than maxSteps syncs.
var ErrHotLoop = errors.New("driver: hot loop (too many syncs without the clock reaching its target)")

// Event is a Warning event Metacontroller would record on a parent.
type Event struct {
	Time    time.Time
	Key     string
	Reason  string // SyncError, FinalizeError, Throttled
	Message string
}

// Driver plays Metacontroller against the hook server at URL. Set its fields before the first
// call; URL may be changed between calls (to point at a restarted server). It syncs one
// parent at a time; the zero value is not usable: set URL and Clock.
type Driver struct {
	// URL is the base URL of the hook server (its /sync and /finalize are called).
	URL string
	// Clock is the virtual clock; the server under test should read the same one.
	Clock *Clock
	// Client makes the calls (nil: a client with HookTimeout, over Endpoint's TLS when set).
	Client *http.Client
	// Endpoint, when set, is the CA and Authorization header Metacontroller resolved from the
	// CompositeController (endpoint.go); nil: plain calls without one.
	Endpoint *Endpoint
	// HookTimeout is webhook.timeout (0: DefaultHookTimeout).
	HookTimeout time.Duration
	// Controller is the CompositeController's name (""; DefaultController).
	Controller string
	// ResyncPeriod is spec.resyncPeriodSeconds (0: no periodic resync).
	ResyncPeriod time.Duration
	// Related, when set, supplies the related objects of a parent's sync request.
	Related func(p *v1.Proxy) metacontroller.RelativeObjects
	// Refinalize calls finalize once more, with the stale parent, after it answered
	// finalized, as Metacontroller may; anything but 200 and finalized is then an error.
	Refinalize bool
	// BeforeApply sees every 200 answer before it is applied; returning false drops it, as
	// if the answer was lost before the status write: the parent is retried with backoff.
	// It may call the driver's read methods and change URL (to a restarted server).
	BeforeApply func(key string, resp *metacontroller.SyncResponse) bool
	// Budget, when set, models Metacontroller's client rate limit and worker pool in virtual
	// time (budget.go); nil syncs instantly, one parent at a time.
	Budget *Budget
	// IgnoreStatusChanges models the CompositeController's parentResource.ignoreStatusChanges:
	// a status write then enqueues no echo sync (updateParentObject skips an update that
	// changes neither generation, labels, annotations nor deletionTimestamp).
	IgnoreStatusChanges bool
	// OnStatusWrite, when set, sees every status write with the virtual time it lands. It is
	// called with the driver's lock held: it must not call the driver.
	OnStatusWrite func(key string, at time.Time, st v1.ProxyStatus)

	mu sync.Mutex
	// store holds the Proxies, their queue, events and sync count (loop.go).
	store[*object]
	writes int
	// metaWrites counts PatchAnnotations calls that changed a parent (metadata.go).
	metaWrites int
}

type object struct {
	schedule
	parent   v1.Proxy
	children metacontroller.RelativeObjects
	writes   int
	syncs    int
}

func (o *object) key() string { return o.parent.Key() }

// Finalizer is the finalizer Metacontroller adds to every parent.
func (d *Driver) Finalizer() string { return "metacontroller.io/compositecontroller-" + d.controller() }

func (d *Driver) controller() string {
	if d.Controller == "" {
		return DefaultController
	}
	return d.Controller
}

func (d *Driver) init() {
	if d.objs == nil {
		d.objs = map[string]*object{}
	}
}

// Apply creates or updates a parent as kubectl apply would: a new object gets a UID,
// generation 1 and the finalizer; a spec change bumps the generation. Status is never taken
// from p. The parent is queued for an immediate sync.
func (d *Driver) Apply(p *v1.Proxy) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.init()
	key := p.Key()
	if p.Name == "" || p.Namespace == "" {
		return fmt.Errorf("driver: apply: name and namespace are required")
	}
	o, ok := d.objs[key]
	if !ok {
		np := v1.Proxy{TypeMeta: metav1.TypeMeta{APIVersion: v1.APIVersion, Kind: v1.Kind}}
		np.ObjectMeta = *p.ObjectMeta.DeepCopy()
		if np.UID == "" {
			d.uids++
			np.UID = k8stypes.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", d.uids))
		}
		np.Generation, np.ResourceVersion = 1, "1"
		np.CreationTimestamp = metav1.NewTime(d.Clock.Now().UTC().Truncate(time.Second))
		np.Finalizers = append(slices.Clone(np.Finalizers), d.Finalizer())
		np.DeletionTimestamp = nil
		np.Spec = clone(p.Spec)
		o = &object{parent: np, children: metacontroller.RelativeObjects{}}
		d.objs[key] = o
		// kubectl's create, served by the API server like every other call (Budget.ServerRate).
		d.enqueue(o, d.chargeOther(CallApply))
		return nil
	} else {
		if o.parent.DeletionTimestamp != nil {
			return fmt.Errorf("driver: apply %s: object is being deleted", key)
		}
		if !jsonEqual(o.parent.Spec, p.Spec) {
			o.parent.Spec = clone(p.Spec)
			o.parent.Generation++
		}
		o.parent.Labels, o.parent.Annotations = maps.Clone(p.Labels), maps.Clone(p.Annotations)
		o.bump()
	}
	d.enqueue(o, d.Clock.Now())
	return nil
}

// Delete marks the parent deleted; it goes once its finalizers are removed.
func (d *Driver) Delete(key string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	o, ok := d.objs[key]
	if !ok {
		return fmt.Errorf("driver: delete %s: not found", key)
	}
	if o.parent.DeletionTimestamp == nil {
		t := metav1.NewTime(d.Clock.Now().UTC().Truncate(time.Second))
		o.parent.DeletionTimestamp = &t
		o.bump()
	}
	if len(o.parent.Finalizers) == 0 {
		delete(d.objs, key)
		return nil
	}
	d.enqueue(o, d.Clock.Now())
	return nil
}

func (o *object) bump() {
	rv, _ := strconv.Atoi(o.parent.ResourceVersion)
	o.parent.ResourceVersion = strconv.Itoa(rv + 1)
}

// Get returns a copy of the live parent.
func (d *Driver) Get(key string) (v1.Proxy, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	o, ok := d.objs[key]
	if !ok {
		return v1.Proxy{}, false
	}
	return clone(o.parent), true
}

// Status returns the live parent's status.
func (d *Driver) Status(key string) (v1.ProxyStatus, bool) {
	p, ok := d.Get(key)
	return p.Status, ok
}

// Exists reports whether the parent still exists.
func (d *Driver) Exists(key string) bool {
	_, ok := d.Get(key)
	return ok
}

// Children returns the live children of a parent.
func (d *Driver) Children(key string) metacontroller.RelativeObjects {
	d.mu.Lock()
	defer d.mu.Unlock()
	o, ok := d.objs[key]
	if !ok {
		return nil
	}
	out := metacontroller.RelativeObjects{}
	for t, objs := range o.children {
		out[t] = maps.Clone(objs)
	}
	return out
}

// UpdateChild changes a live child as a kubelet or another controller would (say, to set a
// Pod's status.podIP) and queues its parent, as a child event does in Metacontroller.
// typeKey is "<Kind>.<apiVersion>", childKey "namespace/name".
func (d *Driver) UpdateChild(parentKey, typeKey, childKey string, mutate func(obj map[string]any)) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	o, ok := d.objs[parentKey]
	if !ok {
		return fmt.Errorf("driver: update child of %s: parent not found", parentKey)
	}
	raw, ok := o.children[typeKey][childKey]
	if !ok {
		return fmt.Errorf("driver: update child %s %s of %s: not found", typeKey, childKey, parentKey)
	}
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		return err
	}
	mutate(obj)
	b, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	o.children[typeKey][childKey] = b
	d.enqueue(o, d.Clock.Now())
	return nil
}

// NextSync is when the parent is next due to be synced.
func (d *Driver) NextSync(key string) (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	o, ok := d.objs[key]
	if !ok || !o.pending {
		return time.Time{}, false
	}
	return o.due, true
}

// Writes is the number of status writes so far (deep-equal answers cost none).
func (d *Driver) Writes() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.writes
}

// Syncs is the number of hook calls that answered 200 so far.
func (d *Driver) Syncs() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.syncs
}

// Events returns the Warning events recorded so far.
func (d *Driver) Events() []Event {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.events)
}

// Step moves the clock to the earliest due sync and runs it. It reports false when nothing
// is scheduled. An error is a broken contract (undecodable answer, failed re-finalize), not a
// hook error: those become Events and backoff, as in Metacontroller.
func (d *Driver) Step() (bool, error) {
	if d.Budget != nil {
		return d.stepBudget()
	}
	d.mu.Lock()
	key, due, ok := d.next()
	d.mu.Unlock()
	if !ok {
		return false, nil
	}
	d.Clock.AdvanceTo(due)
	return true, d.sync(key)
}

// RunUntilIdle runs every sync due now or earlier, without moving the clock.
func (d *Driver) RunUntilIdle() error { return runUntilIdle(d.Clock, d) }

// RunFor runs every sync due within dur of now, then leaves the clock at now+dur.
func (d *Driver) RunFor(dur time.Duration) error { return runFor(d.Clock, d, dur) }

// RunUntil runs syncs until cond holds, failing once the clock would pass now+limit.
func (d *Driver) RunUntil(cond func() bool, limit time.Duration) error {
	return runUntil(d.Clock, d, cond, limit)
}

// hook is the proxy controller's webhook.
func (d *Driver) hook() hook {
	return hook{url: d.URL, client: d.Client, endpoint: d.Endpoint, timeout: d.HookTimeout}
}

// sync runs one hook call for key and applies its answer.
func (d *Driver) sync(key string) error {
	d.mu.Lock()
	o, ok := d.objs[key]
	if !ok {
		d.mu.Unlock()
		return nil
	}
	o.pending = false
	parentCopy := clone(o.parent)
	parent := &parentCopy
	req := request[*v1.Proxy]{Controller: controllerJSON(d.controller(), "proxies"), Parent: parent, Children: o.children, Finalizing: parent.DeletionTimestamp != nil}
	d.mu.Unlock()
	if d.Related != nil {
		req.Related = d.Related(parent)
	}
	if req.Related == nil {
		req.Related = metacontroller.RelativeObjects{}
	}
	hook := "sync"
	if req.Finalizing {
		hook = "finalize"
	}
	resp, retryAfter, err := d.hook().call(hook, req)
	// Called without the lock, so it may read the driver (Status, Get) or repoint URL.
	if err == nil && d.BeforeApply != nil && !d.BeforeApply(key, resp) {
		err = errDropped
	}
	now := d.Clock.Now()

	d.mu.Lock()
	defer d.mu.Unlock()
	o, ok = d.objs[key]
	if !ok {
		return nil
	}
	if err != nil {
		d.failed(o, now, retryAfter, err)
		return nil
	}
	d.answered(o)
	o.syncs++
	finalized := req.Finalizing && resp.Finalized
	if !finalized {
		// ManageChildren runs before the status update, as upstream.
		if err := d.applyChildren(o, resp.Children); err != nil {
			return fmt.Errorf("driver: %s %s: %w", hook, key, err)
		}
	}
	if err := d.applyStatus(o, resp.Status); err != nil {
		return fmt.Errorf("driver: %s %s: %w", hook, key, err)
	}
	if finalized {
		d.charge(CallFinalizer, 2) // RemoveFinalizer: a GET and an update (AtomicUpdate)
		o.parent.Finalizers = slices.DeleteFunc(o.parent.Finalizers, func(f string) bool { return f == d.Finalizer() })
		if len(o.parent.Finalizers) == 0 {
			delete(d.objs, key)
		}
		if d.Refinalize {
			d.mu.Unlock()
			again, _, err := d.hook().call("finalize", req)
			d.mu.Lock()
			if err != nil {
				return fmt.Errorf("driver: finalize %s again after finalized: %w", key, err)
			}
			if !again.Finalized {
				return fmt.Errorf("driver: finalize %s again after finalized: answered finalized=false", key)
			}
		}
		return nil
	}
	period := d.ResyncPeriod
	if d.Budget != nil {
		period = 0 // with a Budget the period is a fleet-wide ticker, as upstream (budget.go)
	}
	d.resync(o, now, resp, period)
	return nil
}

// decodeStatus decodes a hook's status answer into the CRD's status type S, strictly: a field
// the CRD schema does not declare would be pruned by the API server and rewritten on every
// sync. A null status is S's zero value.
func decodeStatus[S any](raw any) (S, error) {
	var st S
	b, err := json.Marshal(raw)
	if err != nil {
		return st, err
	}
	if string(b) != "null" {
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&st); err != nil {
			return st, fmt.Errorf("status not in the CRD schema: %w", err)
		}
	}
	return st, nil
}

// applyStatus replaces the status, injecting observedGeneration, and writes only when the
// result differs from the live status; a write is an update event, so it queues a sync.
func (d *Driver) applyStatus(o *object, raw any) error {
	st, err := decodeStatus[v1.ProxyStatus](raw)
	if err != nil {
		return err
	}
	st.ObservedGeneration = o.parent.Generation
	if jsonEqual(o.parent.Status, st) {
		d.charge(CallStatusGet, 1) // AtomicStatusUpdate GETs the live object even when it then writes nothing
		return nil
	}
	d.charge(CallStatusGet, 1)
	at := d.charge(CallStatusUpdate, 1)
	o.parent.Status = st
	o.bump()
	o.writes++
	d.writes++
	if d.OnStatusWrite != nil {
		d.OnStatusWrite(o.parent.Key(), at, st)
	}
	if !d.IgnoreStatusChanges {
		d.enqueue(o, at)
	}
	return nil
}

type childMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
}

// applyChildren creates or replaces the children in the answer and deletes the others.
func (d *Driver) applyChildren(o *object, children []json.RawMessage) error {
	want := metacontroller.RelativeObjects{}
	for i, raw := range children {
		var m childMeta
		if err := json.Unmarshal(raw, &m); err != nil {
			return fmt.Errorf("children[%d]: %w", i, err)
		}
		if m.APIVersion == "" || m.Kind == "" || m.Metadata.Name == "" {
			return fmt.Errorf("children[%d]: apiVersion, kind and metadata.name are required", i)
		}
		if v, ok := m.Metadata.Labels["controller-uid"]; ok && v != string(o.parent.UID) {
			return fmt.Errorf("children[%d]: label controller-uid=%s does not match the parent", i, v)
		}
		var obj map[string]any
		_ = json.Unmarshal(raw, &obj)
		meta, _ := obj["metadata"].(map[string]any)
		labels, _ := meta["labels"].(map[string]any)
		if labels == nil {
			labels = map[string]any{}
		}
		labels["controller-uid"] = string(o.parent.UID)
		meta["labels"] = labels
		if meta["namespace"] == nil {
			meta["namespace"] = o.parent.Namespace
		}
		b, _ := json.Marshal(obj)
		t := metacontroller.TypeKey(m.Kind, m.APIVersion)
		if want[t] == nil {
			want[t] = map[string]json.RawMessage{}
		}
		want[t][o.parent.Namespace+"/"+m.Metadata.Name] = b
	}
	if d.Budget != nil {
		// One call per child created, changed or deleted; its watch event enqueues the parent.
		n := 0
		for t, objs := range want {
			for k, b := range objs {
				if old, ok := o.children[t][k]; !ok || !bytes.Equal(old, b) {
					n++
				}
			}
		}
		for t, objs := range o.children {
			for k := range objs {
				if _, ok := want[t][k]; !ok {
					n++
				}
			}
		}
		if n > 0 {
			d.enqueue(o, d.charge(CallChild, n))
		}
	}
	o.children = want
	return nil
}

// jsonEqual compares two values as Metacontroller compares unstructured objects.
func jsonEqual(a, b any) bool {
	var x, y any
	ab, _ := json.Marshal(a)
	bb, _ := json.Marshal(b)
	_ = json.Unmarshal(ab, &x)
	_ = json.Unmarshal(bb, &y)
	return reflect.DeepEqual(x, y)
}

// clone deep-copies through JSON, the form the API server stores (the API types have no
// generated DeepCopy).
func clone[T any](v T) T {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("driver: clone: %v", err))
	}
	var out T
	if err := json.Unmarshal(b, &out); err != nil {
		panic(fmt.Sprintf("driver: clone: %v", err))
	}
	return out
}
