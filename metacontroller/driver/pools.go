package driver

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
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
// Both levels run the same loop (loop.go): queue, backoff, 429 + Retry-After, hook timeout and
// answer cap; this file keeps what is particular to pools (members as children, child events).
type Pools struct {
	// Proxies plays the proxy controller; its Clock is the clock of both levels.
	Proxies *Driver
	// URL is the base URL of the pool hooks: URL+"/sync" and URL+"/finalize" are called.
	URL string
	// Client makes the calls (nil: a client with HookTimeout, over Endpoint's TLS when set).
	Client *http.Client
	// HookTimeout is the pools controller's webhook.timeout (0: the proxy controller's, as
	// one install sets both).
	HookTimeout time.Duration
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

	mu sync.Mutex
	// store holds the pools, their queue, events and sync count (loop.go).
	store[*poolObject]
	seen map[string]seenChild // member key -> what was last seen, for child events
}

type seenChild struct{ version, owner string }

type poolObject struct {
	schedule
	parent v1.ProxyPool
}

func (o *poolObject) key() string { return o.parent.Key() }

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

// NextDue is when the earliest queued sync of either level is due; false when nothing is
// queued.
func (ps *Pools) NextDue() (time.Time, bool) {
	ps.mu.Lock()
	_, pdue, pok := ps.next()
	ps.mu.Unlock()
	xdue, xok := ps.Proxies.NextDue()
	switch {
	case pok && (!xok || pdue.Before(xdue)):
		return pdue, true
	default:
		return xdue, xok
	}
}

// Step runs the sync due first across both levels (pools first on a tie, as their answers
// create the Proxies the other level then syncs), moving the clock to it. It reports false
// when nothing is queued.
func (ps *Pools) Step() (bool, error) {
	ps.mu.Lock()
	pk, pdue, pok := ps.next()
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

// RunUntilIdle runs every sync of either level due now or earlier, without moving the clock.
func (ps *Pools) RunUntilIdle() error { return runUntilIdle(ps.Proxies.Clock, ps) }

// RunFor runs every sync due within dur of now, then leaves the clock at now+dur.
func (ps *Pools) RunFor(dur time.Duration) error { return runFor(ps.Proxies.Clock, ps, dur) }

// RunUntil runs syncs until cond holds, failing once the clock would pass now+limit.
func (ps *Pools) RunUntil(cond func() bool, limit time.Duration) error {
	return runUntil(ps.Proxies.Clock, ps, cond, limit)
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
	req := request[*v1.ProxyPool]{Controller: controllerJSON(PoolController, "proxypools"), Parent: &parent, Children: children, Related: metacontroller.RelativeObjects{}, Finalizing: parent.DeletionTimestamp != nil}
	name := "sync"
	if req.Finalizing {
		name = "finalize"
	}
	h := hook{url: ps.URL, client: ps.Client, endpoint: ps.Endpoint, timeout: cmp.Or(ps.HookTimeout, ps.Proxies.HookTimeout)}
	h.prefix = "pool "
	resp, retryAfter, err := h.call(name, req)
	if err == nil && ps.BeforeApply != nil && !ps.BeforeApply(key, resp) {
		err = errDropped
	}
	now := ps.Proxies.Clock.Now()

	ps.mu.Lock()
	o, ok = ps.objs[key]
	if !ok {
		ps.mu.Unlock()
		return nil
	}
	if err != nil {
		ps.failed(o, now, retryAfter, err)
		ps.mu.Unlock()
		return nil
	}
	ps.answered(o)
	if err := ps.applyPoolStatus(o, resp.Status, now); err != nil {
		ps.mu.Unlock()
		return fmt.Errorf("driver: pool %s %s: %w", name, key, err)
	}
	if req.Finalizing && resp.Finalized {
		delete(ps.objs, key)
		ps.mu.Unlock()
		return nil
	}
	ps.resync(o, now, resp, ps.ResyncPeriod)
	uid := string(o.parent.UID)
	ps.mu.Unlock()
	if err := ps.applyMembers(parent.Namespace, uid, resp.Children); err != nil {
		return fmt.Errorf("driver: pool %s %s: %w", name, key, err)
	}
	return nil
}

func (ps *Pools) applyPoolStatus(o *poolObject, raw any, now time.Time) error {
	st, err := decodeStatus[v1.ProxyPoolStatus](raw)
	if err != nil {
		return err
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
