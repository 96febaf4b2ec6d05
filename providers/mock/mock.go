// Package mock owns the in-memory provider: a real, concurrency-safe Provider that simulates
// asynchronous provisioning, records every call and injects faults of each error class. Its
// addresses come from 127.0.0.0/8, and it can serve a real forward proxy on each address so a
// laptop fleet is genuinely healthy. It knows nothing of the sync core.
package mock

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/proxy-operator/proxy-operator/providers"
)

// Config is the mock entry of the providers config.
type Config struct {
	// ProvisioningDelay is how long an instance stays Provisioning (default 5s).
	ProvisioningDelay Duration `json:"provisioningDelay,omitempty"`
	// ServeProxies makes every instance a real forward proxy on its own loopback address.
	ServeProxies bool `json:"serveProxies,omitempty"`
	// RelayAnywhere lets those proxies relay to any destination; by default they relay only
	// to loopback.
	RelayAnywhere bool `json:"relayAnywhere,omitempty"`
	// Faults are injected from the start.
	Faults []Fault `json:"faults,omitempty"`
}

// DefaultProvisioningDelay is the Provisioning time when the config does not say.
const DefaultProvisioningDelay = 5 * time.Second

// Duration is the providers config duration ("5s").
type Duration = providers.Duration

// Fault makes the next Count calls of Op fail with an error of class Kind.
type Fault struct {
	Op    string `json:"op"`    // create, get, delete, list
	Kind  string `json:"kind"`  // quota, transient, permanent
	Count int    `json:"count"` // how many calls fail; 0 means 1
}

// Validate names what is wrong with a fault.
func (f Fault) Validate() error {
	switch f.Op {
	case "create", "get", "delete", "list":
	default:
		return fmt.Errorf("fault op %q: want create, get, delete or list", f.Op)
	}
	if _, err := kindError(f.Kind); err != nil {
		return err
	}
	if f.Count < 0 {
		return fmt.Errorf("fault count %d must not be negative", f.Count)
	}
	return nil
}

func kindError(kind string) (error, error) {
	switch kind {
	case "quota":
		return providers.ErrQuotaExceeded, nil
	case "transient":
		return providers.ErrTransient, nil
	case "permanent":
		return providers.ErrPermanent, nil
	}
	return nil, fmt.Errorf("fault kind %q: want quota, transient or permanent", kind)
}

// Call is one recorded provider call.
type Call struct {
	Op  string `json:"op"`
	Arg string `json:"arg"`
	Err string `json:"err,omitempty"`
}

// record is an instance as the mock stores it.
type record struct {
	inst      providers.Instance
	addr      string // the instance's loopback address, chosen at Create
	port      int32
	deleted   bool
	stopProxy func()
}

// Provider is the in-memory provider.
type Provider struct {
	delay time.Duration
	now   func() time.Time
	serve func(addr string, creds *providers.Credentials) (stop func(), err error)
	// refuse names the destinations a served proxy never relays to (WithRefused).
	refuse func(netip.AddrPort) bool

	mu        sync.Mutex
	instances map[string]*record // by ID
	addrs     map[string]string  // address -> ID of the instance holding it
	faults    []Fault
	calls     []Call
}

var _ providers.Provider = (*Provider)(nil)

// Option configures a Provider.
type Option func(*Provider)

// WithClock injects the clock that drives provisioning.
func WithClock(now func() time.Time) Option { return func(p *Provider) { p.now = now } }

// WithServer makes every Running instance serve a forward proxy at its address through serve,
// demanding the instance's credentials.
func WithServer(serve func(addr string, creds *providers.Credentials) (stop func(), err error)) Option {
	return func(p *Provider) { p.serve = serve }
}

// WithRefused makes the served proxies refuse to relay to every destination refuse names (the
// operator's own listeners), even where they may relay to loopback.
func WithRefused(refuse func(netip.AddrPort) bool) Option {
	return func(p *Provider) { p.refuse = refuse }
}

// Validate names the first fault that is wrong ("faults[1]: ...").
func (c Config) Validate() error {
	for i, f := range c.Faults {
		if err := f.Validate(); err != nil {
			return fmt.Errorf("faults[%d]: %w", i, err)
		}
	}
	return nil
}

// New validates cfg and builds a mock provider from it.
func New(cfg Config, opts ...Option) (*Provider, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("mock %w", err)
	}
	p := &Provider{
		delay:     time.Duration(cfg.ProvisioningDelay),
		now:       time.Now,
		instances: map[string]*record{},
		addrs:     map[string]string{},
		faults:    slices.Clone(cfg.Faults),
	}
	if p.delay == 0 {
		p.delay = DefaultProvisioningDelay
	}
	if cfg.ServeProxies {
		relayAnywhere := cfg.RelayAnywhere
		p.serve = func(addr string, creds *providers.Credentials) (func(), error) {
			return ServeForwardProxyWith(addr, ForwardConfig{RelayAnywhere: relayAnywhere, Credentials: creds, Refuse: p.refuse})
		}
	}
	for _, o := range opts {
		o(p)
	}
	return p, nil
}

// ID is the provider ID of the instance named name.
func ID(name string) string { return "mock://" + name }

// Address is the first loopback address tried for the instance named name: 127.x.y.z with
// x in 1..254, never 127.0.0.0/16, so it cannot collide with services on 127.0.0.1.
func Address(name string) string { return AddressCandidate(name, 0) }

// MaxAddressCandidates is how many addresses Create tries for one instance before it reports
// that none is free. Over the 16 million addresses of the range, 64 taken in a row means the
// range (or the host's listeners) is full, not bad luck.
const MaxAddressCandidates = 64

// AddressCandidate is the i-th address tried for the instance named name (i = 0 is Address):
// each a hash of the name and i, so the sequence is the same on every run. Create takes the
// first one that no other instance of the provider holds and, when it serves proxies, that it
// can listen on: two names whose first addresses meet (likely with thousands of instances:
// the birthday bound) both get one.
func AddressCandidate(name string, i int) string {
	seed := name
	if i > 0 {
		seed = name + "#" + strconv.Itoa(i)
	}
	sum := sha256.Sum256([]byte(seed))
	x := 1 + sum[0]%254
	y, z := sum[1], 1+sum[2]%254
	return netip.AddrFrom4([4]byte{127, x, y, z}).String()
}

// ErrNoFreeAddress is the error of a Create for which none of the MaxAddressCandidates
// addresses was free; it is reported as a quota error (retried slowly).
var ErrNoFreeAddress = errors.New("no free loopback address")

// allocate picks the instance's address and, when the provider serves proxies, starts its
// forward proxy there. Callers hold p.mu.
func (p *Provider) allocate(req providers.CreateRequest) (addr string, stop func(), err error) {
	for i := range MaxAddressCandidates {
		addr = AddressCandidate(req.Name, i)
		if _, taken := p.addrs[addr]; taken {
			continue
		}
		if p.serve == nil {
			return addr, nil, nil
		}
		stop, err = p.serve(netip.AddrPortFrom(netip.MustParseAddr(addr), uint16(req.Port)).String(), req.Credentials)
		switch {
		case err == nil:
			return addr, stop, nil
		case errors.Is(err, syscall.EADDRINUSE):
			// Something outside this provider listens there: try the next address.
			continue
		case errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE), errors.Is(err, syscall.ENOBUFS):
			// Out of descriptors or buffers: frees up as other instances go.
			return "", nil, providers.Wrap(providers.ErrTransient, "mock create", err)
		default:
			// The host cannot listen on its loopback range (no 127/8 route, no permission):
			// asking again changes nothing until someone changes the host.
			return "", nil, providers.Wrap(providers.ErrPermanent, "mock create", err)
		}
	}
	return "", nil, providers.Wrap(providers.ErrQuotaExceeded, "mock create",
		fmt.Errorf("%w for %s: the first %d candidates are taken", ErrNoFreeAddress, req.Name, MaxAddressCandidates))
}

// Inject adds faults at run time.
func (p *Provider) Inject(faults ...Fault) error {
	for i, f := range faults {
		if err := f.Validate(); err != nil {
			return fmt.Errorf("fault %d: %w", i, err)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults = append(p.faults, faults...)
	return nil
}

// fault consumes one fault for op, if any is armed. Callers hold p.mu.
func (p *Provider) fault(op, arg string) error {
	for i := range p.faults {
		f := &p.faults[i]
		if f.Op != op {
			continue
		}
		kind, _ := kindError(f.Kind)
		if f.Count <= 1 {
			p.faults = slices.Delete(p.faults, i, i+1)
		} else {
			f.Count--
		}
		return providers.Wrap(kind, "mock "+op, fmt.Errorf("injected fault for %s", arg))
	}
	return nil
}

// MaxRecordedCalls bounds the call record: `make run` keeps a mock provider for days, and
// an unbounded record would grow with every sync. Beyond it the oldest half is dropped.
const MaxRecordedCalls = 1 << 14

func (p *Provider) record(op, arg string, err error) {
	c := Call{Op: op, Arg: arg}
	if err != nil {
		c.Err = err.Error()
	}
	if len(p.calls) >= MaxRecordedCalls {
		p.calls = append(p.calls[:0], p.calls[len(p.calls)/2:]...)
	}
	p.calls = append(p.calls, c)
}

// Create makes the instance named req.Name, or returns the existing one's ID.
func (p *Provider) Create(ctx context.Context, req providers.CreateRequest) (id string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer func() { p.record("create", req.Name, err) }()
	if err := ctx.Err(); err != nil {
		return "", providers.Wrap(providers.ErrTransient, "mock create", err)
	}
	if err := p.fault("create", req.Name); err != nil {
		return "", err
	}
	if req.Name == "" || req.OwnerUID == "" {
		return "", providers.Wrap(providers.ErrPermanent, "mock create", fmt.Errorf("name and owner UID are required"))
	}
	id = ID(req.Name)
	if r, ok := p.instances[id]; ok && !r.deleted {
		return id, nil
	}
	r := &record{port: req.Port, inst: providers.Instance{
		ID:       id,
		Name:     req.Name,
		State:    providers.StateProvisioning,
		OwnerUID: req.OwnerUID,
		SpecHash: req.SpecHash,
		// The forward proxy holds the credential it was created with, like a VM.
		CredentialsVersion: req.CredentialsVersion,
		CreatedAt:          p.now().UTC().Truncate(time.Second),
	}}
	addr, stop, err := p.allocate(req)
	if err != nil {
		return "", err
	}
	r.addr, r.stopProxy = addr, stop
	p.instances[id] = r
	p.addrs[addr] = id
	return id, nil
}

// view is the instance as a caller sees it now: Provisioning turns Running after the delay.
func (p *Provider) view(r *record) providers.Instance {
	in := r.inst
	if in.State == providers.StateProvisioning && !p.now().Before(in.CreatedAt.Add(p.delay)) {
		in.State = providers.StateRunning
	}
	if in.State == providers.StateRunning {
		in.IP = r.addr
	} else {
		in.IP = ""
	}
	return in
}

// Get returns the instance with this ID, or ErrNotFound.
func (p *Provider) Get(ctx context.Context, id string) (_ *providers.Instance, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer func() { p.record("get", id, err) }()
	if err := ctx.Err(); err != nil {
		return nil, providers.Wrap(providers.ErrTransient, "mock get", err)
	}
	if err := p.fault("get", id); err != nil {
		return nil, err
	}
	r, ok := p.instances[id]
	if !ok {
		return nil, providers.Wrap(providers.ErrNotFound, "mock get", fmt.Errorf("no instance %s", id))
	}
	in := p.view(r)
	return &in, nil
}

// Delete removes the instance; a missing one is not an error.
func (p *Provider) Delete(ctx context.Context, id string) (err error) {
	// The forward proxy is stopped after the lock is released: its graceful shutdown may
	// wait up to a second, and every other call of every hook would wait with it.
	var stop func()
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	p.mu.Lock()
	defer p.mu.Unlock()
	defer func() { p.record("delete", id, err) }()
	if err := ctx.Err(); err != nil {
		return providers.Wrap(providers.ErrTransient, "mock delete", err)
	}
	if err := p.fault("delete", id); err != nil {
		return err
	}
	if r, ok := p.instances[id]; ok {
		stop = r.stopProxy
		delete(p.instances, id)
		if p.addrs[r.addr] == id {
			delete(p.addrs, r.addr)
		}
	}
	return nil
}

// ListByTag returns every instance, all of which carry the managed tag.
func (p *Provider) ListByTag(ctx context.Context) (_ []providers.Instance, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer func() { p.record("list", "", err) }()
	if err := ctx.Err(); err != nil {
		return nil, providers.Wrap(providers.ErrTransient, "mock list", err)
	}
	if err := p.fault("list", ""); err != nil {
		return nil, err
	}
	return p.snapshot(), nil
}

func (p *Provider) snapshot() []providers.Instance {
	out := make([]providers.Instance, 0, len(p.instances))
	for _, r := range p.instances {
		out = append(out, p.view(r))
	}
	slices.SortFunc(out, func(a, b providers.Instance) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Instances returns every instance as Get would show it, sorted by ID. It records no call.
func (p *Provider) Instances() []providers.Instance {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.snapshot()
}

// Seed stores instances as they are (for fixtures and tests), replacing any with the same ID.
func (p *Provider) Seed(instances ...providers.Instance) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, in := range instances {
		in.IP = ""
		if old, ok := p.instances[in.ID]; ok && p.addrs[old.addr] == in.ID {
			delete(p.addrs, old.addr)
		}
		r := &record{inst: in}
		for i := range MaxAddressCandidates {
			if a := AddressCandidate(in.Name, i); p.addrs[a] == "" {
				r.addr = a
				break
			}
		}
		if r.addr != "" {
			p.addrs[r.addr] = in.ID
		}
		p.instances[in.ID] = r
	}
}

// Calls returns the calls recorded so far (at most the latest MaxRecordedCalls).
func (p *Provider) Calls() []Call {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls)
}

// ResetCalls forgets the recorded calls.
func (p *Provider) ResetCalls() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = nil
}

// Close stops every forward proxy the provider serves.
func (p *Provider) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.instances {
		if r.stopProxy != nil {
			r.stopProxy()
			r.stopProxy = nil
		}
	}
}
