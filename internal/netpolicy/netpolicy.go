// Package netpolicy owns the operator's egress policy: which addresses the operator itself may
// connect to when it probes a proxy, and which proxy endpoints it may hand to crawlers. It
// knows nothing of Proxies, HTTP or leases; callers ask about a host name, an address or a
// connection about to be made.
package netpolicy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/proxy-operator/proxy-operator/api/v1alpha1"
)

// ErrDenied is wrapped by *DeniedError.
var ErrDenied = errors.New("egress denied by policy")

// ErrInvalidHost is returned for a host that is neither an IP address nor a DNS name.
var ErrInvalidHost = v1alpha1.ErrInvalidHost

// DeniedError says what was denied and why, in words fit for a Proxy condition.
type DeniedError struct {
	Host   string // what was asked about: a name, an address or address:port
	Reason string
}

func (e *DeniedError) Error() string { return fmt.Sprintf("%s: %s", e.Host, e.Reason) }
func (e *DeniedError) Unwrap() error { return ErrDenied }

// Config is the policy's knobs. The zero Config is the safe default: loopback denied, any
// other unicast address allowed for every proxy.
type Config struct {
	// AllowLoopback lets any proxy live on 127.0.0.0/8 and ::1 (tests, a laptop). The
	// operator's own listeners stay denied.
	AllowLoopback bool
	// LoopbackProviders are providers whose Managed instances live on loopback (the mock
	// provider's forward proxies): their instances may be there even without AllowLoopback.
	LoopbackProviders []string
	// ExternalCIDRs, when not empty, is the only place External endpoints may resolve to.
	ExternalCIDRs []netip.Prefix
	// OwnListeners are the operator's listen addresses ("host:port", host empty or
	// unspecified for every interface): a proxy there would make the operator probe itself.
	OwnListeners []string
	// Protected are other addresses ("host:port") no proxy may be on and no crawler's
	// target may name, whatever TargetAllow says: the lease store's. A name is refused as a
	// target by name (the gateway does not resolve); an address as OwnListeners are.
	Protected []string
	// TargetAllow are ranges a crawler's target may be in although CheckTarget denies them
	// (tests, `make run` and the crawl benchmark, whose sites are on loopback). Metadata,
	// link-local, own listeners and Protected stay denied.
	TargetAllow []netip.Prefix
	// TargetAllowAddrs are single addresses ("ip:port") a target may be at although CheckTarget
	// denies their range: the demo site of `make run`, and nothing else on loopback. Metadata,
	// link-local, own listeners and Protected stay denied.
	TargetAllowAddrs []string
	// ClusterSuffixes are the DNS suffixes CheckTarget refuses as cluster-internal; nil:
	// DefaultClusterSuffixes.
	ClusterSuffixes []string
}

// Policy answers egress questions. It is immutable and safe for concurrent use.
type Policy struct {
	allowLoopback bool
	loopbackProv  map[string]bool
	external      []netip.Prefix
	ownPorts      map[uint16]bool         // ports the operator listens on every interface
	own           map[netip.AddrPort]bool // exact listener addresses
	localAddrs    []netip.Addr            // this host's addresses when New ran, for ownPorts
	protNames     map[string]bool         // Protected names, "name:port" lower case
	targetAllow   []netip.Prefix
	targetAddrs   map[netip.AddrPort]bool
	suffixes      []string // lower case, without leading or trailing dots
	resolver      func(ctx context.Context, host string) ([]netip.Addr, error)
}

// metadataNames are the cloud instance-metadata host names (compared without a trailing dot,
// lower case).
var metadataNames = map[string]bool{
	"metadata":                     true,
	"metadata.google.internal":     true,
	"metadata.goog":                true,
	"instance-data":                true,
	"instance-data.ec2.internal":   true,
	"metadata.azure.com":           true,
	"metadata.tencentyun.com":      true,
	"metadata.platformequinix.com": true,
}

// metadataAddrs are metadata endpoints outside the link-local ranges.
var metadataAddrs = map[netip.Addr]bool{
	netip.MustParseAddr("fd00:ec2::254"):   true, // AWS IMDS over IPv6
	netip.MustParseAddr("fd00:ec2::23"):    true, // AWS DNS over IPv6
	netip.MustParseAddr("fd20:ce::254"):    true, // GCP metadata over IPv6
	netip.MustParseAddr("168.63.129.16"):   true, // Azure wire server
	netip.MustParseAddr("100.100.100.200"): true, // Alibaba Cloud
	netip.MustParseAddr("192.0.0.192"):     true, // Oracle Cloud (legacy)
}

// New builds a policy.
func New(cfg Config) (*Policy, error) {
	p := &Policy{
		allowLoopback: cfg.AllowLoopback,
		loopbackProv:  map[string]bool{},
		ownPorts:      map[uint16]bool{},
		own:           map[netip.AddrPort]bool{},
		localAddrs:    interfaceAddrs(),
		protNames:     map[string]bool{},
	}
	if err := p.target(cfg); err != nil {
		return nil, err
	}
	for _, n := range cfg.LoopbackProviders {
		p.loopbackProv[n] = true
	}
	for _, pr := range cfg.ExternalCIDRs {
		if !pr.IsValid() {
			return nil, fmt.Errorf("netpolicy: invalid external CIDR %s", pr)
		}
		p.external = append(p.external, pr.Masked())
	}
	for _, l := range append(slices.Clone(cfg.OwnListeners), cfg.Protected...) {
		host, port, err := net.SplitHostPort(l)
		if err != nil {
			return nil, fmt.Errorf("netpolicy: own or protected address %q: %w", l, err)
		}
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("netpolicy: own or protected address %q: port: %w", l, err)
		}
		a, err := netip.ParseAddr(host)
		switch {
		case host == "" || err == nil && a.IsUnspecified():
			p.ownPorts[uint16(n)] = true
		case err == nil:
			p.own[netip.AddrPortFrom(a.Unmap(), uint16(n))] = true
		default:
			p.protNames[strings.ToLower(strings.TrimSuffix(host, "."))+":"+port] = true
			// A name ("localhost:8080"): listening on it means its loopback addresses.
			p.own[netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(n))] = true
			p.own[netip.AddrPortFrom(netip.IPv6Loopback(), uint16(n))] = true
		}
	}
	return p, nil
}

// ParseCIDRs parses a comma-separated list of CIDRs (a flag's value); empty gives none.
func ParseCIDRs(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		pr, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("netpolicy: %w", err)
		}
		out = append(out, pr)
	}
	return out, nil
}

func interfaceAddrs() []netip.Addr {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range as {
		if pn, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(pn.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out
}

// ValidHost reports whether host is an IP address or a DNS name; see v1alpha1.ValidHost.
func ValidHost(host string) error { return v1alpha1.ValidHost(host) }

// Dest says whose endpoint a check is about.
type Dest struct {
	// External is an External Proxy's endpoint: the CIDR allow-list applies.
	External bool
	// Provider is a Managed Proxy's provider name (LoopbackProviders may be on loopback).
	Provider string
}

func (p *Policy) loopbackOK(d Dest) bool {
	return p.allowLoopback || !d.External && d.Provider != "" && p.loopbackProv[d.Provider]
}

// CheckHost is the static check of a proxy endpoint, without DNS: the host must be valid, not
// a metadata name, and, if it is an address, an allowed one (a name is checked at dial time,
// after it resolves). A zero port skips the own-listener check.
func (p *Policy) CheckHost(host string, port uint16, d Dest) error {
	if err := ValidHost(host); err != nil {
		return err
	}
	if metadataNames[strings.ToLower(strings.TrimSuffix(host, "."))] {
		return &DeniedError{Host: host, Reason: "a cloud metadata service name"}
	}
	// Numeric forms (2852039166, 0xa9fea9fe, 127.1) are addresses to every resolver: checked
	// as one, never passed as a name.
	if a, ok, err := HostAddr(host); err != nil {
		return err
	} else if ok {
		return p.CheckAddr(a, port, d)
	}
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") && !p.loopbackOK(d) {
		return &DeniedError{Host: host, Reason: "loopback, denied outside tests (-allow-loopback-proxies)"}
	}
	return nil
}

// denier returns the refusal of a (at port, when not 0) for a reason.
func denier(a netip.Addr, port uint16) func(reason string) error {
	return func(reason string) error {
		h := a.String()
		if port != 0 {
			h = netip.AddrPortFrom(a, port).String()
		}
		return &DeniedError{Host: h, Reason: reason}
	}
}

// deniedEverywhere refuses what no policy allows, as a proxy or as a target: anything but an
// address, cloud metadata, link-local.
func deniedEverywhere(a netip.Addr, deny func(string) error) error {
	switch {
	case !a.IsValid():
		return deny("not an address")
	case metadataAddrs[a]:
		return deny("a cloud metadata address")
	case a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast():
		return deny("link-local (cloud metadata lives there)")
	}
	return nil
}

// CheckAddr checks one resolved address (port 0: skip the own-listener check).
func (p *Policy) CheckAddr(a netip.Addr, port uint16, d Dest) error {
	a = a.Unmap().WithZone("")
	deny := denier(a, port)
	if err := deniedEverywhere(a, deny); err != nil {
		return err
	}
	switch {
	case a.IsUnspecified():
		return deny("the unspecified address")
	case a.IsMulticast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return deny("not a unicast address")
	case a.IsLoopback() && !p.loopbackOK(d):
		return deny("loopback, denied outside tests (-allow-loopback-proxies)")
	}
	if v4, ok := embeddedIPv4(a); ok {
		if err := p.CheckAddr(v4, port, d); err != nil {
			var de *DeniedError
			if errors.As(err, &de) {
				return deny("embeds " + v4.String() + ": " + de.Reason)
			}
			return err
		}
	}
	if port != 0 && p.isOwn(a, port) {
		return deny("one of the operator's own listeners")
	}
	if d.External && len(p.external) > 0 {
		for _, pr := range p.external {
			if pr.Contains(a) {
				return nil
			}
		}
		return deny("outside the CIDRs allowed for External endpoints")
	}
	return nil
}

var (
	nat64WellKnown = netip.MustParsePrefix("64:ff9b::/96")   // RFC 6052
	nat64LocalUse  = netip.MustParsePrefix("64:ff9b:1::/48") // RFC 8215, read as a /96 embedding
	sixToFour      = netip.MustParsePrefix("2002::/16")      // RFC 3056
)

// embeddedIPv4 returns the IPv4 address an IPv6 address carries in one of the forms a router
// or the kernel translates into an IPv4 connection: IPv4-compatible (::a.b.c.d, deprecated but
// still routed by some stacks), NAT64 and 6to4. IPv4-mapped addresses are unmapped before.
func embeddedIPv4(a netip.Addr) (netip.Addr, bool) {
	if !a.Is6() {
		return netip.Addr{}, false
	}
	b := a.As16()
	switch {
	case nat64WellKnown.Contains(a), nat64LocalUse.Contains(a):
		return netip.AddrFrom4([4]byte(b[12:16])), true
	case sixToFour.Contains(a):
		return netip.AddrFrom4([4]byte(b[2:6])), true
	case [12]byte(b[:12]) == [12]byte{} && a != netip.IPv6Unspecified() && a != netip.IPv6Loopback():
		return netip.AddrFrom4([4]byte(b[12:16])), true
	}
	return netip.Addr{}, false
}

// OwnListener says whether ap is one of the operator's own listeners (Config.OwnListeners) or
// a Protected address (the lease store's; a name there stands for its loopback addresses):
// what a relay the operator runs (a mock proxy) must never reach.
func (p *Policy) OwnListener(ap netip.AddrPort) bool {
	return p.isOwn(ap.Addr().Unmap().WithZone(""), ap.Port())
}

func (p *Policy) isOwn(a netip.Addr, port uint16) bool {
	if p.own[netip.AddrPortFrom(a, port)] {
		return true
	}
	if !p.ownPorts[port] {
		return false
	}
	if a.IsLoopback() {
		return true
	}
	for _, l := range p.localAddrs {
		if l == a {
			return true
		}
	}
	return false
}

type destKey struct{}

// WithDest says whose endpoint the connections made under ctx go to, for Control.
func WithDest(ctx context.Context, d Dest) context.Context {
	return context.WithValue(ctx, destKey{}, d)
}

// Control is a net.Dialer.ControlContext: it checks the address a connection is about to be
// made to, after DNS resolution, so a name cannot rebind past the policy.
func (p *Policy) Control(ctx context.Context, _, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &DeniedError{Host: address, Reason: "not an address:port"}
	}
	d, _ := ctx.Value(destKey{}).(Dest)
	return p.CheckAddr(ap.Addr(), ap.Port(), d)
}
