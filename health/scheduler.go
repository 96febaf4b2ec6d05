package health

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/netpolicy"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
)

// DefaultWorkers bounds concurrent probes when Config.Workers is zero.
const DefaultWorkers = 64

// ErrConfig is returned by New for an unusable configuration.
var ErrConfig = errors.New("health: bad config")

// Config is what a Scheduler needs.
type Config struct {
	// View is the fleet to probe: every Proxy with an IP that is not being deleted.
	View *fleet.View
	// Prober makes the probes (NewHTTPProber in production).
	Prober Prober
	// Workers bounds concurrent probes (0: DefaultWorkers).
	Workers int
	// Now stamps probe times and places slots (nil: time.Now). It must move with real time:
	// the loop sleeps on real timers.
	Now func() time.Time
	// Registerer receives the prober's metrics (nil: none registered).
	Registerer prometheus.Registerer
	// FleetDurationOnly drops the proxy label from the probe duration histogram: one
	// histogram for the whole fleet instead of about 15 series per proxy (150k at 10,000
	// proxies). The failure counter keeps its proxy label.
	FleetDurationOnly bool
	// Log receives health transitions (nil: discarded).
	Log *slog.Logger
	// OnTransition, when set, is told of every verdict transition after it is published
	// (health state, exit, band), on the scheduling loop or in Report's caller: it must not
	// block (healthmark.Marker.Notify does not).
	OnTransition func(key string, h verdict.Health)

	// ExitURL is the echo URL exit checks fetch for proxies whose spec.verify names none
	// (empty: those proxies get no exit check).
	ExitURL string
	// ExitInterval is how often each proxy's exit is checked (0: DefaultExitInterval). The
	// check rides on a successful probe, as a second request through the proxy.
	ExitInterval time.Duration
	// Geo answers the country and network of exits (nil: none known).
	Geo Geo
	// ScoreHalfLife is how fast outcomes fade from the quality score (0:
	// DefaultScoreHalfLife); SlowProbe is the latency beyond which a successful probe
	// counts as slow (0: DefaultSlowProbe).
	ScoreHalfLife time.Duration
	SlowProbe     time.Duration
}

// DefaultExitInterval paces exit checks: an exit rarely moves, and each check is one more
// request through the proxy.
const DefaultExitInterval = 5 * time.Minute

// Scheduler probes the fleet on one scheduling loop and a bounded pool of workers, and keeps
// a verdict per proxy that Health reads without waiting on any probe.
type Scheduler struct {
	view    *fleet.View
	prober  Prober
	workers int
	now     func() time.Time
	log     *slog.Logger
	metrics *metrics

	// unit is the length of one "second" of the health check spec; tests shrink it.
	unit time.Duration
	// jitter picks the first probe's offset within an interval.
	jitter       func(time.Duration) time.Duration
	onTransition func(key string, h verdict.Health)
	// onResult, when set, sees every probe result (tests and the benchmark).
	onResult func(key string, due, start time.Time, r Result)

	exitURL      string
	exitInterval time.Duration
	geo          Geo
	halfLife     time.Duration
	slowProbe    time.Duration

	mu        sync.RWMutex
	published map[string]verdict.Health
	scores    map[string]*score
}

// New returns a Scheduler; call Run to start probing.
func New(c Config) (*Scheduler, error) {
	if c.View == nil || c.Prober == nil {
		return nil, fmt.Errorf("%w: View and Prober are required", ErrConfig)
	}
	if c.Workers < 0 {
		return nil, fmt.Errorf("%w: Workers %d is negative", ErrConfig, c.Workers)
	}
	s := &Scheduler{
		view: c.View, prober: c.Prober, workers: c.Workers, now: c.Now, log: c.Log,
		unit: time.Second, jitter: rand.N[time.Duration], published: map[string]verdict.Health{},
		onTransition: c.OnTransition, scores: map[string]*score{},
		exitURL: c.ExitURL, exitInterval: c.ExitInterval, geo: c.Geo, halfLife: c.ScoreHalfLife, slowProbe: c.SlowProbe,
	}
	if s.exitInterval <= 0 {
		s.exitInterval = DefaultExitInterval
	}
	if s.halfLife <= 0 {
		s.halfLife = DefaultScoreHalfLife
	}
	if s.slowProbe <= 0 {
		s.slowProbe = DefaultSlowProbe
	}
	if s.workers == 0 {
		s.workers = DefaultWorkers
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(c.Registerer, !c.FleetDurationOnly)
	if err != nil {
		return nil, err
	}
	s.metrics = m
	return s, nil
}

// Health is the current verdict on the proxy with this namespace/name. It takes one read
// lock and never waits on a probe. A proxy the loop has not picked up yet reports what its
// status last recorded, so the first sync after a restart does not flap it to Unknown.
func (s *Scheduler) Health(key string) verdict.Health {
	s.mu.RLock()
	h, ok := s.published[key]
	s.mu.RUnlock()
	if ok {
		return h
	}
	if p, ok := s.view.Get(key); ok && probeable(p) {
		return newVerdict(p.Recorded).health
	}
	return verdict.Health{State: verdict.Unknown}
}

// publish makes h the verdict Health returns, with the band of the proxy's score.
func (s *Scheduler) publish(key string, h verdict.Health) verdict.Health {
	s.mu.Lock()
	if sc := s.scores[key]; sc != nil {
		h.Band = sc.band
	}
	s.published[key] = h
	s.mu.Unlock()
	return h
}

func (s *Scheduler) unpublish(key string) {
	s.mu.Lock()
	delete(s.published, key)
	delete(s.scores, key)
	s.mu.Unlock()
}

// Report folds an outcome a crawler (or the gateway) saw through the proxy into its quality
// score at time at. A proxy the prober does not know is ignored. Safe for concurrent use.
func (s *Scheduler) Report(key string, o Outcome, at time.Time) {
	if h, changed := s.grade(key, o, at, 1); changed {
		s.log.Info("proxy quality band changed", "proxy", key, "band", string(h.Band))
		if s.onTransition != nil {
			s.onTransition(key, h)
		}
	}
}

// grade adds an outcome (its weight times scale) to key's score; when the band moves, the
// published verdict takes it.
func (s *Scheduler) grade(key string, o Outcome, at time.Time, scale float64) (verdict.Health, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.published[key]
	sc := s.scores[key]
	if !ok || sc == nil {
		return h, false
	}
	changed := sc.add(o, at, s.halfLife, scale)
	s.metrics.score.WithLabelValues(key).Set(sc.value())
	if changed {
		h.Band = sc.band
		s.published[key] = h
	}
	return h, changed
}

// probeOutcome is how the score weighs a probe result.
func (s *Scheduler) probeOutcome(r Result) Outcome {
	switch {
	case !r.OK:
		return OutcomeProbeFailed
	case r.Latency > s.slowProbe:
		return OutcomeProbeSlow
	}
	return OutcomeProbeOK
}

func probeable(p fleet.Proxy) bool { return p.IP != "" && p.Port > 0 && !p.Deleting }

// entry is the loop's record of one probed proxy. Only the loop touches it.
type entry struct {
	key      string
	uid      string
	target   Target
	interval time.Duration
	fail     int32
	succeed  int32
	verdict  *judge
	// graded is set once the proxy was Healthy: its probes count towards its score from then.
	graded bool
	// proxy is the record the exit verdict was made against; exitURL is the echo to ask and
	// exitDue when (no check before it).
	proxy   fleet.Proxy
	exitURL string
	exitDue time.Time

	due    time.Time // the slot of the next (or running) probe
	index  int       // in the heap; -1 while a probe runs
	cancel context.CancelFunc
}

type job struct {
	e      *entry
	ctx    context.Context
	target Target
	due    time.Time
}

type done struct {
	job
	start time.Time
	res   Result
}

// Run probes until ctx ends, then cancels running probes, waits for the workers and
// returns nil.
func (s *Scheduler) Run(ctx context.Context) error {
	jobs := make(chan job, s.workers)
	// Buffered for every worker, so a worker never blocks handing back a result: at most
	// s.workers probes are ever out.
	results := make(chan done, s.workers)
	var wg sync.WaitGroup
	for range s.workers {
		wg.Go(func() {
			for j := range jobs {
				start := time.Now()
				r := s.prober.Probe(j.ctx, j.target)
				results <- done{job: j, start: start, res: r}
			}
		})
	}

	l := &loop{s: s, entries: map[string]*entry{}, jobs: jobs}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var seen uint64
	first := true
	for {
		changed := s.view.Changed()
		if v := s.view.Version(); first || v != seen {
			first, seen = false, v
			l.sync(s.view.List())
		}
		l.dispatch()
		wait := time.Hour
		if len(l.heap) > 0 && l.busy < s.workers {
			wait = max(l.heap[0].due.Sub(s.now()), 0)
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			for _, e := range l.entries {
				if e.cancel != nil {
					e.cancel()
				}
			}
			// Queued jobs run with a cancelled context and return at once; results has room
			// for every one of them.
			close(jobs)
			wg.Wait()
			return nil
		case <-changed:
		case <-timer.C:
		case d := <-results:
			l.finish(d)
		}
	}
}

// loop is the scheduling loop's state.
type loop struct {
	s       *Scheduler
	entries map[string]*entry
	heap    dueHeap
	jobs    chan<- job
	busy    int
}

// sync brings the entries in line with the view: new proxies get a first probe at a random
// point of their interval, changed ones are updated, gone ones stop at once.
func (l *loop) sync(ps []fleet.Proxy) {
	s := l.s
	keep := make(map[string]struct{}, len(ps))
	for _, p := range ps {
		if !probeable(p) {
			continue
		}
		keep[p.Key] = struct{}{}
		hc := p.HealthCheck
		// A vendor proxy is probed through its endpoint with a username of its own session
		// (fleet.ProbeSession); a template that cannot render leaves the probe without one,
		// and the vendor's 407 makes the proxy unhealthy.
		creds, _ := p.UpstreamCredentials(v1.UsernameValues{Session: fleet.ProbeSession})
		t := Target{
			Proxy:       net.JoinHostPort(p.IP, strconv.Itoa(int(p.Port))),
			URL:         hc.ProbeURL,
			Timeout:     time.Duration(hc.TimeoutSeconds) * s.unit,
			Expected:    hc.ExpectedStatusCodes,
			Credentials: creds,
			Dest:        netpolicy.Dest{External: p.Mode == v1.ModeExternal, Provider: p.Provider},
		}
		interval := time.Duration(max(hc.IntervalSeconds, 1)) * s.unit
		e, ok := l.entries[p.Key]
		if ok && (e.uid != p.UID || e.target.Proxy != t.Proxy) {
			// Another machine behind the same name: the old verdict says nothing about it.
			l.remove(e)
			ok = false
			p.Recorded = verdict.Health{}
		}
		if !ok {
			e = &entry{key: p.Key, uid: p.UID, index: -1, verdict: newVerdict(p.Recorded), proxy: p}
			e.due = s.now().Add(s.jitter(interval))
			l.entries[p.Key] = e
			heap.Push(&l.heap, e)
			s.mu.Lock()
			s.scores[e.key] = newScore(p.Recorded.Band)
			s.mu.Unlock()
			l.reverify(e, p)
			s.publish(e.key, e.verdict.health)
			s.metrics.known(e.key)
		} else if !e.proxy.SameVerification(p) {
			l.reverify(e, p)
		}
		if ok && interval < e.interval && e.index >= 0 {
			if latest := s.now().Add(interval); e.due.After(latest) {
				e.due = latest
				heap.Fix(&l.heap, e.index)
			}
		}
		e.target, e.interval = t, interval
		e.fail, e.succeed = hc.FailureThreshold, hc.SuccessThreshold
		e.proxy = p
		exitURL := s.exitURL
		if p.Verify != nil && p.Verify.ExitURL != "" {
			exitURL = p.Verify.ExitURL
		}
		if exitURL != e.exitURL {
			e.exitURL, e.exitDue = exitURL, time.Time{}
		}
	}
	for key, e := range l.entries {
		if _, ok := keep[key]; !ok {
			l.remove(e)
		}
	}
}

// reverify judges the exit e already knows against p's verification (a changed spec.verify
// or attributes, or a proxy picked up with an exit its status recorded), publishing a change.
func (l *loop) reverify(e *entry, p fleet.Proxy) {
	e.proxy = p
	old := e.verdict.health.Exit
	addr, err := netip.ParseAddr(old.IP)
	if err != nil {
		return
	}
	if ex := exitOf(p, addr, l.s.geo); ex != old {
		e.verdict.health.Exit = ex
		h := l.s.publish(e.key, e.verdict.health)
		l.s.log.Info("proxy exit verdict changed", "proxy", e.key, "exit", ex.IP, "mismatch", ex.Mismatch)
		if l.s.onTransition != nil {
			l.s.onTransition(e.key, h)
		}
	}
}

// remove stops probing e, cancelling a running probe.
func (l *loop) remove(e *entry) {
	if e.cancel != nil {
		e.cancel()
		e.cancel = nil
	}
	if e.index >= 0 {
		heap.Remove(&l.heap, e.index)
	}
	delete(l.entries, e.key)
	l.s.unpublish(e.key)
	l.s.metrics.forget(e.key)
}

// dispatch hands every due probe to a worker while one is free. Probes that find no free
// worker wait in the heap and start late; the lateness histogram shows it.
func (l *loop) dispatch() {
	now := l.s.now()
	for len(l.heap) > 0 && l.busy < l.s.workers && !l.heap[0].due.After(now) {
		e := heap.Pop(&l.heap).(*entry)
		ctx, cancel := context.WithCancel(context.Background())
		e.cancel = cancel
		l.busy++
		l.s.metrics.lateness.Observe(now.Sub(e.due).Seconds())
		t := e.target
		if e.exitURL != "" && !now.Before(e.exitDue) {
			t.ExitURL = e.exitURL
		}
		l.jobs <- job{e: e, ctx: ctx, target: t, due: e.due}
	}
}

// finish folds a result in and schedules the proxy's next probe one interval after the slot
// of this one, so lateness does not accumulate.
func (l *loop) finish(d done) {
	l.busy--
	s, e := l.s, d.e
	if s.onResult != nil {
		s.onResult(e.key, d.due, d.start, d.res)
	}
	if cur, ok := l.entries[e.key]; !ok || cur != e {
		return // removed while probing
	}
	e.cancel()
	e.cancel = nil
	s.metrics.observe(e.key, d.res)
	prev := e.verdict.health
	changed := e.verdict.observe(d.res, d.start, e.fail, e.succeed)
	if changed {
		s.log.Info("proxy health changed", "proxy", e.key, "from", string(prev.State),
			"to", string(e.verdict.health.State), "reason", e.verdict.health.Reason,
			"latencyMillis", e.verdict.health.LatencyMillis)
	}
	now := s.now()
	exitChanged := false
	switch {
	case d.res.Exit.IsValid():
		e.exitDue = now.Add(s.exitInterval)
		s.metrics.exitChecks.WithLabelValues("ok").Inc()
		if ex := exitOf(e.proxy, d.res.Exit, s.geo); ex != e.verdict.health.Exit {
			s.log.Info("proxy exit changed", "proxy", e.key, "from", e.verdict.health.Exit.IP, "to", ex.IP,
				"country", ex.Country, "asn", ex.ASN, "mismatch", ex.Mismatch)
			e.verdict.health.Exit, exitChanged = ex, true
		}
	case d.res.ExitErr != nil:
		// The exit stays what it was; the next probe asks again.
		s.metrics.exitChecks.WithLabelValues("failed").Inc()
		s.log.Debug("exit check failed", "proxy", e.key, "err", d.res.ExitErr)
	}
	// Probes count towards the score from the first Healthy verdict on: a machine still
	// booting is not a bad proxy (the health verdict already keeps it from crawlers), and
	// grading its refused probes would make every new member of a pool with
	// rotation.minBand look worse than the members it replaces.
	bandChanged := false
	if e.verdict.health.State == verdict.Healthy {
		e.graded = true
	}
	if e.graded {
		_, bandChanged = s.grade(e.key, s.probeOutcome(d.res), d.start, probeScale(e.interval))
	}
	if changed || exitChanged || prev.LatencyMillis != e.verdict.health.LatencyMillis {
		s.publish(e.key, e.verdict.health)
	}
	if (changed || exitChanged || bandChanged) && s.onTransition != nil {
		s.onTransition(e.key, s.Health(e.key))
	}
	e.due = d.due.Add(e.interval)
	if e.due.Before(now) {
		e.due = now
	}
	heap.Push(&l.heap, e)
}

// dueHeap orders entries by their next slot.
type dueHeap []*entry

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h dueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *dueHeap) Push(x any) {
	e := x.(*entry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *dueHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.index = -1
	return e
}
