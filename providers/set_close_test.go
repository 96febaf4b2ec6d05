package providers_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/proxy-operator/proxy-operator/providers"
)

// closing is a provider holding a resource: Close marks it closed and may fail.
type closing struct {
	closed bool
	err    error
}

func (c *closing) Create(context.Context, providers.CreateRequest) (string, error) { return "", nil }
func (c *closing) Get(context.Context, string) (*providers.Instance, error)        { return nil, nil }
func (c *closing) Delete(context.Context, string) error                            { return nil }
func (c *closing) ListByTag(context.Context) ([]providers.Instance, error)         { return nil, nil }
func (c *closing) Close() error                                                    { c.closed = true; return c.err }

// quiet has a Close without an error, like the mock provider's.
type quiet struct {
	closing
}

func (q *quiet) Close() { q.closed = true }

// plain holds nothing.
type plain struct{ closing }

func (*plain) Close(int) {}

func TestSetCloseReachesThroughTheMetricsWrapper(t *testing.T) {
	m := providers.NewMetrics(prometheus.NewRegistry())
	a, b, c := &closing{}, &closing{err: errors.New("socket stuck")}, &quiet{}
	set := providers.NewSet(
		providers.Entry{Name: "a", Type: "gcp", Provider: m.Instrument("a", a)},
		providers.Entry{Name: "b", Type: "gcp", Provider: m.Instrument("b", b)},
		providers.Entry{Name: "c", Type: "mock", Provider: m.Instrument("c", c)},
		providers.Entry{Name: "d", Type: "mock", Provider: &plain{}},
	)
	err := set.Close()
	if !a.closed || !b.closed || !c.closed {
		t.Errorf("closed a=%t b=%t c=%t, want all", a.closed, b.closed, c.closed)
	}
	if err == nil || !strings.Contains(err.Error(), "provider b: close: socket stuck") || strings.Contains(err.Error(), "provider a") {
		t.Errorf("Close error %v, want only b's failure, named", err)
	}
}
