// Package factory owns the providers config file: it parses it strictly, names the entry that
// is wrong, and builds each provider through one explicit switch on its type. It is the only
// package that knows every provider implementation.
package factory

import (
	"context"
	"fmt"
	"os"
	"regexp"

	"sigs.k8s.io/yaml"

	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/gcp"
	"github.com/proxy-operator/proxy-operator/providers/kubernetes"
	"github.com/proxy-operator/proxy-operator/providers/mock"
)

// Config is the providers config file.
type Config struct {
	Providers []Entry `json:"providers"`
}

// Entry is one named provider instance. Exactly the block matching Type may be set.
type Entry struct {
	Name string       `json:"name"`
	Type string       `json:"type"`
	Mock *mock.Config `json:"mock,omitempty"`
	// Kubernetes configures in-cluster Squid Pods (returned as Metacontroller children).
	Kubernetes *kubernetes.Config `json:"kubernetes,omitempty"`
	// GCP configures Compute Engine VMs; required for type gcp (project has no default).
	GCP *gcp.Config `json:"gcp,omitempty"`
}

// Deps are what providers may need from the process.
type Deps struct {
	// Metrics, when set, counts every provider call.
	Metrics *providers.Metrics
}

var nameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// Default is the config used when no file is given: one mock provider named "mock" whose
// instances are real forward proxies on loopback.
func Default() Config {
	return Config{Providers: []Entry{{Name: "mock", Type: "mock", Mock: &mock.Config{ServeProxies: true}}}}
}

// Load reads and parses the file at path.
func Load(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("providers config: %w", err)
	}
	return Parse(b)
}

// Parse parses a providers config, rejecting unknown fields, and validates it.
func Parse(b []byte) (Config, error) {
	var c Config
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return Config{}, fmt.Errorf("providers config: %w", err)
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Validate checks names, uniqueness, types and that each entry's block matches its type.
func (c Config) Validate() error {
	if len(c.Providers) == 0 {
		return fmt.Errorf("providers config: no providers listed")
	}
	seen := map[string]int{}
	for i, e := range c.Providers {
		where := fmt.Sprintf("providers config: providers[%d]", i)
		if e.Name != "" {
			where += fmt.Sprintf(" (%s)", e.Name)
		}
		if !nameRE.MatchString(e.Name) {
			return fmt.Errorf("%s: name %q must be a DNS label (lowercase letters, digits, '-', at most 63)", where, e.Name)
		}
		if j, dup := seen[e.Name]; dup {
			return fmt.Errorf("%s: name %q already used by providers[%d]", where, e.Name, j)
		}
		seen[e.Name] = i
		blocks := map[string]bool{"mock": e.Mock != nil, "kubernetes": e.Kubernetes != nil, "gcp": e.GCP != nil}
		for typ, set := range blocks {
			if set && typ != e.Type {
				return fmt.Errorf("%s: has a %q block but type %q", where, typ, e.Type)
			}
		}
		switch e.Type {
		case "mock":
			if e.Mock != nil {
				for j, f := range e.Mock.Faults {
					if err := f.Validate(); err != nil {
						return fmt.Errorf("%s: mock.faults[%d]: %w", where, j, err)
					}
				}
			}
		case "kubernetes":
			if e.Kubernetes != nil {
				if err := e.Kubernetes.Validate(); err != nil {
					return fmt.Errorf("%s: %w", where, err)
				}
			}
		case "gcp":
			if e.GCP == nil {
				return fmt.Errorf("%s: type gcp needs a gcp block with at least project", where)
			}
			if err := e.GCP.Validate(); err != nil {
				return fmt.Errorf("%s: %w", where, err)
			}
		case "":
			return fmt.Errorf("%s: type is required (one of: mock, kubernetes, gcp)", where)
		default:
			return fmt.Errorf("%s: unknown type %q (one of: mock, kubernetes, gcp)", where, e.Type)
		}
	}
	return nil
}

// Build constructs every provider of a validated config.
func Build(c Config, deps Deps) (*providers.Set, error) {
	entries := make([]providers.Entry, 0, len(c.Providers))
	for _, e := range c.Providers {
		var p providers.Provider
		var err error
		switch e.Type {
		case "mock":
			cfg := mock.Config{}
			if e.Mock != nil {
				cfg = *e.Mock
			}
			p, err = mock.New(cfg)
		case "kubernetes":
			cfg := kubernetes.Config{}
			if e.Kubernetes != nil {
				cfg = *e.Kubernetes
			}
			p, err = kubernetes.New(cfg)
		case "gcp":
			// Background, not a start-up deadline: the auth library may keep this context for
			// token refreshes for the life of the process.
			p, err = gcp.New(context.Background(), *e.GCP)
		default:
			err = fmt.Errorf("unknown type %q", e.Type)
		}
		if err != nil {
			return nil, fmt.Errorf("provider %s: %w", e.Name, err)
		}
		entries = append(entries, providers.Entry{Name: e.Name, Type: e.Type, Provider: deps.Metrics.Instrument(e.Name, p)})
	}
	return providers.NewSet(entries...), nil
}
