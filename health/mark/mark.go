// Package mark owns the annotation the operator sets on a Proxy when its health verdict
// changes, so that Metacontroller, which syncs a parent whenever the parent changes, carries
// the new verdict into status at once instead of at the next resync. It knows nothing of how
// verdicts are reached or how status is written.
package mark

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Annotation is the annotation patched on a transition: "<verdict>@<seq>". The sequence makes
// every transition a real change of the object (a merge patch that changes nothing is not
// an update and would trigger no sync); its value means nothing to anyone else.
const Annotation = "crawl.example.com/health"

// Defaults: the patches are the operator's own API writes, so they get their own budget,
// below the operator's client budget (package kube), so GC lists and events keep room.
const (
	DefaultQPS   = 10
	DefaultBurst = 20
)

// Patcher sets the annotation on the Proxy namespace/name. An error the caller should not
// retry (the Proxy is gone) is reported by Gone.
type Patcher interface {
	Patch(ctx context.Context, key, value string) error
	Gone(err error) bool
}

// Config is what a Marker needs.
type Config struct {
	Patcher Patcher
	// Behind reports the verdict to mark when the Proxy's status is behind the live verdict,
	// and false when status already says it (then nothing is sent: a flap that came back
	// before its patch costs nothing). It is asked when the patch is about to be sent.
	Behind func(key string) (verdict string, behind bool)
	// QPS and Burst bound the patches (0: DefaultQPS, DefaultBurst).
	QPS   float64
	Burst int
	// Now reads the clock (nil: time.Now); Step takes its time from the caller instead.
	Now func() time.Time
	Log *slog.Logger
}

// Marker coalesces transitions per Proxy in a FIFO and sends at most QPS patches a second.
// A Proxy waiting in the queue is not queued twice, so the queue holds at most one entry per
// Proxy however hard the fleet flaps, and what is sent is the verdict at sending time.
type Marker struct {
	c       Config
	limiter *rate.Limiter
	log     *slog.Logger

	mu     sync.Mutex
	queue  []string
	queued map[string]bool
	seq    uint64
	wake   chan struct{}
	sent   int
	failed int
}

// New returns a Marker; call Run (or Step, in a simulation) to send.
func New(c Config) (*Marker, error) {
	if c.Patcher == nil || c.Behind == nil {
		return nil, fmt.Errorf("healthmark: Patcher and Behind are required")
	}
	if c.QPS <= 0 {
		c.QPS = DefaultQPS
	}
	if c.Burst <= 0 {
		c.Burst = DefaultBurst
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	log := c.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// The sequence starts from the clock so that a restarted process never repeats a value
	// the annotation may still hold (a repeat would be a no-op patch, hence no sync).
	return &Marker{c: c, log: log, limiter: rate.NewLimiter(rate.Limit(c.QPS), c.Burst),
		queued: map[string]bool{}, wake: make(chan struct{}, 1), seq: uint64(max(c.Now().UnixNano(), 0))}, nil
}

// Notify queues key after a verdict transition; it never blocks.
func (m *Marker) Notify(key string) {
	m.mu.Lock()
	if !m.queued[key] {
		m.queued[key] = true
		m.queue = append(m.queue, key)
	}
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Len is the number of Proxies waiting.
func (m *Marker) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.queue)
}

// Sent is the number of patches sent so far (failed ones excluded).
func (m *Marker) Sent() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sent
}

// Step sends every queued patch the budget allows at now and returns how long until the next
// one may go (0 when the queue is empty).
func (m *Marker) Step(ctx context.Context, now time.Time) time.Duration {
	for {
		m.mu.Lock()
		if len(m.queue) == 0 {
			m.mu.Unlock()
			return 0
		}
		key := m.queue[0]
		verdict, behind := m.c.Behind(key)
		if !behind {
			m.pop()
			m.mu.Unlock()
			continue
		}
		r := m.limiter.ReserveN(now, 1)
		if d := r.DelayFrom(now); d > 0 {
			r.CancelAt(now)
			m.mu.Unlock()
			return d
		}
		m.pop()
		m.seq++
		value := verdict + "@" + strconv.FormatUint(m.seq, 10)
		m.mu.Unlock()

		err := m.c.Patcher.Patch(ctx, key, value)
		m.mu.Lock()
		switch {
		case err == nil:
			m.sent++
		case m.c.Patcher.Gone(err):
		default:
			// Retried after the rest of the queue: a failing API server gets at most QPS
			// patches a second from us either way.
			m.failed++
			if !m.queued[key] {
				m.queued[key] = true
				m.queue = append(m.queue, key)
			}
			m.log.Warn("health annotation patch failed", "proxy", key, "err", err)
		}
		m.mu.Unlock()
	}
}

func (m *Marker) pop() {
	delete(m.queued, m.queue[0])
	m.queue[0] = ""
	m.queue = m.queue[1:]
}

// Run sends patches until ctx ends.
func (m *Marker) Run(ctx context.Context) error {
	for {
		wait := m.Step(ctx, m.c.Now())
		var timer *time.Timer
		var fire <-chan time.Time
		if wait > 0 {
			timer = time.NewTimer(wait)
			fire = timer.C
		}
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return nil
		case <-m.wake:
		case <-fire:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}
