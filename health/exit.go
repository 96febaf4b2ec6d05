package health

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	v1 "github.com/proxy-operator/proxy-operator/api/v1alpha1"
	"github.com/proxy-operator/proxy-operator/health/geoip"
	"github.com/proxy-operator/proxy-operator/internal/fleet"
	"github.com/proxy-operator/proxy-operator/internal/verdict"
)

// Geo answers what the databases say about an exit address (*geoip.Resolver in production).
type Geo interface {
	Lookup(addr netip.Addr) (geoip.Info, error)
	Has(k geoip.Kind) bool
}

// exitOf builds the exit record of a proxy whose exit check saw addr: the databases' answer
// and the verdict of the Proxy's spec.verify on it. A database error is a mismatch too: the
// check asked for cannot be made.
func exitOf(p fleet.Proxy, addr netip.Addr, geo Geo) verdict.Exit {
	e := verdict.Exit{IP: addr.String()}
	var info geoip.Info
	var geoErr error
	if geo != nil {
		info, geoErr = geo.Lookup(addr)
		e.Country, e.ASN = info.Country, info.ASN
	}
	var why []string
	v := p.Verify
	var expected []string
	if v != nil {
		expected = v.ExpectedExit
	}
	switch {
	case len(expected) > 0:
		in := false
		for _, s := range expected {
			if pf, err := v1.ParsePrefix(s); err == nil && pf.Contains(addr) {
				in = true
				break
			}
		}
		if !in {
			why = append(why, fmt.Sprintf("exit %s is outside expectedExit %s", addr, strings.Join(expected, ", ")))
		}
	case p.Mode == v1.ModeManaged:
		// A Managed proxy is a machine of ours: a target must see the machine's own address.
		// Another one means the traffic leaks out through some other egress.
		if ip, err := netip.ParseAddr(p.IP); err == nil && ip.Unmap() != addr {
			why = append(why, fmt.Sprintf("exit %s differs from the proxy's IP %s", addr, p.IP))
		}
	}
	if v != nil && v.CountryAttribute != "" {
		if want := p.Attributes[v.CountryAttribute]; want != "" {
			switch {
			case geo == nil || !geo.Has(geoip.KindCountry):
				why = append(why, fmt.Sprintf("%s=%s cannot be verified: no country database is configured", v.CountryAttribute, want))
			case geoErr != nil:
				why = append(why, fmt.Sprintf("%s=%s cannot be verified: %v", v.CountryAttribute, want, geoErr))
			case info.Country == "":
				why = append(why, fmt.Sprintf("%s=%s cannot be verified: exit %s is not in the country database", v.CountryAttribute, want, addr))
			case !strings.EqualFold(info.Country, want):
				why = append(why, fmt.Sprintf("%s=%s but exit %s is in %s", v.CountryAttribute, want, addr, info.Country))
			}
		}
	}
	if v != nil && v.ASNAttribute != "" {
		if want := p.Attributes[v.ASNAttribute]; want != "" {
			asn, err := parseASN(want)
			switch {
			case err != nil:
				why = append(why, fmt.Sprintf("%s=%s is not an AS number", v.ASNAttribute, want))
			case geo == nil || !geo.Has(geoip.KindASN):
				why = append(why, fmt.Sprintf("%s=%s cannot be verified: no ASN database is configured", v.ASNAttribute, want))
			case geoErr != nil:
				why = append(why, fmt.Sprintf("%s=%s cannot be verified: %v", v.ASNAttribute, want, geoErr))
			case info.ASN == 0:
				why = append(why, fmt.Sprintf("%s=%s cannot be verified: exit %s is not in the ASN database", v.ASNAttribute, want, addr))
			case info.ASN != asn:
				why = append(why, fmt.Sprintf("%s=%s but exit %s is in AS%d", v.ASNAttribute, want, addr, info.ASN))
			}
		}
	}
	e.Mismatch = strings.Join(why, "; ")
	return e
}

// parseASN reads "AS15169", "as15169" or "15169".
func parseASN(s string) (uint32, error) {
	s = strings.TrimSpace(s)
	if len(s) > 2 && strings.EqualFold(s[:2], "AS") {
		s = s[2:]
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%q is not an AS number", s)
	}
	return uint32(n), nil
}
