// Package fleet owns the in-process view of every Proxy: the record that sync and finalize
// calls keep current and that the prober, the discovery API and orphan GC read. It knows
// nothing of how the record is filled or what readers do with it.
package fleet

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
	"github.com/proxy-operator/proxy-operator/providers"
)

// Credentials are the username and password a proxy demands; printing them in any way
// (fmt, slog, encoding/json) hides the password. They leave the process only in a lease
// answer: never in status, a log, a capture or the list answer.
type Credentials = providers.Credentials

// Proxy is what the process knows about one Proxy after its latest sync.
type Proxy struct {
	Key         string // namespace/name
	UID         string
	Generation  int64
	Mode        v1.ProvisioningMode
	Provider    string
	ProviderID  string
	IP          string // empty until there is somewhere to probe
	Port        int32
	Attributes  map[string]string
	MaxLeases   int32
	HealthCheck v1.HealthCheckSpec
	Phase       v1.ProxyPhase
	// Recorded is the health the Proxy's status last recorded: where a restarted prober starts.
	Recorded verdict.Health
	// Deleting is set once the Proxy is being finalized; it is no longer offered to crawlers.
	Deleting bool
	// Credentials are what the proxy demands (nil: an External proxy without any). Probes
	// and lease answers use them.
	Credentials *Credentials
	// Draining is set on a pool member being removed: it is listed, its leases run to their
	// end, but it takes no new lease.
	Draining bool
	// AwaitingVerdict is set while the Proxy's new instance runs and waits for its first
	// verdict: the hook then syncs it again every provisioning poll, and that sync carries
	// the verdict into status without a health annotation patch (decision 0172). The hook's
	// business alone: not part of the records discovery replicas read.
	AwaitingVerdict bool `json:"-"`
	// Verify is the Proxy's spec.verify (nil: only a Managed proxy's own IP is checked, and
	// only when an exit URL is configured).
	Verify *v1.VerifySpec
	// Vendor is the Proxy's spec.vendor: a vendor's gateway, each lease of it a sticky exit of
	// its own (decision 0293). Its Attributes then carry v1.SourceAttribute (WithSource).
	Vendor *v1.VendorSpec
}

// IsVendor reports whether p is a vendor's gateway rather than one of our own proxies.
func (p Proxy) IsVendor() bool { return p.Vendor != nil }

// ProbeSession is the vendor session the prober's requests ask for: one sticky exit.
const ProbeSession = "probe"

// UpstreamCredentials are what one dial of p sends: p's credential, or for a vendor proxy
// its credential with the username rendered from the template for the session and targeting
// in v ({user} being the credential's own username; decision 0293). Like the password, a
// rendered username is never logged, shown in status or answered: log p.Key.
func (p Proxy) UpstreamCredentials(v v1.UsernameValues) (*Credentials, error) {
	if p.Vendor == nil || p.Credentials == nil {
		return p.Credentials, nil
	}
	v.User = p.Credentials.Username
	if v.Lifetime <= 0 {
		v.Lifetime = p.Vendor.SessionLifetime()
	}
	user, err := p.Vendor.Render(v)
	if err != nil {
		return nil, err
	}
	return &Credentials{Username: user, Password: p.Credentials.Password}, nil
}

// ExcludesMismatch reports whether a failed exit check keeps the proxy from new leases.
func (p Proxy) ExcludesMismatch() bool { return p.Verify.Excludes() }

// Attributes the operator adds from status.exit, so crawlers can select on what the exit
// check learned (exit.country=DE) rather than on what a manifest claims. A user attribute of
// the same name is replaced.
const (
	AttrExitCountry = "exit.country"
	AttrExitASN     = "exit.asn"
)

// WithExit returns attrs plus the exit attributes of e (attrs itself when e adds nothing).
func WithExit(attrs map[string]string, e *v1.ExitStatus) map[string]string {
	if e == nil || (e.Country == "" && e.ASN == 0) {
		return attrs
	}
	out := maps.Clone(attrs)
	if out == nil {
		out = map[string]string{}
	}
	if e.Country != "" {
		out[AttrExitCountry] = e.Country
	}
	if e.ASN != 0 {
		out[AttrExitASN] = strconv.FormatInt(e.ASN, 10)
	}
	return out
}

// WithSource returns attrs with v1.SourceAttribute set for a vendor proxy, and without it
// for one of our own, so a manifest can neither pass our proxy off as bought traffic nor hide
// it from ordinary leases (attrs itself when nothing changes).
func WithSource(attrs map[string]string, vendor bool) map[string]string {
	if _, has := attrs[v1.SourceAttribute]; !vendor && !has || vendor && attrs[v1.SourceAttribute] == v1.SourceVendor {
		return attrs
	}
	out := maps.Clone(attrs)
	if out == nil {
		out = map[string]string{}
	}
	if vendor {
		out[v1.SourceAttribute] = v1.SourceVendor
	} else {
		delete(out, v1.SourceAttribute)
	}
	return out
}

// Equal reports whether two records are the same.
func (p Proxy) Equal(o Proxy) bool {
	type scalars struct {
		Key, UID, Provider, ProviderID, IP string
		Generation                         int64
		Mode                               v1.ProvisioningMode
		Port, MaxLeases                    int32
		Phase                              v1.ProxyPhase
		Recorded                           verdict.Health
		Deleting, Draining, Awaiting       bool
		ProbeURL                           string
		Interval, Timeout, Fail, Succeed   int32
	}
	s := func(x Proxy) scalars {
		h := x.HealthCheck
		return scalars{x.Key, x.UID, x.Provider, x.ProviderID, x.IP, x.Generation, x.Mode, x.Port, x.MaxLeases,
			x.Phase, x.Recorded, x.Deleting, x.Draining, x.AwaitingVerdict, h.ProbeURL, h.IntervalSeconds, h.TimeoutSeconds, h.FailureThreshold, h.SuccessThreshold}
	}
	return s(p) == s(o) && equalCredentials(p.Credentials, o.Credentials) && maps.Equal(p.Attributes, o.Attributes) &&
		slices.Equal(p.HealthCheck.ExpectedStatusCodes, o.HealthCheck.ExpectedStatusCodes) && equalVerify(p.Verify, o.Verify) &&
		equalVendor(p.Vendor, o.Vendor)
}

func equalVendor(a, b *v1.VendorSpec) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.UsernameTemplate == b.UsernameTemplate && a.PricePerGiB == b.PricePerGiB &&
		a.SessionLifetimeSeconds == b.SessionLifetimeSeconds && slices.Equal(a.Countries, b.Countries)
}

// SameVerification reports whether an exit check's verdict on p and on o must be the same:
// what exitOf reads (mode, IP, attributes, spec.verify) is equal.
func (p Proxy) SameVerification(o Proxy) bool {
	return p.Mode == o.Mode && p.IP == o.IP && maps.Equal(p.Attributes, o.Attributes) && equalVerify(p.Verify, o.Verify)
}

func equalVerify(a, b *v1.VerifySpec) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.ExitURL == b.ExitURL && a.CountryAttribute == b.CountryAttribute && a.ASNAttribute == b.ASNAttribute &&
		a.OnMismatch == b.OnMismatch && slices.Equal(a.ExpectedExit, b.ExpectedExit)
}

func equalCredentials(a, b *Credentials) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// View is the concurrency-safe record of the fleet.
type View struct {
	mu      sync.RWMutex
	byKey   map[string]Proxy
	version uint64
	changed chan struct{}

	started time.Time
	warmup  time.Duration
	now     func() time.Time
}

// New returns an empty view. The view calls itself complete once warmup has passed since
// start: by then Metacontroller's periodic resync has synced every Proxy at least once.
func New(now func() time.Time, warmup time.Duration) *View {
	return &View{byKey: map[string]Proxy{}, changed: make(chan struct{}), started: now(), warmup: warmup, now: now}
}

// Upsert records p; it reports whether anything changed.
func (v *View) Upsert(p Proxy) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if old, ok := v.byKey[p.Key]; ok && old.Equal(p) {
		return false
	}
	p.Attributes = maps.Clone(p.Attributes)
	if p.Credentials != nil {
		c := *p.Credentials
		p.Credentials = &c
	}
	p.HealthCheck.ExpectedStatusCodes = slices.Clone(p.HealthCheck.ExpectedStatusCodes)
	if p.Verify != nil {
		vs := *p.Verify
		vs.ExpectedExit = slices.Clone(vs.ExpectedExit)
		p.Verify = &vs
	}
	v.byKey[p.Key] = p
	v.bump()
	return true
}

// Remove forgets the Proxy with this key.
func (v *View) Remove(key string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.byKey[key]; !ok {
		return
	}
	delete(v.byKey, key)
	v.bump()
}

func (v *View) bump() {
	v.version++
	close(v.changed)
	v.changed = make(chan struct{})
}

// Get returns the record for key.
func (v *View) Get(key string) (Proxy, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	p, ok := v.byKey[key]
	return p, ok
}

// List returns every record sorted by key. Callers own the result.
func (v *View) List() []Proxy {
	v.mu.RLock()
	out := make([]Proxy, 0, len(v.byKey))
	for _, p := range v.byKey {
		out = append(out, p)
	}
	v.mu.RUnlock()
	slices.SortFunc(out, func(a, b Proxy) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// Len is the number of Proxies in the view.
func (v *View) Len() int {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return len(v.byKey)
}

// Version increases on every change; Changed is closed at the next one.
func (v *View) Version() uint64 {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.version
}

// Changed returns a channel closed at the next change of the view.
func (v *View) Changed() <-chan struct{} {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.changed
}

// Complete reports whether the view can be taken as the whole fleet: warmup has passed since
// the process started. Before that, an absent Proxy may simply not have been synced yet.
func (v *View) Complete() bool {
	return !v.now().Before(v.started.Add(v.warmup))
}

// CompleteAt is when the view becomes complete.
func (v *View) CompleteAt() time.Time { return v.started.Add(v.warmup) }

// Matches reports whether attrs hold every pair of the selector (equality on each; an empty
// selector matches everything but vendor proxies). Listing and leasing both select proxies
// with it. A vendor proxy (v1.SourceAttribute) matches only a selector that names the
// attribute: bought traffic is never handed to a request that did not ask for it.
func Matches(attrs, sel map[string]string) bool {
	if _, vendor := attrs[v1.SourceAttribute]; vendor {
		if _, asked := sel[v1.SourceAttribute]; !asked {
			return false
		}
	}
	for k, v := range sel {
		if got, ok := attrs[k]; !ok || got != v {
			return false
		}
	}
	return true
}
