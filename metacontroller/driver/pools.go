package driver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/metacontroller"
)

// PoolController is the name of the pools CompositeController (its finalizer's suffix).
const PoolController = "proxy-operator-pools"

// Pools plays Metacontroller's second CompositeController: ProxyPools are its parents, and
// their children are Proxies that it creates, updates (in place) and deletes in Proxies, the
// Driver playing the first controller for them. Both share one virtual clock and one queue
// order: Step runs whichever sync is due first, and a change to a member Proxy (its status
// written, its deletion) queues its pool at once, as a child event does in Metacontroller.
type Pools struct {
	// Proxies plays the proxy controller; its Clock is the clock of both levels.
	Proxies *Driver
	// URL is the base URL of the pool hooks: URL+"/sync" and URL+"/finalize" are called.
	URL string
	// Client makes the calls (nil: a client with DefaultHookTimeout, over Endpoint's TLS when
	// set).
	Client *http.Client
	// Endpoint, when set, is the CA and Authorization header of the pools controller (as
	// Driver.Endpoint).
	Endpoint *Endpoint
	// ResyncPeriod is the pools controller's resyncPeriodSeconds (0: none).
	ResyncPeriod time.Duration
	// BeforeApply sees every 200 answer before it is applied; returning false drops it, as
	// if the operator died before Metacontroller acted on it.
	BeforeApply func(key string, resp *metacontroller.SyncResponse) bool
	// AfterSync, when set, is called after every sync of either level (the invariant check).
	AfterSync func()

	mu     sync.Mutex
	objs   map[string]*poolObject
	uids   int
	seen   map[string]seenChild // member key -> what was last seen, for child events
	events []Event
	syncs  int
}

type seenChild struct{ version, owner string }

type poolObject struct {
	parent   v1.ProxyPool
	due      time.Time
	pending  bool
	failures int
}

// PoolFinalizer is the finalizer Metacontroller adds to every pool.
func PoolFinalizer() string { return "metacontroller.io/compositecontroller-" + PoolController }

// ApplyPool creates or updates a pool as kubectl apply would and queues it now.
func (ps *Pools) ApplyPool(p *v1.ProxyPool) error {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.objs == nil {
		ps.objs, ps.seen = map[string]*poolObject{}, map[string]seenChild{}
	}
	key := p.Key()
	if p.Name == "" || p.Namespace == "" {
		return fmt.Errorf("driver: apply pool: name and namespace are required")
	}
	now := ps.Proxies.Clock.Now()
	o, ok := ps.objs[key]
	if !ok {
		np := v1.ProxyPool{TypeMeta: metav1.TypeMeta{APIVersion: v1.APIVersion, Kind: v1.PoolKind}}
		np.ObjectMeta = *p.ObjectMeta.DeepCopy()
		if np.UID == "" {
			ps.uids++
			np.UID = k8stypes.UID(fmt.Sprintf("00000000-0000-4000-9000-%012d", ps.uids))
		}
		np.Generation, np.ResourceVersion = 1, "1"
		np.CreationTimestamp = metav1.NewTime(now.UTC().Truncate(time.Second))
		np.Finalizers = []string{PoolFinalizer()}
		np.Spec = clone(p.Spec)
		o = &poolObject{parent: np}
		ps.objs[key] = o
	} else {
		if o.parent.DeletionTimestamp != nil {
			return fmt.Errorf("driver: apply pool %s: being deleted", key)
		}
		if !jsonEqual(o.parent.Spec, p.Spec) {
			o.parent.Spec = clone(p.Spec)
			o.parent.Generation++
		}
	}
	ps.enqueue(o, now)
	return nil
}

// Scale sets spec.replicas through the scale subresource, as kubectl scale or an HPA does.
func (ps *Pools) Scale(key string, replicas int32) error {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	o, ok := ps.objs[key]
	if !ok {
		return fmt.Errorf("driver: scale %s: not found", key)
	}
	if o.parent.Spec.Replicas == nil || *o.parent.Spec.Replicas != replicas {
		o.parent.Spec.Replicas = &replicas
		o.parent.Generation++
	}
	ps.enqueue(o, ps.Proxies.Clock.Now())
	return nil
}

// DeletePool marks the pool deleted; it goes once finalize answers finalized.
func (ps *Pools) DeletePool(key string) error {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	o, ok := ps.objs[key]
	if !ok {
		return fmt.Errorf("driver: delete pool %s: not found", key)
	}
	if o.parent.DeletionTimestamp == nil {
		t := metav1.NewTime(ps.Proxies.Clock.Now().UTC().Truncate(time.Second))
		o.parent.DeletionTimestamp = &t
	}
	ps.enqueue(o, ps.Proxies.Clock.Now())
	return nil
}

// Pool returns a copy of the live pool.
func (ps *Pools) Pool(key string) (v1.ProxyPool, bool) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	o, ok := ps.objs[key]
	if !ok {
		return v1.ProxyPool{}, false
	}
	return clone(o.parent), true
}

// PoolEvents returns the Warning events recorded on pools so far.
func (ps *Pools) PoolEvents() []Event {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return slices.Clone(ps.events)
}

// PoolSyncs is the number of pool hook calls that answered 200.
func (ps *Pools) PoolSyncs() int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.syncs
}

// Members returns the live member Proxies of a pool (being deleted included), sorted by key.
// They share maps and pointers with the live objects: read them, never change them.
func (ps *Pools) Members(poolKey string) []v1.Proxy {
	ps.mu.Lock()
	o, ok := ps.objs[poolKey]
	var uid string
	if ok {
		uid = string(o.parent.UID)
	}
	ps.mu.Unlock()
	if !ok {
		return nil
	}
	return ps.membersOf(uid)
}

func (ps *Pools) membersOf(uid string) []v1.Proxy {
	d := ps.Proxies
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []v1.Proxy
	for _, o := range d.objs {
		if o.parent.Labels["controller-uid"] == uid {
			out = append(out, o.parent) // shallow: the driver runs one sync at a time
		}
	}
	slices.SortFunc(out, func(a, b v1.Proxy) int { return strings.Compare(a.Key(), b.Key()) })
	return out
}

func (ps *Pools) enqueue(o *poolObject, t time.Time) {
	if !o.pending || t.Before(o.due) {
		o.due, o.pending = t, true
	}
}

func (ps *Pools) nextPool() (string, time.Time, bool) {
	var best string
	var due time.Time
	found := false
	for k, o := range ps.objs {
		if !o.pending {
			continue
		}
		if !found || o.due.Before(due) || (o.due.Equal(due) && k < best) {
			best, due, found = k, o.due, true
		}
	}
	return best, due, found
}

// Step runs the sync due first across both levels (pools first on a tie, as their answers
// create the Proxies the other level then syncs), moving the clock to it. It reports false
// when nothing is queued.
func (ps *Pools) Step() (bool, error) {
	ps.mu.Lock()
	pk, pdue, pok := ps.nextPool()
	ps.mu.Unlock()
	xdue, xok := ps.Proxies.NextDue()
	switch {
	case !pok && !xok:
		return false, nil
	case pok && (!xok || !xdue.Before(pdue)):
		ps.Proxies.Clock.AdvanceTo(pdue)
		if err := ps.syncPool(pk); err != nil {
			return true, err
		}
	default:
		if _, err := ps.Proxies.Step(); err != nil {
			return true, err
		}
	}
	ps.childEvents()
	if ps.AfterSync != nil {
		ps.AfterSync()
	}
	return true, nil
}

// RunFor runs every sync due within dur of now, then leaves the clock at now+dur.
func (ps *Pools) RunFor(dur time.Duration) error {
	end := ps.Proxies.Clock.Now().Add(dur)
	for range maxSteps {
		if !ps.dueBy(end) {
			ps.Proxies.Clock.AdvanceTo(end)
			return nil
		}
		if _, err := ps.Step(); err != nil {
			return err
		}
	}
	return ErrHotLoop
}

// RunUntil runs syncs until cond holds, failing once the clock would pass now+limit.
func (ps *Pools) RunUntil(cond func() bool, limit time.Duration) error {
	end := ps.Proxies.Clock.Now().Add(limit)
	for range maxSteps {
		if cond() {
			return nil
		}
		if !ps.dueBy(end) {
			ps.Proxies.Clock.AdvanceTo(end)
			if cond() {
				return nil
			}
			return fmt.Errorf("driver: condition not met within %s", limit)
		}
		if _, err := ps.Step(); err != nil {
			return err
		}
	}
	return ErrHotLoop
}

func (ps *Pools) dueBy(end time.Time) bool {
	ps.mu.Lock()
	_, pdue, pok := ps.nextPool()
	ps.mu.Unlock()
	xdue, xok := ps.Proxies.NextDue()
	return (pok && !pdue.After(end)) || (xok && !xdue.After(end))
}

// childEvents queues the pool of every member whose object changed (or went) since the last
// look, as Metacontroller's child informer does.
func (ps *Pools) childEvents() {
	d := ps.Proxies
	d.mu.Lock()
	current := make(map[string]seenChild, len(d.objs))
	for k, o := range d.objs {
		if uid := o.parent.Labels["controller-uid"]; uid != "" {
			current[k] = seenChild{version: o.parent.ResourceVersion + "/" + strconv.FormatBool(o.parent.DeletionTimestamp != nil), owner: uid}
		}
	}
	d.mu.Unlock()

	ps.mu.Lock()
	defer ps.mu.Unlock()
	changed := map[string]bool{}
	for k, c := range current {
		if ps.seen[k] != c {
			changed[c.owner] = true
		}
	}
	for k, c := range ps.seen {
		if _, ok := current[k]; !ok {
			changed[c.owner] = true
		}
	}
	ps.seen = current
	now := d.Clock.Now()
	for _, o := range ps.objs {
		if changed[string(o.parent.UID)] {
			ps.enqueue(o, now)
		}
	}
}

// poolRequest is the v2 hook body for a pool.
type poolRequest struct {
	Controller json.RawMessage                `json:"controller"`
	Parent     *v1.ProxyPool                  `json:"parent"`
	Children   metacontroller.RelativeObjects `json:"children"`
	Related    metacontroller.RelativeObjects `json:"related"`
	Finalizing bool                           `json:"finalizing"`
}

func (ps *Pools) syncPool(key string) error {
	ps.mu.Lock()
	o, ok := ps.objs[key]
	if !ok {
		ps.mu.Unlock()
		return nil
	}
	o.pending = false
	parent := clone(o.parent)
	ps.mu.Unlock()

	childType := metacontroller.TypeKey(v1.Kind, v1.APIVersion)
	children := metacontroller.RelativeObjects{childType: {}}
	for _, m := range ps.membersOf(string(parent.UID)) {
		b, _ := json.Marshal(m)
		children[childType][m.Key()] = b
	}
	ctrl, _ := json.Marshal(map[string]any{
		"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
		"metadata": map[string]any{"name": PoolController},
	})
	req := poolRequest{Controller: ctrl, Parent: &parent, Children: children, Related: metacontroller.RelativeObjects{}, Finalizing: parent.DeletionTimestamp != nil}
	hook := "sync"
	if req.Finalizing {
		hook = "finalize"
	}
	resp, err := ps.call(hook, req)
	if err == nil && ps.BeforeApply != nil && !ps.BeforeApply(key, resp) {
		err = errors.New("answer dropped before it was applied")
	}
	now := ps.Proxies.Clock.Now()

	ps.mu.Lock()
	o, ok = ps.objs[key]
	if !ok {
		ps.mu.Unlock()
		return nil
	}
	if err != nil {
		o.failures++
		ps.enqueue(o, now.Add(backoff(o.failures)))
		ps.events = append(ps.events, Event{Time: now, Key: key, Reason: "SyncError", Message: err.Error()})
		ps.mu.Unlock()
		return nil
	}
	o.failures = 0
	ps.syncs++
	if err := ps.applyPoolStatus(o, resp.Status, now); err != nil {
		ps.mu.Unlock()
		return fmt.Errorf("driver: pool %s %s: %w", hook, key, err)
	}
	if req.Finalizing && resp.Finalized {
		delete(ps.objs, key)
		ps.mu.Unlock()
		return nil
	}
	if resp.ResyncAfterSeconds > 0 {
		ps.enqueue(o, now.Add(time.Duration(resp.ResyncAfterSeconds*float64(time.Second))))
	}
	if ps.ResyncPeriod > 0 {
		ps.enqueue(o, now.Add(ps.ResyncPeriod))
	}
	uid := string(o.parent.UID)
	ps.mu.Unlock()
	if err := ps.applyMembers(parent.Namespace, uid, resp.Children); err != nil {
		return fmt.Errorf("driver: pool %s %s: %w", hook, key, err)
	}
	return nil
}

func (ps *Pools) applyPoolStatus(o *poolObject, raw any, now time.Time) error {
	b, err := json.Marshal(raw)
	if err != nil {
		return err
	}
	var st v1.ProxyPoolStatus
	if string(b) != "null" {
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&st); err != nil {
			return fmt.Errorf("status not in the CRD schema: %w", err)
		}
	}
	st.ObservedGeneration = o.parent.Generation
	if jsonEqual(o.parent.Status, st) {
		return nil
	}
	o.parent.Status = st
	ps.enqueue(o, now)
	return nil
}

// applyMembers creates or updates (in place) the desired members in the proxy level and
// deletes the observed members that are not desired, skipping those already being deleted.
func (ps *Pools) applyMembers(namespace, uid string, children []json.RawMessage) error {
	want := map[string]*v1.Proxy{}
	for i, raw := range children {
		var px v1.Proxy
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&px); err != nil {
			return fmt.Errorf("children[%d]: %w", i, err)
		}
		if px.APIVersion != v1.APIVersion || px.Kind != v1.Kind || px.Name == "" {
			return fmt.Errorf("children[%d]: apiVersion %q kind %q name %q: want a named %s Proxy", i, px.APIVersion, px.Kind, px.Name, v1.APIVersion)
		}
		if v, ok := px.Labels["controller-uid"]; ok && v != uid {
			return fmt.Errorf("children[%d]: label controller-uid=%s does not match the parent", i, v)
		}
		if px.Namespace == "" {
			px.Namespace = namespace
		}
		px.Labels = maps.Clone(px.Labels)
		if px.Labels == nil {
			px.Labels = map[string]string{}
		}
		px.Labels["controller-uid"] = uid
		if _, dup := want[px.Key()]; dup {
			return fmt.Errorf("children[%d]: %s listed twice", i, px.Key())
		}
		want[px.Key()] = &px
	}
	observed := map[string]v1.Proxy{}
	for _, m := range ps.membersOf(uid) {
		observed[m.Key()] = m
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		px := want[k]
		if m, ok := observed[k]; ok && m.DeletionTimestamp != nil {
			continue // Metacontroller leaves a child being deleted alone
		}
		if cur, ok := observed[k]; ok {
			if maps.Equal(cur.Labels, px.Labels) && maps.Equal(cur.Annotations, px.Annotations) &&
				(reflect.DeepEqual(cur.Spec, px.Spec) || jsonEqual(cur.Spec, px.Spec)) {
				continue // an apply that changes nothing is no update
			}
		} else if _, taken := ps.Proxies.Get(k); taken {
			return fmt.Errorf("child %s exists and belongs to another parent", k)
		}
		if err := ps.Proxies.Apply(px); err != nil {
			return err
		}
	}
	for _, k := range slices.Sorted(maps.Keys(observed)) {
		if _, ok := want[k]; ok || observed[k].DeletionTimestamp != nil {
			continue
		}
		if err := ps.Proxies.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

func (ps *Pools) call(hook string, req poolRequest) (*metacontroller.SyncResponse, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	client, err := ps.Endpoint.httpClient(ps.Client, DefaultHookTimeout)
	if err != nil {
		return nil, fmt.Errorf("%s hook: %w", hook, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), DefaultHookTimeout)
	defer cancel()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(ps.URL, "/")+"/"+hook, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	ps.Endpoint.authorize(hreq)
	hreq.Header.Set("Content-Type", "application/json")
	res, err := client.Do(hreq)
	if err != nil {
		return nil, fmt.Errorf("pool %s hook: %w", hook, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("pool %s hook: reading answer: %w", hook, err)
	}
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("pool %s hook: HTTP %d: %s", hook, res.StatusCode, strings.TrimSpace(string(b)))
	}
	var resp metacontroller.SyncResponse
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&resp); err != nil {
		return nil, fmt.Errorf("pool %s hook: undecodable answer: %w", hook, err)
	}
	return &resp, nil
}
