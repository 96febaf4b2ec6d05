// Package factory owns the providers config file: it parses it strictly, names the entry that
// is wrong, and builds each provider through one table of types (name -> config block,
// validate, build). It is the only package that knows every provider implementation; each
// provider validates its own config.
package factory

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"
	"sigs.k8s.io/yaml"

	"github.com/proxy-operator/proxy-operator/providers"
	"github.com/proxy-operator/proxy-operator/providers/aws"
	"github.com/proxy-operator/proxy-operator/providers/gcp"
	"github.com/proxy-operator/proxy-operator/providers/hetzner"
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
	// AWS configures EC2 instances; required for type aws (region has no default).
	AWS *aws.Config `json:"aws,omitempty"`
	// Hetzner configures Hetzner Cloud servers; required for type hetzner (tokenFile has no
	// default).
	Hetzner *hetzner.Config `json:"hetzner,omitempty"`
}

// Deps are what providers may need from the process.
type Deps struct {
	// Metrics, when set, counts every provider call.
	Metrics *providers.Metrics
	// OwnListener, when set, says whether an address is one of the operator's own listeners:
	// mock proxies never relay there (a leased proxy must not reach the hooks).
	OwnListener func(netip.AddrPort) bool
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
	build func(Entry, Deps) (providers.Provider, error)
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
		build: func(e Entry, d Deps) (providers.Provider, error) {
			return mock.New(deref(e.Mock), mock.WithRefused(d.OwnListener))
		},
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
		build: func(e Entry, _ Deps) (providers.Provider, error) { return kubernetes.New(deref(e.Kubernetes)) },
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
		build: func(e Entry, _ Deps) (providers.Provider, error) { return gcp.New(context.Background(), *e.GCP) },
	},
	{
		name: "aws",
		set:  func(e Entry) bool { return e.AWS != nil },
		validate: func(e Entry) error {
			if e.AWS == nil {
				return fmt.Errorf("type aws needs an aws block with at least region")
			}
			return e.AWS.Validate()
		},
		// Background: the credential chain may keep it for refreshes (web identity, SSO).
		build: func(e Entry, _ Deps) (providers.Provider, error) { return aws.New(context.Background(), *e.AWS) },
	},
	{
		name: "hetzner",
		set:  func(e Entry) bool { return e.Hetzner != nil },
		validate: func(e Entry) error {
			if e.Hetzner == nil {
				return fmt.Errorf("type hetzner needs a hetzner block with at least tokenFile")
			}
			return e.Hetzner.Validate()
		},
		build: func(e Entry, _ Deps) (providers.Provider, error) { return hetzner.New(*e.Hetzner) },
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

// Parse parses a providers config, rejecting unknown fields, and validates it. A decoding
// error names the entry and the YAML line (see locate).
func Parse(b []byte) (Config, error) {
	var c Config
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return Config{}, locate(b, err)
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
			p, err = t.build(e, deps)
		}
		if err != nil {
			_ = providers.NewSet(entries...).Close()
			return nil, fmt.Errorf("provider %s: %w", e.Name, err)
		}
		entries = append(entries, providers.Entry{Name: e.Name, Type: e.Type, Provider: deps.Metrics.Instrument(e.Name, p)})
	}
	return providers.NewSet(entries...), nil
}

// decodePrefix is what sigs.k8s.io/yaml puts before a decoding error: it converts YAML to JSON
// first, so its messages say JSON about a YAML file.
var decodePrefix = regexp.MustCompile(`^(error unmarshaling JSON: )?(while decoding JSON: )?(json: )?`)

// quoted is the first double-quoted word of an error message: the unknown field, or the value
// that did not parse.
var quoted = regexp.MustCompile(`"([^"\\]*)"`)

// locate turns a decoding error into one that says YAML and names the providers entry and the
// line: each entry is decoded alone to find the one at fault, and the line is that of the key
// (or value) the message quotes, else of the entry.
func locate(b []byte, err error) error {
	msg := decodePrefix.ReplaceAllString(err.Error(), "")
	var doc yamlv3.Node
	if yerr := yamlv3.Unmarshal(b, &doc); yerr != nil {
		// Not YAML at all: the parser's message carries the line. The converter's, when it
		// refused the file (its lines are the more exact); else the YAML parser's own, as the
		// converter may have accepted a text it then failed to decode as JSON.
		const conv = "error converting YAML to JSON: "
		m := yerr.Error()
		if strings.HasPrefix(err.Error(), conv) {
			m = strings.TrimPrefix(err.Error(), conv)
		}
		return fmt.Errorf("providers config: invalid YAML: %s", strings.TrimPrefix(m, "yaml: "))
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yamlv3.MappingNode {
		return fmt.Errorf("providers config: YAML: %s (want a mapping with a providers list)", msg)
	}
	root := doc.Content[0]
	for i := 0; i+1 < len(root.Content); i += 2 {
		key, val := root.Content[i], root.Content[i+1]
		if key.Value != "providers" {
			return fmt.Errorf("providers config: YAML line %d: unknown field %q (the file has one field: providers)", key.Line, key.Value)
		}
		if val.Kind != yamlv3.SequenceNode {
			return fmt.Errorf("providers config: YAML line %d: providers: %s (want a list of entries)", val.Line, msg)
		}
		for j, item := range val.Content {
			one, merr := yamlv3.Marshal(item)
			if merr != nil {
				continue
			}
			var e Entry
			eerr := yaml.UnmarshalStrict(one, &e)
			if eerr == nil {
				continue
			}
			where := fmt.Sprintf("providers[%d]", j)
			if name := mappingValue(item, "name"); name != "" {
				where += fmt.Sprintf(" (%s)", name)
			}
			emsg := decodePrefix.ReplaceAllString(eerr.Error(), "")
			line := item.Line
			if m := quoted.FindStringSubmatch(emsg); m != nil {
				if n := findNode(item, m[1]); n != nil {
					line = n.Line
				}
			}
			return fmt.Errorf("providers config: YAML line %d: %s: %s", line, where, emsg)
		}
	}
	return fmt.Errorf("providers config: YAML: %s", msg)
}

// mappingValue is the scalar under key in a mapping node, or "".
func mappingValue(n *yamlv3.Node, key string) string {
	if n.Kind != yamlv3.MappingNode {
		return ""
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key && n.Content[i+1].Kind == yamlv3.ScalarNode {
			return n.Content[i+1].Value
		}
	}
	return ""
}

// findNode returns the first mapping key, else the first scalar, whose value is v.
func findNode(n *yamlv3.Node, v string) *yamlv3.Node {
	var key, scalar *yamlv3.Node
	var walk func(n *yamlv3.Node, isKey bool)
	walk = func(n *yamlv3.Node, isKey bool) {
		if n.Kind == yamlv3.ScalarNode && n.Value == v {
			if isKey && key == nil {
				key = n
			} else if !isKey && scalar == nil {
				scalar = n
			}
		}
		for i, c := range n.Content {
			walk(c, n.Kind == yamlv3.MappingNode && i%2 == 0)
		}
	}
	walk(n, false)
	if key != nil {
		return key
	}
	return scalar
}
