// Package factory owns the providers config file: it parses it strictly, names the entry that
// is wrong, and builds each provider through one table of types (name -> config block,
// validate, build). It is the only package that knows every provider implementation; each
// provider validates its own config.
package factory

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"

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

// providerType is one row of the table: a type name, whether an entry carries its block, how
// its config is checked (by the provider's own Validate) and how it is built.
type providerType struct {
	name string
	// set says whether the entry carries this type's block.
	set func(Entry) bool
	// validate checks the entry's block; it runs only when the entry is of this type.
	validate func(Entry) error
	// build constructs the provider of a validated entry.
	build func(Entry) (providers.Provider, error)
}

// types is every provider type, in the order error messages list them.
var types = []providerType{
	{
		name: "mock",
		set:  func(e Entry) bool { return e.Mock != nil },
		validate: func(e Entry) error {
			if e.Mock == nil {
				return nil
			}
			if err := e.Mock.Validate(); err != nil {
				return fmt.Errorf("mock.%w", err)
			}
			return nil
		},
		build: func(e Entry) (providers.Provider, error) { return mock.New(deref(e.Mock)) },
	},
	{
		name: "kubernetes",
		set:  func(e Entry) bool { return e.Kubernetes != nil },
		validate: func(e Entry) error {
			if e.Kubernetes == nil {
				return nil
			}
			return e.Kubernetes.Validate()
		},
		build: func(e Entry) (providers.Provider, error) { return kubernetes.New(deref(e.Kubernetes)) },
	},
	{
		name: "gcp",
		set:  func(e Entry) bool { return e.GCP != nil },
		validate: func(e Entry) error {
			if e.GCP == nil {
				return fmt.Errorf("type gcp needs a gcp block with at least project")
			}
			return e.GCP.Validate()
		},
		// Background, not a start-up deadline: the auth library may keep this context for
		// token refreshes for the life of the process.
		build: func(e Entry) (providers.Provider, error) { return gcp.New(context.Background(), *e.GCP) },
	},
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func lookupType(name string) (providerType, bool) {
	for _, t := range types {
		if t.name == name {
			return t, true
		}
	}
	return providerType{}, false
}

// TypeNames lists every provider type the factory builds.
func TypeNames() []string {
	out := make([]string, len(types))
	for i, t := range types {
		out[i] = t.name
	}
	return out
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

// Validate checks that at least one provider is listed, names are DNS labels and unique,
// each type is known, an entry carries no block but its type's, and each block passes its
// provider's own Validate. It returns the first problem, naming the entry.
func (c Config) Validate() error {
	if len(c.Providers) == 0 {
		return fmt.Errorf("providers config: no providers listed")
	}
	known := strings.Join(TypeNames(), ", ")
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
		for _, t := range types {
			if t.set(e) && t.name != e.Type {
				return fmt.Errorf("%s: has a %q block but type %q", where, t.name, e.Type)
			}
		}
		if e.Type == "" {
			return fmt.Errorf("%s: type is required (one of: %s)", where, known)
		}
		t, ok := lookupType(e.Type)
		if !ok {
			return fmt.Errorf("%s: unknown type %q (one of: %s)", where, e.Type, known)
		}
		if err := t.validate(e); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
	}
	return nil
}

// Build constructs every provider of a validated config. On an error, the providers built so
// far are closed.
func Build(c Config, deps Deps) (*providers.Set, error) {
	entries := make([]providers.Entry, 0, len(c.Providers))
	for _, e := range c.Providers {
		t, ok := lookupType(e.Type)
		var p providers.Provider
		var err error
		if !ok {
			err = fmt.Errorf("unknown type %q", e.Type)
		} else {
			p, err = t.build(e)
		}
		if err != nil {
			_ = providers.NewSet(entries...).Close()
			return nil, fmt.Errorf("provider %s: %w", e.Name, err)
		}
		entries = append(entries, providers.Entry{Name: e.Name, Type: e.Type, Provider: deps.Metrics.Instrument(e.Name, p)})
	}
	return providers.NewSet(entries...), nil
}
