package providers

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// Entry is one configured provider instance: its name (what spec.provider refers to), its
// type and the provider itself.
type Entry struct {
	Name     string
	Type     string
	Provider Provider
}

// Set is the configured providers, by name. It is built once at start and read-only after.
type Set struct {
	byName map[string]Entry
}

// NewSet builds a Set; names must be unique (the config loader checks this first).
func NewSet(entries ...Entry) *Set {
	s := &Set{byName: make(map[string]Entry, len(entries))}
	for _, e := range entries {
		s.byName[e.Name] = e
	}
	return s
}

// Lookup returns the provider configured under name.
func (s *Set) Lookup(name string) (Entry, bool) {
	if s == nil {
		return Entry{}, false
	}
	e, ok := s.byName[name]
	return e, ok
}

// Entries returns every configured provider, sorted by name.
func (s *Set) Entries() []Entry {
	if s == nil {
		return nil
	}
	out := make([]Entry, 0, len(s.byName))
	for _, e := range s.byName {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b Entry) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out
}

// Close closes every provider that holds resources (one with a Close method, looked for
// through wrappers that Unwrap), so that served proxies and client connections end with the
// process. Call it once the servers have stopped.
func (s *Set) Close() error {
	var errs []error
	for _, e := range s.Entries() {
		p := e.Provider
		for p != nil {
			if c, ok := p.(interface{ Close() error }); ok {
				if err := c.Close(); err != nil {
					errs = append(errs, fmt.Errorf("provider %s: close: %w", e.Name, err))
				}
				break
			}
			if c, ok := p.(interface{ Close() }); ok {
				c.Close()
				break
			}
			u, ok := p.(interface{ Unwrap() Provider })
			if !ok {
				break
			}
			p = u.Unwrap()
		}
	}
	return errors.Join(errs...)
}

// Metrics counts provider calls as proxy_operator_provider_requests_total{provider,op,result}.
type Metrics struct {
	requests *prometheus.CounterVec
}

// NewMetrics registers the provider metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{requests: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "proxy_operator_provider_requests_total",
		Help: "Provider calls by provider name, operation and result class.",
	}, []string{"provider", "op", "result"})}
	reg.MustRegister(m.requests)
	return m
}

// Instrument wraps p so that every call is counted under name.
func (m *Metrics) Instrument(name string, p Provider) Provider {
	if m == nil {
		return p
	}
	return &instrumented{name: name, p: p, m: m}
}

type instrumented struct {
	name string
	p    Provider
	m    *Metrics
}

var _ Provider = (*instrumented)(nil)

// Unwrap returns the provider being counted, so optional capabilities stay discoverable.
func (i *instrumented) Unwrap() Provider { return i.p }

func (i *instrumented) count(op string, err error) {
	i.m.requests.WithLabelValues(i.name, op, ClassName(err)).Inc()
}

func (i *instrumented) Create(ctx context.Context, req CreateRequest) (string, error) {
	id, err := i.p.Create(ctx, req)
	i.count("create", err)
	return id, err
}

func (i *instrumented) Get(ctx context.Context, id string) (*Instance, error) {
	in, err := i.p.Get(ctx, id)
	i.count("get", err)
	return in, err
}

func (i *instrumented) Delete(ctx context.Context, id string) error {
	err := i.p.Delete(ctx, id)
	i.count("delete", err)
	return err
}

func (i *instrumented) ListByTag(ctx context.Context) ([]Instance, error) {
	out, err := i.p.ListByTag(ctx)
	i.count("list", err)
	return out, err
}

// ListByOwner keeps the wrapped provider's OwnerLister visible, counted as a list.
func (i *instrumented) ListByOwner(ctx context.Context, ownerUID string) ([]Instance, error) {
	out, err := ListByOwner(ctx, i.p, ownerUID)
	i.count("list", err)
	return out, err
}
