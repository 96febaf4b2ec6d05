package driver

import (
	"maps"
	"time"
)

// Budget models, in virtual time, the two things that pace Metacontroller on a large fleet:
// its client's rate limit and its worker pool. Sources (metacontroller/metacontroller@v4.17.2):
//
//   - pkg/cmd/metacontroller/main.go: --client-go-qps 5 and --client-go-burst 10 set the
//     rest.Config's QPS and Burst, i.e. client-go's token bucket over every API call
//     Metacontroller makes; --workers 5 sync goroutines per controller.
//
//   - pkg/controller/composite/controller.go, syncParentObject and updateParentStatus: a sync
//     adds the finalizer first when it is missing (finalizer.SyncObject -> AddFinalizer, an
//     AtomicUpdate: GET + update, 2 calls), calls the hook, then AtomicStatusUpdate
//     (pkg/dynamic/clientset/clientset.go): a GET of the live parent always, and an
//     UpdateStatus only when the status differs. So a sync that writes costs 2 calls and one
//     that does not costs 1; the write's watch event re-enqueues the parent (updateParentObject
//     filters nothing unless ignoreStatusChanges), whose echo sync costs 1 more: about 3 calls
//     per status write. A finished finalize removes the finalizer: GET + update, 2 calls.
//
//   - pkg/dynamic/informer/informer.go: resyncPeriodSeconds is a ticker per handler that
//     lists every cached parent and enqueues it (a fleet-wide flood, not one timer per
//     parent), and the shared informer's own resync (--cache-flush-interval, 30 min) does the
//     same.
//
//   - The work queue (client-go workqueue, controller.go newParentController) never holds a
//     key twice and never syncs one key on two workers at once.
//
//   - pkg/controller/common/manage_children.go (ManageChildren, run after the hook and before
//     the status update): one create, update or delete per child that differs; a child's own
//     watch event enqueues its parent again (it coalesces with the status write's echo when
//     both land while the parent is being synced).
//
// Reads from informers (the parent, children, related objects) cost no calls; neither do
// hook calls, which only take HookLatency of a worker's time.
//
// The machine's limit: on one small machine the API server (with etcd) serves a bounded
// number of calls a second for every client together: Metacontroller's, the operator's
// health annotation patches and kubectl's creates of the Proxies being applied. ServerRate
// models it as one more token bucket that every call of every client passes; a call then
// keeps its worker busy CallLatency. Calls are counted by kind (Counts) so a bring-up can be
// itemised per proxy.
type Budget struct {
	// QPS and Burst are --client-go-qps and --client-go-burst (0: 5 and 10).
	QPS   float64
	Burst int
	// Workers is --workers (0: 5).
	Workers int
	// HookLatency is how long one hook call keeps a worker busy (virtual time; 0: none).
	HookLatency time.Duration
	// CallLatency is how long one API call keeps a worker busy once granted (0: none).
	CallLatency time.Duration
	// CacheFlush is --cache-flush-interval: every parent is enqueued on that period (0: off).
	CacheFlush time.Duration
	// ServerRate is the calls a second the API server serves for all its clients together
	// (0: unlimited); ServerBurst is how many it takes at once before they queue (0: 1).
	ServerRate  float64
	ServerBurst int

	started    bool
	client     bucket
	server     bucket
	cursor     time.Time // virtual time inside the sync being run
	free       []time.Time
	busy       map[string]time.Time
	finalizer  map[string]bool
	calls      int
	counts     map[string]int
	nextResync time.Time
	nextFlush  time.Time
}

// Kinds of API call, for Counts.
const (
	CallFinalizer    = "finalizer"     // AddFinalizer or RemoveFinalizer: GET + update
	CallStatusGet    = "status-get"    // AtomicStatusUpdate's GET
	CallStatusUpdate = "status-update" // UpdateStatus
	CallChild        = "child"         // a child created, updated or deleted
	CallPatch        = "patch"         // another client's metadata patch (the health annotation)
	CallApply        = "apply"         // kubectl's create of a parent
)

// bucket is client-go's token bucket (golang.org/x/time/rate with a rate and a burst) as the
// generic cell rate algorithm: tat is the theoretical arrival time of the next call.
type bucket struct {
	rate  float64
	burst int
	tat   time.Time
}

// take grants one call asked for at t.
func (k *bucket) take(t time.Time) time.Time {
	if k.rate <= 0 {
		return t
	}
	interval := time.Duration(float64(time.Second) / k.rate)
	tolerance := time.Duration(max(k.burst, 1)-1) * interval
	g := t
	if earliest := k.tat.Add(-tolerance); earliest.After(g) {
		g = earliest
	}
	if k.tat.Before(g) {
		k.tat = g
	}
	k.tat = k.tat.Add(interval)
	return g
}

// Counts is the number of API calls made so far by kind (Metacontroller's, and with a
// ServerRate the other clients' the driver sees: patches and applies).
func (b *Budget) Counts() map[string]int { return maps.Clone(b.counts) }

// Calls is the number of API calls Metacontroller made so far.
func (b *Budget) Calls() int { return b.calls }

func (b *Budget) init(now time.Time) {
	if b.started {
		return
	}
	b.started = true
	if b.QPS <= 0 {
		b.QPS = 5
	}
	if b.Burst <= 0 {
		b.Burst = 10
	}
	if b.Workers <= 0 {
		b.Workers = 5
	}
	b.free = make([]time.Time, b.Workers)
	for i := range b.free {
		b.free[i] = now
	}
	b.busy, b.finalizer, b.counts = map[string]time.Time{}, map[string]bool{}, map[string]int{}
	b.client = bucket{rate: b.QPS, burst: b.Burst, tat: now}
	b.server = bucket{rate: b.ServerRate, burst: b.ServerBurst, tat: now}
}

// take grants one of Metacontroller's calls asked for at t: client-go's bucket, then the
// API server's.
func (b *Budget) take(t time.Time, kind string) time.Time {
	b.calls++
	b.counts[kind]++
	return b.server.take(b.client.take(t))
}

// charge spends n calls of one kind in the sync being run and returns when the last is
// granted. Without a Budget every call is free and instant. Called with d.mu held.
func (d *Driver) charge(kind string, n int) time.Time {
	b := d.Budget
	if b == nil {
		return d.Clock.Now()
	}
	for range n {
		b.cursor = b.take(b.cursor, kind).Add(b.CallLatency)
	}
	return b.cursor
}

// chargeOther spends one call of another client (kubectl, the operator) at the clock's time:
// it passes only the API server's bucket, and returns when it is served. Called with d.mu
// held.
func (d *Driver) chargeOther(kind string) time.Time {
	b := d.Budget
	now := d.Clock.Now()
	if b == nil {
		return now
	}
	b.init(now)
	b.counts[kind]++
	return b.server.take(now).Add(b.CallLatency)
}

func (b *Budget) freeWorker() int {
	best := 0
	for i, t := range b.free {
		if t.Before(b.free[best]) {
			best = i
		}
	}
	return best
}

// nextTick is the earliest fleet-wide enqueue (resyncPeriodSeconds or the cache flush).
func (d *Driver) nextTick() (time.Time, bool) {
	b := d.Budget
	var t time.Time
	ok := false
	if d.ResyncPeriod > 0 {
		t, ok = b.nextResync, true
	}
	if b.CacheFlush > 0 && (!ok || b.nextFlush.Before(t)) {
		t, ok = b.nextFlush, true
	}
	return t, ok
}

// stepBudget runs the next sync on the first free worker once the queue reaches it.
func (d *Driver) stepBudget() (bool, error) {
	d.mu.Lock()
	b := d.Budget
	if b.nextResync.IsZero() {
		b.init(d.Clock.Now())
		b.nextResync = d.Clock.Now().Add(d.ResyncPeriod)
		b.nextFlush = d.Clock.Now().Add(b.CacheFlush)
	}
	var (
		key    string
		start  time.Time
		worker int
	)
	for range maxSteps {
		k, due, ok := d.next()
		tick, ticking := d.nextTick()
		worker = b.freeWorker()
		s := due
		if b.free[worker].After(s) {
			s = b.free[worker]
		}
		if ticking && (!ok || !tick.After(s)) && len(d.objs) > 0 {
			for _, o := range d.objs {
				d.enqueue(o, tick)
			}
			if d.ResyncPeriod > 0 && !b.nextResync.After(tick) {
				b.nextResync = b.nextResync.Add(d.ResyncPeriod)
			}
			if b.CacheFlush > 0 && !b.nextFlush.After(tick) {
				b.nextFlush = b.nextFlush.Add(b.CacheFlush)
			}
			continue
		}
		if !ok {
			d.mu.Unlock()
			return false, nil
		}
		if busy := b.busy[k]; busy.After(s) {
			// Still on another worker: the queue hands it out again once that one is done.
			o := d.objs[k]
			o.pending = false
			d.enqueue(o, busy)
			continue
		}
		key, start = k, s
		break
	}
	if key == "" {
		d.mu.Unlock()
		return false, ErrHotLoop
	}
	b.cursor = start
	var finalizerAt time.Time
	if !b.finalizer[key] && d.objs[key].parent.DeletionTimestamp == nil {
		b.finalizer[key] = true
		finalizerAt = d.charge(CallFinalizer, 2)
	}
	b.cursor = b.cursor.Add(b.HookLatency)
	d.mu.Unlock()

	d.Clock.AdvanceTo(start)
	err := d.sync(key)

	d.mu.Lock()
	defer d.mu.Unlock()
	b.free[worker] = b.cursor
	b.busy[key] = b.cursor
	if o, ok := d.objs[key]; ok && !finalizerAt.IsZero() {
		// The finalizer's update event arrived while the key was being synced: the queue
		// hands it out once more.
		d.enqueue(o, finalizerAt)
	}
	return true, err
}

// NextAt is when the next sync would start on a Budget (or the next fleet-wide enqueue
// happen), for simulations that interleave their own events; false when nothing is queued.
func (d *Driver) NextAt() (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	b := d.Budget
	k, due, ok := d.next()
	if b == nil || b.nextResync.IsZero() {
		return due, ok
	}
	var at time.Time
	if ok {
		at = due
		if w := b.free[b.freeWorker()]; w.After(at) {
			at = w
		}
		if busy := b.busy[k]; busy.After(at) {
			at = busy
		}
	}
	if tick, ticking := d.nextTick(); ticking && len(d.objs) > 0 && (!ok || tick.Before(at)) {
		return tick, true
	}
	return at, ok
}
