package netpolicy

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// DefaultClusterSuffixes are the DNS suffixes of names that only mean something inside a
// cluster or a private network: Kubernetes Services (svc, cluster.local), cloud-internal names
// (internal: GCP's and EC2's instance names, and the TLD ICANN reserved for private use in
// 2024), mDNS (local) and home networks (home.arpa). No public site ends in one.
var DefaultClusterSuffixes = []string{"svc", "cluster.local", "internal", "local", "home.arpa"}

// ParseSuffixes parses a comma-separated list of DNS suffixes (a flag's value); leading and
// trailing dots are dropped.
func ParseSuffixes(s string) ([]string, error) {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		f = strings.ToLower(strings.Trim(strings.TrimSpace(f), "."))
		if f == "" {
			continue
		}
		if err := ValidHost(f); err != nil {
			return nil, fmt.Errorf("netpolicy: suffix %q: %w", f, err)
		}
		out = append(out, f)
	}
	return out, nil
}

// targetDenied are ranges no crawler's target is in: besides loopback, link-local, private
// (RFC 1918, ULA fc00::/7), unspecified and multicast, which the netip predicates name.
var targetDenied = []struct {
	prefix netip.Prefix
	why    string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "\"this network\" (RFC 1122)"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared address space (CGNAT, RFC 6598; cluster networks use it)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignments (RFC 6890)"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking (RFC 2544)"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved (RFC 1112)"},
	{netip.MustParsePrefix("100::/64"), "discard-only (RFC 6666)"},
}

func (p *Policy) target(cfg Config) error {
	for _, pr := range cfg.TargetAllow {
		if !pr.IsValid() {
			return fmt.Errorf("netpolicy: invalid target CIDR %s", pr)
		}
		p.targetAllow = append(p.targetAllow, pr.Masked())
	}
	for _, s := range cfg.TargetAllowAddrs {
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			return fmt.Errorf("netpolicy: target address %q is not ip:port: %w", s, err)
		}
		if p.targetAddrs == nil {
			p.targetAddrs = map[netip.AddrPort]bool{}
		}
		p.targetAddrs[netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())] = true
	}
	suffixes := cfg.ClusterSuffixes
	if suffixes == nil {
		suffixes = DefaultClusterSuffixes
	}
	for _, s := range suffixes {
		if s = strings.ToLower(strings.Trim(s, ".")); s != "" {
			p.suffixes = append(p.suffixes, s)
		}
	}
	return nil
}

// CheckTarget is the check of a crawler's target (a request's host and port, before anything
// is leased for it): where traffic through our proxies may go. It is stricter than CheckHost,
// the check of a proxy: private ranges are fine for a proxy in the cluster's own network, but
// no target of a crawl is there. Addresses in every form (HostAddr) are checked as addresses;
// names are checked by name only (the gateway does not resolve; the upstream checks what a
// name resolves to): localhost and *.localhost, metadata names, single-label names (resolved
// through the cluster's search path) and the cluster suffixes are denied.
func (p *Policy) CheckTarget(host string, port uint16) error {
	a, ok, err := HostAddr(host)
	if err != nil {
		return err
	}
	if ok {
		return p.checkTargetAddr(a, port)
	}
	if err := ValidHost(host); err != nil {
		return err
	}
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	deny := func(reason string) error { return &DeniedError{Host: host, Reason: reason} }
	switch {
	case p.protNames[name+":"+strconv.Itoa(int(port))]:
		return deny("a protected address of the operator (the lease store)")
	case metadataNames[name]:
		return deny("a cloud metadata service name")
	case name == "localhost" || strings.HasSuffix(name, ".localhost"):
		if p.targetAllowed(netip.MustParseAddr("127.0.0.1")) && p.targetAllowed(netip.IPv6Loopback()) {
			return nil
		}
		return deny("loopback")
	case !strings.Contains(name, "."):
		return deny("a name without a dot (resolved through the cluster's search path)")
	}
	for _, s := range p.suffixes {
		if name == s || strings.HasSuffix(name, "."+s) {
			return deny("a cluster-internal name (suffix ." + s + ")")
		}
	}
	return nil
}

func (p *Policy) targetAllowed(a netip.Addr) bool {
	for _, pr := range p.targetAllow {
		if pr.Contains(a) {
			return true
		}
	}
	return false
}

func (p *Policy) checkTargetAddr(a netip.Addr, port uint16) error {
	a = a.Unmap().WithZone("")
	deny := denier(a, port)
	if err := deniedEverywhere(a, deny); err != nil {
		return err
	}
	if port != 0 && p.isOwn(a, port) {
		return deny("one of the operator's own listeners or protected addresses")
	}
	if v4, ok := embeddedIPv4(a); ok {
		if err := p.checkTargetAddr(v4, port); err != nil {
			return deny("embeds " + v4.String() + ": " + err.(*DeniedError).Reason)
		}
	}
	if p.targetAllowed(a) || port != 0 && p.targetAddrs[netip.AddrPortFrom(a, port)] {
		return nil
	}
	switch {
	case a.IsLoopback():
		return deny("loopback")
	case a.IsUnspecified():
		return deny("the unspecified address")
	case a.IsMulticast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return deny("not a unicast address")
	case a.IsPrivate():
		return deny("a private address (RFC 1918, ULA)")
	}
	for _, d := range targetDenied {
		if d.prefix.Contains(a) {
			return deny(d.why)
		}
	}
	return nil
}
